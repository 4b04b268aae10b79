"""Story threads: the GM opens, advances, resolves and abandons them; anyone at the table lists those they may see.

The threads are read from the state fold as of a position (the head, a branch's tip or a turn), so an undo or a
fork shows each as it was there. A player's listing is cut by the secrets rule (:class:`story.viewer.Viewer`):
a GM-only thread is left out, and a hidden entity is left out of the threads that name it.
"""

from __future__ import annotations

from schemas.canon import StoryThread
from schemas.threads import ThreadAbandonment, ThreadCreate, ThreadProgress, ThreadResolution, ThreadsQuery
from serve.operations.base import Access, Call, On, Rest, Role, operation
from serve.operations.secrets import viewer_of

_F = "threads"
_IDS = ("campaign_id",)
_ONE = ("campaign_id", "thread_id")
_GM = Access(Role.GM, On.CAMPAIGN)


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/threads"),
    ids=_IDS,
    body=ThreadsQuery,
    output=list[StoryThread],
)
async def list_threads(call: Call[ThreadsQuery]) -> list[StoryThread]:
    """The story threads as of the head (or a branch's tip, or turn_id), optionally of one status, with their
    advances; a player sees those the table (or their character) may see."""
    b, story = call.body, call.ctx.story
    state = await call.run(story.state, call.id("campaign_id"), turn_id=b.turn_id, branch_id=b.branch_id)
    threads = viewer_of(call).state(state).threads
    return [t for t in threads if b.status is None or t.status is b.status]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/threads", 201),
    ids=_IDS,
    body=ThreadCreate,
    output=StoryThread,
)
async def open_thread(call: Call[ThreadCreate]) -> StoryThread:
    """Open a story thread at the head (the GM's: canon at once, on the head's branch)."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.threads.open,
        call.id("campaign_id"),
        b.title,
        description=b.description,
        involved_entity_ids=b.involved_entity_ids,
        visibility=b.visibility,
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/threads/{thread_id}/advance"),
    ids=_ONE,
    body=ThreadProgress,
    output=StoryThread,
)
async def advance_thread(call: Call[ThreadProgress]) -> StoryThread:
    """Move an open thread on at the head's turn (it stays open, status advanced)."""
    b, threads = call.body, call.ctx.story.threads
    return await call.run(  # type: ignore[no-any-return]
        threads.advance,
        call.id("campaign_id"),
        call.id("thread_id"),
        b.progress,
        involved_entity_ids=b.involved_entity_ids,
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/threads/{thread_id}/resolve"),
    ids=_ONE,
    body=ThreadResolution,
    output=StoryThread,
)
async def resolve_thread(call: Call[ThreadResolution]) -> StoryThread:
    """Resolve an open thread at the head's turn."""
    threads = call.ctx.story.threads
    return await call.run(threads.resolve, call.id("campaign_id"), call.id("thread_id"), call.body.resolution)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/threads/{thread_id}/abandon"),
    ids=_ONE,
    body=ThreadAbandonment,
    output=StoryThread,
)
async def abandon_thread(call: Call[ThreadAbandonment]) -> StoryThread:
    """Abandon an open thread at the head's turn (closed unresolved, with why)."""
    threads = call.ctx.story.threads
    return await call.run(threads.abandon, call.id("campaign_id"), call.id("thread_id"), call.body.reason)  # type: ignore[no-any-return]
