"""Triggers and their activations: the GM's alone (a player never sees a trigger, nor what one fired).

A trigger is declared with its conditions on the state and what it does (a narrator note, or a proposal of typed
state events judged by the gate); the story engine fires it, per branch, when a turn or a scene end makes its
conditions hold (:mod:`story.triggers`), and records each firing as an activation with its turn and branch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.common import Id
from schemas.triggers import Activation, Trigger, TriggerCreate, TriggerUpdate
from serve.operations.base import Access, Call, Empty, On, Rest, Role, operation

_F = "triggers"
_IDS = ("campaign_id",)
_ONE = ("campaign_id", "trigger_id")
_GM = Access(Role.GM, On.CAMPAIGN)


class ActivationsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trigger_id: Id | None = Field(default=None, description="Only this trigger's firings.")
    branch_id: Id | None = Field(default=None, description="Only the firings on this branch.")


@operation(family=_F, access=_GM, rest=Rest("GET", "/campaigns/{campaign_id}/triggers"), ids=_IDS, output=list[Trigger])
async def list_triggers(call: Call[Empty]) -> list[Trigger]:
    """The campaign's triggers, oldest first (the GM's)."""
    return await call.run(call.ctx.story.triggers.of, call.id("campaign_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/triggers", 201),
    ids=_IDS,
    body=TriggerCreate,
    output=Trigger,
)
async def create_trigger(call: Call[TriggerCreate]) -> Trigger:
    """Declare a trigger: conditions on the state that fire a narrator note or a proposal on a branch (the GM's).

    It fires when a turn or a scene end makes its conditions hold on the branch, once per line unless repeatable."""
    return await call.run(call.ctx.story.triggers.create, call.id("campaign_id"), call.body)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("PATCH", "/campaigns/{campaign_id}/triggers/{trigger_id}"),
    ids=_ONE,
    body=TriggerUpdate,
    output=Trigger,
)
async def update_trigger(call: Call[TriggerUpdate]) -> Trigger:
    """Change a trigger's name, conditions, action, repeatability or whether it is active (the GM's)."""
    triggers = call.ctx.story.triggers
    return await call.run(triggers.update, call.id("campaign_id"), call.id("trigger_id"), call.body)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("DELETE", "/campaigns/{campaign_id}/triggers/{trigger_id}"),
    ids=_ONE,
    output=Trigger,
)
async def delete_trigger(call: Call[Empty]) -> Trigger:
    """Remove a trigger; its activations stay as the record of what it did (the GM's)."""
    triggers = call.ctx.story.triggers
    return await call.run(triggers.delete, call.id("campaign_id"), call.id("trigger_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("GET", "/campaigns/{campaign_id}/activations"),
    ids=_IDS,
    body=ActivationsQuery,
    output=list[Activation],
)
async def list_activations(call: Call[ActivationsQuery]) -> list[Activation]:
    """The triggers' firings, oldest first, each with its turn, branch and what it made (the GM's)."""
    b, triggers = call.body, call.ctx.story.triggers
    return await call.run(  # type: ignore[no-any-return]
        triggers.activations, call.id("campaign_id"), trigger_id=b.trigger_id, branch_id=b.branch_id
    )
