"""JSON ingest of an object held in a separate source bucket (a second S3 server with its own credentials).

Two nanio servers: the product's bucket (the session's server) and the source bucket (one started here, with
other credentials). A real corpus file placed in the source bucket is ingested through the JSON body on local
Ray; the job document is checked field by field, the copy in the product's layout byte for byte, and the
endpoint's and the copy's events in the structured log. A missing key, a size that disagrees, a read the
source refuses and a copy the product's bucket cannot take each fail the job with the reason and leave nothing
behind; the refused job, retried once the credentials are right, completes without duplicates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from jobs.api import create_app
from schemas.settings import Settings, load_settings
from stores.blob.s3 import S3BlobStore
from tests.corpus import corpus_file
from tests.fixtures.blob import NanioServer, drop_s3_buckets, running_nanio, unique_bucket
from tests.unit.ingest_log_support import json_logs_on_local_ray, read_lines, scrape, series, table

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

API = "/api/v1/library"
BOOK = "rulebooks/fate-srd/fate-accelerated-SRD.md"
PDF = "pdfs/py-pdf-sample-files/pdflatex-4-pages.pdf"


@pytest.fixture(scope="module")
def source_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NanioServer]:
    with running_nanio(tmp_path_factory.mktemp("source-nanio")) as server:
        yield server


class Buckets:
    """The product's and the source's bucket of one test, and the settings that name them."""

    def __init__(self, tmp_path: Path, product: NanioServer, source: NanioServer) -> None:
        self.tmp_path, self.product_server, self.source_server = tmp_path, product, source
        self.product_bucket, self.source_bucket = unique_bucket("prod"), unique_bucket("src")
        self.product: S3BlobStore = product.store(self.product_bucket)
        self.source: S3BlobStore = source.store(self.source_bucket)
        self.source.ensure_bucket()

    def settings(self, *, source_secret: str | None = None, executor: str = "auto") -> Settings:
        return load_settings(
            ingest_executor=executor,
            data_dir=self.tmp_path / "data",
            blob_url=f"s3://{self.product_bucket}?endpoint={self.product_server.url}&region=us-east-1",
            blob_access_key=self.product_server.access_key,
            blob_secret_key=self.product_server.secret_key,
            source_blob_url=f"s3://{self.source_bucket}?endpoint={self.source_server.url}&region=us-east-1",
            source_blob_access_key=self.source_server.access_key,
            source_blob_secret_key=source_secret or self.source_server.secret_key,
        )

    def product_keys(self) -> list[str]:
        return sorted(info.key for info in self.product.list("items/"))


@pytest.fixture
def buckets(tmp_path: Path, nanio_server: NanioServer, source_server: NanioServer) -> Iterator[Buckets]:
    made = Buckets(tmp_path, nanio_server, source_server)
    yield made
    drop_s3_buckets(made.product, [made.product_bucket])
    drop_s3_buckets(made.source, [made.source_bucket])
    made.product.close()
    made.source.close()


def _client(settings: Settings, root: Path, *, runner: bool) -> TestClient:
    return TestClient(create_app(settings, allowed_roots=[root], start_runner=runner))


def _wait(client: TestClient, job_id: str, *, timeout: float = 300.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"{API}/jobs/{job_id}").json()
        if job["status"] in ("completed", "failed"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job.get('status')} after {timeout}s")


def _library(client: TestClient, name: str, kind: str) -> str:
    response = client.post(f"{API}/libraries", json={"name": name, "type": kind})
    assert response.status_code == 201, response.text
    return str(response.json()["uid"])


def _events(logs: list[dict[str, Any]], name: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name and all(e.get(k) == v for k, v in match.items())]


def _one(logs: list[dict[str, Any]], name: str, **match: Any) -> dict[str, Any]:
    found = _events(logs, name, **match)
    assert len(found) == 1, f"{name} {match}: {len(found)} events"
    return found[0]


def _ingest_and_check(client: TestClient, buckets: Buckets, key: str, data: bytes) -> tuple[str, str, str]:
    """The JSON ingest of ``key`` (in the source bucket, holding ``data``) run to completion through the API;
    the job document checked field by field, the item, the copy byte for byte, the job list's filters.

    Returns:
        the job's id, the library's uid and the copy's key in the product's bucket.
    """
    library = _library(client, "fate", "rulebook")
    body = {
        "s3_key": key,
        "title": "Fate Accelerated",
        "library_uid": library,
        "collection_uid": None,
        "file_type": "text/markdown",
        "file_size": len(data),
        "source": "library-service",
        "source_ref": "doc-fae-1",
        "classification": "reference",
    }
    accepted = client.post(f"{API}/ingest", json=body)
    assert accepted.status_code == 202, accepted.text
    queued = accepted.json()
    assert queued["status"] == "pending" and queued["progress"] == "queued" and queued["item_uid"] is None
    job_id = queued["job_id"]
    job = _wait(client, job_id)
    assert job["status"] == "completed", job["error"]

    item_uid = job["item_uid"]
    raw_key = f"items/{item_uid}/original/fate-accelerated.md"
    expected = {
        "job_id": job_id,
        "status": "completed",
        "progress": "completed",
        "error": None,
        "retry_count": 0,
        "embedding_model": "all-MiniLM-L6-v2",
        "title": "Fate Accelerated",
        "file_type": "text/markdown",
        "file_size": len(data),
        "source": "library-service",
        "source_ref": "doc-fae-1",
        "s3_key": key,
        "source_bucket": buckets.source_bucket,
        "raw_key": raw_key,
        "origin": "source_bucket",
        "library_uid": library,
        "collection_uid": None,
        "classification": "reference",
    }
    assert {name: job[name] for name in expected} == expected
    assert job["chunks_created"] > 10 and job["concepts_extracted"] > 0
    assert job["progress_detail"]["fraction"] == 1.0
    assert job["created_at"] <= job["started_at"] <= job["completed_at"]

    item = client.get(f"{API}/items/{item_uid}").json()
    assert item["status"] == "ready" and item["title"] == "Fate Accelerated" and item["file_type"] == "markdown"
    assert item["classification"] == "reference"
    assert (item["source"], item["source_ref"], item["size_bytes"], item["raw_key"]) == (
        "library-service",
        "doc-fae-1",
        len(data),
        raw_key,
    )
    # the copy, byte for byte, in the product's layout; the source bucket holds what it held
    assert buckets.product.get(raw_key) == data
    keys = buckets.product_keys()
    assert [k for k in keys if "/original/" in k] == [raw_key]
    assert len([k for k in keys if "/chunks/" in k]) == job["chunks_created"]
    assert [info.key for info in buckets.source.list()] == [key]

    def listed(**params: str) -> list[str]:
        return [j["job_id"] for j in client.get(f"{API}/jobs", params=params).json()]

    assert listed(source="library-service") == [job_id]
    assert listed(source="library-service", status="completed") == [job_id]
    assert listed(source_ref="doc-fae-1") == [job_id]
    assert listed(source="another-service") == [] and listed(status="failed") == []
    return job_id, library, raw_key


def test_json_ingest_copies_from_the_source_bucket_and_completes(buckets: Buckets, tmp_path: Path) -> None:
    data = corpus_file(BOOK).read_bytes()
    key = "library-service/fate/fate-accelerated.md"
    buckets.source.put(key, data)
    settings = buckets.settings()
    with capture_logs() as logs, _client(settings, tmp_path, runner=True) as client:
        job_id, library, raw_key = _ingest_and_check(client, buckets, key, data)
    received = _one(logs, "ingest_request_received")
    assert {k: received[k] for k in ("s3_key", "title", "library_uid", "file_type", "source", "source_ref")} == {
        "s3_key": key,
        "title": "Fate Accelerated",
        "library_uid": library,
        "file_type": "text/markdown",
        "source": "library-service",
        "source_ref": "doc-fae-1",
    }
    assert _one(logs, "ingest_library_lookup")["library_type"] == "rulebook"
    assert _one(logs, "ingest_library_lookup")["found"] is True
    check = _one(logs, "ingest_s3_key_check")
    assert (check["s3_key"], check["exists"], check["bucket"]) == (key, True, buckets.source_bucket)
    dispatched = _one(logs, "ingest_task_dispatched")
    assert (dispatched["job_id"], dispatched["task_id"], dispatched["queue"]) == (job_id, job_id, "ingest-runner")
    start = _one(logs, "embed_s3_fetch_start", source_bucket=buckets.source_bucket)
    assert (start["s3_key"], start["job_id"], start["retry_count"]) == (key, job_id, 0)
    fetched = _one(logs, "embed_s3_fetch_complete", source_bucket=buckets.source_bucket)
    assert fetched["s3_key"] == key and fetched["file_size"] == len(data) and fetched["duration_ms"] >= 0
    copy = _one(logs, "s3_cross_bucket_copy_start")
    assert (copy["source_bucket"], copy["source_key"], copy["dest_bucket"], copy["dest_key"]) == (
        buckets.source_bucket,
        key,
        buckets.product_bucket,
        raw_key,
    )
    copied = _one(logs, "s3_cross_bucket_copy_complete")
    assert (copied["source_key"], copied["dest_key"], copied["file_size"]) == (key, raw_key, len(data))
    assert isinstance(copied["duration_ms"], int) and copied["log_level"] == "debug"
    assert not _events(logs, "embed_s3_fetch_failed") and not _events(logs, "s3_cross_bucket_copy_failed")
    # the runner's read of the source bucket, then the extract stage's of the copy in the product's
    reads = [(e["source_bucket"], e["s3_key"]) for e in _events(logs, "embed_s3_fetch_complete")]
    assert reads == [(buckets.source_bucket, key), (buckets.product_bucket, raw_key)], reads
    _as_the_table_says(logs, _table_rows(failed=False))


SOURCE_BUCKET_CHECKED = "source-bucket test"


def _table_rows(*, failed: bool) -> list[Any]:
    """The rows of docs/ingest-events.md this module checks: the endpoint's, the fetch's and the copy's
    events (the ``…_failed`` ones or the others)."""
    rows = [row for row in table().values() if row.checked_by(SOURCE_BUCKET_CHECKED)]
    assert len(rows) >= 11, "the table's source-bucket rows moved"
    return [row for row in rows if row.event.endswith("_failed") == failed]


def _as_the_table_says(logs: list[dict[str, Any]], rows: list[Any]) -> None:
    """Each row's event was logged, every time at the table's level and with every field it lists."""
    problems = []
    for row in rows:
        found = _events(logs, row.event)
        if not found:
            problems.append(f"{row.event}: not logged")
        for line in found:
            if line["log_level"] != row.level:
                problems.append(f"{row.event}: level {line['log_level']}, the table says {row.level}")
            missing = [name for name in row.fields if name not in line]
            if missing:
                problems.append(f"{row.event}: no {missing} in {sorted(line)}")
    assert problems == []


RAY_CHECKED = "source-bucket Ray test"
#: the rows of docs/ingest-events.md a source-bucket job that completes on Ray logs
RAY_ROWS = {
    "ingest_request_received",
    "ingest_s3_key_check",
    "ingest_library_lookup",
    "ingest_task_dispatched",
    "ingest_item_created",
    "embed_task_started",
    "embed_s3_fetch_start",
    "embed_s3_fetch_complete",
    "s3_cross_bucket_copy_start",
    "s3_cross_bucket_copy_complete",
    "embed_chunking_start",
    "embed_chunking_complete",
    "embed_concepts_start",
    "embed_concepts_complete",
    "embed_vectors_start",
    "embed_vectors_complete",
    "embed_graph_write_start",
    "embed_graph_write_complete",
    "embed_graph_build_start",
    "embed_graph_build_complete",
    "embed_job_completed",
}
#: a slice of the book, so the job is small (and would run in the API's process but for the setting)
RAY_SLICE_BYTES = 24_000


def test_json_ingest_from_the_source_bucket_on_ray_logs_each_event_from_its_process_and_exports_metrics(
    buckets: Buckets, tmp_path: Path
) -> None:
    """The JSON ingest of an object in the source bucket, sent to local Ray by LOREKEEPER_INGEST_EXECUTOR=ray,
    with JSON logs from the driver (the API and its runner) and every Ray worker, and Ray's metrics export."""
    import ray

    data = corpus_file(BOOK).read_bytes()[:RAY_SLICE_BYTES].rsplit(b"\n", 1)[0] + b"\n"
    key = "library-service/fate/fate-accelerated.md"
    buckets.source.put(key, data)
    logs = tmp_path / "logs"
    with (
        json_logs_on_local_ray(logs) as port,
        _client(buckets.settings(executor="ray"), tmp_path, runner=True) as client,
    ):
        job_id, library, raw_key = _ingest_and_check(client, buckets, key, data)
        chunks = client.get(f"{API}/jobs/{job_id}").json()["chunks_created"]
        driver_worker_id = ray.get_runtime_context().get_worker_id()
        exported = scrape(
            port,
            [
                "ray_lorekeeper_s3_operations_total",
                "ray_lorekeeper_embeddings_generated_total",
                "ray_lorekeeper_chunks_created_total",
                "ray_lorekeeper_ingest_jobs_total",
            ],
        )
    lines, driver = read_lines(logs), os.getpid()

    def logged(name: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in lines if e.get("event") == name and all(e.get(k) == v for k, v in match.items())]

    (chosen,) = logged("ingest_executor_chosen")
    assert (chosen["executor"], chosen["pid"]) == ("ray", driver), chosen
    rows = [row for row in table().values() if row.checked_by(RAY_CHECKED)]
    assert {row.event for row in rows} == RAY_ROWS, "the table's rows for this test moved"
    problems = []
    for row in rows:
        found = logged(row.event)
        if not found:
            problems.append(f"{row.event}: not logged")
            continue
        for line in found:
            if line["level"] != row.level:
                problems.append(f"{row.event}: level {line['level']}, the table says {row.level}")
            missing = [name for name in (*row.fields, "timestamp", "host", "pid", "logger") if name not in line]
            if missing:
                problems.append(f"{row.event}: no {missing} in {sorted(line)}")
            if "job_id" in row.fields and line["job_id"] != job_id:
                problems.append(f"{row.event}: job_id {line['job_id']}, not the job's {job_id}")
        pids = {line["pid"] for line in found}
        wanted = {
            "API": pids == {driver},
            "driver": pids == {driver},
            "worker": driver not in pids,
            "API, worker": driver in pids and len(pids) > 1,
        }[row.process]
        if not wanted:
            problems.append(f"{row.event}: logged by {pids} (the driver is {driver}), the table says {row.process}")
    assert problems == []

    # the runner's read of the source bucket in the driver, then the extract stage's of the copy on a worker
    reads = {(e["source_bucket"], e["s3_key"], e["pid"] == driver) for e in logged("embed_s3_fetch_complete")}
    assert reads == {(buckets.source_bucket, key, True), (buckets.product_bucket, raw_key, False)}, reads
    (copied,) = logged("s3_cross_bucket_copy_complete")
    copy = (copied["dest_bucket"], copied["dest_key"], copied["file_size"])
    assert copy == (buckets.product_bucket, raw_key, len(data))
    mine = [line for line in lines if line.get("job_id") == job_id]
    assert len({line["pid"] for line in mine}) >= 3  # the driver and the extract, embed and write actors
    (done,) = logged("embed_job_completed", job_id=job_id)
    assert done["chunks"] == chunks and done["item_uid"] == raw_key.split("/")[1]
    assert sum(e["chunks_written"] for e in logged("embed_graph_write_complete", job_id=job_id)) == chunks
    assert sum(e["chunks"] for e in logged("embed_vectors_complete", job_id=job_id)) == chunks
    assert logged("ingest_request_received")[0]["library_uid"] == library

    # the worker's series in Ray's export: S3 reads and writes, embeddings, chunks; the job's count (driver)
    samples = series(exported)

    def from_workers(name: str, **labels: str) -> float:
        return sum(
            value
            for metric, found, value in samples
            if metric == name
            and found.get("WorkerId") != driver_worker_id
            and all(found.get(k) == v for k, v in labels.items())
        )

    assert from_workers("ray_lorekeeper_s3_operations_total", operation="put", status="ok") >= chunks
    assert from_workers("ray_lorekeeper_s3_operations_total", operation="get", status="ok") >= 1
    assert from_workers("ray_lorekeeper_embeddings_generated_total") == chunks
    assert from_workers("ray_lorekeeper_chunks_created_total", library_type="rulebook") == chunks
    assert from_workers("ray_lorekeeper_embedding_duration_seconds_count") > 0
    jobs = {found["status"]: value for metric, found, value in samples if metric == "ray_lorekeeper_ingest_jobs_total"}
    assert jobs == {"completed": 1.0}, jobs


