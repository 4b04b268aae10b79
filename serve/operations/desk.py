"""The GM's desk: notes on scenes, sessions and arcs with their summaries, take and version dispositions, pruning,
and what happened between two turns.

Notes are the GM's: every note operation is GM-only, and a note reaches a player only through recall, when the
GM shared it (the secrets rule, :mod:`serve.operations.secrets`). Sessions and arcs are listed to the whole table
with the summaries each reader may see; starting, ending, summarizing them is the GM's. What happened between two
turns is read by anyone at the table, cut to what their seat may see.
"""

from __future__ import annotations

from schemas.desk import (
    ArcCreate,
    BetweenQuery,
    Happenings,
    NoteCreate,
    NotesQuery,
    NoteUpdate,
    PruneRecord,
    PruneRequest,
    SceneNote,
    SessionEnd,
    SessionStart,
    SpansQuery,
    SpanSummaryRequest,
    SpanView,
    StorySpan,
    TakeDispositionRequest,
    VersionDispositionRequest,
)
from schemas.story import Summary, Take, TurnVersion
from serve.operations.base import Access, Call, Empty, On, Rest, Role, operation
from serve.operations.secrets import viewer_of

_F = "desk"
_IDS = ("campaign_id",)
_NOTE = ("campaign_id", "note_id")
_SPAN = ("campaign_id", "span_id")
_GM = Access(Role.GM, On.CAMPAIGN)


# -- notes ------------------------------------------------------------------------------------------------


@operation(
    family=_F,
    access=Access(Role.GM, On.SCENE, turns=("turn_id",)),
    rest=Rest("POST", "/scenes/{scene_id}/notes", 201),
    ids=("scene_id",),
    body=NoteCreate,
    output=SceneNote,
)
async def add_scene_note(call: Call[NoteCreate]) -> SceneNote:
    """Write a note, idea or TODO on a scene (at turn_id, else the head): never canon, the GM's unless shared."""
    b = call.body
    notes = call.ctx.story.desk.notes
    return await call.run(  # type: ignore[no-any-return]
        notes.add, call.id("scene_id"), b.text, kind=b.kind, turn_id=b.turn_id, visibility=b.visibility
    )


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/notes"),
    ids=_IDS,
    body=NotesQuery,
    output=list[SceneNote],
)
async def list_scene_notes(call: Call[NotesQuery]) -> list[SceneNote]:
    """The GM's notes on the line of the head (or a branch's tip, or turn_id), of a scene or kind, open TODOs."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.notes.at,
        call.id("campaign_id"),
        scene_id=b.scene_id,
        kind=b.kind,
        open_only=b.open_only,
        turn_id=b.turn_id,
        branch_id=b.branch_id,
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("PATCH", "/campaigns/{campaign_id}/notes/{note_id}"),
    ids=_NOTE,
    body=NoteUpdate,
    output=SceneNote,
)
async def update_scene_note(call: Call[NoteUpdate]) -> SceneNote:
    """Change a note's text, share it with the table or characters (or take it back), mark a TODO done."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.notes.update,
        call.id("campaign_id"),
        call.id("note_id"),
        text=b.text,
        visibility=b.visibility,
        done=b.done,
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("DELETE", "/campaigns/{campaign_id}/notes/{note_id}"),
    ids=_NOTE,
    output=SceneNote,
)
async def delete_scene_note(call: Call[Empty]) -> SceneNote:
    """Remove a note (and take it out of recall); answers the note removed."""
    notes = call.ctx.story.desk.notes
    return await call.run(notes.delete, call.id("campaign_id"), call.id("note_id"))  # type: ignore[no-any-return]


