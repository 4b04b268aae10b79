"""A campaign's model roles: which of the server's engines plays narrator, extractor, summarizer and judge.

Read by the table (who plays each seat, the embedding model, what the server has), set by its GM; the
campaign's creation takes them too (:func:`serve.operations.campaigns.create_campaign`). A role naming an
engine the server does not have is refused (400, naming the ones it has).
"""

from __future__ import annotations

from typing import Any

from models.embedding import EmbeddingConfig
from schemas.model_roles import CampaignModels, ModelRoles, Seat, SeatModel
from schemas.story import Campaign
from serve.operations.base import Access, Call, On, Rest, Role, operation
from serve.seats import EngineSet
from serve.services import Services

_F = "campaigns"


def engine_set(services: Services) -> EngineSet:
    """The engines of this server (names and what each is), for checking and describing roles."""
    return EngineSet(services.serve)


def check_roles(services: Services, roles: ModelRoles | None) -> None:
    """Refuse roles that name an engine this server does not have (InvalidRequest, 400)."""
    engine_set(services).check(roles)


def describe(services: Services, campaign: Campaign) -> CampaignModels:
    """The campaign's roles as they resolve on this server."""
    engines = EngineSet(services.serve, roles_of=lambda _: campaign.model_roles)
    seats: dict[Seat, SeatModel] = {}
    for seat in Seat:
        name, chosen = engines.chosen(campaign.id, seat)
        kind, model = engines.describe(name)
        seats[seat] = SeatModel(engine=name, kind=kind, model=model, chosen=chosen)
    return CampaignModels(
        campaign_id=campaign.id,
        roles=campaign.model_roles or ModelRoles(),
        seats=seats,
        embedding=EmbeddingConfig().model,
        available=engines.names(),
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN),
    rest=Rest("GET", "/campaigns/{campaign_id}/models"),
    ids=("campaign_id",),
    output=CampaignModels,
)
async def get_models(call: Call[Any]) -> CampaignModels:
    """Which engine plays each seat for the campaign (narrator, extractor, summarizer, judge), the embedding
    model (the server's, not a campaign's choice) and the engines the server has."""
    campaign: Campaign = await call.run(call.ctx.story.get_campaign, call.id("campaign_id"))
    return describe(call.ctx, campaign)


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("PUT", "/campaigns/{campaign_id}/models"),
    ids=("campaign_id",),
    body=ModelRoles,
    output=CampaignModels,
)
async def set_models(call: Call[ModelRoles]) -> CampaignModels:
    """Name the engines that play the campaign's seats (a seat left unset plays on the deployment's engine);
    the next turn and the next scene end use them."""
    check_roles(call.ctx, call.body)
    campaign: Campaign = await call.run(call.ctx.story.set_model_roles, call.id("campaign_id"), call.body)
    return describe(call.ctx, campaign)
