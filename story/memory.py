"""Memories and summaries: what characters remember, and what the story so far comes to.

Each is anchored to the turn that produced it, and is seen only from that turn's future: a memory
made on a branch is not remembered on another branch forked before it (:mod:`story.lineage`).

A memory that no longer holds is retracted, not deleted: like canon, the story keeps what it once
held, with when and why it was withdrawn, but a retracted memory is no longer listed or recalled.
"""

from __future__ import annotations

from typing import Any

from schemas.common import utc_now
from schemas.story import Memory, Summary, Turn
from schemas.text import NOTE_MAX, check_text
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryConflict, StoryInvalid, StoryNotFound
from story.graph import anchored_on, node_props
from story.references import check_memory_refs, check_turn_of


class Memories:
    """Memories and summaries, anchored to turns and seen along their lineage."""

    def __init__(self, core: StoryCore) -> None:
        self.core = core
        self.story = core.story

    def add_memory(self, memory: Memory) -> Memory:
        """Record what an entity remembers, anchored to the turn that produced it.

        Raises:
            InvalidReference: the anchor is not a turn of the campaign, or the observer is not a being
                there at that turn, or a subject is not there (:mod:`story.references`).
        """
        turn = self._anchor_turn(memory.campaign_id, memory.anchor_turn_id)
        state = self.core.fold(memory.campaign_id, turn_id=turn.id)
        check_memory_refs(state, memory.observer_entity_id, memory.subject_entity_ids)
        if memory.retracted_at is not None:
            raise StoryInvalid("a memory is added as it is held; retract it afterwards")
        self._anchor("Memory", memory, turn)
        return memory

    def get_memory(self, campaign_id: str, memory_id: str) -> Memory:
        """A memory of the campaign, retracted or not; another campaign's answers like a missing one."""
        rows = self.core.graph.run(*cypher.node("Memory", memory_id))
        if not rows or rows[0]["n"].get("campaign_id") != campaign_id:
            raise StoryNotFound(f"no memory {memory_id!r} in campaign {campaign_id!r}")
        return from_props(Memory, rows[0]["n"], key="id")

    def retract_memory(self, campaign_id: str, memory_id: str, *, reason: str) -> Memory:
        """Withdraw a memory that no longer holds: it stays in the graph, marked with when and why.

        Raises:
            StoryNotFound: no such memory in the campaign.
            StoryInvalid: no reason given, or one a memory cannot hold (over 2,000 characters, a NUL
                character, a lone surrogate); nothing is written then.
            StoryConflict: it was retracted already (the first retraction's when and why stand).
        """
        # the whole request is checked before the write: a reason the record cannot hold was once written,
        # then refused when the record was read back (400), leaving the memory retracted for good
        try:
            reason = check_text(reason.strip(), max_length=NOTE_MAX)
        except ValueError as exc:
            raise StoryInvalid(f"reason: {exc}" if reason.strip() else "say why the memory is retracted") from None
        memory = self.get_memory(campaign_id, memory_id)
        if memory.retracted_at is not None:
            raise StoryConflict(f"memory {memory_id!r} was retracted at {memory.retracted_at.isoformat()}")
        rows = self.core.graph.run(*cypher.retract_memory(memory_id, utc_now().isoformat(), reason))
        if not rows:  # retracted by another writer between the read and the write
            raise StoryConflict(f"memory {memory_id!r} was retracted meanwhile")
        return from_props(Memory, rows[0]["n"], key="id")

    def add_summary(self, summary: Summary) -> Summary:
        """Record a summary of the story up to its anchor turn.

        Raises:
            InvalidReference: the anchor (or first) turn is not a turn of the campaign, or the scene it
                summarizes is not a scene of the campaign.
        """
        turn = self._anchor_turn(summary.campaign_id, summary.anchor_turn_id)
        if summary.from_turn_id is not None:
            first = self._anchor_turn(summary.campaign_id, summary.from_turn_id, field="from_turn_id")
            if first.depth > turn.depth:
                raise InvalidReference("from_turn_id", f"turn {first.id!r} comes after the anchor turn {turn.id!r}")
        if summary.scene_id is not None:
            rows = self.core.graph.run(*cypher.node("Scene", summary.scene_id))
            if not rows or rows[0]["n"].get("campaign_id") != summary.campaign_id:
                raise InvalidReference("scene_id", f"no scene {summary.scene_id!r} in campaign {summary.campaign_id!r}")
        self._anchor("Summary", summary, turn)
        return summary

    def _anchor_turn(self, campaign_id: str, turn_id: str, *, field: str = "anchor_turn_id") -> Turn:
        """The turn a memory or summary is anchored to: a real turn of the campaign."""
        try:
            turn: Turn | None = self.story.turn(turn_id)
        except StoryNotFound:
            turn = None
        return check_turn_of(turn, campaign_id, turn_id, field)

    def _anchor(self, label: str, record: Memory | Summary, turn: Turn) -> None:
        self.core.graph.run(*anchored(label, record, turn))

    def memories(
        self,
        campaign_id: str,
        *,
        observer_entity_id: str | None = None,
        turn_id: str | None = None,
        branch_id: str | None = None,
    ) -> list[Memory]:
        """Memories whose anchor turn is on the line up to a position (the head; a branch's tip with
        ``branch_id``; ``turn_id``): the branch's past only, retracted ones left out."""
        visible = self._visible("Memory", campaign_id, turn_id, branch_id)
        memories = [from_props(Memory, r, key="id") for r in held(visible)]
        if observer_entity_id is not None:
            memories = [m for m in memories if m.observer_entity_id == observer_entity_id]
        return memories

    def summaries(self, campaign_id: str, *, turn_id: str | None = None, branch_id: str | None = None) -> list[Summary]:
        """Summaries anchored on the line up to a position (as :meth:`memories`)."""
        return [from_props(Summary, r, key="id") for r in self._visible("Summary", campaign_id, turn_id, branch_id)]

    def _visible(
        self, label: str, campaign_id: str, turn_id: str | None, branch_id: str | None
    ) -> list[dict[str, Any]]:
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, turn_id, branch_id)
        return anchored_on(self.story.nodes(cypher.anchored_on(label, campaign_id, lineage.branch_ids)), lineage)


def anchored(label: str, record: Memory | Summary, turn: Turn) -> Statement:
    """The statement that writes a memory or summary anchored at ``turn`` (a bulk write queues it in its
    transaction, with the turn it creates: :meth:`Memories.add_summary` checks the turn's campaign first)."""
    props = node_props(record, anchor_turn_uid=turn.id, branch_id=turn.branch_id, depth=turn.depth)
    return cypher.create_anchored(label, turn.id, props)


def held(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The memory rows not retracted (the records a listing, a prompt or a recall shows)."""
    return [r for r in rows if r.get("retracted_at") is None]
