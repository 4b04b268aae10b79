"""Every named event of a real ingest and a real MCP search, checked against docs/ingest-events.md, and the
ingest, S3 and embedding series a Ray worker exports, scraped from Ray's metrics port.

One run: JSON logs (DEBUG) to a folder, one file per process; local Ray started with its metrics export
on a free port and the driver's log configuration as the workers' setup hook; the product's bucket on
nanio (so object-store calls are counted); an ingest on Ray of a slice of a corpus rulebook and of a
corrupt PDF; then ``search_knowledge`` through the MCP SDK's client against the API on the same stores.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobs.pipeline import IngestReport, run_ingest
from jobs.plan import IngestExecutor, IngestOptions
from schemas.knowledge import LibraryType
from tests.corpus import corpus_file
from tests.fixtures.blob import NanioServer, unique_bucket
from tests.unit.ingest_log_support import (
    RAY_EXPORT,
    ROOT,
    json_logs_on_local_ray,
    read_lines,
    scrape,
    series,
    table,
)

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

SLICE_BYTES = 12_000


def test_the_table_lists_every_contract_event() -> None:
    contract = (ROOT.parent / "shared" / "docs" / "ingest-contract.md").read_text()
    named = set(re.findall(r"^- `([a-z0-9_]+)`", contract, flags=re.MULTILINE))
    assert len(named) > 30, "the contract's event list moved"
    # the contract writes a trio once (`embed_graph_write_start` / `_complete` / `_failed`)
    for trio in re.findall(r"^- `([a-z0-9_]+)_start` /", contract, flags=re.MULTILINE):
        named |= {f"{trio}_start", f"{trio}_complete"} | ({f"{trio}_failed"} if "write" in trio else set())
    renamed = {"mcp_neo4j_query": "mcp_graph_query"}
    assert {renamed.get(name, name) for name in named} - set(table()) == set()


# -- one real run ----------------------------------------------------------------------------------------


@dataclass
class Run:
    report: IngestReport
    lines: list[dict[str, Any]]
    driver_pid: int
    scrape: str
    driver_worker_id: str
    search: dict[str, Any]
    replica_scrape: str


REPLICA_QUERY = "What is a stunt?"


def _search_replica(settings: Any, port: int, driver_worker_id: str) -> str:
    """The Search deployment alone on Ray Serve, asked once; Ray's export once its series are in."""
    from ray import serve

    from serve.deployments import SearchReplica

    handle = serve.run(serve.deployment(SearchReplica).bind(settings), name="search-events", route_prefix=None)
    try:
        assert handle.search.remote(REPLICA_QUERY).result()
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            text = scrape(port, ["ray_lorekeeper_search_results_total"], timeout_s=5)
            if any(
                metric == "ray_lorekeeper_search_duration_seconds_count" and labels.get("WorkerId") != driver_worker_id
                for metric, labels, _ in series(text)
            ):
                break
            time.sleep(1)
        return text
    finally:
        serve.shutdown()


