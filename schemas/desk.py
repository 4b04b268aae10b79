"""The GM's desk: notes, ideas and TODOs on a scene; sessions and arcs with their summaries; take dispositions
and pruning; what happened on the lineage between two turns.

A note is narrative, never canon: it is kept beside the story (never in the state, the canon export or the
gate), GM-only unless the GM shares it (:class:`~schemas.visibility.Visibility`), and recalled by meaning for
those who may see it (:mod:`story.notes`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.campaign import BranchDisposition
from schemas.common import Id, LorekeeperModel, UtcDatetime, utc_now
from schemas.narration import Summary
from schemas.story_ids import default_id
from schemas.text import Name, Note, Text
from schemas.visibility import Audience, Visibility

__all__ = [
    "GM_ONLY",
    "ArcCreate",
    "BetweenQuery",
    "HappenedEvent",
    "Happenings",
    "NoteCreate",
    "NoteKind",
    "NoteUpdate",
    "NotesQuery",
    "PruneRecord",
    "PruneRequest",
    "PruneStatus",
    "SceneEnded",
    "SceneNote",
    "SessionEnd",
    "SessionStart",
    "SpanKind",
    "SpanSummaryRequest",
    "SpanView",
    "SpansQuery",
    "StorySpan",
    "TakeDispositionRequest",
    "VersionDispositionRequest",
]

GM_ONLY = Visibility(audience=Audience.GM)
"""A note's audience until the GM shares it."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- notes ------------------------------------------------------------------------------------------------


class NoteKind(StrEnum):
    NOTE = "note"  # something to remember about the scene
    IDEA = "idea"  # something that could happen
    TODO = "todo"  # something to do (can be marked done)


class SceneNote(LorekeeperModel):
    """A GM's note, idea or TODO on a scene (and a turn of it), on the scene's branch. Never canon."""

    id: Id = default_id("note")
    campaign_id: Id
    scene_id: Id
    anchor_turn_id: Id = Field(description="The turn it is anchored to: the one given, else the head when written.")
    kind: NoteKind = NoteKind.NOTE
    text: Note
    visibility: Visibility = Field(default=GM_ONLY, description="Who may see it: the GM's alone unless shared.")
    done_at: UtcDatetime | None = Field(default=None, description="When a TODO was marked done (None: open).")
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _done_is_a_todo(self) -> Self:
        if self.done_at is not None and self.kind is not NoteKind.TODO:
            raise ValueError("only a TODO can be marked done")
        return self


class NoteCreate(_Body):
    """``POST /api/v1/scenes/{scene_id}/notes``: a note on the scene (GM-only unless shared)."""

    text: Note
    kind: NoteKind = NoteKind.NOTE
    turn_id: Id | None = Field(default=None, description="Anchor it to this turn of the scene; unset: the head.")
    visibility: Visibility | None = Field(default=None, description="Share it: the table or characters; unset: GM.")


class NoteUpdate(_Body):
    """``PATCH /api/v1/campaigns/{id}/notes/{note_id}``: what changes (unset fields stay)."""

    text: Note | None = None
    visibility: Visibility | None = Field(default=None, description="Share it, or make it the GM's again.")
    done: bool | None = Field(default=None, description="A TODO done (true) or open again (false).")


class NotesQuery(_Body):
    """``GET /api/v1/campaigns/{id}/notes``: the notes on a line, of a scene or kind, open TODOs only."""

    scene_id: Id | None = None
    kind: NoteKind | None = None
    open_only: bool = Field(default=False, description="Only TODOs not done.")
    turn_id: Id | None = Field(default=None, description="As of this turn (its line); the head when unset.")
    branch_id: Id | None = Field(
        default=None, description="The line of this branch's tip (or of turn_id seen from it)."
    )


# -- sessions and arcs ----------------------------------------------------------------------------------


class SpanKind(StrEnum):
    SESSION = "session"  # the turns played in one sitting
    ARC = "arc"  # a named span of scenes


class StorySpan(LorekeeperModel):
    """A session or an arc: a span of turns on one line, ``after_turn_id`` (exclusive) to ``to_turn_id``."""

    id: Id = default_id("span")
    campaign_id: Id
    kind: SpanKind
    name: Name
    branch_id: Id = Field(description="The branch of its last turn (the line it covers).")
    after_turn_id: Id | None = Field(default=None, description="The turn before its first (None: the story's start).")
    to_turn_id: Id | None = Field(default=None, description="Its last turn (None: a session still being played).")
    scene_ids: list[Id] = Field(default_factory=list, description="An arc's scenes, in story order.")
    summary_id: Id | None = Field(default=None, description="Its summary, once written.")
    started_at: UtcDatetime = Field(default_factory=utc_now)
    ended_at: UtcDatetime | None = None


