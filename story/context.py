"""What a turn reads before the model runs, in one call: :meth:`story.service.StoryService.turn_context`.

The narrator's prompt needs the campaign, its world's axioms, the world at the head, the turns just
before the one being narrated, and the memories and summaries on the head's line. Read one by one,
each call re-reads the campaign (its row, branches and head) and walks the lineage again; read
together, the campaign is read once and the rest in a few queries (see :mod:`story.cypher`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from schemas.story import Campaign, Memory, Summary, Turn, WorldStateView


class TurnContext(BaseModel):
    """Everything a turn reads, each value what the separate call returns.

    Attributes:
        campaign: ``get_campaign(campaign_id)``.
        axioms: the texts of ``axioms(campaign.world_id)``, in that order.
        state: ``state(campaign_id)``: the world at the head.
        recent: ``history(campaign_id, turn_id=turn.parent_turn_id, last=recent)``; ``[]`` for a first turn or
            ``recent=0``.
        memories: ``memories(campaign_id)``.
        summaries: ``summaries(campaign_id)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign: Campaign
    axioms: list[str]
    state: WorldStateView
    recent: list[Turn]
    memories: list[Memory]
    summaries: list[Summary]
