"""``lorekeeper model``: the embedded default model, fetched ahead of its first use."""

from __future__ import annotations

import typer
from rich.console import Console

from schemas.errors import ConfigError

model_app = typer.Typer(help="The embedded default model (engine local).", no_args_is_help=True)


@model_app.command("pull")
def pull() -> None:
    """Fetch the pinned default model (checked against its sha256) into the model cache, if not there yet."""
    from models.llm import DEFAULT_LOCAL_MODEL, ensure_default_model

    try:
        path = ensure_default_model()
    except ConfigError as exc:
        Console(stderr=True).print(f"[red]cannot fetch the model[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    Console(highlight=False).print(f"{DEFAULT_LOCAL_MODEL.name}: {path}", markup=False, soft_wrap=True)