class SpanView(StorySpan):
    """A span as listed, with its summary when the reader may see it."""

    summary: Summary | None = None


class SessionStart(_Body):
    """``POST /api/v1/campaigns/{id}/sessions``: a session starts after the head."""

    name: Name | None = Field(default=None, description="Its name; unset: 'Session n'.")


class SessionEnd(_Body):
    """``POST …/spans/{span_id}/end``: the session ends at the head (or a turn of its line)."""

    turn_id: Id | None = None


class ArcCreate(_Body):
    """``POST /api/v1/campaigns/{id}/spans``: an arc of named scenes, or a session given as a range of turns."""

    kind: SpanKind = SpanKind.ARC
    name: Name
    scene_ids: list[Id] = Field(default_factory=list, description="An arc's scenes (ended, on one line).")
    from_turn_id: Id | None = Field(default=None, description="A range's first turn.")
    to_turn_id: Id | None = Field(default=None, description="A range's last turn.")


class SpanSummaryRequest(_Body):
    """``POST …/spans/{span_id}/summary``: the GM's words, or (unset) formed by the memory former."""

    text: Text | None = None
    visibility: Visibility | None = Field(default=None, description="Who may read it; unset: the table.")


class SpansQuery(_Body):
    """``GET /api/v1/campaigns/{id}/spans``: the sessions and arcs of a line."""

    kind: SpanKind | None = None
    branch_id: Id | None = Field(default=None, description="The line of this branch's tip; the head's when unset.")


# -- takes and pruning ----------------------------------------------------------------------------------


class TakeDispositionRequest(_Body):
    """``PUT …/takes/{take_id}/disposition``: keep a take (retained), let it go (disposable), or archive it."""

    disposition: BranchDisposition | None = None
    archived: bool | None = Field(default=None, description="Hide it from the turn's listing (or show it again).")


class VersionDispositionRequest(_Body):
    """``PUT …/versions/{version_id}/disposition``: keep an archived version (retained) or let it go."""

    disposition: BranchDisposition


class PruneRequest(_Body):
    """``POST /api/v1/campaigns/{id}/prune``: remove what is disposable once the story moved on."""

    keep_turns: int | None = Field(
        default=None, ge=0, le=100_000, description="Turns behind the head that stay untouched; unset: the setting."
    )
    dry_run: bool = Field(default=False, description="Say what would go, remove nothing.")


class PruneStatus(StrEnum):
    """Where a prune is: ``pending`` from the transaction that decided it (its takes and versions gone) until its
    branches are gone too; ``done`` after."""

    PENDING = "pending"
    DONE = "done"


class PruneRecord(LorekeeperModel):
    """What one prune removed (or, dry, would remove), and what it kept and why."""

    id: Id = default_id("prune")
    campaign_id: Id
    keep_turns: int
    head_turn_id: Id | None = None
    dry_run: bool = False
    takes: list[Id] = Field(default_factory=list, description="Takes removed (with the versions archiving them).")
    versions: list[Id] = Field(default_factory=list, description="Turn versions removed.")
    branches: list[Id] = Field(default_factory=list, description="Branches removed.")
    kept: dict[str, str] = Field(default_factory=dict, description="Disposable records kept, each with why.")
    status: PruneStatus = Field(
        default=PruneStatus.DONE, description="pending: its branches are still being removed (a restart finishes)."
    )
    branches_planned: list[Id] = Field(
        default_factory=list, description="The branches the prune decided to remove, leaves first."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)


# -- between two turns ----------------------------------------------------------------------------------


class BetweenQuery(_Body):
    """``GET /api/v1/campaigns/{id}/between``: what happened after ``from_turn_id`` up to ``to_turn_id``."""

    from_turn_id: Id = Field(description="Where we left: what happened after it.")
    to_turn_id: Id | None = Field(default=None, description="Up to this turn (on its line); unset: the head.")


class HappenedEvent(BaseModel):
    """A canon event committed between the two turns."""

    seq: int
    kind: str
    depth: int
    event: dict[str, Any]


class SceneEnded(BaseModel):
    scene_id: str
    title: str | None = None
    end_turn_id: str
    outcomes: list[str] = Field(default_factory=list)


class Happenings(BaseModel):
    """What happened on a line after one turn up to another, as the caller's seat may see it."""

    campaign_id: str
    from_turn_id: str
    to_turn_id: str
    branch_id: str
    turns: int = Field(description="Turns played after from_turn_id up to to_turn_id.")
    events: list[HappenedEvent] = Field(default_factory=list, description="Canon events, threads' among them.")
    threads: list[HappenedEvent] = Field(default_factory=list, description="The thread events alone.")
    scenes_ended: list[SceneEnded] = Field(default_factory=list)
    summaries: list[Summary] = Field(default_factory=list, description="Summaries anchored in the span.")
