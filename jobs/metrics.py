"""Prometheus metrics of ingestion, counted where the work runs (:mod:`stores.metric_export`).

The stage actors count chunks, concepts and embeddings as they make them (in a Ray worker, through
Ray's export too); the driver counts jobs by how they ended and the run's wall time.
"""

from __future__ import annotations

from stores.metric_export import Counter, Histogram

INGEST_JOBS = Counter("lorekeeper_ingest_jobs_total", "Ingest jobs by final status.", ["status"])
INGEST_DURATION = Histogram(
    "lorekeeper_ingest_duration_seconds",
    "Wall time of one ingest run, by library type.",
    ["library_type"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)
CHUNKS_CREATED = Counter("lorekeeper_chunks_created_total", "Chunks written to every store.", ["library_type"])
CONCEPTS_EXTRACTED = Counter("lorekeeper_concepts_extracted_total", "Concepts found in ingested items.")
EMBEDDINGS_GENERATED = Counter("lorekeeper_embeddings_generated_total", "Chunk embeddings computed.", ["model"])
EMBEDDING_DURATION = Histogram(
    "lorekeeper_embedding_duration_seconds",
    "Embedding time per chunk (an embed batch's time over its chunks).",
    ["model"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
