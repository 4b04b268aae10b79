"""What the ``lorekeeper`` commands share: the settings read once at the command, the consoles, the
errors printed, and the story service on the configured stores."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from schemas.errors import ConfigError, LorekeeperError

if TYPE_CHECKING:
    from schemas.settings import Settings
    from story.service import StoryService

console = Console()
err_console = Console(stderr=True)


def read_settings():  # noqa: ANN202 - the Settings type is imported lazily
    from schemas.settings import get_settings

    try:
        return get_settings()
    except ConfigError as exc:
        err_console.print(f"[red]configuration error[/red] {exc}")
        raise typer.Exit(2) from None


def print_error(exc: LorekeeperError) -> None:
    err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)


@contextmanager
def story_service(settings: Settings, *, bulk: bool = False) -> Iterator[StoryService]:
    """The story service on the configured stores, with the campaign memory index; closes them after.

    ``bulk``: the process embeds many records (an import, a rebuild), so its embedder uses every core
    as the ingest pipeline's embed stage does; otherwise it embeds one query at a time on
    ``search_threads`` (the recall index's default).
    """
    from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
    from stores.factory import open_blob_store, open_graph_store
    from story.recall_index import open_recall_index
    from story.service import StoryService

    embedder = SentenceTransformerEmbedder(EmbeddingConfig()) if bulk else None
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    recall = open_recall_index(settings, embedder=embedder)
    try:
        service = StoryService(graph, blobs, recall=recall, checkpoints_kept=settings.checkpoints_kept)
        service.prepare()
        yield service
    finally:
        recall.close()
        graph.close()
        blobs.close()
