"""What proposals cite, read once per batch, and the gate's word on whether that evidence holds.

Accepted evidence becomes SUPPORTED_BY links, and a link to a chunk or turn that is not there is
simply not written: so a proposal citing a made-up passage used to become canon with no provenance and
no warning. The gate now rejects a proposal (with the missing ids in its rationale) whose evidence
cites chunks that do not exist, or turns that are not this campaign's; whose chunks come from items
the campaign does not draw on (when it pins its library, :mod:`story.library_pins`); or, for source
authority, whose chunks the campaign does not use as canon. Rejected rather than left pending: a
reviewer's approval cannot make a missing passage exist, and a scene that has ended takes no more
commits, so a held proposal would wait for nothing. The proposer re-proposes with evidence that holds.

:meth:`story.scenes.Scenes.propose` refuses missing chunks and turns at once; the gate checks again
because the store can change in between (a branch deleted, a campaign imported without its knowledge,
its pins changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.campaign import LibraryPin
from schemas.common import Authority
from schemas.knowledge import Classification
from schemas.story import ProposedChange
from stores.graph.base import GraphStore
from story import cypher
from story.library_pins import pin_for


@dataclass(frozen=True, slots=True)
class CitedChunk:
    uid: str
    item: str | None
    library: str | None
    classification: str | None


def cited_turns(proposal: ProposedChange) -> list[str]:
    """The turns a proposal names: its evidence's and the turn that proposed it."""
    return list(dict.fromkeys([*proposal.evidence.turn_ids, *([proposal.turn_id] if proposal.turn_id else [])]))


@dataclass(frozen=True, slots=True)
class Citations:
    """The cited chunks and turns that exist, and the library pins of the campaign citing them."""

    chunks: dict[str, CitedChunk] = field(default_factory=dict)
    turns: frozenset[str] = frozenset()
    pins: tuple[LibraryPin, ...] = ()

    def missing(self, proposal: ProposedChange) -> tuple[list[str], list[str]]:
        """The chunks the proposal cites that do not exist, and its turns that are not the campaign's."""
        chunks = [c for c in dict.fromkeys(proposal.evidence.chunk_ids) if c not in self.chunks]
        return chunks, [t for t in cited_turns(proposal) if t not in self.turns]

    def verdict(self, proposal: ProposedChange) -> str | None:
        """Why the proposal's evidence does not hold, or None when it does."""
        chunks, turns = self.missing(proposal)
        problems = []
        if chunks:
            problems.append(f"its evidence cites chunks that do not exist: {', '.join(chunks)}")
        if turns:
            problems.append(f"it cites turns that are not in this campaign: {', '.join(turns)}")
        if problems:
            return "; ".join(problems) + " (nothing to link it to: propose it again with evidence that exists)"
        cited = [self.chunks[c] for c in dict.fromkeys(proposal.evidence.chunk_ids)]
        if self.pins:
            undrawn = [c for c in cited if pin_for(self.pins, item=c.item, library=c.library) is None]
            if undrawn:
                named = ", ".join(f"{c.uid} (item {c.item})" for c in undrawn)
                return f"it cites passages of items this campaign does not draw on: {named}; pin them to cite them"
        if proposal.authority is Authority.SOURCE:
            other = [(c, use) for c in cited if (use := self.use(c)) != Classification.CANON.value]
            if other:
                named = ", ".join(f"{c.uid} ({use})" for c, use in other)
                return f"source authority needs passages this campaign uses as canon, and these are not: {named}"
        return None

    def use(self, chunk: CitedChunk) -> str:
        """How the campaign uses a chunk's item: its pin's use, else the item's classification."""
        pin = pin_for(self.pins, item=chunk.item, library=chunk.library)
        if pin is not None and pin.use is not None:
            return pin.use.value
        return chunk.classification or "unclassified"


def read_citations(
    graph: GraphStore, campaign_id: str, proposals: Sequence[ProposedChange], pins: Sequence[LibraryPin] = ()
) -> Citations:
    """Everything ``proposals`` cite, in one graph read (none when they cite nothing)."""
    chunk_ids = sorted({c for p in proposals for c in p.evidence.chunk_ids})
    turn_ids = sorted({t for p in proposals for t in cited_turns(p)})
    if not chunk_ids and not turn_ids:
        return Citations(pins=tuple(pins))
    rows = graph.run(*cypher.cited(chunk_ids, turn_ids, campaign_id))
    chunks = {
        r["uid"]: CitedChunk(r["uid"], r["item"], r["library"], r["classification"])
        for r in rows
        if r["kind"] == "chunk"
    }
    turns = frozenset(r["uid"] for r in rows if r["kind"] == "turn")
    return Citations(chunks, turns, tuple(pins))
