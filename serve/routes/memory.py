"""A campaign's memory: recall its past by meaning, list, add and retract memories, read summaries.

Recall and the listings see one line of the story: the head's (or ``as_of_turn_id``'s / ``turn_id``'s)
ancestors, so an undone turn or another branch's past is never recalled. A memory that no longer
holds is retracted, not deleted: it stays in the graph with when and why, and is no longer listed or
recalled. Retracting one is the GM's call (a GM or admin key).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from schemas.common import Authority
from schemas.errors import InvalidRequest
from schemas.recall import RecallRequest, RecallResponse
from schemas.serving import MemoryCreate, MemoryRetract
from schemas.story import Memory, Summary
from serve.auth import Principal
from serve.deps import API, PrincipalDep, ServicesDep, turn_in
from serve.services import Services


def router() -> APIRouter:
    """Recall, memories and summaries."""
    r = APIRouter(prefix=API, tags=["memory"])

    @r.post("/campaigns/{campaign_id}/recall", response_model=RecallResponse)
    async def recall(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: RecallRequest) -> RecallResponse:
        await _at(s, caller, campaign_id, body.as_of_turn_id)
        if s.story.recall_index is None:  # an unknown campaign still answers 404, not 501
            await s.run(s.story.get_campaign, campaign_id)
        hits = await s.run(
            s.story.recall,
            campaign_id,
            body.query,
            as_of_turn_id=body.as_of_turn_id,
            observer_entity_id=body.observer_entity_id,
            kinds=body.kinds,
            limit=body.limit,
        )
        return RecallResponse(campaign_id=campaign_id, query=body.query, as_of_turn_id=body.as_of_turn_id, hits=hits)

    @r.get("/campaigns/{campaign_id}/memories", response_model=list[Memory])
    async def memories(
        s: ServicesDep,
        caller: PrincipalDep,
        campaign_id: str,
        observer_entity_id: Annotated[str | None, Query(description="Only this entity's memories.")] = None,
        turn_id: Annotated[str | None, Query(description="As of this turn (its lineage); the head when unset.")] = None,
    ) -> Any:
        await _at(s, caller, campaign_id, turn_id)
        return await s.run(s.story.memories, campaign_id, observer_entity_id=observer_entity_id, turn_id=turn_id)

    @r.post("/campaigns/{campaign_id}/memories", status_code=201, response_model=Memory)
    async def add_memory(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: MemoryCreate) -> Any:
        anchor = body.anchor_turn_id
        if anchor is not None:
            await turn_in(s, caller, campaign_id, anchor)
        else:
            caller.require_campaign(campaign_id)
            campaign = await s.run(s.story.get_campaign, campaign_id)
            if campaign.head_turn_id is None:
                raise InvalidRequest("story", f"campaign {campaign_id!r} has no turn yet to anchor a memory to")
            anchor = campaign.head_turn_id
        memory = Memory(
            campaign_id=campaign_id,
            observer_entity_id=body.observer_entity_id,
            kind=body.kind,
            text=body.text,
            subject_entity_ids=body.subject_entity_ids,
            anchor_turn_id=anchor,
            salience=body.salience,
        )
        return await s.run(s.story.add_memory, memory)

    @r.post("/campaigns/{campaign_id}/memories/{memory_id}/retract", response_model=Memory)
    async def retract_memory(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, memory_id: str, body: MemoryRetract
    ) -> Any:
        caller.require_campaign(campaign_id)
        caller.require_authority(Authority.GM)
        return await s.run(s.story.retract_memory, campaign_id, memory_id, reason=body.reason)

    @r.get("/campaigns/{campaign_id}/summaries", response_model=list[Summary])
    async def summaries(
        s: ServicesDep,
        caller: PrincipalDep,
        campaign_id: str,
        turn_id: Annotated[str | None, Query(description="As of this turn (its lineage); the head when unset.")] = None,
    ) -> Any:
        await _at(s, caller, campaign_id, turn_id)
        return await s.run(s.story.summaries, campaign_id, turn_id=turn_id)

    return r


async def _at(s: Services, caller: Principal, campaign_id: str, turn_id: str | None) -> None:
    """The caller may read the campaign, and ``turn_id`` (if any) is one of its turns."""
    if turn_id is not None:
        await turn_in(s, caller, campaign_id, turn_id)
    else:
        caller.require_campaign(campaign_id)
