"""Qdrant's embedded engine (qdrant-edge-py): HNSW, a write-ahead log and payload indexes, in-process.

Layout under the index folder, one folder per collection::

    <path>/<collection>/space.json   the collection's VectorSpace, written last: it marks the
                                     collection complete (a folder without it is a creation that
                                     crashed half-way and is rebuilt by ensure_collection)
    <path>/<collection>/shard/       one EdgeShard: edge_config.json, segments/, wal/

Durability: every update goes through the shard's write-ahead log before it returns, so a process that
dies without ``close()`` loses nothing (the WAL is replayed on the next load); ``close()`` flushes
segments so the next load has little to replay.

Indexing: qdrant-edge never optimizes on its own (no background workers). New points land in a plain
segment that is searched by brute force (~5 ms per 100,000 384-d points on one core); ``optimize()``
builds HNSW and merges segments. This index calls it inside ``upsert`` once ``optimize_every`` points
(default 20,000) have been written since the last optimization, so bulk ingestion keeps search
sub-millisecond and a trickle of writes pays for it rarely; callers finishing a bulk load (ingest,
reindex) call :meth:`QdrantEdgeVectorIndex.optimize` themselves. Optimizing holds the GIL: it pauses the
calling process for ~0.2-0.5 ms per new 384-d point on a 2-core machine (8-11 s per 20,000).

Concurrency: one process owns the folder (the WAL is locked; a second process gets
:class:`Unavailable`; the folder's lock and the shards shared by the index objects of a process are
:mod:`stores.vector.edge_shards`). Inside it, threads may share the index: writes and optimizations of a
collection are serialised by its lock, reads run concurrently (the engine guards its segments), and
opening, creating and dropping collections are serialised by the index's lock.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from schemas.errors import ConfigError, Conflict, InvalidRequest, NotFound, StoreError, Unavailable
from schemas.search import SearchFilters
from schemas.settings import VectorBackend, VectorLocation
from stores.lazy import LazyClient
from stores.vector.base import Distance, VectorHit, VectorPoint, VectorSpace, point_uuid
from stores.vector.edge_shards import (
    SHARD_DIR,
    SPACE_FILE,
    STORE,
    OpenCollection,
    OpenShards,
    acquire_shards,
    ensure_payload_indexes,
    read_space,
    release_shards,
)
from stores.vector.filters import (
    build_delete_filter,
    build_filter,
    check_collection_name,
    check_limit,
    check_vector,
    scored_hits,
    split_payload,
    stored_payload,
)

log = structlog.get_logger(__name__)

# Points written since the last optimization that trigger the next one (see the module docstring).
OPTIMIZE_EVERY = 20_000
# Points per update operation: bounds the Python-side list of Point objects built at once.
UPSERT_BATCH = 1024
# Filtered searches estimated to keep this many points or fewer are exact (see the class docstring).
EXACT_BELOW = 10_000
# The same for a filter of one condition keeping under WIDE_EF_BELOW of the collection (see the class docstring).
EXACT_BELOW_ALONE = 25_000
# Share of a collection under which a filtered search uses ACORN (qdrant's own bound is 0.4).
ACORN_BELOW = 0.1
# Share under which a filtered search that is neither exact nor ACORN explores the widest ef
# (8x ``hnsw_ef``); from here to half the collection ef is ``hnsw_ef`` / share, at most 4x.
WIDE_EF_BELOW = 0.2


class QdrantEdgeVectorIndex(LazyClient):
    """The vector index on qdrant-edge shards in a local folder (one shard per collection).

    Args:
        path: Folder holding one subfolder per collection; created on first use.
        optimize_every: Points written to a collection since its last optimization that make
            ``upsert`` optimize it (build HNSW) before returning; ``None`` leaves it to
            :meth:`optimize`.
        indexing_threshold_kb: Segments larger than this get an HNSW index when optimized (qdrant's
            default, 10,000 KB, when ``None``). Applies to collections created from now on.
        full_scan_threshold_kb: Below this size a segment is searched exactly even if it has HNSW
            (qdrant's default, 10,000 KB, when ``None``). Applies to collections created from now on.
            Tests lower both to exercise HNSW on small fixtures.
        hnsw_ef: Candidates an HNSW search explores (qdrant's default is ef_construct, 100); 128 keeps
            unfiltered recall@10 near 0.98 on clustered data at little cost.
        acorn: Use ACORN for filtered searches (two-hop neighbours when the filter rejects a node's
            direct ones); without it a filter keeping a third of the points dropped recall@10 to ~0.87
            on the congruence fixture, with it 1.0. It is paid for: on 100,000 memory records a
            filter keeping 8 % cost 28 ms with it and 4.4 ms searched exactly, one keeping 37 % 10 ms
            against 3 ms without it at recall@10 0.996 (``benchmarks/recall_scale.py``), and one keeping
            18 % (a lineage and an observer) 10-12 ms against 7 ms searched plainly at ef 1024, both
            with an exact search's top 10 on 141 of 141 queries (at ef 728: 140). So a filtered search
            first estimates (from the payload indexes, ~0.1 ms) how many points pass: ``exact_below``
            or fewer are searched exactly (``exact_below_alone`` under one condition); a filter keeping
            less than ``acorn_below`` of the collection uses ACORN; a wider one searches HNSW plainly, with
            ``hnsw_ef`` raised 8x under :data:`WIDE_EF_BELOW` and by the inverse of the share kept (at most
            4x) up to half.
        exact_below: Filtered searches estimated to keep this many points or fewer are exact
            (brute force over the payload index's matches: ~0.5 µs a 384-d point on one core).
        exact_below_alone: The same bound for a filter of one condition (a recall's lineage keys) keeping
            less than :data:`WIDE_EF_BELOW` of the collection: its scan walks that condition's matches alone
            (~0.35 µs a point), where HNSW would run at 8x ``hnsw_ef`` or ACORN; lineages of 12,001-19,001
            of 100,000 memory records: 22.7-26.6 ms of CPU at ef 1024, 4.9-6.6 ms exact (docs/story.md).
        acorn_below: Share of the collection under which a filtered search uses ACORN.
        payload_in_ram: Keep payloads in RAM (qdrant-edge's ``payload_memory`` ``Cached``: an in-RAM
            copy of the payload file) rather than read from the file at each search (``Cold``). A
            search returns the payload of every hit; on 100,000 memory records, once the machine's
            page cache had turned over, a recall's 100 payload reads took the vector leg from ~5 to
            ~10 ms at p50 and ~14 to ~26-34 ms at p95 (``benchmarks/recall_scale.py``). Costs RAM
            about the size of the payloads (~1 KB a memory record). Applies to collections created
            from now on.
        timeout_s: Accepted for symmetry with the server backends; an embedded engine has no
            network to time out on.

    Raises:
        ConfigError: ``path`` is missing (qdrant-edge needs a folder; ``:memory:`` is local mode).
    """

    name = STORE

    def __init__(
        self,
        path: Path | str,
        *,
        optimize_every: int | None = OPTIMIZE_EVERY,
        indexing_threshold_kb: int | None = None,
        full_scan_threshold_kb: int | None = None,
        hnsw_ef: int | None = 128,
        payload_in_ram: bool = True,
        acorn: bool = True,
        exact_below: int = EXACT_BELOW,
        exact_below_alone: int = EXACT_BELOW_ALONE,
        acorn_below: float = ACORN_BELOW,
        timeout_s: float = 5.0,
    ) -> None:
        if path is None or str(path) in ("", ":memory:"):
            raise ConfigError(
                "LOREKEEPER_VECTOR_URL", "qdrant-edge needs a folder; ':memory:' is qdrant-client local mode"
            )
        self.path = Path(path)
        self.optimize_every = optimize_every
        self.indexing_threshold_kb = indexing_threshold_kb
        self.full_scan_threshold_kb = full_scan_threshold_kb
        self.hnsw_ef = hnsw_ef
        self.payload_in_ram = payload_in_ram
        self.acorn = acorn
        self.exact_below = exact_below
        self.exact_below_alone = exact_below_alone
        self.acorn_below = acorn_below
        self.timeout_s = timeout_s

    @classmethod
    def from_location(cls, location: VectorLocation, *, timeout_s: float = 5.0) -> QdrantEdgeVectorIndex:
        """The index a resolved settings location describes.

        Raises:
            ConfigError: the location is not a qdrant-edge folder.
        """
        if location.backend is not VectorBackend.QDRANT_EDGE or location.path is None:
            raise ConfigError(
                "LOREKEEPER_VECTOR_URL", "QdrantEdgeVectorIndex needs a qdrant_edge location with a folder"
            )
        return cls(location.path, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"QdrantEdgeVectorIndex({self.path})"

    def _open(self) -> OpenShards:
        self.path.mkdir(parents=True, exist_ok=True)
        return acquire_shards(self.path, wait_s=max(self.timeout_s, 1.0))

    # -- error translation ------------------------------------------------------------------------

    @contextmanager
    def _call(self, collection: str | None = None) -> Iterator[OpenShards]:
        """Run a block against the open shards, translating qdrant-edge's and the file system's errors."""
        try:
            yield self.client
        except StoreError:
            raise
        except OSError as exc:
            raise StoreError(STORE, f"{_where(collection)}file system error in {self.path}: {exc}") from exc
        except Exception as exc:
            raise _translate(exc, collection, self.path) from exc

    # -- collections ------------------------------------------------------------------------------

    def ensure_collection(self, collection: str, space: VectorSpace) -> None:
        """Create the collection (shard, keyword payload indexes, space.json) if missing.

        Raises:
            Conflict: the collection exists with another vector name, size or distance.
        """
        check_collection_name(STORE, collection)
        with self._call(collection) as shards, shards.lock:
            folder = shards.root / collection
            existing = shards.open.get(collection)
            stored = existing.space if existing else read_space(folder)
            if stored is not None:
                if stored != space:
                    raise Conflict(
                        STORE,
                        f"collection {collection!r} exists with vector {_describe(stored)}, not "
                        f"{_describe(space)}; a different embedding model needs a new collection",
                    )
                self._collection(collection)  # opens it and adds payload indexes FILTER_FIELDS gained
                return
            if folder.exists():
                # No space.json: a creation that died half-way. The index is derived, so start over.
                shutil.rmtree(folder)
            shards.open[collection] = self._create(folder, collection, space)

    def _create(self, folder: Path, collection: str, space: VectorSpace) -> OpenCollection:
        import qdrant_edge as qe

        shard_dir = folder / SHARD_DIR
        shard_dir.mkdir(parents=True)
        config = qe.EdgeConfig(
            vectors={space.name: qe.EdgeVectorParams(size=space.dim, distance=_edge_distance(space))},
            hnsw_config=(
                # m and ef_construct are qdrant's defaults; only the full-scan threshold is tuned.
                qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=self.full_scan_threshold_kb)
                if self.full_scan_threshold_kb is not None
                else None
            ),
            payload_memory=qe.Memory.Cached if self.payload_in_ram else None,
            optimizers=(
                qe.EdgeOptimizersConfig(indexing_threshold=self.indexing_threshold_kb)
                if self.indexing_threshold_kb is not None
                else None
            ),
        )
        shard = qe.EdgeShard.create(str(shard_dir), config)
        try:
            ensure_payload_indexes(shard)
            shard.flush()
            tmp = folder / f"{SPACE_FILE}.tmp"
            tmp.write_text(space.model_dump_json(), encoding="utf-8")
            os.replace(tmp, folder / SPACE_FILE)
        except BaseException:
            shard.close()
            raise
        return OpenCollection(collection, folder, shard, space, pending=0)

    def _collection(self, collection: str) -> OpenCollection:
        """The open collection, loading its shard on first use in this process.

        Raises:
            NotFound: no such collection.
            Unavailable: another process holds the shard open.
        """
        check_collection_name(STORE, collection)
        with self._call(collection) as shards:
            col = shards.open.get(collection)
            if col is not None:
                return col
            with shards.lock:
                col = shards.open.get(collection)
                if col is not None:
                    return col
                folder = shards.root / collection
                space = read_space(folder)
                if space is None:
                    raise NotFound(STORE, f"collection {collection!r} does not exist in {shards.root}")
                from qdrant_edge import EdgeShard

                shard = EdgeShard.load(str(folder / SHARD_DIR))
                try:
                    ensure_payload_indexes(shard)
                    info = shard.info()
                except BaseException:
                    shard.close()
                    raise
                # Points that were never indexed (a crash, or a small tail) count toward the next optimize.
                col = OpenCollection(
                    collection,
                    folder,
                    shard,
                    space,
                    pending=max(0, info.points_count - info.indexed_vectors_count),
                )
                shards.open[collection] = col
                return col

    def collections(self) -> list[str]:
        with self._call() as shards:
            return sorted(
                entry.name
                for entry in shards.root.iterdir()
                if entry.is_dir() and not entry.name.startswith(".") and (entry / SPACE_FILE).is_file()
            )

    def drop_collection(self, collection: str) -> None:
        """Close and delete the collection's folder; a missing one is fine."""
        check_collection_name(STORE, collection)
        with self._call(collection) as shards, shards.lock:
            col = shards.open.pop(collection, None)
            if col is not None:
                with col.write_lock:
                    col.shard.close()
            folder = shards.root / collection
            if folder.exists():
                # Rename first so a crash mid-delete never leaves a half-deleted collection under its name.
                trash = shards.root / f".dropped-{collection}-{uuid.uuid4().hex[:8]}"
                os.replace(folder, trash)
                shutil.rmtree(trash, ignore_errors=True)

    def space(self, collection: str) -> VectorSpace:
        """The collection's vector space (name, size, distance).

        Raises:
            NotFound: no such collection.
        """
        return self._collection(collection).space

    # -- points -----------------------------------------------------------------------------------

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> int:
        """Insert or replace ``points`` by graph id (WAL-durable on return); returns how many.

        Optimizes the collection before returning once ``optimize_every`` points have accumulated.

        Raises:
            InvalidRequest: a vector has the wrong size or a non-finite value.
            NotFound: no such collection.
        """
        from qdrant_edge import Point, UpdateOperation

        col = self._collection(collection)
        space = col.space
        edge_points = [
            Point(
                point_uuid(p.id),
                {space.name: check_vector(STORE, collection, space, p.vector, what=f"point {p.id!r}")},
                stored_payload(STORE, collection, p),
            )
            for p in points
        ]
        with self._call(collection), col.write_lock:
            for start in range(0, len(edge_points), UPSERT_BATCH):
                col.shard.update(UpdateOperation.upsert_points(edge_points[start : start + UPSERT_BATCH]))
            col.pending += len(edge_points)
            if self.optimize_every is not None and col.pending >= self.optimize_every:
                self._optimize(col)
        return len(edge_points)

    def optimize(self, collection: str) -> bool:
        """Build HNSW for new points and merge segments now (blocking; holds the GIL while it runs).

        Returns:
            Whether anything was optimized.
        """
        col = self._collection(collection)
        with self._call(collection), col.write_lock:
            return self._optimize(col)

    def _optimize(self, col: OpenCollection) -> bool:
        started = time.perf_counter()
        changed = bool(col.shard.optimize())
        col.pending = 0
        log.info(
            "vector_edge_optimized",
            collection=col.name,
            changed=changed,
            seconds=round(time.perf_counter() - started, 3),
        )
        return changed

    def get(self, collection: str, ids: Sequence[str]) -> list[VectorPoint]:
        """The points that exist among ``ids``, with vectors and payloads, in the order asked."""
        col = self._collection(collection)
        if not ids:
            return []
        with self._call(collection):
            records = col.shard.retrieve(
                point_ids=list({point_uuid(i) for i in ids}), with_payload=True, with_vector=True
            )
        found = {str(r.id): _to_point(col.space, r) for r in records}
        return [found[key] for key in (point_uuid(i) for i in ids) if key in found]

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
    ) -> list[VectorHit]:
        """Nearest points to ``vector``, best first, restricted by ``filters``.

        Raises:
            InvalidRequest: wrong query size, non-finite values, or ``limit < 1``.
            NotFound: no such collection.
        """
        import qdrant_edge as qe

        col = self._collection(collection)
        query = check_vector(STORE, collection, col.space, vector, what="the query")
        check_limit(STORE, collection, limit)
        edge_filter = build_filter(qe, filters)
        request = self._request(qe, col, query, edge_filter, self._search_params(qe, col, edge_filter), limit)
        with self._call(collection):
            scored = col.shard.query(request)
        return scored_hits(col.space, scored)

    def search_batch(
        self,
        collection: str,
        vectors: Sequence[Sequence[float]],
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
    ) -> list[list[VectorHit]]:
        """:meth:`search` for each of ``vectors``, as one qdrant-edge ``query_batch``: the filter's share
        is estimated once, and the engine runs the searches in one planned pass over the segments
        (two exact searches over 8,000 of 100,000 points took 7.3 ms batched against 11.0 ms one by one).

        Raises:
            InvalidRequest: a query of the wrong size or with non-finite values, or ``limit < 1``.
            NotFound: no such collection.
        """
        import qdrant_edge as qe

        col = self._collection(collection)
        queries = [
            check_vector(STORE, collection, col.space, vector, what=f"query {n}") for n, vector in enumerate(vectors)
        ]
        check_limit(STORE, collection, limit)
        if not queries:
            return []
        edge_filter = build_filter(qe, filters)
        params = self._search_params(qe, col, edge_filter)
        batch = qe.QueryBatchRequest([self._request(qe, col, q, edge_filter, params, limit) for q in queries])
        with self._call(collection):
            results = col.shard.query_batch(batch)
        return [scored_hits(col.space, scored) for scored in results]

    @staticmethod
    def _request(qe: Any, col: OpenCollection, query: list[float], edge_filter: Any, params: Any, limit: int) -> Any:
        return qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(query, using=col.space.name),
            filter=edge_filter,
            params=params,
            with_payload=True,
            with_vector=False,
        )

    def _search_params(self, qe: Any, col: OpenCollection, edge_filter: Any) -> Any:
        """Exact, ACORN or plain HNSW (with ``hnsw_ef`` scaled up) by the filter's estimated share."""
        if edge_filter is None:
            return qe.SearchParams(hnsw_ef=self.hnsw_ef)
        with self._call(col.name):
            passing = int(col.shard.count(qe.CountRequest(exact=False, filter=edge_filter)))
            total = max(1, int(col.shard.info().points_count))
        share = passing / total
        alone = len(edge_filter.must or ()) == 1 and not edge_filter.should and not edge_filter.must_not
        if passing <= self.exact_below or (alone and passing <= self.exact_below_alone and share < WIDE_EF_BELOW):
            return qe.SearchParams(exact=True)
        if self.acorn and share < self.acorn_below:
            return qe.SearchParams(hnsw_ef=self.hnsw_ef, acorn=qe.AcornSearchParams(enable=True, max_selectivity=1.0))
        if self.hnsw_ef is None or share >= 0.5:  # a lineage over most of the campaign: as configured
            return qe.SearchParams(hnsw_ef=self.hnsw_ef)
        if share < WIDE_EF_BELOW:
            # hnsw_ef / share (~6x here) still missed an exact top 10 that ACORN and 8x found
            return qe.SearchParams(hnsw_ef=8 * self.hnsw_ef)
        return qe.SearchParams(hnsw_ef=min(4 * self.hnsw_ef, round(self.hnsw_ef / share)))

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        """Delete points by graph id; ids that do not exist are ignored."""
        from qdrant_edge import UpdateOperation

        col = self._collection(collection)
        if not ids:
            return
        with self._call(collection), col.write_lock:
            col.shard.update(UpdateOperation.delete_points([point_uuid(i) for i in ids]))

    def delete_by_filter(self, collection: str, filters: SearchFilters) -> None:
        """Delete every point matching ``filters``.

        Raises:
            InvalidRequest: ``filters`` sets no field (that would delete everything).
        """
        import qdrant_edge as qe

        edge_filter = build_delete_filter(qe, STORE, collection, filters)
        col = self._collection(collection)
        with self._call(collection), col.write_lock:
            col.shard.update(qe.UpdateOperation.delete_points_by_filter(edge_filter))

    def scroll(
        self, collection: str, *, filters: SearchFilters | None = None, batch_size: int = 256
    ) -> Iterator[VectorPoint]:
        """Every point matching ``filters``, with vectors, fetched ``batch_size`` at a time (by point id)."""
        import qdrant_edge as qe

        col = self._collection(collection)
        if batch_size < 1:
            raise InvalidRequest(STORE, f"collection {collection!r}: batch_size must be at least 1")
        edge_filter = build_filter(qe, filters)
        offset: Any = None
        while True:
            with self._call(collection):
                records, offset = col.shard.scroll(
                    qe.ScrollRequest(
                        offset=offset,
                        limit=batch_size,
                        filter=edge_filter,
                        with_payload=True,
                        with_vector=True,
                    )
                )
            for record in records:
                yield _to_point(col.space, record)
            if offset is None:
                return

    def count(self, collection: str, filters: SearchFilters | None = None) -> int:
        """Exact number of points matching ``filters``."""
        import qdrant_edge as qe

        col = self._collection(collection)
        with self._call(collection):
            return int(col.shard.count(qe.CountRequest(exact=True, filter=build_filter(qe, filters))))

    def health(self) -> None:
        """Raise unless the index folder exists (or can be created) and is writable."""
        with self._call() as shards:
            if not os.access(shards.root, os.W_OK | os.X_OK):
                raise Unavailable(STORE, f"index folder {shards.root} is not writable")

    def close(self) -> None:
        """Release the folder; the last index object of this process on it flushes and closes the shards.

        The index reopens them on next use.
        """
        shards, self._client = self._client, None
        if shards is not None:
            release_shards(shards)


def _where(collection: str | None) -> str:
    return f"collection {collection!r}: " if collection else ""


def _describe(space: VectorSpace) -> str:
    return f"{space.name!r} of size {space.dim} ({space.distance.value})"


def _edge_distance(space: VectorSpace) -> Any:
    from qdrant_edge import Distance as EdgeDistance

    return {
        Distance.COSINE: EdgeDistance.Cosine,
        Distance.DOT: EdgeDistance.Dot,
        Distance.EUCLID: EdgeDistance.Euclid,
    }[space.distance]


def _to_point(space: VectorSpace, record: Any) -> VectorPoint:
    graph_id, payload = split_payload(record.payload)
    vector = record.vector
    if isinstance(vector, dict):
        vector = vector.get(space.name)
    return VectorPoint(id=graph_id or str(record.id), vector=list(vector or []), payload=payload)


def _translate(exc: Exception, collection: str | None, root: Path) -> StoreError:
    # qdrant-edge raises plain Exception with the engine's message; its wording is the only signal.
    message = str(exc)
    where = _where(collection)
    if "WouldBlock" in message or "Resource temporarily unavailable" in message:
        return Unavailable(
            STORE,
            f"{where}the shard in {root} is open in another process; qdrant-edge is single-process "
            "(route writes through one process, or use a Qdrant server)",
        )
    if "not initialized" in message:
        return NotFound(STORE, f"{where}the collection was dropped or the index closed while in use")
    if "dimension error" in message or "Wrong input" in message or "Not existing vector" in message:
        return InvalidRequest(STORE, f"{where}{message}")
    return StoreError(STORE, f"{where}{type(exc).__name__}: {message}")
