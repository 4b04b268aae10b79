"""``ingest`` on the command line: ``lorekeeper ingest …`` and the Ray Job entrypoint ``python -m jobs ingest …``."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TextIO

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jobs.timeline import describe
from schemas.errors import ConfigError, LorekeeperError
from schemas.knowledge import Classification, LibraryType

if TYPE_CHECKING:
    from jobs.pipeline import IngestReport
    from jobs.plan import IngestOptions
    from schemas.settings import Settings

console = Console(stderr=True)


@dataclass
class IngestTally:
    """What an ingest has done so far, summed from the pipeline's progress events."""

    files: int | None = None  # None until the files are found
    done: int = 0
    failed: int = 0
    pages: int = 0
    chunks: int = 0

    def apply(self, event: str, fields: dict[str, Any]) -> None:
        """Count one ``run_ingest`` progress event (``files_found``, ``file_done``, ``chunks_written``)."""
        if event == "files_found":
            self.files = int(fields["files"])
        elif event == "file_done":
            self.done += 1
            self.pages += int(fields.get("pages") or 0)
            self.failed += fields.get("status") == "failed"
        elif event == "chunks_written":
            self.chunks += int(fields["chunks"])


class IngestDisplay(Protocol):
    """Shows an ingest's progress while ``run_ingest`` calls :meth:`update` with its events."""

    def __enter__(self) -> IngestDisplay: ...

    def __exit__(self, *exc: object) -> None: ...

    def update(self, event: str, fields: dict[str, Any]) -> None: ...


class LiveProgress:
    """Rich's live bars (files, chunks), for a terminal."""

    def __init__(self, terminal: Console) -> None:
        self.tally = IngestTally()
        self._started = time.perf_counter()
        self._bars = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=terminal,
            transient=False,
        )
        self._files = self._bars.add_task("files", total=None, detail="")
        self._chunks = self._bars.add_task("chunks", total=None, detail="")

    def __enter__(self) -> LiveProgress:
        self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bars.stop()

    def update(self, event: str, fields: dict[str, Any]) -> None:
        tally = self.tally
        tally.apply(event, fields)
        self._bars.update(self._files, total=tally.files, completed=tally.done, detail=f"{tally.pages} pages")
        rate = tally.chunks / max(time.perf_counter() - self._started, 1e-9)
        self._bars.update(self._chunks, completed=tally.chunks, detail=f"{rate:.1f} chunks/s")


