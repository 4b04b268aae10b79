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


def converted_default_model(cache: Path | None = None) -> Path:
    """The default model as a Hugging Face folder in the model cache, converted on the first call only.

    The folder is ``<model cache>/<package>-<version>-hf`` (beside the GGUF it comes from); the conversion
    writes it under a temporary name and renames it whole, so a folder that exists is a finished one. Two
    processes converting at once both succeed: the second rename loses and the winner's folder is used.

    Raises:
        ConfigError: the GGUF file cannot be fetched.
    """
    from models.hf_folder import convert_to_folder
    from models.llm import DEFAULT_LOCAL_MODEL, ensure_default_model, model_cache_dir

    pin = DEFAULT_LOCAL_MODEL
    dest = (cache or model_cache_dir()) / f"{pin.package}-{pin.version}-hf"
    if (dest / "config.json").is_file():
        return dest
    try:
        return convert_to_folder(ensure_default_model(pin, cache), dest)
    except (FileExistsError, OSError):
        if (dest / "config.json").is_file():  # another process finished it first
            return dest
        raise


@model_app.command("convert")
def convert(
    dest: Annotated[
        Path | None,
        typer.Argument(help="The folder to write (it must not exist); none: the model cache's, reused if there."),
    ] = None,
) -> None:
    """Write the default model as a Hugging Face folder (config, safetensors, tokenizer): what vLLM serves."""
    from models.hf_folder import convert_to_folder
    from models.llm import DEFAULT_LOCAL_MODEL, ensure_default_model

    try:
        folder = converted_default_model() if dest is None else convert_to_folder(ensure_default_model(), dest)
    except (ConfigError, FileExistsError) as exc:
        Console(stderr=True).print(f"[red]cannot convert the model[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    Console(highlight=False).print(f"{DEFAULT_LOCAL_MODEL.name}: {folder}", markup=False, soft_wrap=True)