async def _mcp_search(url: str) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    async with (
        create_mcp_http_client() as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        result = await client.call_tool("search_knowledge", {"query": "How do aspects and fate points work?"})
        assert not result.isError, result.content
        return json.loads(result.content[0].text)  # type: ignore[union-attr]


def _books(folder: Path) -> Path:
    folder.mkdir()
    text = corpus_file("rulebooks/fate-srd/fate-accelerated-SRD.md").read_bytes()[:SLICE_BYTES]
    (folder / "fate-accelerated-opening.md").write_bytes(text.rsplit(b"\n", 1)[0] + b"\n")
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, nanio_server: NanioServer) -> Iterator[Run]:
    import ray

    from schemas.settings import get_settings
    from serve.app import create_app
    from tests.unit.serve_support import api_services, running

    root = tmp_path_factory.mktemp("events")
    books, logs = _books(root / "books"), root / "logs"
    env = {
        "LOREKEEPER_DATA_DIR": str(root / "data"),
        "LOREKEEPER_BLOB_URL": f"s3://{unique_bucket('events')}?endpoint={nanio_server.url}&region=us-east-1",
        "LOREKEEPER_BLOB_ACCESS_KEY": nanio_server.access_key,
        "LOREKEEPER_BLOB_SECRET_KEY": nanio_server.secret_key,
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    settings = get_settings()
    try:
        with json_logs_on_local_ray(logs) as port:
            # a small job may run in-process where the executor is chosen by size; this one is about Ray
            options = IngestOptions(library="fate", library_type=LibraryType.RULEBOOK, executor=IngestExecutor.RAY)
            report = run_ingest([str(books)], options, settings=settings)
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
            with api_services() as services, running(create_app(services)) as url:
                search = anyio.run(_mcp_search, url)
            replica_scrape = _search_replica(settings, port, driver_worker_id)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    lines = read_lines(logs)  # every line of every process is one JSON object
    yield Run(report, lines, os.getpid(), exported, driver_worker_id, search, replica_scrape)


def _events(run: Run, name: str) -> list[dict[str, Any]]:
    return [line for line in run.lines if line.get("event") == name]


def test_the_run_did_what_the_events_describe(run: Run) -> None:
    outcomes = {Path(f.source_ref).name: f for f in run.report.files}
    assert outcomes["fate-accelerated-opening.md"].status == "completed", outcomes
    assert outcomes["corrupt.pdf"].status == "failed"
    assert run.report.executor == "ray" if hasattr(run.report, "executor") else True
    assert run.search["hits"], run.search


def test_every_checked_event_is_logged_with_its_fields(run: Run) -> None:
    problems = []
    for row in table().values():
        if not row.checked_by("yes"):
            continue
        found = _events(run, row.event)
        if not found:
            problems.append(f"{row.event}: not logged")
            continue
        for line in found:
            if line["level"] != row.level:
                problems.append(f"{row.event}: level {line['level']}, the table says {row.level}")
            missing = [name for name in row.fields if name not in line]
            if missing:
                problems.append(f"{row.event}: no {missing} in {sorted(line)}")
            for shape in ("timestamp", "host", "pid", "logger"):
                if shape not in line:
                    problems.append(f"{row.event}: the line has no {shape}")
        pids = {line["pid"] for line in found}
        if row.process == "worker" and run.driver_pid in pids:
            problems.append(f"{row.event}: logged by the driver, the table says a Ray worker")
        if row.process in ("driver", "API") and pids != {run.driver_pid}:
            problems.append(f"{row.event}: logged by {pids}, the table says the driver ({run.driver_pid})")
        if row.process == "Search" and run.driver_pid not in pids:  # the API in this process, and the replica
            problems.append(f"{row.event}: not logged by the API's search in this process")
    assert problems == []


def test_one_jobs_lines_are_found_by_its_id_across_processes(run: Run) -> None:
    completed = next(f for f in run.report.files if f.status == "completed")
    lines = [line for line in run.lines if line.get("job_id") == completed.job_id]
    by_event = {line["event"] for line in lines}
    assert {
        "embed_task_started",
        "embed_chunking_complete",
        "embed_concepts_complete",
        "embed_vectors_complete",
        "embed_graph_write_complete",
        "embed_graph_build_complete",
        "embed_job_completed",
    } <= by_event, by_event
    assert len({line["pid"] for line in lines}) >= 3  # the driver and the extract, embed and write actors
    # once the item is known, every line of the job names it
    assert {line.get("item_uid") for line in lines if line["event"] != "embed_task_started"} == {completed.item_uid}
    done = _events(run, "embed_job_completed")[0]
    assert done["chunks"] == completed.chunks > 0 and done["total_duration_ms"] > 0
    assert sum(line["chunks_written"] for line in lines if line["event"] == "embed_graph_write_complete") == (
        completed.chunks
    )
    assert sum(line["chunks"] for line in lines if line["event"] == "embed_vectors_complete") == completed.chunks


def test_a_failed_file_names_its_error(run: Run) -> None:
    failed = next(f for f in run.report.files if f.status == "failed")
    chunking = [line for line in _events(run, "embed_chunking_failed") if line["job_id"] == failed.job_id]
    job = [line for line in _events(run, "embed_job_failed") if line["job_id"] == failed.job_id]
    assert len(chunking) == 1 and chunking[0]["file_type"] == "pdf"
    assert len(job) == 1 and job[0]["traceback"] and job[0]["error"] and job[0]["exception_type"]


def test_the_mcp_search_events_carry_the_call(run: Run) -> None:
    (called,) = _events(run, "mcp_tool_called")
    assert called["tool"] == "search_knowledge" and called["arguments"]["query"].startswith("How do aspects")
    call_id = called["mcp_call_id"]
    for event in ("mcp_search_vector_query", "mcp_search_vector_results", "mcp_graph_traverse", "mcp_tool_response"):
        mine = [line for line in _events(run, event) if line["pid"] == run.driver_pid]  # not the replica's search
        assert [line.get("mcp_call_id") for line in mine] == [call_id], event
    results = next(line for line in _events(run, "mcp_search_vector_results") if line["pid"] == run.driver_pid)
    assert results["candidates"] > 0 and results["top_score"] >= results["lowest_score"]
    response = _events(run, "mcp_tool_response")[0]
    assert response["items"] == len(run.search["hits"]) and response["bytes"] > 0 and response["status"] == "ok"
    traverse = next(line for line in _events(run, "mcp_graph_traverse") if line["pid"] == run.driver_pid)
    assert traverse["start_nodes"] and traverse["nodes_visited"] >= len(traverse["start_nodes"])


# -- metrics from the workers ----------------------------------------------------------------------------


def test_workers_series_reach_rays_metrics_export(run: Run) -> None:
    samples = series(run.scrape)

    def from_workers(name: str, **labels: str) -> float:
        return sum(
            value
            for metric, found, value in samples
            if metric == name
            and found.get("WorkerId") != run.driver_worker_id
            and all(found.get(k) == v for k, v in labels.items())
        )

    completed = next(f for f in run.report.files if f.status == "completed")
    assert from_workers("ray_lorekeeper_s3_operations_total", operation="put", status="ok") >= completed.chunks
    assert from_workers("ray_lorekeeper_embeddings_generated_total") == completed.chunks
    assert from_workers("ray_lorekeeper_chunks_created_total", library_type="rulebook") == completed.chunks
    assert from_workers("ray_lorekeeper_embedding_duration_seconds_count") > 0
    # the job counts are the driver's (on Ray, so exported too)
    jobs = {found["status"]: value for metric, found, value in samples if metric == "ray_lorekeeper_ingest_jobs_total"}
    assert jobs == {"completed": 1.0, "failed": 1.0}


def test_the_exported_names_are_the_dashboards_after_the_charts_rename(run: Run) -> None:
    from tests.unit.test_deploy_grafana import code_metrics, series_names

    exported = {RAY_EXPORT.sub(r"\1", metric) for metric, _, _ in series(run.scrape) if RAY_EXPORT.match(metric)}
    assert exported, "no lorekeeper series in Ray's export"
    known = series_names()
    assert exported <= set(known), exported - set(known)
    # and each carries the labels the code gives it (Ray adds its own)
    for metric, labels, _ in series(run.scrape):
        name = RAY_EXPORT.sub(r"\1", metric)
        if name in known:
            assert code_metrics()[known[name]][1] <= set(labels), (metric, labels)


def test_a_search_replicas_series_and_lines_reach_the_scrape_and_the_log(run: Run) -> None:
    """What the Search replica on Ray Serve counts is in Ray's export (per leg, results, whole searches), and
    it logs the same JSON lines as the driver, to its own file."""
    replica = {
        (metric, labels.get("search_type")): value
        for metric, labels, value in series(run.replica_scrape)
        if labels.get("WorkerId") != run.driver_worker_id and metric.startswith("ray_lorekeeper_search_")
    }
    for leg in ("vector", "text", "hybrid"):
        assert replica.get(("ray_lorekeeper_search_duration_seconds_count", leg)) == 1.0, (leg, replica)
    assert replica.get(("ray_lorekeeper_search_results_total", "hybrid"), 0) > 0
    asked = [line for line in _events(run, "mcp_search_vector_query") if line["query"] == REPLICA_QUERY]
    assert len(asked) == 1 and asked[0]["pid"] != run.driver_pid and asked[0]["level"] == "debug"
