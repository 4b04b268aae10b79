"""Story threads managed by the GM directly: open, advance, resolve, abandon, and list them as of any turn.

A thread's lifecycle is told by typed state events (``thread_opened``, ``thread_advanced``, ``thread_resolved``,
``thread_abandoned``: :mod:`schemas.events`), whichever way they come: proposed from a scene and judged by the
gate like any other change, or written here as the GM's ruling. Here the events are the GM's (authority gm),
anchored to the head's turn, checked against the head's state by :mod:`story.rules` (an unknown thread, or
one already resolved or abandoned, is refused with nothing written) and committed in one transaction guarded
by the campaign's version (:meth:`story.core.StoryCore.mutate`), on the head's branch (forking one when the
head is behind the line's end, as any write there does).

A thread's status is never stored apart from the events: the state fold (:mod:`story.state`) gives it as of
any turn on any branch, so an undo or a fork shows the thread as it was there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from schemas.canon import StoryThread, ThreadStatus, WorldStateView
from schemas.common import Authority
from schemas.events import BaseStateEvent, ThreadAbandoned, ThreadAdvanced, ThreadOpened, ThreadResolved
from schemas.visibility import Visibility
from story.campaigns import write_branch
from story.errors import StoryNotFound
from story.graph import CampaignContext, Writes

if TYPE_CHECKING:
    from story.scenes import Scenes

log = structlog.get_logger(__name__)


class Threads:
    """The GM's direct thread operations; ``scenes`` commits their events as retcons are committed, ``state``
    reads the world at a position (:meth:`story.timeline.Timeline.state`)."""

    def __init__(self, scenes: Scenes, state: Callable[..., WorldStateView]) -> None:
        self.scenes = scenes
        self.state = state
        self.core = scenes.core
        self.story = scenes.story

    def at(
        self,
        campaign_id: str,
        *,
        turn_id: str | None = None,
        branch_id: str | None = None,
        status: ThreadStatus | None = None,
    ) -> list[StoryThread]:
        """The threads as of the head (or a branch's tip, or a turn on it), optionally of one status."""
        view = self.state(campaign_id, turn_id=turn_id, branch_id=branch_id)
        return [t for t in view.threads if status is None or t.status is status]

    def open(
        self,
        campaign_id: str,
        title: str,
        *,
        description: str | None = None,
        involved_entity_ids: list[str] | None = None,
        visibility: Visibility | None = None,
        thread_id: str | None = None,
    ) -> StoryThread:
        """Open a thread at the head. Raises StoryInvalid: an involved entity is not there, or the id is taken."""
        fields: dict[str, Any] = {"title": title, "description": description, "visibility": visibility}
        fields["involved_entity_ids"] = list(involved_entity_ids or [])
        if thread_id is not None:
            fields["thread_id"] = thread_id
        event = ThreadOpened(**fields)
        return self._write(campaign_id, event, "open")

    def advance(
        self, campaign_id: str, thread_id: str, progress: str, *, involved_entity_ids: list[str] | None = None
    ) -> StoryThread:
        """Move a live thread on. Raises StoryNotFound (no such thread here), StoryInvalid (it is closed)."""
        event = ThreadAdvanced(thread_id=thread_id, progress=progress, involved_entity_ids=involved_entity_ids or [])
        return self._write(campaign_id, event, "advance")

    def resolve(self, campaign_id: str, thread_id: str, resolution: str) -> StoryThread:
        """Resolve a live thread. Raises StoryNotFound (no such thread here), StoryInvalid (it is closed)."""
        return self._write(campaign_id, ThreadResolved(thread_id=thread_id, resolution=resolution), "resolve")

    def abandon(self, campaign_id: str, thread_id: str, reason: str) -> StoryThread:
        """Abandon a live thread. Raises StoryNotFound (no such thread here), StoryInvalid (it is closed)."""
        return self._write(campaign_id, ThreadAbandoned(thread_id=thread_id, reason=reason), "abandon")

    def _write(self, campaign_id: str, event: BaseStateEvent, what: str) -> StoryThread:
        thread_id: str = getattr(event, "thread_id")  # noqa: B009 - every thread event has one

        def build(ctx: CampaignContext, writes: Writes) -> tuple[str, dict[str, Any]]:
            state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
            if not isinstance(event, ThreadOpened) and thread_id not in state.threads:
                raise StoryNotFound(f"no thread {thread_id!r} on this branch of campaign {campaign_id!r}")
            anchored = event.model_copy(update={"turn_id": ctx.head.id if ctx.head else None})
            branch_id, fork = write_branch(ctx, writes)
            props = self.scenes._commit_events(
                ctx,
                writes,
                [anchored],
                authority=Authority.GM,
                branch_id=branch_id,
                scene_id=None,
                what=f"the thread's {what}",
                state=state,
            )
            return branch_id, {**fork, **props}

        branch_id = self.core.mutate(campaign_id, f"thread_{what}", build)
        log.info("thread_changed", campaign_id=campaign_id, thread_id=thread_id, change=what, branch_id=branch_id)
        thread = next(t for t in self.at(campaign_id) if t.id == thread_id)
        return thread