class PlainProgress:
    """Progress as plain lines, for a stderr that is not a terminal (a CI log, a Ray Job's log, a file).

    A live bar redraws itself in place, which a log cannot show, so rich draws nothing there until the
    end: a CI log stayed silent for minutes. Here one line is written at the start, on an event at
    least ``interval`` seconds after the last line, every ``interval`` seconds while no event comes
    (Ray starting, the model loading, a long book: a heartbeat thread), and at the end.
    """

    def __init__(self, stream: TextIO, *, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.tally = IngestTally()
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._started = clock()
        self._last_line: float | None = None
        self._lock = threading.Lock()  # the heartbeat thread and the driver's events share the tally and stream
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __enter__(self) -> PlainProgress:
        with self._lock:
            self._write()
        self._heartbeat = threading.Thread(target=self._beat, name="ingest-progress", daemon=True)
        self._heartbeat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, event: str, fields: dict[str, Any]) -> None:
        with self._lock:
            self.tally.apply(event, fields)
            if event == "files_found" or self._due():
                self._write()

    def close(self) -> None:
        """Stop the heartbeat and write the final line."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        with self._lock:
            self._write()

    def line(self) -> str:
        """The state in one line: files done of found, pages, chunks, rate, time elapsed."""
        tally = self.tally
        elapsed = self._clock() - self._started
        minutes, seconds = divmod(int(elapsed), 60)
        clock = f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}" if minutes >= 60 else f"{minutes}:{seconds:02d}"
        if tally.files is None:
            return f"ingest: looking for files, {clock} elapsed"
        share = f"{100 * tally.done // tally.files}%" if tally.files else "-"
        failed = f", {tally.failed} failed" if tally.failed else ""
        rate = tally.chunks / max(elapsed, 1e-9)
        return (
            f"ingest: {tally.done}/{tally.files} files ({share}{failed}), {tally.pages} pages, "
            f"{tally.chunks} chunks ({rate:.1f} chunks/s), {clock} elapsed"
        )

    def _due(self) -> bool:
        return self._last_line is None or self._clock() - self._last_line >= self._interval

    def _write(self) -> None:
        """Write the state line; the caller holds the lock."""
        self._last_line = self._clock()
        self._stream.write(self.line() + "\n")
        self._stream.flush()

    def _beat(self) -> None:
        # Checks four times an interval, so a line is never more than a quarter interval late.
        while not self._stop.wait(self._interval / 4):
            with self._lock:
                if self._due():
                    self._write()


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, folders or s3://bucket/prefix URLs.")],
    library: Annotated[str, typer.Option(help="Library name (created on first use).")],
    library_type: Annotated[
        LibraryType, typer.Option("--type", help="Library type; picks chunking.")
    ] = LibraryType.RULEBOOK,
    collection: Annotated[str | None, typer.Option(help="Collection inside the library.")] = None,
    classification: Annotated[
        Classification, typer.Option(help="canon, reference or inspiration.")
    ] = Classification.CANON,
    password: Annotated[
        str | None, typer.Option(envvar="LOREKEEPER_PDF_PASSWORD", help="Password of encrypted PDFs.")
    ] = None,
    max_file_mb: Annotated[float, typer.Option(help="Files larger than this fail.")] = 512.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    executor: Annotated[
        str,
        typer.Option(
            envvar="LOREKEEPER_INGEST_EXECUTOR",
            help="Where the stages run: 'local' (this process), 'ray', or 'auto' (local for a small job).",
        ),
    ] = "auto",
    progress_interval: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds between progress lines when stderr is not a terminal (a CI log)."),
    ] = 10.0,
) -> None:
    """Ingest rulebooks and lore: extract, chunk, embed, find concepts, write to the four stores.

    SIGTERM (a container being stopped) stops it between two batches of written chunks: files not
    finished are recorded as failed, and it exits 143 (running it again ingests only those)."""
    from jobs import stopping

    stopping.on_sigterm()
    settings, options = _settings_and_options(
        library, library_type, collection, classification, password, max_file_mb, executor
    )
    report = _run_with_progress(paths, options, settings, progress_interval)
    if as_json:
        _echo_json(report)
    _print_summary(report, library)
    counts = report.counts
    if stopping.requested() is not None and counts.get("failed"):
        console.print(f"[yellow]ingest stopped by SIGTERM[/yellow]: {counts['failed']} files left to a later run")
        from jobs.inprocess import leave_if_model_loading

        leave_if_model_loading(stopping.EXIT_INTERRUPTED)  # a model still loading would abort the exit
        raise typer.Exit(stopping.EXIT_INTERRUPTED)
    if counts.get("failed") and not (counts.get("completed") or counts.get("skipped")):
        raise typer.Exit(1)


def _settings_and_options(
    library: str,
    library_type: LibraryType,
    collection: str | None,
    classification: Classification,
    password: str | None,
    max_file_mb: float,
    executor: str = "auto",
) -> tuple[Settings, IngestOptions]:
    """The settings from the environment and the ingest's options; a configuration error exits 2."""
    from jobs.plan import IngestExecutor, IngestOptions
    from schemas.ray_head import warm_address
    from schemas.settings import get_settings

    if executor not in {e.value for e in IngestExecutor}:
        console.print(f"[red]configuration error[/red] --executor is auto, local or ray, not {executor!r}")
        raise typer.Exit(2)
    try:
        settings = get_settings()
        options = IngestOptions(
            library=library,
            library_type=library_type,
            collection=collection,
            classification=classification,
            password=SecretStr(password) if password else None,
            max_file_bytes=int(max_file_mb * 1024 * 1024),
            executor=IngestExecutor(executor),
            ray_address=warm_address(settings.data_dir),  # a `lorekeeper up` head, when one answers
        )
    except ConfigError as exc:
        console.print(f"[red]configuration error[/red] {exc}")
        raise typer.Exit(2) from None
    return settings, options


def _run_with_progress(
    paths: list[str], options: IngestOptions, settings: Settings, progress_interval: float
) -> IngestReport:
    """Run the ingest, showing progress live on a terminal and as lines otherwise; a failure exits 1."""
    from jobs.pipeline import run_ingest

    display: IngestDisplay = (
        LiveProgress(console) if console.is_terminal else PlainProgress(sys.stderr, interval=progress_interval)
    )
    try:
        with display:
            report = run_ingest(paths, options, settings=settings, on_progress=display.update)
    except LorekeeperError as exc:
        console.print(f"[red]ingest failed[/red] {exc}")
        raise typer.Exit(1) from None
    return report


