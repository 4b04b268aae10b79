"""What one seat at the table may see of the story's records: the one secrets rule, applied wherever records
leave for a player.

The GM (and an admin) sees everything. A player sees what is public and what names the character their key
plays (:func:`schemas.visibility.may_see`); :data:`TABLE` is what the whole table sees (public records only).
The rule is applied where records leave for someone who may not see them all:

* the API's answers to a player key (``serve.operations.secrets``): the state, memories, summaries,
  proposals, recall, house rules, scenes;
* the narrator's context for a player's turn (``narrator.context.for_viewer``): what the narration (which the
  whole table reads) can draw on;
* a scene's outcomes in words (the table's: the summaries and memories formed at its end are written from them).

A hidden entity (one that entered the story with a visibility the viewer does not see) is hidden whole:
its facts, public or not, the relationships it is in, its whereabouts, what it holds, its place in threads,
and any proposal that names it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.canon import WorldStateView
from schemas.desk import SceneNote
from schemas.narration import Memory, Summary
from schemas.proposals import ProposalDecision, ProposedChange
from schemas.recall import RecallHit, RecallKind
from schemas.visibility import Visibility, may_see, memory_visibility

__all__ = ["TABLE", "Viewer", "told_to_table"]


@dataclass(frozen=True)
class Viewer:
    """A seat at the table: the GM's (``gm``), or a player's, playing ``character_id`` (None: no character)."""

    gm: bool = False
    character_id: str | None = None

    def sees(self, visibility: Visibility | Mapping[str, Any] | None) -> bool:
        """Whether this seat sees a record of ``visibility`` (a model, or its JSON as the state folds it)."""
        if isinstance(visibility, Mapping):
            visibility = Visibility.model_validate(visibility)
        return may_see(visibility, gm=self.gm, character_id=self.character_id)

    def sees_memory(self, memory: Memory) -> bool:
        """A memory or claim: as its visibility says, else known to its observer."""
        return self.sees(memory_visibility(memory.visibility, memory.observer_entity_id))

    def sees_summary(self, summary: Summary) -> bool:
        return self.sees(summary.visibility)

    def sees_media(self, media: Any, hidden: Iterable[str] = ()) -> bool:
        """A media record (or a job's): as its visibility says, and not when it shows an entity in ``hidden``."""
        return self.gm or (self.sees(media.visibility) and media.entity_id not in set(hidden))

    def hidden(self, state: WorldStateView) -> set[str]:
        """The entities of ``state`` this seat may not see."""
        return set() if self.gm else {e.id for e in state.entities if not self.sees(e.visibility)}

    def state(self, state: WorldStateView) -> WorldStateView:
        """The world as this seat sees it: the entities, facts, relationships and threads it may see, and
        nothing that names a hidden entity (its facts, relationships, whereabouts, holdings, places in threads,
        the happenings it took part in or that took place in it)."""
        if self.gm:
            return state
        hidden = self.hidden(state)
        facts = [
            f
            for f in state.facts
            if self.sees(f.visibility) and f.subject_entity_id not in hidden and f.object_entity_id not in hidden
        ]
        relationships = [
            r
            for r in state.relationships
            if self.sees(r.visibility) and r.source_entity_id not in hidden and r.target_entity_id not in hidden
        ]
        hid = hidden
        threads = [
            t.model_copy(
                update={
                    "involved_entity_ids": [i for i in t.involved_entity_ids if i not in hidden],
                    "advances": [  # a step's entities too (a thread's advances: story.threads)
                        a.model_copy(update={"involved_entity_ids": [x for x in a.involved_entity_ids if x not in hid]})
                        for a in t.advances
                    ],
                }
            )
            for t in state.threads
            if self.sees(t.visibility)
        ]
        return state.model_copy(
            update={
                "entities": [e for e in state.entities if e.id not in hidden],
                "facts": facts,
                "relationships": relationships,
                "threads": threads,
                # a happening naming a hidden entity is the GM's (as a scene's outcome naming one is)
                "happenings": [
                    h
                    for h in state.happenings
                    if h.location_entity_id not in hidden and not hidden & set(h.participant_entity_ids)
                ],
                "locations": {k: v for k, v in state.locations.items() if k not in hidden and v not in hidden},
                "holders": {k: v for k, v in state.holders.items() if k not in hidden and v not in hidden},
            }
        )

    def sees_proposal(self, proposal: ProposedChange, hidden: Iterable[str] = ()) -> bool:
        """A proposal: not when its content (or a GM's edit of it) is a secret this seat does not see, nor when
        it names an entity in ``hidden`` (:meth:`sees_content`)."""
        if self.gm:
            return True
        review = getattr(proposal, "review", None)  # a GM's edit replaces the content: both are checked
        edited = getattr(review, "content", None)
        return all(self.sees_content(c, hidden) for c in (proposal.content, *([edited] if edited else [])))

    def sees_content(self, content: Any, hidden: Iterable[str] = ()) -> bool:
        """A proposal's content: not when it (a fact, entity or relationship) or any event of a state change
        carries a visibility this seat does not see, nor when it names an entity in ``hidden``."""
        if self.gm:
            return True
        events = getattr(content, "events", None) or []
        if not all(self.sees(getattr(part, "visibility", None)) for part in (content, *events)):
            return False
        return not (set(hidden) & set(_strings(content.model_dump(mode="json"))))

    def names_only_seen(self, text: str | None, state: WorldStateView) -> bool:
        """Whether every fact and entity ``text`` names by id (a gate's rationale: "it contradicts fact
        fact_… (plan = '…')") is one this seat sees in ``state``; an id it cannot find there fails closed."""
        if self.gm or not text:
            return True
        named = set(_RECORD_ID.findall(text))
        if not named:
            return True
        seen = self.state(state)
        return named <= {f.id for f in seen.facts} | {e.id for e in seen.entities}

    def hits(
        self,
        hits: Sequence[RecallHit],
        *,
        memories: Iterable[Memory],
        state: WorldStateView | None,
        summaries: Iterable[Summary],
        notes: Iterable[SceneNote] = (),
    ) -> list[RecallHit]:
        """The recalled records this seat may see, in their order: each memory, fact and summary looked up among
        those of its line (``memories``, the facts of ``state`` as this seat sees them, ``summaries``, the GM's
        ``notes``: a note given none is never seen); turns are the table's. A hit whose record is not found, or
        of a kind this rule does not know (a scene's outcome in words), is left out: the filter fails closed."""
        if self.gm:
            return list(hits)
        seen_memories = {m.id for m in memories if self.sees_memory(m)}
        seen_facts = {f.id for f in self.state(state).facts} if state is not None else set()
        seen_summaries = {s.id for s in summaries if self.sees_summary(s)}
        allowed = {RecallKind.MEMORY: seen_memories, RecallKind.FACT: seen_facts, RecallKind.SUMMARY: seen_summaries}
        allowed[RecallKind.NOTE] = {n.id for n in notes if self.sees(n.visibility)}  # the GM's unless shared

        def seen(hit: RecallHit) -> bool:
            if hit.kind is RecallKind.TURN:
                return True
            return hit.id in allowed.get(hit.kind, set())

        return [h for h in hits if seen(h)]


_RECORD_ID = re.compile(r"\b(?:fact|ent)_[0-9A-Za-z]+")
"""A fact's or an entity's id, as a text names it."""

TABLE = Viewer()
"""What the whole table sees: public records only (a scene's outcomes in words are written for it)."""


def told_to_table(
    proposals: Sequence[ProposedChange],
    decisions: Sequence[ProposalDecision],
    entities: Mapping[str, Mapping[str, Any]],
) -> tuple[list[ProposedChange], list[ProposalDecision]]:
    """The proposals (and their decisions) whose outcome the whole table may read in words: a scene's outcomes
    are shown to every player, and the summary and memories formed at its end are written from them, so a
    secret's outcome, or one naming a hidden entity, is left out (the GM reads it in the state).

    Args:
        entities: the raw state's entities after the gate (:class:`story.state.WorldState`), hidden ones found
            by their visibility.
    """
    hidden = {eid for eid, e in entities.items() if not TABLE.sees(e.get("visibility"))}
    told = [p for p in proposals if TABLE.sees_proposal(p, hidden)]
    ids = {p.id for p in told}
    return told, [d for d in decisions if d.proposal_id in ids]


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value (the ids a proposal's content names among them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
