"""API bodies of the GM's thread operations: open, advance, resolve, abandon, and the listing's query.

A thread itself is :class:`schemas.canon.StoryThread` (its status as of a position comes from the state fold).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from schemas.canon import ThreadStatus
from schemas.common import Id
from schemas.text import Name, Text
from schemas.visibility import Visibility

__all__ = ["ThreadAbandonment", "ThreadCreate", "ThreadProgress", "ThreadResolution", "ThreadsQuery"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThreadCreate(_Body):
    """``POST /api/v1/campaigns/{id}/threads``: a thread the GM opens at the head."""

    title: Name
    description: Text | None = None
    involved_entity_ids: list[Id] = Field(default_factory=list, description="Entities the thread is about.")
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")


class ThreadProgress(_Body):
    """``POST …/threads/{thread_id}/advance``: what moved the thread on."""

    progress: Text
    involved_entity_ids: list[Id] = Field(default_factory=list, description="Entities this step draws in.")


class ThreadResolution(_Body):
    """``POST …/threads/{thread_id}/resolve``: how the thread was resolved."""

    resolution: Text


class ThreadAbandonment(_Body):
    """``POST …/threads/{thread_id}/abandon``: why the thread is dropped unresolved."""

    reason: Text


class ThreadsQuery(_Body):
    """``GET /api/v1/campaigns/{id}/threads``: the threads as of a position, optionally of one status."""

    turn_id: Id | None = Field(default=None, description="As of this turn (its lineage); the head when unset.")
    branch_id: Id | None = Field(
        default=None, description="Read this branch's line: its tip, or with turn_id that turn as seen from it."
    )
    status: ThreadStatus | None = Field(default=None, description="Only threads in this status.")
