"""A campaign's timeline: the head (undo, redo), branches, checkpoints, turn versions, and the world as of any turn.

Moving the head is the GM's (undo, redo, branch, switch, restore, revert); every key of the campaign reads it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.serving import BranchCreate, CheckpointCreate
from schemas.story import Branch, Campaign, Checkpoint, TurnVersion, WorldStateView
from serve.operations.base import Access, Call, On, Rest, Role, operation

_F = "timeline"
_IDS = ("campaign_id",)
GM = Access(Role.GM, On.CAMPAIGN)
PLAYER = Access(Role.PLAYER, On.CAMPAIGN)


class BranchesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_archived: bool = False


class CheckpointsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["automatic", "named"] | None = Field(
        default=None,
        description="automatic: taken at a turn's boundaries and restores (pruned); named: made by the GM; "
        "default: both.",
    )


class StateQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: str | None = None
    branch_id: str | None = None


@operation(family=_F, access=GM, rest=Rest("POST", "/campaigns/{campaign_id}/undo"), ids=_IDS, output=Campaign)
async def undo(call: Call[Any]) -> Campaign:
    """Move the head back one turn; the undone turn stays and redo brings it back."""
    return await call.run(call.ctx.story.undo, call.id("campaign_id"))  # type: ignore[no-any-return]


@operation(family=_F, access=GM, rest=Rest("POST", "/campaigns/{campaign_id}/redo"), ids=_IDS, output=Campaign)
async def redo(call: Call[Any]) -> Campaign:
    """Move the head forward one turn along the active branch's line."""
    return await call.run(call.ctx.story.redo, call.id("campaign_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=PLAYER,
    rest=Rest("GET", "/campaigns/{campaign_id}/branches"),
    ids=_IDS,
    body=BranchesQuery,
    output=list[Branch],
)
async def list_branches(call: Call[BranchesQuery]) -> list[Branch]:
    """The branches of the campaign."""
    story = call.ctx.story
    return await call.run(story.branches, call.id("campaign_id"), include_archived=call.body.include_archived)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN, turns=("from_turn_id",)),
    rest=Rest("POST", "/campaigns/{campaign_id}/branches", 201),
    ids=_IDS,
    body=BranchCreate,
    output=Branch,
)
async def create_branch(call: Call[BranchCreate]) -> Branch:
    """Fork a branch from a turn (the head moves to it)."""
    b = call.body
    return await call.run(call.ctx.story.create_branch, call.id("campaign_id"), b.from_turn_id, name=b.name)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/branches/{branch_id}/switch"),
    ids=("campaign_id", "branch_id"),
    output=Campaign,
)
async def switch_branch(call: Call[Any]) -> Campaign:
    """Make a branch the active one (the head moves to its tip)."""
    return await call.run(call.ctx.story.switch_branch, call.id("campaign_id"), call.id("branch_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("POST", "/campaigns/{campaign_id}/checkpoints", 201),
    ids=_IDS,
    body=CheckpointCreate,
    output=Checkpoint,
)
async def create_checkpoint(call: Call[CheckpointCreate]) -> Checkpoint:
    """Name a turn (the head by default) to come back to."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.create_checkpoint,
        call.id("campaign_id"),
        b.name,
        turn_id=b.turn_id,
        kind=b.kind,
        description=b.description,
    )


@operation(
    family=_F,
    access=PLAYER,
    rest=Rest("GET", "/campaigns/{campaign_id}/checkpoints"),
    ids=_IDS,
    body=CheckpointsQuery,
    output=list[Checkpoint],
)
async def list_checkpoints(call: Call[CheckpointsQuery]) -> list[Checkpoint]:
    """The checkpoints of the campaign, oldest first: automatic ones (each turn's before_user_input,
    after_user_input, after_character_round; before_restore) and named ones (``kind`` keeps one sort)."""
    kind = call.body.kind
    automatic = None if kind is None else kind == "automatic"
    return await call.run(call.ctx.story.checkpoints, call.id("campaign_id"), automatic=automatic)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/checkpoints/{checkpoint_id}/restore"),
    ids=("campaign_id", "checkpoint_id"),
    output=Campaign,
)
async def restore_checkpoint(call: Call[Any]) -> Campaign:
    """Bring the world back to a checkpoint: the head moves to its turn, on a branch forked there when canon was
    committed on the line since (one transaction)."""
    story = call.ctx.story
    return await call.run(story.restore_checkpoint, call.id("campaign_id"), call.id("checkpoint_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/state"),
    ids=_IDS,
    body=StateQuery,
    output=WorldStateView,
    name="get_state_as_of",
)
async def get_state(call: Call[StateQuery]) -> WorldStateView:
    """The world of the campaign as of a turn (default: its head): entities, facts, relationships, threads."""
    b = call.body
    return await call.run(call.ctx.story.state, call.id("campaign_id"), turn_id=b.turn_id, branch_id=b.branch_id)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.TURN),
    rest=Rest("GET", "/campaigns/{campaign_id}/turns/{turn_id}/versions"),
    ids=("campaign_id", "turn_id"),
    output=list[TurnVersion],
)
async def list_turn_versions(call: Call[Any]) -> list[TurnVersion]:
    """The archived versions of a turn (takes a retake or a revert replaced), oldest first."""
    story = call.ctx.story
    return await call.run(story.versions.list, call.id("campaign_id"), call.id("turn_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.TURN),
    rest=Rest("POST", "/campaigns/{campaign_id}/turns/{turn_id}/versions/{version_id}/revert"),
    ids=("campaign_id", "turn_id", "version_id"),
    output=TurnVersion,
)
async def revert_turn_version(call: Call[Any]) -> TurnVersion:
    """Bring an archived version of a turn back: its take selected, its proposals pending again and, while its
    checkpoint was not pruned, the world that went with it (the take it replaces is archived in turn)."""
    ids = (call.id("campaign_id"), call.id("turn_id"), call.id("version_id"))
    return await call.run(call.ctx.story.revert_turn_version, *ids)  # type: ignore[no-any-return]
