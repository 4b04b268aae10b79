"""A campaign's memory: recall its past by meaning, list, add and retract memories, read summaries.

Recall and the listings see one line of the story (the head's, or a turn's ancestors). A player adds
memories for the character their key plays, never for another; the GM for anyone, and retracts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.recall import RecallRequest, RecallResponse
from schemas.serving import MemoryCreate, MemoryRetract
from schemas.story import Memory, Summary
from serve.auth import Forbidden
from serve.operations.base import Access, Call, On, Rest, Role, operation

_F = "memory"
_IDS = ("campaign_id",)
_BRANCH = (
    "Read this branch's line: its tip, or with turn_id that turn as seen from the branch (a branch of "
    "another campaign answers like a missing one); default: the head's."
)


class MemoriesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    observer_entity_id: str | None = Field(default=None, description="Only this entity's memories.")
    turn_id: str | None = Field(default=None, description="As of this turn (its lineage); the head when unset.")
    branch_id: str | None = Field(default=None, description=_BRANCH)


class SummariesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: str | None = Field(default=None, description="As of this turn (its lineage); the head when unset.")
    branch_id: str | None = Field(default=None, description=_BRANCH)


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("as_of_turn_id",)),
    rest=Rest("POST", "/campaigns/{campaign_id}/recall"),
    ids=_IDS,
    body=RecallRequest,
    output=RecallResponse,
)
async def recall(call: Call[RecallRequest]) -> RecallResponse:
    """What the campaign remembers about a query, by meaning: turns, summaries, canon facts and memories on the
    line of the head (or of as_of_turn_id), optionally only what one observer witnessed."""
    b, story, campaign_id = call.body, call.ctx.story, call.id("campaign_id")
    if story.recall_index is None:  # an unknown campaign is not_found, whether recall is on or not
        await call.run(story.get_campaign, campaign_id)
    # a player's answer is filtered for secrets after the search (serve.operations.secrets): ask for more, so
    # that hidden records do not leave a short answer, and let the filter cut back to the limit asked
    call.extra["recall_limit"] = b.limit
    limit = b.limit if call.caller.runs(campaign_id) else min(4 * b.limit, 200)
    hits = await call.run(
        story.recall,
        campaign_id,
        b.query,
        as_of_turn_id=b.as_of_turn_id,
        observer_entity_id=b.observer_entity_id,
        kinds=b.kinds,
        limit=limit,
    )
    return RecallResponse(campaign_id=campaign_id, query=b.query, as_of_turn_id=b.as_of_turn_id, hits=hits)


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/memories"),
    ids=_IDS,
    body=MemoriesQuery,
    output=list[Memory],
)
async def list_memories(call: Call[MemoriesQuery]) -> list[Memory]:
    """The memories held on the line of the head (or of a branch's tip, or of turn_id), optionally one entity's;
    retracted ones left out."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.memories,
        call.id("campaign_id"),
        observer_entity_id=b.observer_entity_id,
        turn_id=b.turn_id,
        branch_id=b.branch_id,
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("anchor_turn_id",)),
    rest=Rest("POST", "/campaigns/{campaign_id}/memories", 201),
    ids=_IDS,
    body=MemoryCreate,
    output=Memory,
)
async def add_memory(call: Call[MemoryCreate]) -> Memory:
    """Record what a character remembers, believes or feels, anchored to a turn (the head by default). A player
    key adds memories for the character it plays only."""
    b, campaign_id, caller = call.body, call.id("campaign_id"), call.caller
    if not caller.runs(campaign_id) and b.observer_entity_id != caller.character_entity_id:
        plays = caller.character_entity_id
        raise Forbidden(
            f"a player key adds memories for its own character ({plays!r})"
            if plays
            else "this player key plays no character: its memories are the GM's to add"
        )
    anchor = await call.run(call.ctx.story.memory_anchor, campaign_id, b.anchor_turn_id)
    memory = Memory(campaign_id=campaign_id, anchor_turn_id=anchor, **b.model_dump(exclude={"anchor_turn_id"}))
    return await call.run(call.ctx.story.add_memory, memory)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN),
    rest=Rest("POST", "/campaigns/{campaign_id}/memories/{memory_id}/retract"),
    ids=("campaign_id", "memory_id"),
    body=MemoryRetract,
    output=Memory,
)
async def retract_memory(call: Call[MemoryRetract]) -> Memory:
    """Withdraw a memory that no longer holds (the GM's): it stays, marked retracted with when and why."""
    story = call.ctx.story
    return await call.run(story.retract_memory, call.id("campaign_id"), call.id("memory_id"), reason=call.body.reason)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/summaries"),
    ids=_IDS,
    body=SummariesQuery,
    output=list[Summary],
)
async def list_summaries(call: Call[SummariesQuery]) -> list[Summary]:
    """The scene, session and arc summaries on the line of the head (or of a branch's tip, or of turn_id), oldest
    first."""
    b, story = call.body, call.ctx.story
    return await call.run(story.summaries, call.id("campaign_id"), turn_id=b.turn_id, branch_id=b.branch_id)  # type: ignore[no-any-return]