def _echo_json(report: IngestReport) -> None:
    """The report as JSON on stdout (``--json``)."""
    typer.echo(
        json.dumps(
            {
                "library_uid": report.library_uid,
                "embedding_model": report.embedding_model,
                "seconds": round(report.seconds, 2),
                "files": [vars(f) for f in report.files],
                "stage_nodes": {stage: dict(nodes) for stage, nodes in report.stage_nodes.items()},
                "executor": report.executor,
                "executor_reason": report.executor_reason,
                "timeline": report.timeline_dict(),
            }
        )
    )


def _print_summary(report: IngestReport, library: str) -> None:
    """The summary on stderr: a row per file, the nodes each stage ran on, the totals."""
    table = Table(title=f"Ingested into {library!r} in {report.seconds:.1f}s ({report.embedding_model})")
    for column in (
        "file",
        "status",
        "pages",
        "chunks",
        "concepts",
        "headings",
        "entries",
        "furniture",
        "facts",
        "detail",
    ):
        table.add_column(column)
    for f in sorted(report.files, key=lambda f: f.source_ref):
        colour = {"completed": "green", "skipped": "cyan", "failed": "red"}.get(f.status, "white")
        table.add_row(
            Path(f.source_ref).name,
            f"[{colour}]{f.status}[/{colour}]",
            str(f.pages or ""),
            str(f.chunks or ""),
            str(f.concepts or ""),
            *_structure_cells(f.structure),
            _facts_cell(f.facts, f.facts_by_kind),
            (f.error or "; ".join(f.warnings))[:120],
        )
    counts = report.counts
    console.print(table)
    for f in sorted(report.files, key=lambda f: f.source_ref):
        for warning in f.warnings:
            console.print(f"[yellow]warning[/yellow] {Path(f.source_ref).name}: {warning}", highlight=False)
    for stage, nodes in report.stage_nodes.items():
        shown = ", ".join(f"{node[:12] or 'local'} ({rows} rows)" for node, rows in sorted(nodes.items()))
        console.print(f"{stage} stage on {len(nodes)} node(s): {shown}")
    if report.executor:
        console.print(f"stages ran {_EXECUTOR_WORDS.get(report.executor, report.executor)}: {report.executor_reason}")
    console.print("timeline (seconds since the job started):", highlight=False)
    for line in describe(report.timeline_dict()):
        console.print(f"  {line}", highlight=False)
    console.print(
        f"{counts.get('completed', 0)} completed, {counts.get('skipped', 0)} unchanged, "
        f"{counts.get('failed', 0)} failed; "
        f"{report.pages} pages, {report.chunks} chunks, {report.chunks / max(report.seconds, 1e-9):.1f} chunks/s"
        + (f", {report.facts} rule facts" if report.facts else "")
    )


_EXECUTOR_WORDS = {"local": "in this process", "ray": "on Ray"}


def _facts_cell(facts: int, by_kind: dict[str, int]) -> str:
    """The summary's facts column: "57 (creature:31 spell:8 …)"; empty for a file that states none."""
    if not facts:
        return ""
    kinds = " ".join(f"{kind}:{n}" for kind, n in by_kind.items())
    return f"{facts} ({kinds})" if kinds else str(facts)


def _structure_cells(structure: dict[str, Any] | None) -> tuple[str, str, str]:
    """The summary's structure columns: "1:3 2:12 3:140", entries, furniture lines dropped."""
    if not structure:
        return "", "", ""
    levels = " ".join(f"{level}:{n}" for level, n in structure.get("headings_by_level", {}).items())
    return levels, str(structure.get("entries", "")), str(structure.get("furniture_dropped", ""))


app = typer.Typer(
    help="Lorekeeper ingestion jobs (the Ray Job entrypoint).", no_args_is_help=True, add_completion=False
)


@app.callback()
def main(
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines.")] = False,
    log_dir: Annotated[
        str | None,
        typer.Option(help="Also write JSON lines to DIR/<host>-<pid>.jsonl, one file per process (Ray workers too)."),
    ] = None,
) -> None:
    """Lorekeeper ingestion jobs (the Ray Job entrypoint)."""
    # A callback keeps `ingest` a subcommand: with one command and none, Typer would make the app that
    # command, and `python -m jobs ingest s3://…` would take "ingest" for a path. It also configures the
    # logs as `lorekeeper` does; the stage actors then log the same way (schemas.logs).
    from schemas.logs import LogConfig, apply

    apply(LogConfig(level=log_level, json_lines=log_json, directory=log_dir))


app.command("ingest")(ingest)
