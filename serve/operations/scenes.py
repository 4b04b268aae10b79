"""Scenes and the gate: open a scene, stage proposals, commit or end it (canon), and the GM's rulings:
retcons and the house rules in force.

A scene is reached through its campaign, so another campaign's scene answers like a missing one.
Players propose with player authority; the GM starts, commits and ends scenes and retcons. Who
proposed is recorded from the caller's key, never taken from the request.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import NotFound
from schemas.retcons import Dependents, RecordRetconAnswer, RecordRetconRequest
from schemas.review import QueuedProposal, ReviewRequest
from schemas.serving import CommitRequest, EndSceneRequest, ProposalCreate, RetconAnswer, RetconRequest, SceneCreate
from schemas.story import GateReport, ProposalStatus, ProposedChange, ResolutionMethod, Scene
from serve.auth import Forbidden
from serve.metrics import GATE_DECISIONS
from serve.operations.base import Access, Call, On, Rest, Role, operation
from story.house_rules import HouseRule

_F = "scenes"
PLAYER_ON_SCENE = Access(Role.PLAYER, On.SCENE)
GM_ON_SCENE = Access(Role.GM, On.SCENE)


class ProposalsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: ProposalStatus | None = None


class ScenesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: str | None = Field(default=None, description="As of this turn (its line); the head when unset.")
    branch_id: str | None = Field(
        default=None,
        description="Read this branch's line: its tip, or with turn_id that turn as seen from the branch (a branch "
        "of another campaign answers like a missing one); default: the head's.",
    )


class HouseRulesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: str | None = None


def _count(report: GateReport) -> GateReport:
    for decision in report.decisions:
        authority = decision.authority.value if decision.authority else "unknown"
        GATE_DECISIONS.labels(decision=decision.status.value, authority=authority).inc()
    return report


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("POST", "/campaigns/{campaign_id}/scenes", 201),
    ids=("campaign_id",),
    body=SceneCreate,
    output=Scene,
)
async def start_scene(call: Call[SceneCreate]) -> Scene:
    """Open a scene (its location and who takes part); proposals gather on it until it is committed or ended."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.start_scene,
        call.id("campaign_id"),
        title=b.title,
        location_entity_id=b.location_entity_id,
        participant_entity_ids=b.participant_entity_ids,
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/scenes"),
    ids=("campaign_id",),
    body=ScenesQuery,
    output=list[Scene],
)
async def list_scenes(call: Call[ScenesQuery]) -> list[Scene]:
    """The scenes of the campaign, each as it stands on the line of the head (or of a branch's tip, or of turn_id):
    active there, completed there, or not_begun (it began on another branch, or after that position)."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.scenes, call.id("campaign_id"), turn_id=b.turn_id, branch_id=b.branch_id
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.SCENE, turns=("turn_id",)),
    rest=Rest("GET", "/scenes/{scene_id}"),
    ids=("scene_id",),
    body=ScenesQuery,
    output=Scene,
)
async def get_scene(call: Call[ScenesQuery]) -> Scene:
    """A scene as it stands on the line of the head (or of a branch's tip, or of turn_id): its status there, location,
    participants, and its end, outcomes and summary where it ended on that line."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.get_scene, call.id("scene_id"), turn_id=b.turn_id, branch_id=b.branch_id
    )


@operation(
    family=_F,
    access=PLAYER_ON_SCENE,
    rest=Rest("POST", "/scenes/{scene_id}/proposals", 201),
    ids=("scene_id",),
    body=ProposalCreate,
    output=ProposedChange,
    name="propose_change",
)
async def propose_change(call: Call[ProposalCreate]) -> ProposedChange:
    """Propose a typed change on a scene; it becomes canon only if the gate accepts it. A player proposes with
    player authority, the GM with gm; who proposed is the caller's key."""
    b = call.body
    call.caller.require_authority(b.authority)
    ruled = b.resolution is not None and b.resolution.method is ResolutionMethod.GM_RULING
    if ruled and not call.caller.runs(call.campaign_id or ""):
        raise Forbidden("a player key may not resolve its own proposal by a GM's ruling")
    fields = b.model_dump(exclude_none=True)
    return await call.run(call.ctx.story.propose, call.id("scene_id"), **fields, proposed_by=call.caller.label)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=PLAYER_ON_SCENE,
    rest=Rest("GET", "/scenes/{scene_id}/proposals"),
    ids=("scene_id",),
    body=ProposalsQuery,
    output=list[QueuedProposal],
)
async def list_proposals(call: Call[ProposalsQuery]) -> list[QueuedProposal]:
    """The proposals of a scene, optionally of one status (pending, accepted, rejected …); for the GM, the review
    queue: each pending one with what the gate would decide now and why (a dry run that writes nothing).

    A player key gets the proposals without verdicts or reviews (a verdict may name canon the player may not see).
    """
    gm = call.caller.runs(call.campaign_id or "")
    queue = call.ctx.story.reviews.queue
    found: list[QueuedProposal] = await call.run(queue, call.id("scene_id"), call.body.status, dry_run=gm)
    return found if gm else [p.model_copy(update={"verdict": None, "review": None}) for p in found]


