"""The ingest job and the Serve application on a real two-node Ray cluster (marker ``cluster``).

One machine, two Ray nodes started as separate ``ray start`` processes (head and worker, 4 logical
CPUs and a custom resource each), and the stores as servers: S3 on nanio (SigV4), OpenSearch on
osmem-server, the graph on a FalkorDB server over Bolt (non-durable: FalkorDB 4.16's Bolt endpoint
crashes on writes with AOF on; reached through :mod:`tests.cluster.bolt_relay`). No Qdrant server
installs here, so the vector index is the embedded engine in a folder of the head, with the ingest's
single writer placed on the head (``lorekeeper_vector_writer``) and the Search replica there too.

The tests run in order and share the cluster: a local single-node run of the same files is the
reference; the cluster job must match it store by store; then a job whose worker node is SIGKILLed
mid-run must match it too; then the Serve config is deployed, answers a turn, and the replicas of a
killed worker node are replaced on the head. Run the lane with ``.ci/cluster``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.cluster.cluster import VECTOR_WRITER_RESOURCE, RayCluster, ray_env, store_snapshot
from tests.cluster.containers import make_cluster
from tests.servers import ServerProcess, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "rulebooks" / "fate-srd"
FILES = ["fate-accelerated-SRD.md", "Fate-Condensed-SRD-CC-BY.md"]
BOOKS_BUCKET = "lk-cluster-books"


@dataclass
class Lane:
    cluster: RayCluster
    env: dict[str, str]  # the LOREKEEPER_* settings of every Ray node
    root: Path
    local: dict[str, Any]  # store snapshot of the local single-node run, per file
    local_report: dict[str, Any]

    def settings(self) -> Any:
        return settings_of(self.env)


def settings_of(env: dict[str, str]) -> Any:
    from schemas.settings import Settings

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LOREKEEPER_")}
    os.environ.update(env)
    try:
        return Settings(_env_file=None)  # type: ignore[call-arg]
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


def _json_report(text: str) -> dict[str, Any]:
    line = next(ln for ln in text.splitlines() if ln.startswith('{"library_uid"'))
    return json.loads(line)


def _upload_books(nanio: Any) -> None:
    store = nanio.store(BOOKS_BUCKET)
    store.ensure_bucket()
    for name in FILES:
        store.put(f"fate/{name}", (CORPUS / name).read_bytes())
    store.close()


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory, nanio_server: Any, osmem_text_url: str) -> Iterator[Lane]:
    from stores.graph.falkordb import EmbeddedFalkorGraphStore, FalkorServer
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
    from tests.fixtures.graph import free_bolt_port

    missing = [name for name in FILES if not (CORPUS / name).is_file()]
    if missing:
        pytest.skip(f"corpus files missing under {CORPUS}: {missing}")
    root = tmp_path_factory.mktemp("cluster")
    timings: dict[str, float] = {}

    # 1. the reference: the same files, local Ray, embedded stores
    started = time.monotonic()
    local_env = {"LOREKEEPER_DATA_DIR": str(root / "local")}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOREKEEPER_", "RAY_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs",
            "ingest",
            *(str(CORPUS / f) for f in FILES),
            "--library",
            "fate-local",
            "--json",
        ],
        env={**env, **local_env, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    local_report = _json_report(done.stdout)
    local = store_snapshot(settings_of(local_env), "fate-local")
    timings["local run"] = time.monotonic() - started

    # 2. the store servers
    _upload_books(nanio_server)
    falkor = FalkorServer(root / "falkordb", durable=False, bolt_port=free_bolt_port(), start_timeout_s=30.0)
    falkor.acquire()
    relay: ServerProcess | None = None
    cluster: RayCluster | None = None
    try:
        admin = EmbeddedFalkorGraphStore(falkor.path)  # constraints need GRAPH.CONSTRAINT, not Bolt
        try:
            admin.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        finally:
            admin.close()
        relay_port = free_port()
        relay = ServerProcess(
            [sys.executable, "-m", "tests.cluster.bolt_relay", str(relay_port), str(falkor.bolt_port)],
            port=relay_port,
            log=root / "bolt-relay.log",
            cwd=ROOT,
        )
        stores_env = {
            "LOREKEEPER_DATA_DIR": str(root / "cluster-data"),
            "LOREKEEPER_BLOB_URL": f"s3://lk-cluster?endpoint={nanio_server.url}&region={nanio_server.region}",
            "LOREKEEPER_BLOB_ACCESS_KEY": nanio_server.access_key,
            "LOREKEEPER_BLOB_SECRET_KEY": nanio_server.secret_key,
            "LOREKEEPER_TEXT_URL": osmem_text_url,
            "LOREKEEPER_TEXT_INDEX": f"lk-cluster-{secrets.token_hex(4)}",
            "LOREKEEPER_VECTOR_URL": str(root / "head-vectors"),
            "LOREKEEPER_GRAPH_URL": f"bolt://127.0.0.1:{relay_port}",
            "LOREKEEPER_GRAPH_DIALECT": "falkordb",
            "LOREKEEPER_GRAPH_USERNAME": "falkordb",
            "LOREKEEPER_GRAPH_PASSWORD": str(falkor.password),
            "LOREKEEPER_STORE_TIMEOUT_S": "10",
            "LOREKEEPER_NARRATOR_ENGINE": "echo",
            "LOREKEEPER_NARRATOR_MODEL": "echo-on-cluster",
        }
        started = time.monotonic()
        cluster = make_cluster(root, ray_env(stores_env))  # processes, or containers (LK_CLUSTER_IMAGE)
        cluster.start_head()
        cluster.add_worker("worker1")
        timings["cluster start"] = time.monotonic() - started
        yield Lane(cluster, stores_env, root, {k: v for k, v in local.items()}, local_report)
    finally:
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.ray_cli("serve", "shutdown", "-y", "-a", cluster.dashboard, timeout=60, check=False)
            cluster.stop()
        if relay is not None:
            relay.stop()
        falkor.stop()
        print("timings:", {k: round(v, 1) for k, v in timings.items()})


def _submit(lane: Lane, submission_id: str, library: str) -> None:
    done = lane.cluster.ray_cli(
        "ray",
        "job",
        "submit",
        "--address",
        lane.cluster.dashboard,
        "--submission-id",
        submission_id,
        "--no-wait",
        "--",
        "python",
        "-m",
        "jobs",
        "ingest",
        f"s3://{BOOKS_BUCKET}/fate/",
        "--library",
        library,
        "--json",
        timeout=120,
    )
    assert submission_id in done.stdout + done.stderr


def _job_status(lane: Lane, submission_id: str) -> str:
    from ray.job_submission import JobSubmissionClient

    return str(JobSubmissionClient(lane.cluster.dashboard).get_job_status(submission_id).value)


def _wait_job(lane: Lane, submission_id: str, timeout: float = 600.0) -> dict[str, Any]:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(lane.cluster.dashboard)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = str(client.get_job_status(submission_id).value)
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            logs = client.get_job_logs(submission_id)
            assert status == "SUCCEEDED", logs[-5000:]
            return _json_report(logs)
        time.sleep(1)
    raise TimeoutError(f"job {submission_id} did not end within {timeout}s")


def _stage_nodes(lane: Lane, report: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {
        stage: {lane.cluster.node_name(node): rows for node, rows in nodes.items()}
        for stage, nodes in report["stage_nodes"].items()
    }


def _assert_matches_local(lane: Lane, report: dict[str, Any], library: str) -> None:
    local_chunks = {Path(f["source_ref"]).name: f["chunks"] for f in lane.local_report["files"]}
    chunks = {f["source_ref"].rsplit("/", 1)[-1]: f["chunks"] for f in report["files"]}
    assert [f["status"] for f in report["files"]] == ["completed"] * len(FILES), report["files"]
    assert chunks == local_chunks
    snapshot = store_snapshot(lane.settings(), library)
    assert sorted(snapshot) == sorted(lane.local)
    for name, records in snapshot.items():
        reference = lane.local[name]
        assert records.problems() == [], name  # every store holds every chunk exactly once
        assert records.graph == reference.graph, name  # same sequences, same chunk texts (hashes)
        n = len(reference.graph)
        assert (len(records.text), len(records.vector), len(records.blob)) == (n, n, n), name
        assert (len(reference.text), len(reference.vector), len(reference.blob)) == (n, n, n), name
        assert records.mentions == reference.mentions, name


def test_ingest_job_runs_on_both_nodes_and_matches_a_local_run(lane: Lane) -> None:
    _submit(lane, "lk-ingest-1", "fate-cluster")
    report = _wait_job(lane, "lk-ingest-1")
    nodes = _stage_nodes(lane, report)
    print("stage report:", nodes)
    assert set().union(*(set(n) for n in nodes.values())) == {"head", "worker1"}, nodes
    assert set(nodes["write"]) == {"head"}, nodes  # the single vector writer sits on the head
    _assert_matches_local(lane, report, "fate-cluster")


def test_killing_the_worker_node_mid_job_loses_and_duplicates_nothing(lane: Lane) -> None:
    from stores.factory import open_graph_store

    expected = sum(f["chunks"] for f in lane.local_report["files"])
    graph = open_graph_store(lane.settings())
    try:
        _submit(lane, "lk-ingest-kill", "fate-kill")
        extracted_query = (  # files whose extraction is done (their chunk rows are on their way to embedding)
            "MATCH (l:Library {name: 'fate-kill'}) MATCH (i:Item {library_uid: l.uid}) "
            "WHERE i.chunk_count IS NOT NULL RETURN count(i) AS n"
        )
        count_query = (
            "MATCH (l:Library {name: 'fate-kill'}) MATCH (i:Item {library_uid: l.uid})-[:HAS_CHUNK]->(c:Chunk) "
            "RETURN count(c) AS n"
        )
        deadline, on_worker = time.monotonic() + 300, []
        while time.monotonic() < deadline:
            assert _job_status(lane, "lk-ingest-kill") in ("PENDING", "RUNNING")
            on_worker = [a for a in _stage_actors(lane) if a["node"] == "worker1"]
            if on_worker and int(graph.run(extracted_query)[0]["n"]) > 0:
                break
            time.sleep(0.3)
        written = int(graph.run(count_query)[0]["n"])
        assert on_worker and written < expected, f"{written} of {expected} chunks written, worker held {on_worker}"
        killed = lane.cluster.kill_worker("worker1")
        dead_after = lane.cluster.wait_node_dead("worker1")
        print(
            f"killed worker1 ({len(killed)} processes) holding {[a['stage'] for a in on_worker]} with "
            f"{written}/{expected} chunks written; declared dead after {dead_after:.1f}s"
        )
        report = _wait_job(lane, "lk-ingest-kill")
    finally:
        graph.close()
    nodes = _stage_nodes(lane, report)
    print("stage report after the kill:", nodes)
    _assert_matches_local(lane, report, "fate-kill")


def _stage_actors(lane: Lane) -> list[dict[str, str]]:
    """Alive actors of the ingest stages, with their node."""
    from ray.util.state import list_actors

    out = []
    for actor in list_actors(address=lane.cluster.dashboard, filters=[("state", "=", "ALIVE")], limit=1000):
        name = actor.class_name or ""
        for stage in ("ExtractStage", "EmbedStage", "WriteStage"):
            if stage in name:
                out.append({"stage": stage, "node": lane.cluster.node_name(actor.node_id or "")})
    return out


# -- Serve ------------------------------------------------------------------------------------------


def _serve_config(port: int) -> dict[str, Any]:
    """cluster/serve-config.yaml, adapted to two nodes on one machine and the embedded vector index."""
    config = yaml.safe_load((ROOT / "cluster" / "serve-config.yaml").read_text())
    # one machine: every node's proxy would want the same port; the head's proxy serves it
    config["proxy_location"] = "HeadOnly"
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    for deployment in config["applications"][0]["deployments"]:
        name = deployment["name"]
        if name == "Narrator":  # two, so both nodes hold one (the code's autoscaling wins over num_replicas)
            deployment["autoscaling_config"].update(min_replicas=2, max_replicas=2)
            deployment["ray_actor_options"]["num_cpus"] = 0.5
        if name == "Search":  # the embedded vector index is one process's, on the head
            deployment.pop("autoscaling_config", None)
            deployment["num_replicas"] = 1
            deployment["ray_actor_options"]["resources"] = {VECTOR_WRITER_RESOURCE: 0.001}
    return config


def _replicas(lane: Lane) -> list[dict[str, str]]:
    """Alive Serve replicas: deployment, actor id and node name."""
    from ray.util.state import list_actors

    actors = list_actors(address=lane.cluster.dashboard, filters=[("state", "=", "ALIVE")], limit=1000)
    out = []
    for actor in actors:
        name = actor.class_name or ""
        if name.startswith("ServeReplica:lorekeeper:"):
            out.append(
                {
                    "deployment": name.rsplit(":", 1)[-1],
                    "actor": actor.actor_id,
                    "node": lane.cluster.node_name(actor.node_id or ""),
                }
            )
    return sorted(out, key=lambda r: (r["deployment"], r["node"]))


def _wait_serving(lane: Lane, url: str, wanted: dict[str, int], timeout: float = 300.0) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    replicas: list[dict[str, str]] = []
    status = subprocess.CompletedProcess([], 0, "", "")
    while time.monotonic() < deadline:
        status = lane.cluster.ray_cli("serve", "status", "-a", lane.cluster.dashboard, timeout=60, check=False)
        try:
            doc = yaml.safe_load(status.stdout) or {}
        except yaml.YAMLError:
            doc = {}
        app = (doc.get("applications") or {}).get("lorekeeper") or {}
        if app.get("status") == "DEPLOY_FAILED":
            raise AssertionError(status.stdout[-4000:])
        healthy = app.get("status") == "RUNNING" and all(
            d.get("status") == "HEALTHY" for d in (app.get("deployments") or {}).values()
        )
        replicas = _replicas(lane)
        counts: dict[str, int] = {}
        for r in replicas:
            counts[r["deployment"]] = counts.get(r["deployment"], 0) + 1
        if healthy and counts == wanted:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=10).status_code == 200:
                    return replicas
        time.sleep(2)
    raise TimeoutError(f"serve not healthy with {wanted}: {replicas}\n{status.stdout[-3000:]}")


def _play_turn(url: str, text: str) -> dict[str, Any]:
    from tests.unit.serve_support import sse_events

    with httpx.Client(base_url=url, timeout=120) as http:
        world = http.post("/api/v1/worlds", json={"name": f"Cluster {text}"})
        assert world.status_code in (200, 201), world.text
        body = {"world_id": world.json()["id"], "name": "Two nodes", "profile": {"genre": "mystery"}}
        campaign = http.post("/api/v1/campaigns", json=body)
        assert campaign.status_code in (200, 201), campaign.text
        streamed = http.post(f"/api/v1/campaigns/{campaign.json()['id']}/turns", json={"text": text, "stream": True})
        assert streamed.status_code == 200, streamed.text
        events = sse_events(streamed.text)
        assert events[-1][0] == "done", streamed.text
        done = events[-1][1]
        assert text in done["narration"] and done["generation"]["model"] == "echo-on-cluster"
        search = http.post("/api/v1/search", json={"query": "how do fate points refresh"})
        assert search.status_code == 200, search.text
        return {"turn": done, "hits": search.json()["hits"]}


def test_serve_deploy_answers_a_turn_and_replaces_the_replicas_of_a_killed_node(lane: Lane) -> None:
    lane.cluster.add_worker("worker2")  # worker1 was killed by the previous test
    port = free_port()
    config_path = lane.root / "serve-config.yaml"
    config_path.write_text(yaml.safe_dump(_serve_config(port), sort_keys=False))
    url = f"http://127.0.0.1:{port}"
    lane.cluster.ray_cli("serve", "deploy", str(config_path), "-a", lane.cluster.dashboard, timeout=120)
    wanted = {"Ingress": 2, "Narrator": 2, "Search": 1, "Gate": 1}
    before = _wait_serving(lane, url, wanted)
    print("replicas before:", before)
    on_worker = [r for r in before if r["node"] == "worker2"]
    assert on_worker, f"no replica on the worker: {before}"
    assert [r["node"] for r in before if r["deployment"] == "Search"] == ["head"]
    first = _play_turn(url, "I knock twice.")
    assert first["hits"], "search found nothing in the ingested rulebooks"

    lane.cluster.kill_worker("worker2")
    lane.cluster.wait_node_dead("worker2")
    after = _wait_serving(lane, url, wanted)
    print("replicas after:", after)
    assert {r["node"] for r in after} == {"head"}
    lost = {r["actor"] for r in on_worker}
    assert not lost & {r["actor"] for r in after}
    for deployment in {r["deployment"] for r in on_worker}:  # replaced, not just gone
        assert sum(r["deployment"] == deployment for r in after) == wanted[deployment]
    _play_turn(url, "I knock again.")
