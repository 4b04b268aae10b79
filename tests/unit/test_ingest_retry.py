"""A failed embedding, then the job retried through the API to completion: its events, its error, its
retry count, and no duplicate item, chunk, chunk text, full-text document or vector.

The embedding fails for real: the job runs on a copy of the default model whose word-embedding table
was cut short (a damaged model file), which loads and passes its warm-up ("warm-up" stays within the
table) but fails on the first real batch (a token past the table). The operator restores the model file
and retries the job (``POST /api/v1/library/jobs/{id}/retry``); the API's runner runs the real pipeline
(in this process: a small job) with that model folder both times, bound as the runner's ``run_jobs``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from jobs.api import create_app
from jobs.pipeline import run_ingest
from jobs.plan import IngestOptions
from jobs.runner import IngestRunner
from models.embedding import DEFAULT_MODEL, EmbeddingConfig, resolve_model_path
from schemas.knowledge import IngestJob
from schemas.search import SearchFilters
from schemas.settings import Settings, load_settings
from stores.factory import open_text_index, open_vector_index
from tests.corpus import corpus_file

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

API = "/api/v1/library"
BOOK = "rulebooks/fate-srd/fate-accelerated-SRD.md"
SLICE_BYTES = 12_000
#: rows kept of the word-embedding table: every token of the warm-up ("warm-up" is 101 4010 1011 2039 102)
KEPT_TOKENS = 4011


def _damage(folder: Path) -> None:
    """Cut the model's word-embedding table to :data:`KEPT_TOKENS` rows (config and weights agree, so it loads)."""
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    weights["embeddings.word_embeddings.weight"] = weights["embeddings.word_embeddings.weight"][:KEPT_TOKENS].copy()
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": KEPT_TOKENS}))


@pytest.fixture
def model(tmp_path: Path) -> Iterator[Path]:
    """A copy of the default model under its own name, damaged; the test restores it."""
    folder = tmp_path / "models" / DEFAULT_MODEL
    shutil.copytree(resolve_model_path(DEFAULT_MODEL), folder)
    _damage(folder)
    yield folder


def _restore(folder: Path) -> None:
    original = Path(resolve_model_path(DEFAULT_MODEL))
    for name in ("model.safetensors", "config.json"):
        shutil.copy(original / name, folder / name)


def _wait(client: TestClient, job_id: str, *, timeout: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"{API}/jobs/{job_id}").json()
        if job["status"] in ("completed", "failed"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job.get('status')} after {timeout}s")


def _events(logs: list[dict[str, Any]], name: str, job_id: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name and e.get("job_id") == job_id]


def _counts(client: TestClient, settings: Settings, item_uid: str) -> dict[str, int]:
    """What the four stores hold of the item: items, chunks, chunk texts, full-text documents, vectors."""
    ctx = client.app.state.ingest  # type: ignore[attr-defined]
    graph = ctx.graph

    def count(query: str) -> int:
        return int(graph.run(query, {"u": item_uid})[0]["n"])

    text, vectors = open_text_index(settings), open_vector_index(settings)
    try:
        only = SearchFilters(item=[item_uid])
        text.refresh()
        return {
            "items": count("MATCH (i:Item) RETURN count(i) AS n"),
            "chunks": count("MATCH (c:Chunk {item_uid: $u}) RETURN count(c) AS n"),
            "chunk_texts": len([o for o in ctx.blob.list(f"items/{item_uid}/chunks/")]),
            "text_documents": text.count(only),
            "vectors": vectors.count("chunks", only),
        }
    finally:
        text.close()
        vectors.close()


def test_a_failed_embedding_is_retried_to_completion_without_duplicates(tmp_path: Path, model: Path) -> None:
    book = tmp_path / "books" / "fate-accelerated-opening.md"
    book.parent.mkdir()
    book.write_bytes(corpus_file(BOOK).read_bytes()[:SLICE_BYTES])
    settings = load_settings(data_dir=tmp_path / "data")
    embedding = EmbeddingConfig(model=str(model))

    def run_jobs(jobs: list[IngestJob], options: IngestOptions) -> object:
        return run_ingest([], options.model_copy(update={"embedding": embedding}), settings=settings, jobs=jobs)

    with (
        capture_logs() as logs,
        TestClient(create_app(settings, allowed_roots=[tmp_path], start_runner=False)) as client,
    ):
        ctx = client.app.state.ingest  # type: ignore[attr-defined]
        ctx.runner = IngestRunner(settings, ctx.catalog, allowed_roots=[tmp_path], run_jobs=run_jobs)
        ctx.runner.start()
        library = client.post(f"{API}/libraries", json={"name": "fate", "type": "rulebook"}).json()["uid"]
        accepted = client.post(f"{API}/ingest", json={"path": str(book), "library_uid": library, "title": "Fate"})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]

        failed = _wait(client, job_id)
        assert failed["status"] == "failed" and failed["retry_count"] == 0, failed
        assert "index out of range" in failed["error"], failed["error"]
        (embed_failed,) = _events(logs, "embed_vectors_failed", job_id)
        assert embed_failed["log_level"] == "error" and embed_failed["model_name"] == DEFAULT_MODEL
        assert embed_failed["chunk_index"] == 0 and "index out of range" in embed_failed["error"]
        assert [e["error"] for e in _events(logs, "embed_job_failed", job_id)] == [failed["error"]]
        assert not _events(logs, "embed_vectors_complete", job_id)
        item_uid = failed["item_uid"]
        assert item_uid is not None  # the item was recorded before its chunks were embedded

        _restore(model)  # the operator repairs the model, then retries the job
        retried = client.post(f"{API}/jobs/{job_id}/retry")
        assert retried.status_code == 202 and retried.json()["retry_count"] == 1, retried.text
        done = _wait(client, job_id)
        assert done["status"] == "completed" and done["error"] is None, done["error"]
        assert done["retry_count"] == 1 and done["item_uid"] == item_uid
        assert client.post(f"{API}/jobs/{job_id}/retry").status_code == 409  # only a failed job
        chunks = done["chunks_created"]
        assert chunks > 5
        assert _counts(client, settings, item_uid) == {
            "items": 1,
            "chunks": chunks,
            "chunk_texts": chunks,
            "text_documents": chunks,
            "vectors": chunks,
        }
        listed = client.get(f"{API}/jobs").json()
        assert [(j["job_id"], j["status"], j["retry_count"]) for j in listed] == [(job_id, "completed", 1)]

    started = [e["retry_count"] for e in _events(logs, "embed_task_started", job_id)]
    assert started == [0, 1], started
    (completed,) = _events(logs, "embed_job_completed", job_id)
    assert completed["chunks"] == chunks and completed["item_uid"] == item_uid
    assert sum(e["chunks"] for e in _events(logs, "embed_vectors_complete", job_id)) == chunks
