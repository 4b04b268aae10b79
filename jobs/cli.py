"""``ingest`` on the command line: ``lorekeeper ingest …`` and the Ray Job entrypoint ``python -m jobs ingest …``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.errors import ConfigError, LorekeeperError
from schemas.knowledge import Classification, LibraryType

console = Console(stderr=True)


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
) -> None:
    """Ingest rulebooks and lore: extract, chunk, embed, find concepts, write to the four stores."""
    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions
    from schemas.settings import get_settings

    try:
        settings = get_settings()
        options = IngestOptions(
            library=library,
            library_type=library_type,
            collection=collection,
            classification=classification,
            password=SecretStr(password) if password else None,
            max_file_bytes=int(max_file_mb * 1024 * 1024),
        )
    except ConfigError as exc:
        console.print(f"[red]configuration error[/red] {exc}")
        raise typer.Exit(2) from None

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    state: dict[str, Any] = {"chunks": 0, "pages": 0, "started": time.perf_counter()}
    files_task = progress.add_task("files", total=None, detail="")
    chunks_task = progress.add_task("chunks", total=None, detail="")

    def on_progress(event: str, fields: dict[str, Any]) -> None:
        if event == "files_found":
            progress.update(files_task, total=fields["files"])
        elif event == "file_done":
            state["pages"] += int(fields.get("pages") or 0)
            progress.advance(files_task)
            progress.update(files_task, detail=f"{state['pages']} pages")
        elif event == "chunks_written":
            state["chunks"] += fields["chunks"]
            rate = state["chunks"] / max(time.perf_counter() - state["started"], 1e-9)
            progress.update(chunks_task, completed=state["chunks"], detail=f"{rate:.1f} chunks/s")

    try:
        with progress:
            report = run_ingest(paths, options, settings=settings, on_progress=on_progress)
    except LorekeeperError as exc:
        console.print(f"[red]ingest failed[/red] {exc}")
        raise typer.Exit(1) from None

    if as_json:
        typer.echo(
            json.dumps(
                {
                    "library_uid": report.library_uid,
                    "embedding_model": report.embedding_model,
                    "seconds": round(report.seconds, 2),
                    "files": [vars(f) for f in report.files],
                }
            )
        )
    table = Table(title=f"Ingested into {library!r} in {report.seconds:.1f}s ({report.embedding_model})")
    for column in ("file", "status", "pages", "chunks", "concepts", "detail"):
        table.add_column(column)
    for f in sorted(report.files, key=lambda f: f.source_ref):
        colour = {"completed": "green", "skipped": "cyan", "failed": "red"}.get(f.status, "white")
        table.add_row(
            Path(f.source_ref).name,
            f"[{colour}]{f.status}[/{colour}]",
            str(f.pages or ""),
            str(f.chunks or ""),
            str(f.concepts or ""),
            (f.error or "")[:120],
        )
    counts = report.counts
    console.print(table)
    console.print(
        f"{counts.get('completed', 0)} completed, {counts.get('skipped', 0)} unchanged, "
        f"{counts.get('failed', 0)} failed; "
        f"{report.pages} pages, {report.chunks} chunks, {report.chunks / max(report.seconds, 1e-9):.1f} chunks/s"
    )
    if counts.get("failed") and not (counts.get("completed") or counts.get("skipped")):
        raise typer.Exit(1)


app = typer.Typer(
    help="Lorekeeper ingestion jobs (the Ray Job entrypoint).", no_args_is_help=True, add_completion=False
)


@app.callback()
def main() -> None:
    """Lorekeeper ingestion jobs (the Ray Job entrypoint)."""
    # A callback keeps `ingest` a subcommand: with one command and none, Typer would make the app that
    # command, and `python -m jobs ingest s3://…` would take "ingest" for a path.


app.command("ingest")(ingest)
