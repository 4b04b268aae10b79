"""Turns and takes: play a turn, retake one, choose a take, list turns, and read a turn's provenance.

A turn runs under the replica's capacity (:class:`~serve.services.Capacity`): past it the caller is
told to come back (429 with Retry-After over REST, ``over_capacity`` over MCP) rather than queued.
Players play turns as themselves (a player or their character, never the GM or the narrator); the
GM retakes any turn and chooses its take.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from narrator.turn import TurnOutcome
from schemas.serving import TakeRequest, TurnRequest
from schemas.story import SpeakerKind, Take, Turn, TurnProvenance
from serve.auth import Forbidden
from serve.errors import TooMany
from serve.metrics import TURNS_REFUSED
from serve.operations.base import Access, Call, On, Rest, Role, operation
from serve.operations.secrets import narrator_viewer
from serve.services import Slot

_F = "turns"
PLAYER_ON_CAMPAIGN = Access(Role.PLAYER, On.CAMPAIGN)


class TurnsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    last: int | None = Field(default=50, ge=1, le=1000, description="The last N turns of the line read.")
    branch_id: str | None = Field(default=None, description="Read this branch's line (its tip); default: the head's.")
    turn_id: str | None = Field(default=None, description="Read the line ending at this turn.")


class TakesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_archived: bool = Field(
        default=False, description="Also list the takes the GM archived (each says archived and its disposition)."
    )


def take_slot(call: Call[Any]) -> Slot:
    """A place among the turns this replica narrates at once, or ``over_capacity``."""
    slot = call.ctx.capacity.acquire()
    if slot is None:
        TURNS_REFUSED.inc()
        raise TooMany(
            f"this server is narrating {call.ctx.capacity.limit} turns already; retry shortly",
            retry_after=call.ctx.capacity.retry_after_s,
        )
    return slot


async def _outcome(events: AsyncIterator[dict[str, Any]], slot: Slot) -> TurnOutcome:
    try:
        outcome: dict[str, Any] = {}
        async for event in events:
            if event["event"] == "done":
                outcome = event
        return TurnOutcome.model_validate(outcome)
    finally:
        slot.release()


async def turn_events(call: Call[TurnRequest]) -> AsyncIterator[dict[str, Any]]:
    """The events of a played turn (REST streams them as server-sent events), once the call is checked."""
    campaign_id, body = call.id("campaign_id"), call.body
    speaker = body.speaker
    if speaker is not None and not call.caller.runs(campaign_id):
        if speaker.kind in (SpeakerKind.GM, SpeakerKind.NARRATOR):
            raise Forbidden(f"a player key speaks as a player or a character, not as the {speaker.kind.value}")
        plays = call.caller.character_entity_id
        if speaker.entity_id is not None and speaker.entity_id != plays:
            raise Forbidden(f"this player key speaks for its own character ({plays!r}), not {speaker.entity_id!r}")
    await call.run(call.ctx.story.get_campaign, campaign_id)  # before any event: a stream could no longer 404
    # the narration is the table's: it draws on no record some of the table may not see
    return call.ctx.flow.play(campaign_id, body, viewer=narrator_viewer(call))


async def retake_events(call: Call[Any]) -> AsyncIterator[dict[str, Any]]:
    """The events of a retake, once the world is rewound to where it stood when the turn was recorded (the
    new take is told from it; the replaced take is archived as a version when the new one is kept)."""
    campaign_id, turn_id = call.id("campaign_id"), call.id("turn_id")
    await call.run(call.ctx.story.versions.rewind, campaign_id, turn_id)
    return call.ctx.flow.retake(campaign_id, turn_id, viewer=narrator_viewer(call))


@operation(
    family=_F,
    access=PLAYER_ON_CAMPAIGN,
    rest=Rest("POST", "/campaigns/{campaign_id}/turns", 201),
    ids=("campaign_id",),
    body=TurnRequest,
    output=TurnOutcome,
    stream=turn_events,
)
async def play_turn(call: Call[TurnRequest]) -> TurnOutcome:
    """Play a turn: the player's input is narrated, kept with its prompt, and its proposals staged on the scene."""
    slot = take_slot(call)
    try:
        events = await turn_events(call)
    except BaseException:
        slot.release()
        raise
    return await _outcome(events, slot)


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/turns"),
    ids=("campaign_id",),
    body=TurnsQuery,
    output=list[Turn],
)
async def list_turns(call: Call[TurnsQuery]) -> list[Turn]:
    """The turns on the line of the head (or of a branch's tip, or ending at a turn), oldest first."""
    b = call.body
    story = call.ctx.story
    return await call.run(story.history, call.id("campaign_id"), turn_id=b.turn_id, branch_id=b.branch_id, last=b.last)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.TURN),
    rest=Rest("POST", "/campaigns/{campaign_id}/turns/{turn_id}/takes", 201),
    ids=("campaign_id", "turn_id"),
    body=TakeRequest,
    output=TurnOutcome,
    stream=retake_events,
)
async def retake_turn(call: Call[TakeRequest]) -> TurnOutcome:
    """Narrate a turn again as a new take, selected, from the world rewound to before it (the GM's: the replaced
    take is archived as a turn version and its pending proposals superseded; revert_turn_version brings it back)."""
    slot = take_slot(call)
    try:
        events = await retake_events(call)
    except BaseException:
        slot.release()
        raise
    return await _outcome(events, slot)


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.TURN),
    rest=Rest("GET", "/campaigns/{campaign_id}/turns/{turn_id}/takes"),
    ids=("campaign_id", "turn_id"),
    body=TakesQuery,
    output=list[Take],
)
async def list_takes(call: Call[TakesQuery]) -> list[Take]:
    """The takes of a turn still in play, the selected one marked; include_archived adds the archived ones."""
    story, archived = call.ctx.story, call.body.include_archived
    return await call.run(story.takes, call.id("turn_id"), include_archived=archived)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.TURN),
    rest=Rest("PUT", "/campaigns/{campaign_id}/turns/{turn_id}/takes/{take_id}/select"),
    ids=("campaign_id", "turn_id", "take_id"),
    output=Take,
)
async def select_take(call: Call[Any]) -> Take:
    """Choose which take of a turn stands (the GM's)."""
    return await call.run(call.ctx.story.select_take, call.id("turn_id"), call.id("take_id"))  # type: ignore[no-any-return]


@operation(
    family="provenance",
    access=Access(Role.PLAYER, On.TURN),
    rest=Rest("GET", "/campaigns/{campaign_id}/turns/{turn_id}/provenance"),
    ids=("campaign_id", "turn_id"),
    output=TurnProvenance,
)
async def get_provenance(call: Call[Any]) -> TurnProvenance:
    """Why the narrator knew what it knew at a turn (prompt, passages) and what the turn made canon."""
    return await call.run(call.ctx.story.provenance, call.id("turn_id"))  # type: ignore[no-any-return]
