"""Worlds and campaigns: create and read them, set the library they draw on, and carry a campaign out and in
as a bundle."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.errors import InvalidRequest
from schemas.serving import CampaignCreate, CampaignLibrary, WorldCreate
from schemas.story import Authority, Campaign, World
from serve.deps import API, AdminDep, PrincipalDep, ServicesDep


def router() -> APIRouter:
    """Worlds, campaigns, export and import."""
    r = APIRouter(prefix=API, tags=["story"])

    @r.post("/worlds", status_code=201, response_model=World)
    async def create_world(s: ServicesDep, _: AdminDep, body: WorldCreate) -> World:
        return await s.run(s.story.create_world, body.name, description=body.description, axioms=body.axioms)  # type: ignore[no-any-return]

    @r.get("/worlds/{world_id}", response_model=World)
    async def get_world(s: ServicesDep, _: AdminDep, world_id: str) -> World:
        return await s.run(s.story.get_world, world_id)  # type: ignore[no-any-return]

    @r.post("/campaigns", status_code=201, response_model=Campaign)
    async def create_campaign(s: ServicesDep, _: AdminDep, body: CampaignCreate) -> Campaign:
        return await s.run(  # type: ignore[no-any-return]
            s.story.create_campaign,
            body.world_id,
            body.name,
            body.profile,
            narrator_rules=body.narrator_rules,
            library_pins=body.library_pins,
        )

    @r.get("/campaigns", response_model=list[Campaign])
    async def list_campaigns(s: ServicesDep, caller: PrincipalDep, world_id: str | None = None) -> list[Campaign]:
        campaigns: list[Campaign] = await s.run(s.story.list_campaigns, world_id)
        return [c for c in campaigns if caller.admin or c.id in caller.campaigns]

    @r.get("/campaigns/{campaign_id}", response_model=Campaign)
    async def get_campaign(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.get_campaign, campaign_id)  # type: ignore[no-any-return]

    # the library it draws on ------------------------------------------------------------------

    @r.get("/campaigns/{campaign_id}/library", response_model=CampaignLibrary)
    async def get_library(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> CampaignLibrary:
        caller.require_campaign(campaign_id)
        campaign: Campaign = await s.run(s.story.get_campaign, campaign_id)
        return CampaignLibrary(pins=campaign.library_pins)

    @r.put("/campaigns/{campaign_id}/library", response_model=CampaignLibrary)
    async def set_library(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: CampaignLibrary
    ) -> CampaignLibrary:
        """Replace what the campaign draws on (a GM's call); an empty list draws on the whole library again."""
        caller.require_campaign(campaign_id)
        caller.require_authority(Authority.GM)
        campaign: Campaign = await s.run(s.story.set_library_pins, campaign_id, body.pins)
        return CampaignLibrary(pins=campaign.library_pins)

    # export and import ------------------------------------------------------------------------

    @r.get("/campaigns/{campaign_id}/export")
    async def export(
        s: ServicesDep,
        caller: PrincipalDep,
        campaign_id: str,
        include_knowledge: Annotated[
            bool,
            Query(
                description="Also carry the library passages the campaign cites (its provenance), their "
                "items and libraries, so the bundle is whole in a store that never ingested them."
            ),
        ] = False,
    ) -> Response:
        import io

        caller.require_campaign(campaign_id)
        buffer = io.BytesIO()
        await s.run(s.story.export_campaign, campaign_id, buffer, include_knowledge=include_knowledge)
        return Response(
            buffer.getvalue(),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{campaign_id}.lorekeeper.zip"'},
        )

    @r.post("/campaigns/import", status_code=201, response_model=Campaign)
    async def import_campaign(s: ServicesDep, _: AdminDep, request: Request) -> Any:
        data = await request.body()
        if not data:
            raise InvalidRequest("story", "send the bundle (a .zip from the export route) as the request body")
        return await s.run(s.story.import_campaign, data)

    return r
