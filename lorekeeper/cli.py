"""The ``lorekeeper`` command line.

Commands import their layers lazily so ``lorekeeper --help`` answers at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from schemas.errors import ConfigError, LorekeeperError

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

console = Console()
err_console = Console(stderr=True)


@app.callback()
def main(
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines.")] = False,
) -> None:
    from lorekeeper.logs import configure_logging

    configure_logging(log_level, json=log_json)


def _settings():  # noqa: ANN202 - the Settings type is imported lazily
    from schemas.settings import get_settings

    try:
        return get_settings()
    except ConfigError as exc:
        err_console.print(f"[red]configuration error[/red] {exc}")
        raise typer.Exit(2) from None


@app.command("config")
def show_config(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show which backend each store family resolves to (secrets are never printed)."""
    settings = _settings()
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

    settings = _settings()
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

    with open_stores(_settings()) as stores:
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


@app.command("version")
def version() -> None:
    """Print the installed version."""
    from lorekeeper import __version__

    console.print(__version__)


if __name__ == "__main__":  # pragma: no cover
    app()
