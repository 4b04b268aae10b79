"""The library a campaign draws on: its pins checked against the catalog, the knowledge-search filters
they make, and the pin a cited passage falls under.

A campaign with no pins draws on the whole library, each item as it is classified (what every
campaign did before pins existed). With pins, the narrator's knowledge search is restricted to the
pinned items and the items of the pinned libraries, and the gate accepts evidence only from those
(:mod:`story.citations`). A library pin follows the library: items ingested into it later are drawn on
too; an item pin names that one item.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.campaign import LibraryPin
from schemas.search import SearchFilters
from stores.graph.base import GraphStore
from story import cypher
from story.errors import StoryNotFound


def _split(pins: Sequence[LibraryPin]) -> tuple[list[str], list[str]]:
    libraries = [p.library_id for p in pins if p.library_id is not None]
    items = [p.item_id for p in pins if p.item_id is not None]
    return libraries, items


def check_pins(graph: GraphStore, pins: Sequence[LibraryPin]) -> None:
    """Refuse pins that name a library or an item the catalog does not hold (one read).

    Raises:
        StoryNotFound: naming every unknown library and item.
    """
    if not pins:
        return
    libraries, items = _split(pins)
    known = {(r["kind"], r["uid"]) for r in graph.run(*cypher.known_targets(libraries, items))}
    unknown = [f"{kind} {uid!r}" for kind, uid in (p.target for p in pins) if (kind, uid) not in known]
    if unknown:
        raise StoryNotFound(f"a campaign can only draw on what the library holds; there is no {', no '.join(unknown)}")


def knowledge_filters(graph: GraphStore, pins: Sequence[LibraryPin]) -> SearchFilters:
    """The search filters that keep a campaign's knowledge search to its pins (none: no filter).

    Filters on different fields must all hold, so pins of both kinds are turned into items: the
    pinned libraries' items are read then, and items ingested into them later are found.
    """
    libraries, items = _split(pins)
    if not libraries and not items:
        return SearchFilters()
    if not items:
        return SearchFilters(library=libraries)
    if libraries:
        items += [r["uid"] for r in graph.run(*cypher.items_of_libraries(libraries))]
    return SearchFilters(item=sorted(set(items)))


def pin_for(pins: Sequence[LibraryPin], *, item: str | None, library: str | None) -> LibraryPin | None:
    """The pin an item falls under: its own, else its library's (None when the campaign does not draw on it)."""
    by_target = {p.target: p for p in pins}
    if item is not None and ("item", item) in by_target:
        return by_target["item", item]
    if library is not None:
        return by_target.get(("library", library))
    return None