@operation(
    family=_F,
    access=GM_ON_SCENE,
    rest=Rest("POST", "/scenes/{scene_id}/proposals/{proposal_id}/review"),
    ids=("scene_id", "proposal_id"),
    body=ReviewRequest,
    output=ProposedChange,
)
async def review_proposal(call: Call[ReviewRequest]) -> ProposedChange:
    """Review a pending proposal (the GM's): accept it, reject it, or edit it (typed content, checked as a new
    proposal's), with a rationale. The gate applies the review at the next commit naming it or at the scene's end:
    accepted or edited, it is judged on the GM's authority; rejected, it never becomes canon. A proposal the end
    left pending for review is made canon after the end by a commit naming it. The reviewer is the caller's key."""
    proposal: ProposedChange | None = None
    with contextlib.suppress(NotFound):
        proposal = await call.run(call.ctx.story.get_proposal, call.id("proposal_id"))
    if proposal is None or proposal.scene_id != call.id("scene_id"):  # another scene's answers like a missing one
        raise NotFound("story", f"no proposal {call.id('proposal_id')!r} on scene {call.id('scene_id')!r}")
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.review, proposal.id, call.caller.label, action=b.action, rationale=b.rationale, content=b.content
    )


@operation(
    family=_F,
    access=GM_ON_SCENE,
    rest=Rest("POST", "/scenes/{scene_id}/commit"),
    ids=("scene_id",),
    body=CommitRequest,
    output=GateReport,
)
async def commit_scene(call: Call[CommitRequest]) -> GateReport:
    """Judge the named pending proposals now, mid-scene (the GM's): the accepted become canon. After the scene's
    end, the proposals it left pending for review that the GM has reviewed since."""
    return _count(await call.run(call.ctx.gate.commit, call.id("scene_id"), call.body.proposal_ids))


@operation(
    family=_F,
    access=GM_ON_SCENE,
    rest=Rest("POST", "/scenes/{scene_id}/end"),
    ids=("scene_id",),
    body=EndSceneRequest,
    output=GateReport,
)
async def end_scene(call: Call[EndSceneRequest]) -> GateReport:
    """End a scene (the GM's): judge every pending proposal, write the accepted as canon; again changes nothing."""
    return _count(await call.run(call.ctx.gate.end_scene, call.id("scene_id"), summary=call.body.summary))


@operation(
    family="rulings",
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("POST", "/facts/{fact_id}/retcon"),
    ids=("fact_id",),
    body=RetconRequest,
    output=RetconAnswer,
)
async def retcon_fact(call: Call[RetconRequest]) -> RetconAnswer:
    """Declare a canon fact never was true on this branch, or replace its value (the GM's)."""
    b = call.body
    call.caller.require_authority(b.authority)
    new_id = await call.run(
        call.ctx.story.retcon,
        b.campaign_id,
        call.id("fact_id"),
        reason=b.reason,
        value=b.value,
        object_entity_id=b.object_entity_id,
        authority=b.authority,
    )
    return RetconAnswer(fact_id=call.id("fact_id"), replaced_by=new_id)


@operation(
    family="rulings",
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("GET", "/campaigns/{campaign_id}/records/{record_id}/dependents"),
    ids=("campaign_id", "record_id"),
    output=Dependents,
)
async def list_dependents(call: Call[Any]) -> Dependents:
    """What current canon rests on a fact, happening, entity or relationship: read it before a retcon (the GM's)."""
    return await call.run(call.ctx.story.record_dependents, call.id("campaign_id"), call.id("record_id"))  # type: ignore[no-any-return]


@operation(
    family="rulings",
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("POST", "/campaigns/{campaign_id}/records/{record_id}/retcon"),
    ids=("campaign_id", "record_id"),
    body=RecordRetconRequest,
    output=RecordRetconAnswer,
)
async def retcon_record(call: Call[RecordRetconRequest]) -> RecordRetconAnswer:
    """Retcon a fact, happening, entity or relationship on this branch (the GM's): it never was, or is retold."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.retcon_record,
        call.id("campaign_id"),
        call.id("record_id"),
        reason=b.reason,
        dependents=b.dependents,
        retelling=b.retelling,
        value=b.value,
        object_entity_id=b.object_entity_id,
    )


@operation(
    family="rulings",
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/house-rules"),
    ids=("campaign_id",),
    body=HouseRulesQuery,
    output=list[HouseRule],
)
async def list_house_rules(call: Call[HouseRulesQuery]) -> list[HouseRule]:
    """The GM's rulings against the rulebook in force as of a turn (default: the head)."""
    return await call.run(call.ctx.story.house_rules, call.id("campaign_id"), turn_id=call.body.turn_id)  # type: ignore[no-any-return]
