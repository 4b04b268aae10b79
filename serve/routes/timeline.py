"""A campaign's timeline: the head (undo, redo), branches, checkpoints, and the world state as of any turn."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from schemas.serving import BranchCreate, CheckpointCreate
from schemas.story import Branch, Campaign, Checkpoint, WorldStateView
from serve.deps import API, PrincipalDep, ServicesDep, turn_in


def router() -> APIRouter:
    """The head, branches, checkpoints and state."""
    r = APIRouter(prefix=API, tags=["story"])

    @r.post("/campaigns/{campaign_id}/undo", response_model=Campaign)
    async def undo(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.undo, campaign_id)  # type: ignore[no-any-return]

    @r.post("/campaigns/{campaign_id}/redo", response_model=Campaign)
    async def redo(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.redo, campaign_id)  # type: ignore[no-any-return]

    @r.get("/campaigns/{campaign_id}/branches", response_model=list[Branch])
    async def branches(s: ServicesDep, caller: PrincipalDep, campaign_id: str, include_archived: bool = False) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.branches, campaign_id, include_archived=include_archived)

    @r.post("/campaigns/{campaign_id}/branches", status_code=201, response_model=Branch)
    async def create_branch(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: BranchCreate) -> Any:
        await turn_in(s, caller, campaign_id, body.from_turn_id)
        return await s.run(s.story.create_branch, campaign_id, body.from_turn_id, name=body.name)

    @r.post("/campaigns/{campaign_id}/branches/{branch_id}/switch", response_model=Campaign)
    async def switch_branch(s: ServicesDep, caller: PrincipalDep, campaign_id: str, branch_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.switch_branch, campaign_id, branch_id)

    @r.post("/campaigns/{campaign_id}/checkpoints", status_code=201, response_model=Checkpoint)
    async def create_checkpoint(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: CheckpointCreate) -> Any:
        caller.require_campaign(campaign_id)
        if body.turn_id is not None:
            await turn_in(s, caller, campaign_id, body.turn_id)
        return await s.run(
            s.story.create_checkpoint,
            campaign_id,
            body.name,
            turn_id=body.turn_id,
            kind=body.kind,
            description=body.description,
        )

    @r.get("/campaigns/{campaign_id}/checkpoints", response_model=list[Checkpoint])
    async def checkpoints(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.checkpoints, campaign_id)

    @r.post("/campaigns/{campaign_id}/checkpoints/{checkpoint_id}/restore", response_model=Campaign)
    async def restore(s: ServicesDep, caller: PrincipalDep, campaign_id: str, checkpoint_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.restore_checkpoint, campaign_id, checkpoint_id)

    @r.get("/campaigns/{campaign_id}/state", response_model=WorldStateView)
    async def state(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str | None = None, branch_id: str | None = None
    ) -> Any:
        caller.require_campaign(campaign_id)
        if turn_id is not None:
            await turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.state, campaign_id, turn_id=turn_id, branch_id=branch_id)

    return r
