"""The ``lorekeeper`` command line.

Commands import their layers lazily so ``lorekeeper --help`` answers at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from lorekeeper.command_context import console, err_console, read_settings, story_service
from schemas.errors import LorekeeperError

if TYPE_CHECKING:
    from jobs.reindex import SkippedItem
    from story.reindexing import RecallRebuild

app = typer.Typer(
    name="lorekeeper",
    help="Lorekeeper: AI-narrated tabletop play at scale. Settings come from LOREKEEPER_* variables.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
schema_app = typer.Typer(help="The data model's JSON Schemas.", no_args_is_help=True)
stores_app = typer.Typer(help="The four stores: check and prepare them.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")
app.add_typer(stores_app, name="stores")


def _register_ingest() -> None:
    # The command lives with the pipeline so `python -m jobs ingest` (a Ray Job) runs the same code.
    from jobs.cli import ingest

    app.command("ingest")(ingest)


_register_ingest()


def _register_serve() -> None:
    from lorekeeper.serve_cli import keys_app, serve_command

    app.command("serve")(serve_command)
    app.add_typer(keys_app, name="keys")


_register_serve()


def _register_campaign() -> None:
    from lorekeeper.campaign_cli import campaign_app, recall_command

    app.add_typer(campaign_app, name="campaign")
    app.command("recall")(recall_command)


_register_campaign()


def _register_play() -> None:
    from lorekeeper.model_cli import model_app
    from lorekeeper.play import play_command

    app.command("play")(play_command)
    app.add_typer(model_app, name="model")


_register_play()


def _register_ray() -> None:
    from lorekeeper.ray_cli import down_command, status_command, up_command

    app.command("up")(up_command)
    app.command("down")(down_command)
    app.command("status")(status_command)


_register_ray()


@app.callback()
def main(
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines.")] = False,
    log_dir: Annotated[
        str | None,
        typer.Option(help="Also write JSON lines to DIR/<host>-<pid>.jsonl, one file per process (Ray workers too)."),
    ] = None,
) -> None:
    from lorekeeper.logs import configure_logging

    configure_logging(log_level, json=log_json, directory=log_dir)


@app.command("config")
def show_config(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show which backend each store family resolves to (secrets are never printed)."""
    settings = read_settings()
    rows = {
        "blob": settings.blob_location(),
        "text": settings.text_location(),
        "vector": settings.vector_location(),
        "graph": settings.graph_location(),
    }
    described = {
        family: {key: str(value) for key, value in loc.model_dump(exclude_none=True).items()}
        for family, loc in rows.items()
    }
    if as_json:
        console.print_json(json.dumps({"environment": settings.environment.value, "stores": described}))
        return
    table = Table(title=f"Lorekeeper stores ({settings.environment.value})")
    table.add_column("family")
    table.add_column("backend")
    table.add_column("where")
    for family, loc in rows.items():
        where = str(getattr(loc, "url", None) or getattr(loc, "path", None) or getattr(loc, "root", None) or "memory")
        if family == "blob" and getattr(loc, "endpoint", None):
            where = f"{loc.endpoint}/{loc.bucket}"
        table.add_row(family, loc.backend.value, where)
    console.print(table)


@stores_app.command("check")
def check_stores() -> None:
    """Open every configured store and check that it answers; exit 1 if one does not."""
    from stores.factory import open_stores

    settings = read_settings()
    failed = False
    table = Table(title="Store health")
    for column in ("family", "backend", "status", "ms"):
        table.add_column(column)
    with open_stores(settings) as stores:
        for family in ("blob", "text", "vector", "graph"):
            store = getattr(stores, family)
            started = time.perf_counter()
            try:
                store.health()
                status = "[green]ok[/green]"
            except LorekeeperError as exc:
                failed = True
                status = f"[red]{exc}[/red]"
            table.add_row(family, type(store).__name__, status, f"{(time.perf_counter() - started) * 1000:.0f}")
    console.print(table)
    if failed:
        raise typer.Exit(1)


