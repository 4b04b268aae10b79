"""Turn presentations: anyone at the table reads how a turn is shown; the GM lays it out or regenerates it.

A presentation is kept apart from the turn (:mod:`story.presentation`): storing blocks or regenerating them from
the selected take writes a new version and never touches the turn, its takes or canon. A player's answer is cut
by the secrets rule (``serve.operations.secrets``): a block whose media record, or whose speaker, the player may
not see is left out.
"""

from __future__ import annotations

from schemas.media_requests import PresentationBlocks, PresentationQuery, RegenerateRequest
from schemas.presentation import PresentationVersion, TurnPresentation
from serve.operations.base import Access, Call, Empty, On, Rest, Role, operation

_F = "presentation"
_IDS = ("campaign_id", "turn_id")
_PATH = "/campaigns/{campaign_id}/turns/{turn_id}/presentation"
_READ = Access(Role.PLAYER, On.TURN)
_GM = Access(Role.GM, On.TURN)


@operation(
    family=_F,
    access=_READ,
    rest=Rest("GET", _PATH),
    ids=_IDS,
    body=PresentationQuery,
    output=TurnPresentation,
)
async def get_presentation(call: Call[PresentationQuery]) -> TurnPresentation:
    """How a turn is shown: its presentation blocks (the latest version, or one), apart from the turn's truth."""
    presentations = call.ctx.story.presentations
    return await call.run(presentations.get, call.id("turn_id"), call.body.version)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_READ,
    rest=Rest("GET", _PATH + "/versions"),
    ids=_IDS,
    output=list[PresentationVersion],
)
async def list_presentation_versions(call: Call[Empty]) -> list[PresentationVersion]:
    """The stored versions of a turn's presentation, oldest first (how each came to be, not its blocks)."""
    return await call.run(call.ctx.story.presentations.versions, call.id("turn_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("PUT", _PATH),
    ids=_IDS,
    body=PresentationBlocks,
    output=TurnPresentation,
)
async def set_presentation(call: Call[PresentationBlocks]) -> TurnPresentation:
    """Lay out a turn's presentation as given (the GM's): its next version; the turn is not touched."""
    b = call.body
    drafted = TurnPresentation(turn_id=call.id("turn_id"), take_id=b.take_id, blocks=b.blocks)
    return await call.run(call.ctx.story.presentations.set, drafted)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", _PATH + "/regenerate", 201),
    ids=_IDS,
    body=RegenerateRequest,
    output=TurnPresentation,
)
async def regenerate_presentation(call: Call[RegenerateRequest]) -> TurnPresentation:
    """Render a turn's presentation again from its selected take (the GM's): its next version, the ones before
    kept; the turn, its takes and canon are not touched."""
    presentations = call.ctx.story.presentations
    return await call.run(presentations.regenerate, call.id("turn_id"), call.body.renderer)  # type: ignore[no-any-return]
