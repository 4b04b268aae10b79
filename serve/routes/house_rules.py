"""A campaign's house rules: the GM's rulings against the rulebook in force as of its head (or a turn)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from serve.deps import API, PrincipalDep, ServicesDep
from story.house_rules import HouseRule


def router() -> APIRouter:
    """House rules."""
    r = APIRouter(prefix=API, tags=["story"])

    @r.get("/campaigns/{campaign_id}/house-rules", response_model=list[HouseRule])
    async def house_rules(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str | None = None) -> Any:
        """Entry, field, the book's value and the ruled one, who ruled, at which turn, on which branch."""
        caller.require_campaign(campaign_id)
        if turn_id is not None:
            await s.turn_in(campaign_id, turn_id)
        return await s.run(s.story.house_rules, campaign_id, turn_id=turn_id)

    return r
