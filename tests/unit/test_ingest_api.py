"""The ingest API's job lifecycle on the embedded stores: submit, follow, fail, retry, restart, outage."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jobs.api import create_app
from schemas.settings import Settings, load_settings
from tests.corpus import corpus_file
from tests.fixtures.text import start_osmem
from tests.servers import free_port

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def books(tmp_path: Path) -> Path:
    folder = tmp_path / "books"
    folder.mkdir()
    return folder


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "data")


def _client(settings: Settings, root: Path, *, runner: bool = True) -> TestClient:
    return TestClient(create_app(settings, allowed_roots=[root], max_upload_bytes=2_000_000, start_runner=runner))


def _wait(client: TestClient, job_id: str, *, until: set[str], timeout: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/library/jobs/{job_id}").json()
        if job["status"] in until:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {job['status']} after {timeout}s")


def _library(client: TestClient) -> str:
    response = client.post("/api/v1/library/libraries", json={"name": "api-books", "type": "rulebook"})
    assert response.status_code == 201, response.text
    return response.json()["uid"]


def test_job_lifecycle_with_failure_and_retry(settings: Settings, books: Path) -> None:
    pdf = books / "rules.pdf"
    pdf.write_bytes(b"%PDF-1.4 this is not really a pdf")
    with _client(settings, books) as client:
        library = _library(client)
        accepted = client.post("/api/v1/library/ingest", data={"library_uid": library, "path": str(pdf)})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        failed = _wait(client, job_id, until={"failed", "completed"})
        assert failed["status"] == "failed" and "rules.pdf" in failed["error"]
        assert failed["started_at"] and failed["completed_at"] and failed["retry_count"] == 0

        shutil.copy(corpus_file("pdfs/py-pdf-sample-files/pdflatex-4-pages.pdf"), pdf)
        retried = client.post(f"/api/v1/library/jobs/{job_id}/retry")
        assert retried.status_code == 202 and retried.json()["status"] == "pending"
        done = _wait(client, job_id, until={"failed", "completed"})
        assert done["status"] == "completed", done
        assert done["retry_count"] == 1 and done["error"] is None
        assert done["chunks_created"] > 0 and done["item_uid"] and done["embedding_model"] == "all-MiniLM-L6-v2"
        assert done["progress"] == "completed" and done["progress_detail"]["fraction"] == 1.0

        item = client.get(f"/api/v1/library/items/{done['item_uid']}").json()
        assert item["status"] == "ready" and item["page_count"] == 4

        upload = client.post(
            "/api/v1/library/ingest",
            data={"library_uid": library},
            files={"file": ("lore.md", b"# The Brass Coast\n\nSmugglers of the Brass Coast trade in moonsilver.\n")},
        )
        assert upload.status_code == 202, upload.text
        assert _wait(client, upload.json()["job_id"], until={"completed", "failed"})["status"] == "completed"

        listed = client.get("/api/v1/library/jobs", params={"status": "completed"}).json()
        assert {j["job_id"] for j in listed} == {job_id, upload.json()["job_id"]}
        assert client.post(f"/api/v1/library/jobs/{job_id}/retry").status_code == 409
        missing = client.get("/api/v1/library/jobs/ingest_nope")
        assert missing.status_code == 404 and "ingest_nope" in missing.json()["message"]
        outside = client.post("/api/v1/library/ingest", data={"library_uid": library, "path": "/etc/hostname"})
        assert outside.status_code == 403
        both = client.post("/api/v1/library/ingest", data={"library_uid": library, "path": str(pdf), "s3_key": "x"})
        assert both.status_code == 422
        metrics = client.get("/metrics").text
        assert 'lorekeeper_ingest_jobs_total{status="completed"}' in metrics


def test_jobs_survive_a_restart(settings: Settings, books: Path) -> None:
    note = books / "note.md"
    note.write_text("# Harbour\n\nThe harbour master keeps a ledger of every ship.\n")
    with _client(settings, books, runner=False) as client:
        library = _library(client)
        job_id = client.post("/api/v1/library/ingest", data={"library_uid": library, "path": str(note)}).json()[
            "job_id"
        ]
        assert client.get(f"/api/v1/library/jobs/{job_id}").json()["status"] == "pending"
    # A new process: the pending job is found in the graph and run.
    with _client(settings, books) as client:
        assert _wait(client, job_id, until={"completed", "failed"})["status"] == "completed"


@pytest.fixture
def dead_text_port() -> int:
    return free_port()


def test_store_outage_fails_the_job_cleanly_and_retry_recovers(
    tmp_path: Path, books: Path, dead_text_port: int
) -> None:
    from osmem_server import resolve_binary

    settings = load_settings(
        data_dir=tmp_path / "data", text_url=f"http://127.0.0.1:{dead_text_port}", store_timeout_s=1.0
    )
    note = books / "storm.md"
    note.write_text("# Storms\n\nA tempest-caller bends the lightning of the Shattered Isles.\n")
    with _client(settings, books) as client:
        library = _library(client)
        job_id = client.post("/api/v1/library/ingest", data={"library_uid": library, "path": str(note)}).json()[
            "job_id"
        ]
        failed = _wait(client, job_id, until={"completed", "failed"})
        assert failed["status"] == "failed"
        assert "OpenSearch" in failed["error"] or "127.0.0.1" in failed["error"], failed["error"]
        if failed["item_uid"]:
            assert client.get(f"/api/v1/library/items/{failed['item_uid']}").json()["status"] != "ready"

        # The full-text store comes back on the same address; the retried job completes.
        folder = tmp_path / "osmem"
        folder.mkdir()
        server = start_osmem(resolve_binary(), dead_text_port, folder)
        try:
            assert client.post(f"/api/v1/library/jobs/{job_id}/retry").status_code == 202
            done = _wait(client, job_id, until={"completed", "failed"})
            assert done["status"] == "completed", done["error"]
        finally:
            server.stop()


@pytest.fixture(autouse=True)
def _ray_cleanup() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
