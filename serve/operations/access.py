"""Enforcing an operation's access rule, once for both doors.

:func:`authorize` resolves what the operation acts on (:class:`~serve.operations.base.On`) to its
campaign and checks the caller's :class:`~serve.operations.base.Role` there:

* no key where one is needed: 401 (the doors refuse it before an operation runs);
* a campaign the key does not hold: 403, whether it exists or not (a key learns nothing of others);
* a scene, turn or fact of a campaign the key does not hold: **404, exactly like a missing one** —
  this is the one place that rule lives (:func:`_missing_unless_mine`);
* a role the key lacks on a campaign it holds (a player ending a scene): 403.

:func:`visible` is the one place every answer passes on its way out, so that what a caller may see
(the secrets of a character, GM-only notes) is filtered for both doors in one place.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import NotFound
from serve.auth import Forbidden
from serve.operations.base import Call, On, Operation, Role
from serve.operations.secrets import redact


async def authorize(op: Operation, call: Call[Any]) -> None:
    """Check ``op``'s rule for this call and record the campaign it resolved to (``call.campaign_id``).

    Raises:
        Forbidden: the key may not use the campaign, or lacks the role.
        NotFound: the record is missing, or belongs to a campaign the key does not hold.
    """
    rule, caller = op.access, call.caller
    if rule.role is Role.ADMIN:
        caller.require_admin()
    if rule.on is On.WORLD:
        await _world(call, call.id("world_id"), gm=rule.role is Role.GM)
        return
    if rule.on is On.NOTHING:
        return
    if rule.on is On.SCENE:
        scene = await _missing_unless_mine(call, "scene", call.id("scene_id"), call.ctx.story.scene_record)
        campaign_id = scene.campaign_id
    else:
        campaign_id = call.ids.get("campaign_id") or getattr(call.body, "campaign_id", None) or ""
        if not caller.plays(campaign_id):
            raise Forbidden(f"this key may not use campaign {campaign_id!r}")
    call.campaign_id = campaign_id
    turn_ids = [call.id("turn_id")] if rule.on is On.TURN else []
    turn_ids += [t for t in (getattr(call.body, name, None) for name in rule.turns) if t]
    for turn_id in turn_ids:
        await _turn_of(call, campaign_id, turn_id)
    if rule.role is Role.GM and not caller.runs(campaign_id):
        raise Forbidden(f"{op.name} is the GM's: this key plays campaign {campaign_id!r} as a player")


async def _missing_unless_mine(call: Call[Any], kind: str, uid: str, read: Any) -> Any:
    """The record, or NotFound when it is missing or belongs to a campaign the caller does not hold:
    another campaign's record answers exactly like a missing one."""
    missing = NotFound("story", f"no {kind} {uid!r}")
    try:
        record = await call.run(read, uid)
    except NotFound:
        raise missing from None
    if not call.caller.plays(record.campaign_id):
        raise missing
    return record


async def _turn_of(call: Call[Any], campaign_id: str, turn_id: str) -> None:
    """``turn_id`` is a turn of ``campaign_id``; a missing turn and another campaign's answer alike."""
    missing = NotFound("story", f"no turn {turn_id!r} in campaign {campaign_id!r}")
    try:
        turn = await call.run(call.ctx.story.get_turn, turn_id)
    except NotFound:
        raise missing from None
    if turn.campaign_id != campaign_id:
        raise missing


async def _world(call: Call[Any], world_id: str, *, gm: bool) -> None:
    """A campaign key reaches the worlds of its campaigns (a GM key authors them); an admin every world."""
    caller = call.caller
    if caller.admin:
        return
    campaigns = await call.run(call.ctx.story.list_campaigns, world_id)
    mine = [c.id for c in campaigns if (caller.runs(c.id) if gm else caller.plays(c.id))]
    if not mine:
        holds = any(caller.plays(c.id) for c in campaigns)
        raise Forbidden(
            f"authoring world {world_id!r} is its GM's" if holds else f"this key may not use world {world_id!r}"
        )


async def visible(op: Operation, call: Call[Any], result: Any) -> Any:
    """What of ``result`` the caller may see. Every answer of every operation passes here (both doors): the
    GM of the campaign sees all it reaches, a player key what is public and what is known to the character
    it plays (:func:`serve.operations.secrets.redact`, by the rule of :class:`story.viewer.Viewer`: state with
    its relationships and threads, recall, provenance, memories, summaries, proposals, house rules). An
    operation on no campaign answers the shared knowledge, which has no secrets."""
    return await redact(call, result)