def _nothing_written(client: TestClient, buckets: Buckets) -> None:
    """No item, no chunk in the graph, no object under items/ in the product's bucket."""
    graph = client.app.state.ingest.graph  # type: ignore[attr-defined]
    assert graph.run("MATCH (i:Item) RETURN count(i) AS n")[0]["n"] == 0
    assert graph.run("MATCH (c:Chunk) RETURN count(c) AS n")[0]["n"] == 0
    assert buckets.product_keys() == []


def test_missing_resized_and_refused_objects_fail_the_job_and_a_retry_completes_once(
    buckets: Buckets, tmp_path: Path
) -> None:
    pdf = corpus_file(PDF).read_bytes()
    note = b"# Harbour\n\nThe harbour master keeps a ledger of every ship that docks at dusk.\n"
    buckets.source.put("in/rules.pdf", pdf)
    buckets.source.put("in/gone.md", note)
    buckets.source.put("in/resized.md", note)
    secret = buckets.source_server.secret_key
    good = buckets.settings()

    # A read the source refuses (a wrong secret): accepted, since the check could not be made; the job fails.
    refused_settings = buckets.settings(source_secret=secret[::-1])
    with capture_logs() as logs, _client(refused_settings, tmp_path, runner=False) as client:
        library = _library(client, "rules", "rulebook")
        body = {"library_uid": library, "source": "library-service", "file_size": len(pdf)}
        accepted = client.post(f"{API}/ingest", json={**body, "s3_key": "in/rules.pdf", "source_ref": "doc-1"})
        assert accepted.status_code == 202, accepted.text
        refused_id = accepted.json()["job_id"]
        client.app.state.ingest.runner.start()  # type: ignore[attr-defined] - the copy fails before any Ray work
        refused = _wait(client, refused_id)
        assert refused["status"] == "failed" and refused["progress"] == "failed"
        assert "refused the credentials" in refused["error"] and "LOREKEEPER_SOURCE_BLOB_ACCESS_KEY" in refused["error"]
        assert secret not in refused["error"] and secret[::-1] not in refused["error"]
        assert refused["started_at"] and refused["completed_at"] and refused["raw_key"] is None
        _nothing_written(client, buckets)
    assert _one(logs, "ingest_s3_key_check")["exists"] is None
    failed = _one(logs, "embed_s3_fetch_failed", job_id=refused_id)
    assert failed["s3_key"] == "in/rules.pdf" and failed["retry_count"] == 0 and "refused" in failed["error"]
    assert not _events(logs, "s3_cross_bucket_copy_start")
    failures = {row.event: row for row in _table_rows(failed=True)}
    assert set(failures) == {"embed_s3_fetch_failed", "s3_cross_bucket_copy_failed"}
    _as_the_table_says(logs, [failures["embed_s3_fetch_failed"]])

    # A copy the product's bucket cannot take (the bucket is gone): the job fails naming it, nothing is kept.
    with capture_logs() as logs, _client(good, tmp_path, runner=False) as client:
        note_job = {"library_uid": library, "s3_key": "in/gone.md", "file_size": len(note), "source_ref": "doc-2"}
        uncopied_id = client.post(f"{API}/ingest", json=note_job).json()["job_id"]
        drop_s3_buckets(buckets.product, [buckets.product_bucket])
        client.app.state.ingest.runner.start()  # type: ignore[attr-defined]
        uncopied = _wait(client, uncopied_id)
        buckets.product.ensure_bucket()
        assert uncopied["status"] == "failed" and "bucket does not exist" in uncopied["error"], uncopied["error"]
        _nothing_written(client, buckets)
    copy_failed = _one(logs, "s3_cross_bucket_copy_failed", job_id=uncopied_id)
    assert (copy_failed["source_bucket"], copy_failed["source_key"]) == (buckets.source_bucket, "in/gone.md")
    assert "bucket does not exist" in copy_failed["error"]
    assert not _events(logs, "s3_cross_bucket_copy_complete")
    _as_the_table_says(logs, [failures["s3_cross_bucket_copy_failed"]])

    # At the door: a missing key (404), a size that disagrees (400), a type that disagrees with the name (400).
    with _client(good, tmp_path, runner=False) as client:
        missing = client.post(f"{API}/ingest", json={**body, "s3_key": "in/nothing.md"})
        assert missing.status_code == 404 and "in/nothing.md" in missing.json()["message"]
        climbing = client.post(f"{API}/ingest", json={**body, "s3_key": "in/../rules.pdf"})
        assert climbing.status_code == 400 and "'..' segment" in climbing.json()["message"]
        wrong = client.post(f"{API}/ingest", json={**body, "s3_key": "in/gone.md"})
        assert wrong.status_code == 400 and f"file_size says {len(pdf)}" in wrong.json()["message"]
        typed = client.post(
            f"{API}/ingest", json={"library_uid": library, "s3_key": "in/gone.md", "file_type": "application/pdf"}
        )
        assert typed.status_code == 400 and "file_type" in typed.json()["message"]
        assert [j["job_id"] for j in client.get(f"{API}/jobs").json()] == [uncopied_id, refused_id]
        # Accepted, then the object goes away or changes before the job runs.
        size = {"file_size": len(note), "library_uid": library, "source": "library-service"}
        gone_id = client.post(f"{API}/ingest", json={**size, "s3_key": "in/gone.md"}).json()["job_id"]
        resized_id = client.post(f"{API}/ingest", json={**size, "s3_key": "in/resized.md"}).json()["job_id"]
    buckets.source.delete("in/gone.md")
    buckets.source.put("in/resized.md", note + b"A second ledger, kept by the smugglers.\n")

    with capture_logs() as logs, _client(good, tmp_path, runner=True) as client:
        gone = _wait(client, gone_id)
        assert gone["status"] == "failed" and "not found" in gone["error"] and "in/gone.md" in gone["error"]
        resized = _wait(client, resized_id)
        assert resized["status"] == "failed" and f"but file_size says {len(note)}" in resized["error"]
        _nothing_written(client, buckets)
        listed = {j["job_id"] for j in client.get(f"{API}/jobs", params={"status": "failed"}).json()}
        assert listed == {refused_id, uncopied_id, gone_id, resized_id}

        # The credentials are right now: the refused job, retried, completes once.
        retried = client.post(f"{API}/jobs/{refused_id}/retry")
        assert retried.status_code == 202 and retried.json()["progress"] == "queued"
        done = _wait(client, refused_id)
        assert done["status"] == "completed" and done["retry_count"] == 1 and done["error"] is None, done["error"]
        item_uid = done["item_uid"]
        raw_key = f"items/{item_uid}/original/rules.pdf"
        assert done["raw_key"] == raw_key and buckets.product.get(raw_key) == pdf
        ctx = client.app.state.ingest  # type: ignore[attr-defined]
        assert [i.uid for i in ctx.catalog.items_for_source(library, "doc-1")] == [item_uid]
        chunks = ctx.graph.run("MATCH (c:Chunk {item_uid: $u}) RETURN count(c) AS n", {"u": item_uid})[0]["n"]
        assert chunks == done["chunks_created"] > 0
        keys = buckets.product_keys()
        assert [k for k in keys if "/original/" in k] == [raw_key]
        assert len([k for k in keys if "/chunks/" in k]) == chunks
        assert ctx.graph.run("MATCH (i:Item) RETURN count(i) AS n")[0]["n"] == 1
    for job_id, text in ((gone_id, "not found"), (resized_id, "file_size says")):
        assert text in _one(logs, "embed_s3_fetch_failed", job_id=job_id)["error"]
    assert (
        _one(logs, "embed_s3_fetch_complete", job_id=refused_id, source_bucket=buckets.source_bucket)["retry_count"]
        == 1
    )
    assert _one(logs, "s3_cross_bucket_copy_complete", job_id=refused_id)["dest_key"] == raw_key


@pytest.fixture(autouse=True)
def _ray_cleanup() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
