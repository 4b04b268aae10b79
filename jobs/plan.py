"""What an ingest run is asked to do, and how its stages are sized for the machine they run on."""

from __future__ import annotations

import os
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from jobs.concepts import LLMExtractorConfig
from models.embedding import EmbeddingConfig
from schemas.knowledge import ChunkingDefaults, Classification, FileType, LibraryType

DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024


class IngestExecutor(StrEnum):
    """Where an ingest's stages run."""

    AUTO = "auto"  # chosen by the job's size (see choose_executor)
    LOCAL = "local"  # the same stage classes, one after another in this process
    RAY = "ray"  # the Ray Data pipeline (local Ray, or the cluster at RAY_ADDRESS)


#: Up to this many estimated chunks, ``auto`` runs the stages in this process: Ray's start-up (local
#: Ray, actors, the model loaded again in the embed actor) costs 15-20 s on two cores, about what
#: embedding 2,000 chunks costs, so below it Ray costs more than its overlap of stages saves.
LOCAL_MAX_CHUNKS = 2500

#: Bytes of a file per chunk it yields, by type, for the estimate only (measured on the corpus: Markdown
#: about 600, HTML about 1,000 with its markup, PDFs several times more with fonts and images).
_BYTES_PER_CHUNK: dict[FileType, int] = {
    FileType.MARKDOWN: 600,
    FileType.TEXT: 600,
    FileType.HTML: 1000,
    FileType.PDF: 3000,
    FileType.DOCX: 2000,
    FileType.EPUB: 2000,
}


class IngestOptions(BaseModel):
    """One ingest run: where the files go, and how they are processed."""

    model_config = ConfigDict(extra="forbid")

    library: str = Field(min_length=1, description="Library name; created on first use.")
    library_type: LibraryType = Field(default=LibraryType.RULEBOOK, description="Picks chunking defaults.")
    collection: str | None = Field(default=None, description="Collection inside the library.")
    classification: Classification = Classification.CANON
    password: SecretStr | None = Field(default=None, description="Password for encrypted PDFs.")
    max_file_bytes: int = Field(default=DEFAULT_MAX_FILE_BYTES, gt=0, description="Larger files fail.")
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    concepts_llm: LLMExtractorConfig | None = Field(
        default=None, description="An OpenAI-compatible endpoint for concept extraction; rules when unset."
    )
    vector_collection: str = Field(default="chunks", description="Vector collection of chunk embeddings.")
    executor: IngestExecutor = Field(
        default=IngestExecutor.AUTO,
        description="Where the stages run: 'ray', 'local' (this process), or 'auto' (local for a small job).",
    )
    local_max_chunks: int = Field(
        default=LOCAL_MAX_CHUNKS, ge=0, description="With 'auto', the most estimated chunks run in this process."
    )
    ray_address: str | None = Field(
        default=None,
        description="A warm local Ray head to attach to when the stages run on Ray (`lorekeeper up`); "
        "RAY_ADDRESS, when set, wins. Unset: a Ray of the run's own, started and stopped with it.",
    )


class StagePlan(BaseModel):
    """Resources and concurrency of each Ray Data stage (see :func:`plan_stages`)."""

    model_config = ConfigDict(frozen=True)

    extract_concurrency: int = Field(gt=0)
    extract_cpus: float = Field(gt=0)
    embed_concurrency: int = Field(gt=0)
    embed_cpus: float = Field(ge=0)
    embed_gpus: float = Field(ge=0)
    embed_batch_size: int = Field(gt=0)
    write_concurrency: int = Field(gt=0)
    write_cpus: float = Field(gt=0)
    write_batch_size: int = Field(gt=0)


def plan_stages(cpus: float, gpus: float, *, embedded_stores: bool) -> StagePlan:
    """Size the stages for a cluster with ``cpus`` and ``gpus``.

    Embedding is the bottleneck: on GPUs it gets one actor per GPU and large batches; on CPUs one
    actor whose torch threads use the cores, while extraction and writes take fractional CPUs so they
    overlap with it instead of waiting for a whole core. Embedded indexes allow one writer process.
    """
    if gpus >= 1:
        return StagePlan(
            extract_concurrency=max(1, int(cpus // 2)),
            extract_cpus=1,
            embed_concurrency=int(gpus),
            embed_cpus=1,
            embed_gpus=1,
            embed_batch_size=512,
            write_concurrency=1 if embedded_stores else max(1, int(cpus // 8)),
            write_cpus=1,
            write_batch_size=512,
        )
    return StagePlan(
        extract_concurrency=max(1, int(cpus // 4)),
        extract_cpus=0.5,
        embed_concurrency=max(1, int(cpus // 8)),
        embed_cpus=1,
        embed_gpus=0,
        embed_batch_size=128,
        write_concurrency=1 if embedded_stores else max(1, int(cpus // 8)),
        write_cpus=0.25,
        write_batch_size=256,
    )


def estimate_chunks(files: Iterable[tuple[str, int]]) -> int:
    """About how many chunks files of these ``(name, bytes)`` yield (an image: one; unknown types: none)."""
    total = 0
    for name, size in files:
        try:
            kind = FileType.from_filename(name)
        except ValueError:
            continue
        per_chunk = _BYTES_PER_CHUNK.get(kind)
        total += 1 if per_chunk is None else max(1, size // per_chunk)
    return total


def choose_executor(
    options: IngestOptions, files: Iterable[tuple[str, int]], *, cluster: str | None
) -> tuple[IngestExecutor, str]:
    """Where a job's stages run (``local`` or ``ray``), and why, for the summary.

    ``auto`` takes Ray when a cluster is named (``cluster``: ``RAY_ADDRESS``), or when the job is
    estimated above ``options.local_max_chunks``; a small job runs in this process.
    """
    if options.executor is not IngestExecutor.AUTO:
        return options.executor, f"asked for ({options.executor.value})"
    if cluster:
        return IngestExecutor.RAY, f"a Ray cluster is named (RAY_ADDRESS={cluster})"
    estimate = estimate_chunks(files)
    if estimate > options.local_max_chunks:
        return IngestExecutor.RAY, f"about {estimate} chunks, over {options.local_max_chunks} for one process"
    return IngestExecutor.LOCAL, f"about {estimate} chunks, at most {options.local_max_chunks}: Ray would cost more"


def fit_chunking(chunking: ChunkingDefaults, max_model_tokens: int) -> ChunkingDefaults:
    """Cap chunk sizes at what the embedding model reads; the rest of a longer chunk would be cut off.

    The target keeps a quarter of the window free for the heading path that is embedded with the text.
    """
    max_tokens = min(chunking.max_tokens, max_model_tokens)
    target = min(chunking.target_tokens, max(32, int(max_tokens * 0.75)))
    overlap = min(chunking.overlap_tokens, target // 4)
    return chunking.model_copy(update={"max_tokens": max_tokens, "target_tokens": target, "overlap_tokens": overlap})


def local_cpus() -> int:
    return os.cpu_count() or 1
