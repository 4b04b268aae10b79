"""``lorekeeper campaign …`` and ``lorekeeper recall``: campaigns imported from transcripts, listed, discarded,
and a campaign's past recalled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lorekeeper.command_context import console, err_console, print_error, read_settings, story_service
from schemas.errors import InvalidRequest, LorekeeperError

if TYPE_CHECKING:
    from story.service import StoryService

campaign_app = typer.Typer(help="Campaigns: import a transcript as one.", no_args_is_help=True)


@campaign_app.command("import-transcript")
def import_transcript(
    file: Annotated[
        Path,
        typer.Argument(help="JSON lines {session, time, speaker, text, ref}, a CRD3 episode or a LoCoMo conversation."),
    ],
    name: Annotated[str | None, typer.Option(help="The new campaign's name (not needed with --resume).")] = None,
    world: Annotated[str | None, typer.Option(help="The world (id) to put it in; a new one by default.")] = None,
    summaries: Annotated[
        bool, typer.Option("--summaries/--no-summaries", help="Write each session's scene summary (indexed too).")
    ] = True,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Finish the unfinished import of FILE (the campaign it left, found by the file's lines): the "
            "lines not yet written, then the recall index, without duplicates.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {campaign_id, turns, sessions, seconds, ...} as JSON.")
    ] = False,
) -> None:
    """Create a campaign from a transcript: a scene per session, a turn per line, every line indexed for recall,
    and a summary of each session.

    The whole file is checked before anything is written (errors name the file, the line and the field; UTF-8,
    or UTF-16/32 with a byte-order mark). An import that stops part-way (killed, a store failing) leaves the
    campaign marked unfinished (`lorekeeper campaign list`) and refused for play: run the same command with
    --resume to finish it, or delete it with `lorekeeper campaign discard-import CAMPAIGN`. Stop `lorekeeper
    serve` first when it uses the same data folder. Importing the same file again once it finished makes another
    campaign.
    """
    from rich.progress import Progress

    from story.transcripts import read_transcript

    if (name is None) != resume:
        err_console.print("give --name NAME for a new campaign, or --resume to finish an unfinished import")
        raise typer.Exit(2)
    settings = read_settings()
    try:
        transcript = read_transcript(file)
        sessions = transcript.sessions()
    except LorekeeperError as exc:
        print_error(exc)
        raise typer.Exit(2) from None
    turns = len(transcript.lines)
    err_console.print(
        f"{file}: {transcript.format.value}, {len(sessions)} sessions, {turns} lines", markup=False, highlight=False
    )
    _print_left_out(transcript.unknown_fields, transcript.skipped)
    with story_service(settings, bulk=True) as story, Progress(console=err_console, transient=True) as progress:
        tasks = {stage: progress.add_task(f"writing {stage}", total=turns) for stage in ("turns", "records")}

        def advance(stage: str, n: int) -> None:
            progress.advance(tasks[stage], n)

        try:
            if resume:
                campaign, report = story.resume_transcript_import(transcript, on_progress=advance)
            else:
                assert name is not None
                campaign, report = story.import_transcript(
                    transcript, name, world_id=world, summaries=summaries, on_progress=advance
                )
        except LorekeeperError as exc:
            print_error(exc)
            if not isinstance(exc, InvalidRequest) and _left_unfinished(story, transcript):
                err_console.print("the campaign is left unfinished: run again with --resume to finish it")
            raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.model_dump()))
        return
    _print_import(campaign, report)


def _print_import(campaign, report) -> None:  # noqa: ANN001 - Campaign and TranscriptImport are imported lazily
    resumed = f" (resumed after {report.resumed_from} lines)" if report.resumed_from is not None else ""
    console.print(
        f"imported {report.turns} turns in {report.sessions} scenes ({report.summaries} summaries){resumed} "
        f"as campaign {campaign.id} ({campaign.name!r}) "
        f"in {report.seconds:.1f}s: graph {report.graph_seconds:.1f}s, model {report.model_seconds:.1f}s, "
        f"embedding and indexing {report.recall_seconds:.1f}s"
        + (f"; {report.reconciled} records the recall index lacked written" if report.reconciled else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _left_unfinished(story: StoryService, transcript) -> bool:  # noqa: ANN001 - Transcript is imported lazily
    """Whether an unfinished import of the transcript's lines is in the graph (a read may fail too)."""
    from story.import_plan import fingerprint

    try:
        states = [c.transcript_import for c in story.list_campaigns()]
    except LorekeeperError:
        return False
    return fingerprint(transcript) in {s.fingerprint for s in states if s is not None}


