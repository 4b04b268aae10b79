"""The ingest job's named log events, one function each, with the fields the ingest contract names.

The stages run in Ray workers (or one after another in the driver, for a small job); every event
carries ``job_id`` and ``item_uid`` (bound for the file being processed, or given), and every line
``host`` and ``pid`` (:mod:`schemas.logs`), so one job's lines from the driver and the workers are
found together. Durations are in milliseconds, sizes in bytes. A batch stage (embed, write) logs per
item of the batch: the chunks of that item it handled, and the real duration of the batch's call.
The table of every event, its level and fields is docs/ingest-events.md; the fetch and copy events
(``embed_s3_fetch_*``, ``s3_cross_bucket_copy_*``) are the fetch step's own.
"""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import structlog

from schemas.knowledge import ChunkingDefaults

if TYPE_CHECKING:
    from jobs.rule_facts import FactsRead

log = structlog.get_logger("jobs.events")

#: concept names listed by ``embed_concepts_complete`` (the count is always whole)
CONCEPT_NAMES_LISTED = 100


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


@contextmanager
def for_file(job_id: str, item_uid: str | None = None) -> Iterator[None]:
    """Bind the job (and the item once known) to every event logged while one file is processed."""
    with structlog.contextvars.bound_contextvars(job_id=job_id, item_uid=item_uid):
        yield


def bind_item(item_uid: str) -> None:
    """The item of the file being processed is known (the worker has its bytes)."""
    structlog.contextvars.bind_contextvars(item_uid=item_uid)


def task_started(job_id: str, item_uid: str | None, retry_count: int, source_ref: str, node_id: str) -> None:
    log.info(
        "embed_task_started",
        job_id=job_id,
        item_uid=item_uid,
        worker_host=socket.gethostname(),
        node_id=node_id,
        retry_count=retry_count,
        source_ref=source_ref,
    )


def chunking_start(library_type: str, chunking: ChunkingDefaults, file_type: str) -> None:
    log.debug(
        "embed_chunking_start",
        library_type=library_type,
        file_type=file_type,
        strategy=chunking.strategy.value,
        chunk_size=chunking.target_tokens,
        chunk_size_max=chunking.max_tokens,
        chunk_overlap=chunking.overlap_tokens,
        unit="tokens",
    )


def chunking_complete(texts: Sequence[str], pages: int, seconds: float) -> None:
    """``embed_chunking_complete``: ``avg_chunk_size`` in bytes of UTF-8 text; the time covers extraction too."""
    sizes = [len(text.encode("utf-8")) for text in texts]
    log.info(
        "embed_chunking_complete",
        chunks_created=len(sizes),
        avg_chunk_size=round(sum(sizes) / len(sizes)) if sizes else 0,
        pages=pages,
        duration_ms=ms(seconds),
    )


def chunking_failed(file_type: str, exc: BaseException) -> None:
    log.error("embed_chunking_failed", file_type=file_type, exception_type=type(exc).__name__, error=str(exc))


def extractor_name(extractor: object) -> str:
    """The model a concept extractor asks, or the name of the rule extractor."""
    config = getattr(extractor, "config", None)
    return str(getattr(config, "model", None) or type(extractor).__name__)


@contextmanager
def concepts(model_name: str) -> Iterator[list[str]]:
    """``embed_concepts_start`` … ``embed_concepts_complete``; the caller puts the concept names in the list."""
    log.debug("embed_concepts_start", model_name=model_name)
    started = time.perf_counter()
    names: list[str] = []
    yield names
    log.info(
        "embed_concepts_complete",
        model_name=model_name,
        concepts_extracted=len(names),
        concept_names=names[:CONCEPT_NAMES_LISTED],
        duration_ms=ms(time.perf_counter() - started),
    )


