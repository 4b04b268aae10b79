"""Worlds and campaigns: author a world and its axioms, create and read campaigns, pin the library they draw
on, and carry a campaign out and in as a bundle."""

from __future__ import annotations

import hashlib
import io
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.canon import Axiom
from schemas.common import Name, Text
from schemas.serving import CampaignBundle, CampaignCreate, CampaignLibrary, WorldCreate
from schemas.story import Campaign, World
from serve.operations.base import Access, Call, On, Rest, Role, operation
from serve.operations.models import check_roles

_F = "campaigns"


class AxiomCreate(BaseModel):
    """A rule of the world that always holds, added by its GM."""

    model_config = ConfigDict(extra="forbid")

    text: Text
    category: Name | None = None


class CampaignsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    world_id: str | None = Field(default=None, description="Only the campaigns of this world.")


class ExportQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_knowledge: bool = Field(
        default=False,
        description="Also carry the library passages the campaign cites (its provenance), their items and "
        "libraries, so the bundle is whole in a store that never ingested them.",
    )


@operation(family=_F, access=Access(Role.ADMIN), rest=Rest("POST", "/worlds", 201), body=WorldCreate, output=World)
async def create_world(call: Call[WorldCreate]) -> World:
    """Create a world (a universe of campaigns) with its axioms."""
    b = call.body
    return await call.run(call.ctx.story.create_world, b.name, description=b.description, axioms=b.axioms)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.WORLD),
    rest=Rest("GET", "/worlds/{world_id}"),
    ids=("world_id",),
    output=World,
)
async def get_world(call: Call[Any]) -> World:
    """A world: its name and description (a key reaches the worlds of its campaigns)."""
    return await call.run(call.ctx.story.get_world, call.id("world_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.WORLD),
    rest=Rest("GET", "/worlds/{world_id}/axioms"),
    ids=("world_id",),
    output=list[Axiom],
)
async def list_axioms(call: Call[Any]) -> list[Axiom]:
    """The axioms of a world: the rules that always hold there."""
    await call.run(call.ctx.story.get_world, call.id("world_id"))
    return await call.run(call.ctx.story.axioms, call.id("world_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.WORLD),
    rest=Rest("POST", "/worlds/{world_id}/axioms", 201),
    ids=("world_id",),
    body=AxiomCreate,
    output=Axiom,
)
async def add_axiom(call: Call[AxiomCreate]) -> Axiom:
    """Add an axiom to a world (its GM: a GM key of one of its campaigns, or an admin)."""
    b = call.body
    return await call.run(call.ctx.story.add_axiom, call.id("world_id"), b.text, category=b.category)  # type: ignore[no-any-return]


@operation(
    family=_F, access=Access(Role.ADMIN), rest=Rest("POST", "/campaigns", 201), body=CampaignCreate, output=Campaign
)
async def create_campaign(call: Call[CampaignCreate]) -> Campaign:
    """Create a campaign in a world, with its profile, narrator rules, the library it draws on and the engines
    that play its seats (``model_roles``; unset: the deployment's)."""
    b = call.body
    check_roles(call.ctx, b.model_roles)
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.create_campaign,
        b.world_id,
        b.name,
        b.profile,
        narrator_rules=b.narrator_rules,
        library_pins=b.library_pins,
        model_roles=b.model_roles,
    )


@operation(
    family=_F, access=Access(Role.ANY), rest=Rest("GET", "/campaigns"), body=CampaignsQuery, output=list[Campaign]
)
async def list_campaigns(call: Call[CampaignsQuery]) -> list[Campaign]:
    """The campaigns this key holds (an admin: every campaign), optionally of one world."""
    campaigns: list[Campaign] = await call.run(call.ctx.story.list_campaigns, call.body.world_id)
    return [c for c in campaigns if call.caller.plays(c.id)]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN),
    rest=Rest("GET", "/campaigns/{campaign_id}"),
    ids=("campaign_id",),
    output=Campaign,
)
async def get_campaign(call: Call[Any]) -> Campaign:
    """A campaign: its world, profile, active branch and head."""
    return await call.run(call.ctx.story.get_campaign, call.id("campaign_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN),
    rest=Rest("GET", "/campaigns/{campaign_id}/library"),
    ids=("campaign_id",),
    output=CampaignLibrary,
)
async def get_library(call: Call[Any]) -> CampaignLibrary:
    """The libraries and items the campaign draws on, each with its use (empty: the whole library)."""
    campaign: Campaign = await call.run(call.ctx.story.get_campaign, call.id("campaign_id"))
    return CampaignLibrary(pins=campaign.library_pins)


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("PUT", "/campaigns/{campaign_id}/library"),
    ids=("campaign_id",),
    body=CampaignLibrary,
    output=CampaignLibrary,
)
async def set_library(call: Call[CampaignLibrary]) -> CampaignLibrary:
    """Replace what the campaign draws on (the GM pins books); an empty list draws on the whole library."""
    campaign: Campaign = await call.run(call.ctx.story.set_library_pins, call.id("campaign_id"), call.body.pins)
    return CampaignLibrary(pins=campaign.library_pins)


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN),  # the whole campaign, its secrets and prompts with it: the GM's
    rest=Rest("GET", "/campaigns/{campaign_id}/export"),
    ids=("campaign_id",),
    body=ExportQuery,
    output=CampaignBundle,
)
async def export_campaign(call: Call[ExportQuery]) -> CampaignBundle:
    """The campaign as a bundle (a zip: its story, canon, memories and prompts, secrets included; the GM's; REST
    answers the zip itself)."""
    campaign_id, buffer = call.id("campaign_id"), io.BytesIO()
    await call.run(call.ctx.story.export_campaign, campaign_id, buffer, include_knowledge=call.body.include_knowledge)
    data = buffer.getvalue()
    return CampaignBundle(
        campaign_id=campaign_id,
        filename=f"{campaign_id}.lorekeeper.zip",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
    )


class BundleUpload(BaseModel):
    """The bundle's bytes (the REST door reads them as the request body)."""

    model_config = ConfigDict(extra="forbid")

    data: bytes = Field(min_length=1)


@operation(
    family=_F,
    access=Access(Role.ADMIN),
    rest=Rest("POST", "/campaigns/import", 201, raw_body=True),
    body=BundleUpload,
    output=Campaign,
    rest_only="a bundle is an upload of up to LOREKEEPER_MAX_UPLOAD_BYTES, sent as the raw request body",
)
async def import_campaign(call: Call[BundleUpload]) -> Campaign:
    """Import a campaign bundle (from the export) into this store."""
    return await call.run(call.ctx.story.import_campaign, call.body.data)  # type: ignore[no-any-return]
