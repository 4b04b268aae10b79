"""What a player key may see of an answer: the secrets filter behind :func:`serve.operations.access.visible`.

The GM of a campaign (and an admin) sees everything. A player key sees what is public and what names the
character it plays (:func:`schemas.visibility.may_see`):

* the state: its entities and facts (a fact proposed with a visibility keeps it; retconned, it keeps it
  too), and of a hidden entity nothing at all (its facts, relationships, whereabouts, holdings, threads);
* memories and subjective claims (unset: known to their observer — an NPC's are the GM's);
* summaries; proposals of a secret fact or entity, or naming a hidden entity;
* recall hits (memories, facts and summaries looked up by id; a hit whose record cannot be found is left
  out: the filter fails closed);
* a turn's provenance: the prompt snapshot and the exact prompt text are the GM's (the narrator may have
  been told what the players may not see), and so are the records recall put into it; the book passages
  (the shared knowledge) stay.

An answer no rule names passes as it is: the other answers carry no secret record.
"""

from __future__ import annotations

from typing import Any

from schemas.canon import WorldStateView
from schemas.narration import Memory, RetrievalSource, Summary, TurnProvenance
from schemas.proposals import ProposedChange, ProposedEntity, ProposedFact
from schemas.recall import RecallResponse
from schemas.visibility import Visibility, may_see, memory_visibility
from serve.operations.base import Call


class Viewer:
    """The caller as the secrets rule sees them: the GM of the campaign, or the player of one character;
    ``hidden``: the entities of the campaign it may not see (when the answer needs them)."""

    def __init__(self, call: Call[Any]) -> None:
        campaign_id = call.campaign_id or ""
        self.gm = call.caller.admin or call.caller.runs(campaign_id)
        self.character_id = call.caller.character_entity_id
        self.hidden: set[str] = set()

    def sees(self, visibility: Visibility | None) -> bool:
        return may_see(visibility, gm=self.gm, character_id=self.character_id)

    def sees_memory(self, memory: Memory) -> bool:
        return self.sees(memory_visibility(memory.visibility, memory.observer_entity_id))

    def sees_proposal(self, proposal: ProposedChange) -> bool:
        content = proposal.content
        if isinstance(content, ProposedFact | ProposedEntity) and not self.sees(content.visibility):
            return False
        return not (self.hidden & set(_strings(content.model_dump(mode="json"))))  # naming a hidden entity


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value (the ids a proposal's content names among them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def redact(call: Call[Any], result: Any) -> Any:
    """``result`` as the caller may see it (the GM's answers unchanged)."""
    viewer = Viewer(call)
    if viewer.gm or call.campaign_id is None:
        return result
    if isinstance(result, WorldStateView):
        return _state(viewer, result)
    if isinstance(result, TurnProvenance):
        return _provenance(result)
    if isinstance(result, RecallResponse):
        return await _recall(call, viewer, result)
    if isinstance(result, list):
        if any(isinstance(r, ProposedChange) for r in result):
            state = await call.run(call.ctx.story.state, call.campaign_id)
            viewer.hidden = {e.id for e in state.entities if not viewer.sees(e.visibility)}
        return [r for r in result if _item_seen(viewer, r)]
    return result


def _item_seen(viewer: Viewer, item: Any) -> bool:
    if isinstance(item, Memory):
        return viewer.sees_memory(item)
    if isinstance(item, Summary):
        return viewer.sees(item.visibility)
    if isinstance(item, ProposedChange):
        return viewer.sees_proposal(item)
    return True


def _state(viewer: Viewer, state: WorldStateView) -> WorldStateView:
    """A player's view of the world: the entities and facts it may see, and nothing that names a hidden entity
    (its facts, relationships, whereabouts, what it holds or is held by, its place in a thread)."""
    hidden = {e.id for e in state.entities if not viewer.sees(e.visibility)}
    facts = [
        f
        for f in state.facts
        if viewer.sees(f.visibility) and f.subject_entity_id not in hidden and f.object_entity_id not in hidden
    ]
    threads = [
        t.model_copy(update={"involved_entity_ids": [i for i in t.involved_entity_ids if i not in hidden]})
        for t in state.threads
    ]
    return state.model_copy(
        update={
            "entities": [e for e in state.entities if e.id not in hidden],
            "facts": facts,
            "relationships": [
                r for r in state.relationships if r.source_entity_id not in hidden and r.target_entity_id not in hidden
            ],
            "threads": threads,
            "locations": {k: v for k, v in state.locations.items() if k not in hidden and v not in hidden},
            "holders": {k: v for k, v in state.holders.items() if k not in hidden and v not in hidden},
        }
    )


def _provenance(provenance: TurnProvenance) -> TurnProvenance:
    """A player's view of a turn's provenance: no prompt, no recalled records; the book passages stay."""
    retrievals = [
        r.model_copy(update={"recalled": []}) for r in provenance.retrievals if r.source is RetrievalSource.KNOWLEDGE
    ]
    return provenance.model_copy(update={"prompt": None, "prompt_text": None, "retrievals": retrievals})


async def _recall(call: Call[Any], viewer: Viewer, response: RecallResponse) -> RecallResponse:
    """The hits the player may see (each secret-bearing record looked up), best first, at most the asked limit."""
    story, campaign_id, turn_id = call.ctx.story, response.campaign_id, response.as_of_turn_id
    kinds = {h.kind for h in response.hits}
    memories: dict[str, Memory] = {}
    facts: set[str] = set()
    summaries: dict[str, Summary] = {}
    if "memory" in kinds:
        held = await call.run(story.memories, campaign_id, turn_id=turn_id)
        memories = {m.id: m for m in held}
    if "fact" in kinds:
        state = await call.run(story.state, campaign_id, turn_id=turn_id)
        facts = {f.id for f in _state(viewer, state).facts}  # those it may see, none about a hidden entity
    if "summary" in kinds:
        summaries = {s.id: s for s in await call.run(story.summaries, campaign_id, turn_id=turn_id)}

    def seen(kind: str, record_id: str) -> bool:
        if kind == "memory":
            return record_id in memories and viewer.sees_memory(memories[record_id])
        if kind == "fact":
            return record_id in facts
        if kind == "summary":
            return record_id in summaries and viewer.sees(summaries[record_id].visibility)
        return kind == "turn"  # turns are the table's; a kind this filter does not know is left out

    limit = call.extra.get("recall_limit")
    hits = [h for h in response.hits if seen(str(h.kind), h.id)][:limit]
    return response.model_copy(update={"hits": hits})