@stores_app.command("init")
def init_stores() -> None:
    """Create the graph's constraints and indexes and the blob bucket (idempotent)."""
    from stores.factory import open_stores
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    with open_stores(read_settings()) as stores:
        stores.blob.ensure_bucket()
        stores.graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        stores.text.ensure()
    console.print("stores ready")


@schema_app.command("export")
def export_schemas(directory: Annotated[Path, typer.Argument(help="Folder to write the JSON Schemas into.")]) -> None:
    """Write one JSON Schema file per model of the data model."""
    from schemas.export import export_json_schemas

    written = export_json_schemas(directory)
    console.print(f"wrote {len(written)} schemas to {directory}")


@app.command("search")
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="How many hits.")] = 5,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit (per query with --queries).")
    ] = False,
    queries: Annotated[
        Path | None, typer.Option(help="JSON lines with 'id' and 'query'; loads the models once.")
    ] = None,
    rerank: Annotated[
        bool | None,
        typer.Option(
            "--rerank/--no-rerank",
            help="Re-rank with LOREKEEPER_RERANKER_MODEL (default: whenever it is set).",
            show_default=False,
        ),
    ] = None,
    library: Annotated[
        list[str] | None, typer.Option(help="Only this library (name or uid); repeat for several.")
    ] = None,
    library_type: Annotated[
        list[str] | None, typer.Option("--type", help="Only libraries of this type (rulebook, lore, …).")
    ] = None,
    classification: Annotated[
        list[str] | None, typer.Option(help="Only canon, reference or inspiration items.")
    ] = None,
) -> None:
    """Search the ingested knowledge (vector + full text + graph, fused, re-ranked when a reranker is set)
    and cite book, page and heading path."""
    from schemas.search import SearchFilters
    from search.service import open_searcher

    if (query is None) == (queries is None):
        err_console.print("give a QUERY or --queries FILE")
        raise typer.Exit(2)
    settings = read_settings()
    if rerank and not settings.reranker_model:
        err_console.print("--rerank needs a re-ranking model: set LOREKEEPER_RERANKER_MODEL to its folder")
        raise typer.Exit(2)
    with open_searcher(settings) as searcher:
        try:
            filters = SearchFilters(
                library=[searcher.library_uid(name) for name in library] if library else None,
                library_type=library_type or None,
                classification=classification or None,
            )
        except (ValueError, LorekeeperError) as exc:
            err_console.print(str(exc))
            raise typer.Exit(2) from None
        if queries is not None:
            for line_no, line in enumerate(queries.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    qid, text = entry["id"], str(entry["query"])
                except (ValueError, KeyError, TypeError):
                    err_console.print(f"{queries}:{line_no}: expected a JSON object with 'id' and 'query'")
                    raise typer.Exit(2) from None
                hits = searcher.search(text, filters=filters, limit=limit, rerank=rerank)
                typer.echo(json.dumps({"id": qid, "hits": [_hit_json(h) for h in hits]}))
            return
        assert query is not None
        hits = searcher.search(query, filters=filters, limit=limit, rerank=rerank)
    if as_json:
        for hit in hits:
            typer.echo(json.dumps(_hit_json(hit)))
        return
    if not hits:
        console.print("no results (has anything been ingested? try `lorekeeper ingest PATH --library NAME`)")
        return
    for n, hit in enumerate(hits, start=1):
        pages = ""
        if hit.page_start:
            pages = f", p. {hit.page_start}" + (f"-{hit.page_end}" if hit.page_end != hit.page_start else "")
        where = " > ".join(hit.heading_path)
        legs = " ".join(f"{leg}#{rank}" for leg, rank in hit.ranks.items())
        console.rule(f"[bold]{n}. {hit.title}{pages}[/bold]  {where}  [dim]{hit.score:.4f} {legs}[/dim]")
        text = hit.text if len(hit.text) < 700 else hit.text[:700] + " …"
        console.print(text, markup=False, highlight=False)


def _hit_json(hit) -> dict:  # noqa: ANN001 - SearchHit is imported lazily
    return dict(hit.model_dump())


@app.command("facts")
def facts_command(
    entry: Annotated[str, typer.Argument(help="The entry's name: 'Goblin', 'Fireball', 'Poisoned'.")],
    item: Annotated[
        str | None, typer.Option("--item", help="Only this item's facts (its uid), whatever its status.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per fact.")] = False,
) -> None:
    """Print a rulebook entry's typed facts (from ingested books): predicate, value, the text it was read
    from, page, chunk id and item."""
    from stores.catalog import Catalog
    from stores.factory import open_graph_store
    from stores.source_facts import SourceFactStore

    settings = read_settings()
    graph = open_graph_store(settings)
    try:
        store = SourceFactStore(graph)
        facts = store.for_item(item, entry=entry) if item else store.find(entry)
        titles = {uid: i.title for uid, i in Catalog(graph).items_by_uid({f.item_uid for f in facts}).items()}
    except LorekeeperError as exc:
        err_console.print(str(exc))
        raise typer.Exit(2 if exc.status_code < 500 else 1) from None
    finally:
        graph.close()
    if as_json:
        for fact in facts:
            typer.echo(json.dumps(fact.model_dump(mode="json")))
        return
    if not facts:
        console.print(f"no facts for {entry!r} (is the rulebook ingested? `lorekeeper ingest PATH --library NAME`)")
        return
    # Plain lines, one per fact, grouped by item: ids stay whole (a table would fold them) and grep works.
    width = max(len(f.predicate) for f in facts)
    shown_item = None
    for fact in facts:
        if fact.item_uid != shown_item:
            shown_item = fact.item_uid
            status = "" if fact.status == "active" else f" ({fact.status})"
            title = titles.get(fact.item_uid, "?")
            typer.echo(f"{fact.subject.name} ({fact.subject.kind}) in {title!r} [{fact.item_uid}]{status}")
        page = f"p. {fact.page}" if fact.page else "p. ?"
        typer.echo(
            f"  {fact.predicate:<{width}}  {fact.value.canonical()}  <- {fact.raw!r}  {page}  {fact.chunk_id or '-'}"
        )


@app.command("reindex")
def reindex_command(
    drop: Annotated[bool, typer.Option(help="Empty the indexes first (removes records of superseded items).")] = False,
) -> None:
    """Rebuild the full-text and vector indexes from the graph and the blob store."""
    from rich.progress import Progress

    from jobs.reindex import reindex
    from story.reindexing import rebuild_every_recall

    settings = read_settings()
    with Progress(console=err_console) as progress:
        task = progress.add_task("reindexing chunks", total=None)
        report = reindex(settings, drop=drop, on_progress=lambda n: progress.advance(task, n))
        with story_service(settings, bulk=True) as story:
            ends = story.finish_scene_ends()  # what a scene end cut short by a crash forms, then its records
            task = progress.add_task("rebuilding campaign recall", total=None)
            recall = rebuild_every_recall(
                story,
                total=lambda n: progress.update(task, total=n),
                on_campaign=lambda _: progress.advance(task),
            )
    console.print(f"reindexed {report.chunks} chunks of {report.items} items")
    console.print(f"rebuilt the recall of {recall.campaigns} campaigns ({recall.records} records)")
    _print_skipped(report.skipped, recall)
    if ends:
        console.print(f"finished {ends} scene ends a crash had cut short")


def _print_skipped(items: list[SkippedItem], recall: RecallRebuild) -> None:
    """What a reindex could not read, on stderr: each skipped item and record (the log has the same)."""
    for item in items:
        err_console.print(f"skipped item {item.item_uid}: {item.problem}", markup=False, highlight=False)
    for record in recall.unreadable:
        left = "not rebuilt" if record.campaign_id in recall.skipped_campaigns else "rebuilt without it"
        err_console.print(
            f"campaign {record.campaign_id} {left}: {record.label} {record.record_id} cannot be read "
            f"({record.problem})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if items or recall.unreadable:
        err_console.print(
            f"skipped {len(items)} items, {len(recall.unreadable)} unreadable records and "
            f"{len(recall.skipped_campaigns)} whole campaigns; everything else was rebuilt"
        )


@app.command("version")
def version() -> None:
    """Print the installed version."""
    from lorekeeper import __version__

    console.print(__version__)


if __name__ == "__main__":  # pragma: no cover
    app()
