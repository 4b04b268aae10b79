"""Scenes and the gate: open scenes, stage proposals, commit or end a scene (canon), retcon a fact."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from schemas.errors import InvalidRequest
from schemas.serving import CommitRequest, EndSceneRequest, ProposalCreate, RetconRequest, SceneCreate
from schemas.story import GateReport, ProposalStatus, ProposedChange, Scene
from serve.deps import API, PrincipalDep, ServicesDep
from serve.metrics import GATE_DECISIONS


def router() -> APIRouter:
    """Scenes, proposals, the gate and retcons."""
    r = APIRouter(prefix=API, tags=["story"])

    @r.post("/campaigns/{campaign_id}/scenes", status_code=201, response_model=Scene)
    async def start_scene(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: SceneCreate) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(
            s.story.start_scene,
            campaign_id,
            title=body.title,
            location_entity_id=body.location_entity_id,
            participant_entity_ids=body.participant_entity_ids,
        )

    @r.get("/campaigns/{campaign_id}/scenes", response_model=list[Scene])
    async def scenes(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.scenes, campaign_id)

    @r.get("/scenes/{scene_id}", response_model=Scene)
    async def get_scene(s: ServicesDep, caller: PrincipalDep, scene_id: str) -> Scene:
        return await s.scene_for(caller, scene_id)

    @r.post("/scenes/{scene_id}/proposals", status_code=201, response_model=ProposedChange)
    async def propose(s: ServicesDep, caller: PrincipalDep, scene_id: str, body: ProposalCreate) -> Any:
        await s.scene_for(caller, scene_id)
        caller.require_authority(body.authority)
        fields = body.model_dump(exclude_none=True)
        fields.setdefault("proposed_by", caller.key_id)
        return await s.run(s.story.propose, scene_id, **fields)

    @r.get("/scenes/{scene_id}/proposals", response_model=list[ProposedChange])
    async def proposals(
        s: ServicesDep, caller: PrincipalDep, scene_id: str, status: ProposalStatus | None = None
    ) -> Any:
        await s.scene_for(caller, scene_id)
        return await s.run(s.story.proposals, scene_id, status)

    @r.post("/scenes/{scene_id}/commit", response_model=GateReport)
    async def commit(s: ServicesDep, caller: PrincipalDep, scene_id: str, body: CommitRequest) -> GateReport:
        await s.scene_for(caller, scene_id)
        report: GateReport = await s.run(s.gate.commit, scene_id, body.proposal_ids)
        _count(report)
        return report

    @r.post("/scenes/{scene_id}/end", response_model=GateReport)
    async def end_scene(
        s: ServicesDep, caller: PrincipalDep, scene_id: str, body: EndSceneRequest | None = None
    ) -> Any:
        await s.scene_for(caller, scene_id)
        report: GateReport = await s.run(s.gate.end_scene, scene_id, summary=body.summary if body else None)
        _count(report)
        return report

    @r.post("/facts/{fact_id}/retcon")
    async def retcon(s: ServicesDep, caller: PrincipalDep, fact_id: str, body: RetconRequest) -> dict[str, Any]:
        caller.require_campaign(body.campaign_id)
        caller.require_authority(body.authority)
        if body.authority.value not in ("gm", "source"):
            raise InvalidRequest("story", "a retcon is declared with gm (or source) authority")
        new_id = await s.run(
            s.story.retcon,
            body.campaign_id,
            fact_id,
            reason=body.reason,
            value=body.value,
            object_entity_id=body.object_entity_id,
            authority=body.authority,
        )
        return {"fact_id": fact_id, "status": "retconned", "replaced_by": new_id}

    return r


def _count(report: GateReport) -> None:
    for decision in report.decisions:
        GATE_DECISIONS.labels(
            decision=decision.status.value, authority=decision.authority.value if decision.authority else "unknown"
        ).inc()