# -- sessions and arcs --------------------------------------------------------------------------------------


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/sessions", 201),
    ids=_IDS,
    body=SessionStart,
    output=StorySpan,
)
async def start_session(call: Call[SessionStart]) -> StorySpan:
    """Start a session after the head (one at a time): what is played until end_session is its span."""
    spans = call.ctx.story.desk.spans
    return await call.run(spans.start_session, call.id("campaign_id"), call.body.name)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("POST", "/campaigns/{campaign_id}/spans/{span_id}/end"),
    ids=_SPAN,
    body=SessionEnd,
    output=StorySpan,
)
async def end_session(call: Call[SessionEnd]) -> StorySpan:
    """End the session being played at the head (or at turn_id on its line)."""
    spans = call.ctx.story.desk.spans
    return await call.run(spans.end_session, call.id("campaign_id"), call.id("span_id"), call.body.turn_id)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=Access(Role.GM, On.CAMPAIGN, turns=("from_turn_id", "to_turn_id")),
    rest=Rest("POST", "/campaigns/{campaign_id}/spans", 201),
    ids=_IDS,
    body=ArcCreate,
    output=StorySpan,
)
async def create_span(call: Call[ArcCreate]) -> StorySpan:
    """Name an arc of ended scenes on one line, or a session or arc given as a range of turns."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.spans.create,
        call.id("campaign_id"),
        b.name,
        kind=b.kind,
        scene_ids=b.scene_ids,
        from_turn_id=b.from_turn_id,
        to_turn_id=b.to_turn_id,
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/spans/{span_id}/summary", 201),
    ids=_SPAN,
    body=SpanSummaryRequest,
    output=Summary,
)
async def summarize_span(call: Call[SpanSummaryRequest]) -> Summary:
    """Summarize a session or arc: the GM's text, or formed by the memory former from its turns and outcomes."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.spans.summarize,
        call.id("campaign_id"),
        call.id("span_id"),
        text=b.text,
        visibility=b.visibility,
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN),
    rest=Rest("GET", "/campaigns/{campaign_id}/spans"),
    ids=_IDS,
    body=SpansQuery,
    output=list[SpanView],
)
async def list_spans(call: Call[SpansQuery]) -> list[SpanView]:
    """The sessions and arcs on the line of the head (or a branch's tip), each with the summary the reader may see."""
    b, story, campaign_id = call.body, call.ctx.story, call.id("campaign_id")
    spans = await call.run(story.desk.spans.at, campaign_id, kind=b.kind, branch_id=b.branch_id)
    wanted = {s.summary_id for s in spans if s.summary_id}
    summaries = await call.run(story.summaries, campaign_id, branch_id=b.branch_id) if wanted else []
    viewer = viewer_of(call)
    seen = {s.id: s for s in summaries if s.id in wanted and viewer.sees_summary(s)}
    return [SpanView(**s.model_dump(), summary=seen.get(s.summary_id or "")) for s in spans]


# -- takes, versions, pruning -------------------------------------------------------------------------------


@operation(
    family=_F,
    access=Access(Role.GM, On.TURN),
    rest=Rest("PUT", "/campaigns/{campaign_id}/turns/{turn_id}/takes/{take_id}/disposition"),
    ids=("campaign_id", "turn_id", "take_id"),
    body=TakeDispositionRequest,
    output=Take,
)
async def set_take_disposition(call: Call[TakeDispositionRequest]) -> Take:
    """Keep a take (retained), let it go (disposable) or archive it; never the take the turn tells."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.pruning.set_take,
        call.id("campaign_id"),
        call.id("turn_id"),
        call.id("take_id"),
        disposition=b.disposition,
        archived=b.archived,
    )


@operation(
    family=_F,
    access=Access(Role.GM, On.TURN),
    rest=Rest("PUT", "/campaigns/{campaign_id}/turns/{turn_id}/versions/{version_id}/disposition"),
    ids=("campaign_id", "turn_id", "version_id"),
    body=VersionDispositionRequest,
    output=TurnVersion,
)
async def set_version_disposition(call: Call[VersionDispositionRequest]) -> TurnVersion:
    """Keep an archived turn version (retained) or let it go (disposable)."""
    pruning = call.ctx.story.desk.pruning
    return await call.run(  # type: ignore[no-any-return]
        pruning.set_version, call.id("campaign_id"), call.id("turn_id"), call.id("version_id"), call.body.disposition
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/prune"),
    ids=_IDS,
    body=PruneRequest,
    output=PruneRecord,
)
async def prune_disposable(call: Call[PruneRequest]) -> PruneRecord:
    """Remove the disposable takes, versions and branches the story moved on from: never canon, never a take told.

    Each prune is recorded; keep_turns defaults to the setting prune_after_turns."""
    b = call.body
    keep = b.keep_turns if b.keep_turns is not None else call.ctx.settings.prune_after_turns
    pruning = call.ctx.story.desk.pruning
    return await call.run(pruning.prune, call.id("campaign_id"), keep_turns=keep, dry_run=b.dry_run)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("GET", "/campaigns/{campaign_id}/prunes"),
    ids=_IDS,
    output=list[PruneRecord],
)
async def list_prunes(call: Call[Empty]) -> list[PruneRecord]:
    """The campaign's prunes, oldest first: what each removed and what it kept, with why."""
    return await call.run(call.ctx.story.desk.pruning.records, call.id("campaign_id"))  # type: ignore[no-any-return]


# -- between two turns --------------------------------------------------------------------------------------


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("from_turn_id", "to_turn_id")),
    rest=Rest("GET", "/campaigns/{campaign_id}/between"),
    ids=_IDS,
    body=BetweenQuery,
    output=Happenings,
)
async def happenings_between(call: Call[BetweenQuery]) -> Happenings:
    """What happened while we were away: events, threads, scene ends and summaries between two turns of a line.

    After from_turn_id up to to_turn_id (the head) on its line, as the caller's seat may see them."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.desk.between, call.id("campaign_id"), b.from_turn_id, b.to_turn_id, viewer=viewer_of(call)
    )