def _print_left_out(unknown_fields: dict[str, int], skipped: list[str]) -> None:
    """What the file holds that the import leaves out: fields no format knows, sessions without lines."""
    if unknown_fields:
        fields = ", ".join(f"{field} ({n}x)" for field, n in sorted(unknown_fields.items()))
        err_console.print(f"left out, unknown fields: {fields}", markup=False, highlight=False, soft_wrap=True)
    for session in skipped:
        err_console.print(f"skipped: {session}", markup=False, highlight=False, soft_wrap=True)


@campaign_app.command("discard-import")
def discard_import(
    campaign_id: Annotated[str, typer.Argument(help="The unfinished import's campaign (`lorekeeper campaign list`).")],
) -> None:
    """Delete an unfinished transcript import whole: its campaign, turns, scenes and summaries, its records in the
    recall index, and its world when the import made it and nothing else is in it. A finished campaign is
    never deleted. Stop the import first."""
    settings = read_settings()
    with story_service(settings) as story:
        try:
            story.discard_transcript_import(campaign_id)
        except LorekeeperError as exc:
            print_error(exc)
            raise typer.Exit(2 if exc.status_code < 500 else 1) from None
    console.print(f"discarded the unfinished import {campaign_id}")


@campaign_app.command("list")
def list_campaigns_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per campaign.")] = False,
) -> None:
    """List the campaigns: id, name, world, and whether each is whole or an unfinished transcript import."""
    from stores.factory import open_blob_store, open_graph_store
    from story.service import StoryService

    settings = read_settings()
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    try:
        campaigns = StoryService(graph, blobs).list_campaigns()
    finally:
        graph.close()
        blobs.close()
    for campaign in campaigns:
        state = campaign.transcript_import
        if as_json:
            typer.echo(campaign.model_dump_json())
            continue
        status = (
            f"unfinished import of {state.source!r}: {state.written} of {state.lines} lines written (--resume)"
            if state
            else "ready"
        )
        typer.echo(f"{campaign.id}  {campaign.name}  world {campaign.world_id}  {status}")


def recall_command(
    campaign_id: Annotated[str, typer.Argument(help="The campaign whose past to recall.")],
    query: Annotated[str | None, typer.Argument(help="What to recall, in plain words.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="How many hits.")] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit (per query with --queries).")
    ] = False,
    queries: Annotated[
        Path | None, typer.Option(help="JSON lines with 'id' and 'query'; loads the model and stores once.")
    ] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Recall along this turn's lineage instead of the head's.")
    ] = None,
    observer: Annotated[str | None, typer.Option(help="Only what this entity (id) witnessed or was told.")] = None,
) -> None:
    """Recall a campaign's turns, summaries, canon and memories by meaning (vector + full text, fused), along
    the head's lineage."""
    if (query is None) == (queries is None):
        err_console.print("give a QUERY or --queries FILE")
        raise typer.Exit(2)
    asked = _read_queries(queries) if queries is not None else [(None, query or "")]
    settings = read_settings()
    with story_service(settings) as story:
        try:
            story.get_campaign(campaign_id)
            for qid, text in asked:
                hits = story.recall(campaign_id, text, as_of_turn_id=as_of, observer_entity_id=observer, limit=limit)
                if queries is not None:
                    typer.echo(json.dumps({"id": qid, "hits": [h.model_dump(mode="json") for h in hits]}))
        except LorekeeperError as exc:
            err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    if queries is not None:
        return
    if as_json:
        for hit in hits:
            typer.echo(json.dumps(hit.model_dump(mode="json")))
        return
    if not hits:
        console.print("nothing recalled (is anything of this campaign indexed? try `lorekeeper reindex`)")
        return
    for n, hit in enumerate(hits, start=1):
        who = ", ".join(hit.speakers)
        when = f" ({hit.story_time})" if hit.story_time else ""
        legs = " ".join(f"{leg}#{rank}" for leg, rank in hit.ranks.items())
        console.rule(f"{n}. {hit.ref or hit.turn_id}  {who}{when}  {hit.score:.4f} {legs}", style="bold")
        console.print(hit.text, markup=False, highlight=False, soft_wrap=True)


def _read_queries(path: Path) -> list[tuple[object, str]]:
    """The (id, query) pairs of a JSON lines file, all read before any model loads."""
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err_console.print(f"{path}: cannot read it ({exc})", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    asked: list[tuple[object, str]] = []
    for line_no, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            qid, text = entry["id"], entry["query"]
            if not isinstance(text, str) or not text.strip():
                raise TypeError
        except (ValueError, KeyError, TypeError):
            err_console.print(
                f"{path}:{line_no}: expected a JSON object with 'id' and a non-empty 'query'",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None
        asked.append((qid, text))
    return asked
