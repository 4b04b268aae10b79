"""``lorekeeper model``: the embedded default model, fetched ahead of its first use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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


@model_app.command("convert")
def convert(dest: Annotated[Path, typer.Argument(help="The folder to write (it must not exist).")]) -> None:
    """Write the default model as a Hugging Face folder (config, safetensors, tokenizer): what vLLM serves."""
    from models.hf_folder import convert_to_folder
    from models.llm import DEFAULT_LOCAL_MODEL, ensure_default_model

    try:
        folder = convert_to_folder(ensure_default_model(), dest)
    except (ConfigError, FileExistsError) as exc:
        Console(stderr=True).print(f"[red]cannot convert the model[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    Console(highlight=False).print(f"{DEFAULT_LOCAL_MODEL.name}: {folder}", markup=False, soft_wrap=True)
