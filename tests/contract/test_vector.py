"""The vector contract on every backend that runs here, plus backend-specific behaviour.

- qdrant-client local mode in memory and in a folder;
- qdrant-edge shards in a folder (crash recovery, threads, the single-process lock, optimization);
- a real Qdrant server when LOREKEEPER_VECTOR_URL is http(s) (``integration``; none installs here);
- congruence: local mode and edge answer the same top-k on the same fixture, exactly without HNSW
  and with recall >= 0.95 against numpy brute force with HNSW;
- a server that is down or silent answers Unavailable within its timeout, naming store and URL only.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from schemas.errors import ConfigError, InvalidRequest, Unavailable
from schemas.search import SearchFilters
from schemas.settings import VectorBackend, VectorLocation, load_settings
from stores.vector.base import VectorPoint, VectorSpace
from stores.vector.edge import SHARD_DIR, SPACE_FILE, QdrantEdgeVectorIndex
from stores.vector.qdrant import QdrantVectorIndex
from tests.contract.vector_contract import SPACE, VectorIndexContract, hit_ids
from tests.fixtures.vector import DIM, make_points, unique_collection
from tests.servers import free_port

pytestmark = pytest.mark.contract

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with the project importable (a second process, a crash)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


class TestQdrantLocalMemory(VectorIndexContract):
    persistent = False

    @pytest.fixture
    def vectors(self, qdrant_memory_index: QdrantVectorIndex) -> QdrantVectorIndex:
        return qdrant_memory_index

    def test_large_collection_warns_once(self) -> None:
        index = QdrantVectorIndex(large_collection_points=50)
        index.ensure_collection("big", SPACE)
        points = make_points(120)
        with capture_logs() as logs:
            index.upsert("big", points[:40])
            index.upsert("big", points[40:80])
            index.upsert("big", points[80:])
        warnings = [e for e in logs if e["event"] == "vector_local_mode_large"]
        assert len(warnings) == 1
        assert warnings[0]["collection"] == "big" and warnings[0]["points"] == 80
        assert warnings[0]["log_level"] == "warning"


class TestQdrantLocalPath(VectorIndexContract):
    persistent = True

    @pytest.fixture
    def vectors(self, qdrant_path_index: QdrantVectorIndex) -> QdrantVectorIndex:
        return qdrant_path_index

    def test_reopen_in_a_new_object_keeps_data(self, qdrant_path_index: QdrantVectorIndex) -> None:
        points = make_points(30)
        qdrant_path_index.ensure_collection("keep", SPACE)
        qdrant_path_index.upsert("keep", points)
        qdrant_path_index.close()
        reopened = QdrantVectorIndex(path=qdrant_path_index.path)
        try:
            assert reopened.count("keep") == 30
            assert hit_ids(reopened.search("keep", points[4].vector, limit=1)) == [points[4].id]
        finally:
            reopened.close()

    def test_second_process_is_unavailable(self, qdrant_path_index: QdrantVectorIndex) -> None:
        qdrant_path_index.ensure_collection("locked", SPACE)
        result = run_python(f"""
            from schemas.errors import Unavailable
            from stores.vector.qdrant import QdrantVectorIndex
            try:
                QdrantVectorIndex(path={str(qdrant_path_index.path)!r}).collections()
            except Unavailable as exc:
                print("UNAVAILABLE", exc)
        """)
        assert "UNAVAILABLE" in result.stdout, result.stderr
        assert "another process" in result.stdout


class TestQdrantEdge(VectorIndexContract):
    persistent = True

    @pytest.fixture
    def vectors(self, edge_index: QdrantEdgeVectorIndex) -> QdrantEdgeVectorIndex:
        return edge_index

    def test_layout_is_one_shard_folder_per_collection(self, edge_index: QdrantEdgeVectorIndex) -> None:
        edge_index.ensure_collection("one", SPACE)
        edge_index.ensure_collection("two", VectorSpace(name="other", dim=3))
        for name in ("one", "two"):
            assert (edge_index.path / name / SPACE_FILE).is_file()
            assert (edge_index.path / name / SHARD_DIR / "wal").is_dir()
        assert edge_index.space("two") == VectorSpace(name="other", dim=3)

    def test_reopen_in_a_new_object_keeps_data_and_space(self, edge_index: QdrantEdgeVectorIndex) -> None:
        points = make_points(50)
        edge_index.ensure_collection("keep", SPACE)
        edge_index.upsert("keep", points)
        edge_index.delete("keep", [points[0].id])
        edge_index.close()
        reopened = QdrantEdgeVectorIndex(edge_index.path)
        try:
            assert reopened.collections() == ["keep"]
            assert reopened.space("keep") == SPACE
            assert reopened.count("keep") == 49
            assert reopened.count("keep", SearchFilters(library="lib-b")) == sum(
                1 for p in points[1:] if p.payload["library"] == "lib-b"
            )
            assert hit_ids(reopened.search("keep", points[5].vector, limit=1)) == [points[5].id]
        finally:
            reopened.close()

    def test_killed_process_recovers_from_the_wal(self, tmp_path: Path) -> None:
        folder = tmp_path / "crash"
        result = run_python(f"""
            import os
            from stores.vector.base import VectorSpace
            from stores.vector.edge import QdrantEdgeVectorIndex
            from schemas.search import SearchFilters
            from tests.fixtures.vector import make_points, DIM
            index = QdrantEdgeVectorIndex({str(folder)!r})
            index.ensure_collection("c", VectorSpace(dim=DIM))
            points = make_points(200)
            index.upsert("c", points[:120])
            index.upsert("c", points[120:])
            index.delete("c", [points[0].id, points[1].id])
            index.delete_by_filter("c", SearchFilters(item="item-3"))
            print("COUNT", index.count("c"), flush=True)
            os._exit(0)  # no close(), no flush: only the write-ahead log has the data
        """)
        assert result.returncode == 0, result.stderr
        written = int(result.stdout.split("COUNT")[1].split()[0])
        index = QdrantEdgeVectorIndex(folder)
        try:
            assert index.count("c") == written
            assert index.count("c", SearchFilters(item="item-3")) == 0
            assert index.get("c", ["chunk-0", "chunk-1"]) == []
            points = make_points(200)
            assert hit_ids(index.search("c", points[150].vector, limit=1)) == ["chunk-150"]
        finally:
            index.close()

    def test_second_process_is_unavailable(self, edge_index: QdrantEdgeVectorIndex) -> None:
        edge_index.ensure_collection("locked", SPACE)
        edge_index.upsert("locked", make_points(5))
        result = run_python(f"""
            from schemas.errors import Unavailable
            from stores.vector.edge import QdrantEdgeVectorIndex
            try:
                QdrantEdgeVectorIndex({str(edge_index.path)!r}).count("locked")
            except Unavailable as exc:
                print("UNAVAILABLE", exc)
        """)
        assert "UNAVAILABLE" in result.stdout, result.stderr
        assert "another process" in result.stdout

    def test_half_created_collection_is_rebuilt(self, edge_index: QdrantEdgeVectorIndex) -> None:
        (edge_index.path / "half" / SHARD_DIR / "segments").mkdir(parents=True)  # no space.json
        assert "half" not in edge_index.collections()
        edge_index.ensure_collection("half", SPACE)
        edge_index.upsert("half", make_points(3))
        assert edge_index.count("half") == 3

    def test_threads_share_one_index(self, edge_index: QdrantEdgeVectorIndex) -> None:
        edge_index.ensure_collection("busy", SPACE)
        base = make_points(60)
        edge_index.upsert("busy", base)
        errors: list[BaseException] = []

        def writer(offset: int) -> None:
            try:
                for n in range(10):
                    batch = [p.model_copy(update={"id": f"w{offset}-{n}-{p.id}"}) for p in base[n * 6 : n * 6 + 6]]
                    edge_index.upsert("busy", batch)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        def reader() -> None:
            try:
                for point in base[:40]:
                    assert edge_index.search("busy", point.vector, limit=3)
                    edge_index.count("busy", SearchFilters(library="lib-a"))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        def optimizer() -> None:
            try:
                for _ in range(3):
                    edge_index.optimize("busy")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
        threads += [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=optimizer)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert edge_index.count("busy") == 60 + 3 * 60

    def test_threads_opening_a_collection_at_once(self, edge_index: QdrantEdgeVectorIndex) -> None:
        edge_index.ensure_collection("shared", SPACE)
        edge_index.upsert("shared", make_points(10))
        edge_index.close()
        counts: list[int] = []
        threads = [threading.Thread(target=lambda: counts.append(edge_index.count("shared"))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert counts == [10] * 8

    def test_upsert_optimizes_past_the_threshold(self, tmp_path: Path) -> None:
        index = QdrantEdgeVectorIndex(
            tmp_path / "opt", optimize_every=100, indexing_threshold_kb=1, full_scan_threshold_kb=1
        )
        try:
            index.ensure_collection("c", SPACE)
            points = make_points(250)
            with capture_logs() as logs:
                index.upsert("c", points[:90])
                assert not [e for e in logs if e["event"] == "vector_edge_optimized"]
                index.upsert("c", points[90:])
            assert [e for e in logs if e["event"] == "vector_edge_optimized"]
            assert index.count("c") == 250
            assert hit_ids(index.search("c", points[17].vector, limit=1)) == [points[17].id]
        finally:
            index.close()

    @pytest.mark.parametrize(("in_ram", "storage"), [(True, "in_ram_mmap"), (False, "mmap")])
    def test_payloads_kept_in_ram_unless_asked(self, tmp_path: Path, in_ram: bool, storage: str) -> None:
        index = QdrantEdgeVectorIndex(tmp_path / "ram", payload_in_ram=in_ram, optimize_every=None)
        try:
            index.ensure_collection("c", SPACE)
            points = make_points(40)
            index.upsert("c", points)
            index.optimize("c")
        finally:
            index.close()
        segments = (tmp_path / "ram" / "c" / SHARD_DIR / "segments").glob("*/segment.json")
        assert {json.loads(s.read_text())["config"]["payload_storage_type"]["type"] for s in segments} == {storage}
        reopened = QdrantEdgeVectorIndex(tmp_path / "ram")
        try:  # the payloads survive a reopen either way
            assert reopened.get("c", [points[3].id])[0].payload == points[3].payload
        finally:
            reopened.close()

    def test_needs_a_folder(self) -> None:
        with pytest.raises(ConfigError):
            QdrantEdgeVectorIndex(":memory:")
        with pytest.raises(ConfigError):
            QdrantEdgeVectorIndex.from_location(VectorLocation(backend=VectorBackend.QDRANT_LOCAL))


@pytest.mark.integration
class TestQdrantServer(VectorIndexContract):
    persistent = True

    @pytest.fixture
    def vectors(self, qdrant_server_index: QdrantVectorIndex) -> QdrantVectorIndex:
        return qdrant_server_index


# -- congruence -----------------------------------------------------------------------------------


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(24, dim))
    return centres[rng.integers(0, 24, n)] + 0.45 * rng.normal(size=(n, dim))


def _load(index: QdrantVectorIndex | QdrantEdgeVectorIndex, data: np.ndarray, space: VectorSpace) -> str:
    name = unique_collection("congruence")
    index.ensure_collection(name, space)
    libraries = ["lib-a", "lib-b", "lib-c"]
    index.upsert(
        name,
        [
            VectorPoint(id=f"p{k}", vector=row.tolist(), payload={"library": libraries[k % 3]})
            for k, row in enumerate(data)
        ],
    )
    return name


def test_local_and_edge_agree_exactly_without_hnsw(
    qdrant_memory_index: QdrantVectorIndex, edge_index: QdrantEdgeVectorIndex
) -> None:
    # Below qdrant's indexing threshold edge searches exactly, as local mode always does: same top-k.
    space = VectorSpace(dim=DIM)
    data = _clustered(600, DIM, seed=11)
    local = _load(qdrant_memory_index, data, space)
    edge = _load(edge_index, data, space)
    queries = _clustered(25, DIM, seed=12)
    for k, query in enumerate(queries):
        filters = SearchFilters(library="lib-b") if k % 2 else None
        want = qdrant_memory_index.search(local, query.tolist(), filters=filters, limit=10)
        got = edge_index.search(edge, query.tolist(), filters=filters, limit=10)
        assert hit_ids(got) == hit_ids(want)
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


def test_edge_hnsw_recall_against_brute_force(qdrant_memory_index: QdrantVectorIndex, tmp_path: Path) -> None:
    # Tiny thresholds make edge build and use HNSW on a small fixture; compare with numpy ground truth
    # (and local mode, which is exact) at recall@10 >= 0.95, filtered and not.
    dim = 48
    space = VectorSpace(dim=dim)
    data = _clustered(3000, dim, seed=21)
    edge_index = QdrantEdgeVectorIndex(
        tmp_path / "hnsw", optimize_every=None, indexing_threshold_kb=1, full_scan_threshold_kb=1
    )
    try:
        edge = _load(edge_index, data, space)
        assert edge_index.optimize(edge)
        local = _load(qdrant_memory_index, data, space)
        unit = data / np.linalg.norm(data, axis=1, keepdims=True)
        library_b = np.arange(len(data)) % 3 == 1
        queries = _clustered(60, dim, seed=22)
        recalls_truth, recalls_local = [], []
        for k, query in enumerate(queries):
            filtered = bool(k % 2)
            scores = unit @ (query / np.linalg.norm(query))
            if filtered:
                scores = np.where(library_b, scores, -np.inf)
            truth = {f"p{i}" for i in np.argsort(-scores)[:10]}
            filters = SearchFilters(library="lib-b") if filtered else None
            got = set(hit_ids(edge_index.search(edge, query.tolist(), filters=filters, limit=10)))
            exact = set(hit_ids(qdrant_memory_index.search(local, query.tolist(), filters=filters, limit=10)))
            assert exact == truth
            recalls_truth.append(len(got & truth) / 10)
            recalls_local.append(len(got & exact) / 10)
        assert np.mean(recalls_truth) >= 0.95
        assert np.mean(recalls_local) >= 0.95
    finally:
        edge_index.close()


# -- a server that is not there -------------------------------------------------------------------


def _assert_unavailable_in_time(index: QdrantVectorIndex, url: str, limit_s: float) -> None:
    started = time.monotonic()
    with pytest.raises(Unavailable) as err:
        index.health()
    elapsed = time.monotonic() - started
    assert elapsed < limit_s, f"took {elapsed:.1f}s"
    message = str(err.value)
    assert "qdrant" in message and url.removeprefix("http://") in message
    assert "sekrit" not in message and "sekrit" not in repr(err.value.context)
    with pytest.raises(Unavailable):
        index.search("anything", [0.1] * DIM)


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_server_down_is_unavailable_quickly() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    index = QdrantVectorIndex(url=url, api_key="sekrit-api-key", timeout_s=2)
    try:
        _assert_unavailable_in_time(index, url, limit_s=3.0)
    finally:
        index.close()


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_silent_server_times_out_within_the_timeout() -> None:
    # A socket that accepts connections (in the kernel's backlog) but never answers: the read times out.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        index = QdrantVectorIndex(url=url, api_key="sekrit-api-key", timeout_s=1)
        try:
            _assert_unavailable_in_time(index, url, limit_s=5.0)
        finally:
            index.close()


def test_ambiguous_location_is_refused() -> None:
    with pytest.raises(ConfigError):
        QdrantVectorIndex(url="http://127.0.0.1:6333", path="/tmp/x")
    with pytest.raises(ConfigError):
        QdrantVectorIndex(path="/tmp/x", api_key="k")


def test_factory_picks_the_backend(tmp_path: Path) -> None:
    from stores.factory import open_vector_index

    default = open_vector_index(load_settings(data_dir=tmp_path))
    assert isinstance(default, QdrantEdgeVectorIndex) and default.path == tmp_path / "vectors"
    local = open_vector_index(load_settings(data_dir=tmp_path, vector_embedded_engine="qdrant_local"))
    assert isinstance(local, QdrantVectorIndex) and local.is_local and local.path == tmp_path / "vectors"
    memory = open_vector_index(load_settings(vector_url=":memory:"))
    assert isinstance(memory, QdrantVectorIndex) and memory.path is None and memory.url is None
    server = open_vector_index(load_settings(vector_url="http://qdrant:6333", store_timeout_s=2))
    assert isinstance(server, QdrantVectorIndex) and server.url == "http://qdrant:6333" and not server.is_open
    assert server.timeout_s == 2
    with pytest.raises(InvalidRequest):
        memory.search("x" * 300, [0.0])


# -- request building and error translation against a canned Qdrant REST server -------------------
# No Qdrant server installs here, so the server path is checked over real HTTP against a server that
# answers the way Qdrant's REST API does (bodies as Qdrant 1.x sends them) and records what it got.


def _collection_info(payload_schema: dict[str, object]) -> dict[str, object]:
    return {
        "status": "green",
        "optimizer_status": "ok",
        "points_count": 0,
        "segments_count": 1,
        "config": {
            "params": {"vectors": {"dense": {"size": DIM, "distance": "Cosine"}}},
            "hnsw_config": {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000},
            "optimizer_config": {"default_segment_number": 0, "flush_interval_sec": 5},
        },
        "payload_schema": payload_schema,
    }


class CannedQdrant:
    """A loopback HTTP server answering ``(method, path)`` from a table, recording every request."""

    def __init__(self, answers: dict[tuple[str, str], tuple[int, object]]) -> None:
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.answers = answers
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path.split("?")[0]
                outer.requests.append((self.command, path, {k.lower(): v for k, v in self.headers.items()}, body))
                status, answer = outer.answers.get((self.command, path), (404, {"status": {"error": "Not found"}}))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _answer  # noqa: N815 - http.server's naming

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


Answers = dict[tuple[str, str], tuple[int, object]]


@pytest.fixture
def canned() -> Iterator[Callable[[Answers], CannedQdrant]]:
    servers: list[CannedQdrant] = []

    def start(answers: Answers) -> CannedQdrant:
        servers.append(CannedQdrant(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _ok(result: object) -> tuple[int, object]:
    return 200, {"result": result, "status": "ok", "time": 0.0}


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_server_requests_for_ensure_and_search(canned: Callable[[Answers], CannedQdrant]) -> None:
    from schemas.search import FILTER_FIELDS

    server = canned(
        {
            ("GET", "/collections/chunks/exists"): _ok({"exists": False}),
            ("PUT", "/collections/chunks"): _ok(True),
            ("GET", "/collections/chunks"): _ok(_collection_info({})),
            **{("PUT", "/collections/chunks/index"): _ok({"operation_id": 1, "status": "completed"})},
            ("POST", "/collections/chunks/points/query"): _ok(
                {
                    "points": [
                        {
                            "id": "00000000-0000-0000-0000-000000000001",
                            "version": 1,
                            "score": 0.9,
                            "payload": {"_id": "chunk-1", "library": "lib-a"},
                        }
                    ]
                }
            ),
        }
    )
    index = QdrantVectorIndex(url=server.url, api_key="sekrit-api-key", timeout_s=2)
    try:
        index.ensure_collection("chunks", SPACE)
        hits = index.search("chunks", [0.1] * DIM, filters=SearchFilters(library="lib-a", status=["x", "y"]))
    finally:
        index.close()
    assert [(h.id, h.score, h.payload) for h in hits] == [("chunk-1", 0.9, {"library": "lib-a"})]
    assert all(headers.get("api-key") == "sekrit-api-key" for _, _, headers, _ in server.requests)
    create = next(body for method, path, _, body in server.requests if (method, path) == ("PUT", "/collections/chunks"))
    assert create["vectors"] == {"dense": {"size": DIM, "distance": "Cosine"}}
    indexed = [body for method, path, _, body in server.requests if path == "/collections/chunks/index"]
    assert sorted(b["field_name"] for b in indexed) == sorted(FILTER_FIELDS)
    assert {b["field_schema"] for b in indexed} == {"keyword"}
    query = next(body for _, path, _, body in server.requests if path.endswith("/points/query"))
    assert query["using"] == "dense" and query["limit"] == 10
    assert query["query"] == {"nearest": [0.1] * DIM}
    assert query["filter"] == {
        "must": [
            {"key": "library", "match": {"value": "lib-a"}},
            {"key": "status", "match": {"any": ["x", "y"]}},
        ]
    }


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (404, "Not found: Collection `chunks` doesn't exist!", "NotFound"),
        (400, "Wrong input: Vector dimension error: expected dim: 8, got 16", "InvalidRequest"),
        (503, "Service unavailable", "Unavailable"),
        (401, "Invalid api-key", "StoreError"),
    ],
)
@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_server_errors_are_translated(
    canned: Callable[[Answers], CannedQdrant], status: int, error: str, expected: str
) -> None:
    server = canned(
        {
            ("GET", "/collections/chunks/exists"): _ok({"exists": True}),
            ("GET", "/collections/chunks"): _ok(_collection_info({})),
            ("POST", "/collections/chunks/points/query"): (status, {"status": {"error": error}, "time": 0.0}),
        }
    )
    index = QdrantVectorIndex(url=server.url, api_key="sekrit-api-key", timeout_s=2)
    try:
        with pytest.raises(Exception) as err:
            index.search("chunks", [0.1] * DIM)
    finally:
        index.close()
    assert type(err.value).__name__ == expected
    message = str(err.value)
    assert server.url.removeprefix("http://") in message and "chunks" in message
    assert "sekrit" not in message
    if status != 401:
        assert error in message


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_server_request_for_a_search_batch(canned: Callable[[Answers], CannedQdrant]) -> None:
    def point(n: int) -> dict[str, object]:
        return {
            "id": f"00000000-0000-0000-0000-00000000000{n}",
            "version": 1,
            "score": 1 - n / 10,
            "payload": {"_id": f"c{n}"},
        }

    server = canned(
        {
            ("GET", "/collections/chunks/exists"): _ok({"exists": True}),
            ("GET", "/collections/chunks"): _ok(_collection_info({})),
            ("POST", "/collections/chunks/points/query/batch"): _ok([{"points": [point(1), point(2)]}, {"points": []}]),
        }
    )
    index = QdrantVectorIndex(url=server.url, api_key="sekrit-api-key", timeout_s=2)
    try:
        hits = index.search_batch("chunks", [[0.1] * DIM, [0.2] * DIM], filters=SearchFilters(library="lib-a"), limit=5)
        assert index.search_batch("chunks", []) == []
    finally:
        index.close()
    assert [[(h.id, h.score) for h in found] for found in hits] == [[("c1", 0.9), ("c2", 0.8)], []]
    batches = [body for _, path, _, body in server.requests if path.endswith("/points/query/batch")]
    assert len(batches) == 1  # one round trip for both, none for an empty batch
    searches = batches[0]["searches"]
    assert [s["query"] for s in searches] == [{"nearest": [0.1] * DIM}, {"nearest": [0.2] * DIM}]
    for search in searches:
        assert search["using"] == "dense" and search["limit"] == 5 and search["with_payload"] is True
        assert search["filter"] == {"must": [{"key": "library", "match": {"value": "lib-a"}}]}
