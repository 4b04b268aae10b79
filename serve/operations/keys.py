"""API keys over the API: an admin creates, lists and revokes any key; a campaign's GM mints, lists and
revokes the player keys of that campaign (a player key may name the character it plays).

A key's secret is answered once, when it is created, and never stored (:mod:`serve.auth`).
"""

from __future__ import annotations

from typing import Any

from schemas.errors import NotFound
from schemas.serving import ApiKeyInfo, CreatedKey, KeyCreate, KeyRole, PlayerKeyCreate
from serve.operations.base import Access, Call, On, Rest, Role, operation

_F = "keys"
ADMIN = Access(Role.ADMIN)
GM = Access(Role.GM, On.CAMPAIGN)


@operation(family=_F, access=ADMIN, rest=Rest("POST", "/keys", 201), body=KeyCreate, output=CreatedKey)
async def create_key(call: Call[KeyCreate]) -> CreatedKey:
    """Create a key (admin): an admin key, or a GM or player key of some campaigns; the secret is shown once."""
    b = call.body
    for campaign_id in b.campaigns:  # a key for a campaign that does not exist is a typo, not a key
        await call.run(call.ctx.story.get_campaign, campaign_id)
    key, info = await call.run(
        call.ctx.keys.create,
        b.name,
        admin=b.admin,
        campaigns=b.campaigns,
        role=b.role,
        character_entity_id=b.character_entity_id,
    )
    return CreatedKey(key=key, info=info)


@operation(family=_F, access=ADMIN, rest=Rest("GET", "/keys"), output=list[ApiKeyInfo])
async def list_keys(call: Call[Any]) -> list[ApiKeyInfo]:
    """Every key (admin), never a secret."""
    return await call.run(call.ctx.keys.list)  # type: ignore[no-any-return]


@operation(family=_F, access=ADMIN, rest=Rest("POST", "/keys/{key_id}/revoke"), ids=("key_id",), output=ApiKeyInfo)
async def revoke_key(call: Call[Any]) -> ApiKeyInfo:
    """Revoke a key (admin); it stops working within seconds, and stays listed as revoked."""
    await call.run(call.ctx.keys.revoke, call.id("key_id"))
    return await call.run(call.ctx.keys.get, call.id("key_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/keys", 201),
    ids=("campaign_id",),
    body=PlayerKeyCreate,
    output=CreatedKey,
)
async def create_player_key(call: Call[PlayerKeyCreate]) -> CreatedKey:
    """Mint a player key for this campaign (its GM), optionally naming the character it plays."""
    b, campaign_id = call.body, call.id("campaign_id")
    await call.run(call.ctx.story.get_campaign, campaign_id)
    key, info = await call.run(
        call.ctx.keys.create,
        b.name,
        campaigns=[campaign_id],
        role=KeyRole.PLAYER,
        character_entity_id=b.character_entity_id,
    )
    return CreatedKey(key=key, info=info)


async def _player_keys(call: Call[Any]) -> list[ApiKeyInfo]:
    keys: list[ApiKeyInfo] = await call.run(call.ctx.keys.list)
    campaign_id = call.id("campaign_id")
    return [k for k in keys if not k.admin and k.role is KeyRole.PLAYER and k.campaigns == [campaign_id]]


@operation(
    family=_F,
    access=GM,
    rest=Rest("GET", "/campaigns/{campaign_id}/keys"),
    ids=("campaign_id",),
    output=list[ApiKeyInfo],
)
async def list_player_keys(call: Call[Any]) -> list[ApiKeyInfo]:
    """The player keys of this campaign alone (its GM), never a secret."""
    return await _player_keys(call)


@operation(
    family=_F,
    access=GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/keys/{key_id}/revoke"),
    ids=("campaign_id", "key_id"),
    output=ApiKeyInfo,
)
async def revoke_player_key(call: Call[Any]) -> ApiKeyInfo:
    """Revoke a player key of this campaign (its GM); any other key answers like a missing one."""
    key_id = call.id("key_id")
    if not any(k.id == key_id for k in await _player_keys(call)):
        raise NotFound("auth", f"no player key {key_id!r} of campaign {call.id('campaign_id')!r}")
    await call.run(call.ctx.keys.revoke, key_id)
    return await call.run(call.ctx.keys.get, key_id)  # type: ignore[no-any-return]
