"""House rules: a GM's rulings that depart from the rulebook, for one campaign, on one line of its story.

The GM's word is final at the table: a GM's fact that contradicts a source fact the campaign draws on is
accepted (:mod:`story.source_check`) and written as canon like any fact, with what it departs from on
the fact itself (``house_rule``, ``book_entry``, ``book_field``, ``book_value``, page, chunk, who ruled
and when) and an OVERRIDES edge to each source fact. Nothing of the book changes: the source fact stays
as printed for every other campaign, and on every branch of this one where the ruling was not made.

Being a fact, a house rule lives where canon lives: it is in force on the line of the story it was
ruled on and its later turns, and not on a branch forked before it; a retcon or a later ruling
supersedes it. So the house rules of a campaign are the house-rule facts current in the world at its
head (:func:`house_rules`), and the gate holds later proposals against the rule in force, not the book.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from schemas.common import FactStatus, LorekeeperModel
from story import cypher
from story.core import StoryCore


class HouseRule(LorekeeperModel):
    """One house rule in force: the book's value of an entry's field, and the GM's ruling that replaces it."""

    fact_id: str = Field(description="The GM's fact that is the ruling.")
    entity_id: str = Field(description="The campaign entity it is about.")
    entry: str = Field(description="The rulebook entry ('Goblin').")
    field: str = Field(description="The entry's field, as the family table names it ('hit_points').")
    book_value: str = Field(description="The value the book prints, normalised ('7').")
    book_raw: str | None = Field(default=None, description="The text the book's value was read from.")
    ruled_value: Any = Field(description="The value the GM ruled.")
    ruled_by: str = Field(description="Who ruled: the proposer's key id, or 'gm'.")
    ruled_at: str | None = Field(default=None, description="When the ruling became canon (ISO 8601).")
    turn_id: str | None = Field(default=None, description="The turn it was ruled at.")
    depth: int | None = Field(default=None, description="The turn's depth in the story tree.")
    branch_id: str = Field(description="The branch it was ruled on.")
    status: str = Field(description="active, or disputed.")
    source_fact_ids: list[str] = Field(default_factory=list, description="The source facts it overrides.")
    book_item: str | None = Field(default=None, description="The library item the book value is from.")
    book_page: int | None = None
    book_chunk: str | None = None


def house_rules(core: StoryCore, campaign_id: str, *, turn_id: str | None = None) -> list[HouseRule]:
    """The house rules in force as of the head (or ``turn_id``), oldest first: one fold and one read."""
    state = core.fold(campaign_id, turn_id=turn_id)
    current = {fid: f for fid, f in state.facts.items() if f["status"] != FactStatus.SUPERSEDED.value}
    if not current:
        return []
    rows = core.story.nodes(cypher.house_rule_facts(campaign_id, sorted(current)))
    out = [_rule(row, current[row["uid"]]) for row in rows]
    return sorted(out, key=lambda r: (current[r.fact_id]["seq"], r.fact_id))


def _rule(node: dict[str, Any], fact: dict[str, Any]) -> HouseRule:
    return HouseRule(
        fact_id=node["uid"],
        entity_id=fact["subject"],
        entry=node.get("book_entry") or "",
        field=node.get("book_field") or fact["predicate"],
        book_value=node.get("book_value") or "",
        book_raw=node.get("book_raw"),
        ruled_value=fact["value"],
        ruled_by=node.get("ruled_by") or "gm",
        ruled_at=node.get("ruled_at"),
        turn_id=fact.get("turn_id"),
        depth=node.get("depth"),
        branch_id=node.get("branch_id") or "",
        status=fact["status"],
        source_fact_ids=list(node.get("source_fact_ids") or []),
        book_item=node.get("book_item"),
        book_page=node.get("book_page"),
        book_chunk=node.get("book_chunk"),
    )