def embed_batch(
    model_name: str,
    dimensions: int,
    items: dict[tuple[str, str], list[Any]],
    embed: Callable[[], Any],
) -> Any:
    """Run one embedding call over a batch, logged per item of the batch: ``embed_vectors_start``, then
    ``embed_vectors_complete`` (the call's duration, the item's tokens) or ``embed_vectors_failed``
    (the item's first chunk in the batch) before the error goes on.

    Args:
        items: (job_id, item_uid) → that item's rows in the batch (each with ``sequence``,
            ``token_count``, ``item_chunks``).
        embed: the call.
    """
    batch = sum(len(rows) for rows in items.values())
    for (job_id, item_uid), rows in items.items():
        log.debug(
            "embed_vectors_start",
            job_id=job_id,
            item_uid=item_uid,
            model_name=model_name,
            dimensions=dimensions,
            batch_size=batch,
            chunks=len(rows),
            total_chunks=rows[0].item_chunks,
        )
    started = time.perf_counter()
    try:
        result = embed()
    except Exception as exc:
        for (job_id, item_uid), rows in items.items():
            log.error(
                "embed_vectors_failed",
                job_id=job_id,
                item_uid=item_uid,
                model_name=model_name,
                chunk_index=min(row.sequence for row in rows),
                exception_type=type(exc).__name__,
                error=str(exc),
            )
        raise
    seconds = time.perf_counter() - started
    for (job_id, item_uid), rows in items.items():
        log.info(
            "embed_vectors_complete",
            job_id=job_id,
            item_uid=item_uid,
            model_name=model_name,
            chunks=len(rows),
            batch_size=batch,
            tokens_processed=sum(row.token_count for row in rows),
            duration_ms=ms(seconds),
        )
    return result


@contextmanager
def graph_write(job_id: str, item_uid: str, chunks: int, first_chunk: int) -> Iterator[dict[str, int]]:
    """``embed_graph_write_start`` … ``_complete`` (or ``_failed``, then the error goes on) around writing an
    item's chunks of one batch to the stores (chunk text, graph, full text, vectors); the caller may
    add counts (``concepts_linked``) to the dict it gets."""
    log.debug("embed_graph_write_start", job_id=job_id, item_uid=item_uid, chunks_to_write=chunks)
    started = time.perf_counter()
    counts: dict[str, int] = {}
    try:
        yield counts
    except Exception as exc:
        log.error(
            "embed_graph_write_failed",
            job_id=job_id,
            item_uid=item_uid,
            chunk_index=first_chunk,
            exception_type=type(exc).__name__,
            error=str(exc),
        )
        raise
    log.info(
        "embed_graph_write_complete",
        job_id=job_id,
        item_uid=item_uid,
        chunks_written=chunks,
        duration_ms=ms(time.perf_counter() - started),
        **counts,
    )


def graph_build(job_id: str, item_uid: str, build: Callable[[], int]) -> int:
    """``embed_graph_build_start`` / ``_complete`` around building an item's concept relationships."""
    log.debug("embed_graph_build_start", job_id=job_id, item_uid=item_uid)
    started = time.perf_counter()
    created = build()
    log.info(
        "embed_graph_build_complete",
        job_id=job_id,
        item_uid=item_uid,
        relationships_created=created,
        duration_ms=ms(time.perf_counter() - started),
    )
    return created


def job_completed(
    job_id: str, item_uid: str, total_seconds: float | None, chunks: int, concepts: int, **extra: Any
) -> None:
    log.info(
        "embed_job_completed",
        job_id=job_id,
        item_uid=item_uid,
        total_duration_ms=ms(total_seconds) if total_seconds is not None else None,
        chunks=chunks,
        concepts=concepts,
        **extra,
    )


def job_failed(
    job_id: str, item_uid: str | None, exception_type: str, error: str, exc: BaseException | None = None
) -> None:
    """``embed_job_failed``: with the traceback of ``exc`` when an exception failed it (None for a refusal)."""
    log.error(
        "embed_job_failed",
        job_id=job_id,
        item_uid=item_uid,
        exception_type=exception_type,
        error=error,
        traceback="".join(traceback.format_exception(exc)) if exc is not None else None,
    )


def facts_extracted(job_id: str, item_uid: str, read: FactsRead, **extra: object) -> None:
    """``rule_facts_extracted``: an item's rulebook facts, per kind."""
    log.info(
        "rule_facts_extracted",
        job_id=job_id,
        item_uid=item_uid,
        facts=len(read.facts),
        entries=read.entries,
        by_kind=read.by_kind,
        **extra,
    )


def facts_failed(job_id: str, item_uid: str, exc: Exception) -> None:
    """``rule_facts_failed``: the item keeps its file, without (new) facts."""
    log.warning(
        "rule_facts_failed", job_id=job_id, item_uid=item_uid, exception_type=type(exc).__name__, message=str(exc)
    )
