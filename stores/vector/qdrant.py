"""Qdrant through qdrant-client: a server (URL), local mode on disk (path) or local mode in memory.

One class serves the three, as ``QdrantClient`` does: the location picks the mode. Local mode is
qdrant-client's pure-Python engine: it keeps every point in numpy arrays, searches by brute force,
evaluates payload filters point by point in Python and, on disk, writes each point to SQLite with its
own commit. It is right for tests and small collections; past ``large_collection_points`` points a
warning (``vector_local_mode_large``) says so once per collection. See docs/adr/0002-embedded-vectors.md.

Errors are translated at the edge of every call: connection failures and time-outs become
:class:`Unavailable` (naming the store and the redacted URL, never the API key), a missing collection
:class:`NotFound`, a refused request :class:`InvalidRequest`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import structlog
from pydantic import SecretStr

from schemas.errors import (
    ConfigError,
    Conflict,
    InvalidRequest,
    NotFound,
    StoreError,
    Unavailable,
    redact_url,
)
from schemas.search import FILTER_FIELDS, SearchFilters
from schemas.settings import VectorBackend, VectorLocation
from stores.lazy import LazyClient
from stores.vector.base import Distance, VectorHit, VectorPoint, VectorSpace, point_uuid
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

# Points per upsert request: small enough for the server's default 32 MiB request limit at 4096-d,
# large enough that the per-request overhead is noise.
UPSERT_BATCH = 256
# Local mode searches by brute force in Python; past this size it stops being a sensible store.
LOCAL_LARGE_COLLECTION_POINTS = 20_000

_DISTANCES = {Distance.COSINE: "Cosine", Distance.DOT: "Dot", Distance.EUCLID: "Euclid"}


class QdrantVectorIndex(LazyClient):
    """The vector index on Qdrant via qdrant-client: a server URL, a local-mode folder, or memory.

    Args:
        url: ``http(s)://host[:port]`` of a Qdrant server (a URL without a port means 6333, as in
            qdrant-client). Mutually exclusive with ``path``.
        path: Folder of qdrant-client local mode. ``None`` (and no URL) keeps everything in memory.
        api_key: Server API key; never logged nor put into a message.
        timeout_s: Connect and request timeout against a server (rounded up to whole seconds by
            qdrant-client); a server that is down answers :class:`Unavailable` within it.
        large_collection_points: Local mode logs ``vector_local_mode_large`` once a collection holds
            more points than this.

    Raises:
        ConfigError: both ``url`` and ``path`` are given.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        path: Path | str | None = None,
        api_key: SecretStr | str | None = None,
        timeout_s: float = 5.0,
        large_collection_points: int = LOCAL_LARGE_COLLECTION_POINTS,
    ) -> None:
        if url and path is not None:
            raise ConfigError("LOREKEEPER_VECTOR_URL", "a Qdrant location is either a server URL or a folder, not both")
        if api_key is not None and not url:
            raise ConfigError("LOREKEEPER_VECTOR_API_KEY", "an API key is only used with a Qdrant server URL")
        self.url = url or None
        self.path = Path(path) if path is not None else None
        self.api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self.timeout_s = float(timeout_s)
        self.large_collection_points = large_collection_points
        self.name = "qdrant" if self.url else "qdrant-local"
        self._init_state()

    @classmethod
    def from_location(cls, location: VectorLocation, *, timeout_s: float = 5.0) -> QdrantVectorIndex:
        """The index a resolved settings location describes (server URL, local folder or memory).

        Raises:
            ConfigError: the location names the qdrant-edge backend, which is not this class.
        """
        if location.backend is VectorBackend.QDRANT_EDGE:
            raise ConfigError("LOREKEEPER_VECTOR_EMBEDDED_ENGINE", "qdrant_edge locations open QdrantEdgeVectorIndex")
        if location.backend is VectorBackend.QDRANT_SERVER:
            return cls(url=location.url, api_key=location.api_key, timeout_s=timeout_s)
        return cls(path=location.path, timeout_s=timeout_s)

    # -- state that never travels to another process ---------------------------------------------

    def _init_state(self) -> None:
        # Local mode mutates numpy arrays and a SQLite connection without locks of its own; one lock
        # serialises every call there. A server client (httpx) is thread-safe and needs none.
        self._lock = threading.RLock()
        self._spaces: dict[str, VectorSpace] = {}
        self._warned_large: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in ("_lock", "_spaces", "_warned_large"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._init_state()

    def __repr__(self) -> str:
        where = redact_url(self.url) if self.url else (str(self.path) if self.path else ":memory:")
        return f"QdrantVectorIndex({where})"

    @property
    def is_local(self) -> bool:
        """Whether this is qdrant-client local mode (a folder or memory) rather than a server."""
        return self.url is None

    def _open(self) -> Any:
        from qdrant_client import QdrantClient

        if self.url:
            # check_compatibility would call the server from the constructor; the first real call
            # (health() or an operation) is where an unreachable server should be reported.
            return QdrantClient(
                url=self.url,
                api_key=self.api_key.get_secret_value() if self.api_key else None,
                timeout=self.timeout_s,  # type: ignore[arg-type]  # floats work; the client rounds up
                check_compatibility=False,
            )
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            return QdrantClient(path=str(self.path), force_disable_check_same_thread=True)
        return QdrantClient(location=":memory:", force_disable_check_same_thread=True)

    # -- error translation ------------------------------------------------------------------------

    def _guard(self) -> AbstractContextManager[Any]:
        return self._lock if self.is_local else nullcontext()

    @contextmanager
    def _call(self, collection: str | None = None) -> Iterator[Any]:
        """Run a block against the client, translating qdrant-client, httpx and grpc errors."""
        with self._guard():
            try:
                yield self.client
            except StoreError:
                raise
            except Exception as exc:
                raise self._translate(exc, collection) from exc

    def _translate(self, exc: Exception, collection: str | None) -> StoreError:
        from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
        from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

        where = f"collection {collection!r}: " if collection else ""
        if isinstance(exc, UnexpectedResponse):
            status = exc.status_code or 0
            detail = _server_detail(exc)
            if status == 404:
                return NotFound(self.name, f"{where}not found ({detail})", url=self.url)
            if status == 409:
                return Conflict(self.name, f"{where}{detail}", url=self.url)
            if status in (400, 422):
                return InvalidRequest(self.name, f"{where}{detail}", url=self.url)
            if status in (401, 403):
                return StoreError(self.name, f"{where}the server refused the API key (HTTP {status})", url=self.url)
            if status == 429 or status >= 500:
                return Unavailable(self.name, f"{where}server error HTTP {status} ({detail})", url=self.url)
            return StoreError(self.name, f"{where}unexpected HTTP {status} ({detail})", url=self.url)
        if isinstance(exc, ResourceExhaustedResponse):
            return Unavailable(self.name, f"{where}rate limited, retry after {exc.retry_after_s}s", url=self.url)
        if isinstance(exc, ResponseHandlingException):
            source = exc.source
            if _is_transport_error(source):
                return Unavailable(
                    self.name,
                    f"{where}cannot reach the server within {self.timeout_s:g}s ({type(source).__name__})",
                    url=self.url,
                )
            return StoreError(
                self.name, f"{where}cannot read the server's answer ({type(source).__name__})", url=self.url
            )
        if _is_transport_error(exc):
            return Unavailable(
                self.name,
                f"{where}cannot reach the server within {self.timeout_s:g}s ({type(exc).__name__})",
                url=self.url,
            )
        grpc_error = _translate_grpc(exc)
        if grpc_error is not None:
            cls, detail = grpc_error
            return cls(self.name, f"{where}{detail}", url=self.url)
        if isinstance(exc, RuntimeError) and "already accessed" in str(exc):
            return Unavailable(
                self.name,
                f"local-mode folder {self.path} is open in another process; local mode is single-process "
                "(use a Qdrant server for several processes)",
            )
        if isinstance(exc, ValueError):
            # Local mode reports every refusal as ValueError; the common ones are checked before the call.
            return InvalidRequest(self.name, f"{where}{exc}", url=self.url)
        return StoreError(self.name, f"{where}{type(exc).__name__}: {exc}", url=self.url)

    # -- collections ------------------------------------------------------------------------------

    def ensure_collection(self, collection: str, space: VectorSpace) -> None:
        """Create the collection with its named vector and keyword payload indexes if missing.

        Raises:
            Conflict: the collection exists with another vector name, size or distance.
            Unavailable: the server cannot be reached.
        """
        from qdrant_client import models

        check_collection_name(self.name, collection, url=self.url)
        with self._call(collection) as client:
            existing = self._read_space(client, collection)
            if existing is None:
                try:
                    client.create_collection(
                        collection_name=collection,
                        vectors_config={
                            space.name: models.VectorParams(
                                size=space.dim, distance=models.Distance(_DISTANCES[space.distance])
                            )
                        },
                    )
                    existing = space
                except Exception as exc:
                    # Another process may have created it between our check and our create.
                    existing = self._read_space(client, collection)
                    if existing is None:
                        raise exc from None
            if existing != space:
                raise Conflict(
                    self.name,
                    f"collection {collection!r} exists with vector {_describe(existing)}, "
                    f"not {_describe(space)}; a different embedding model needs a new collection",
                    url=self.url,
                )
            self._spaces[collection] = space
            if not self.is_local:
                # Local mode ignores payload indexes (and warns when asked for one); the server
                # needs them for filtered HNSW search to stay fast.
                info = client.get_collection(collection)
                for field in FILTER_FIELDS:
                    if field not in (info.payload_schema or {}):
                        client.create_payload_index(
                            collection,
                            field_name=field,
                            field_schema=models.PayloadSchemaType.KEYWORD,
                            wait=True,
                        )

    def collections(self) -> list[str]:
        with self._call() as client:
            return sorted(c.name for c in client.get_collections().collections)

    def drop_collection(self, collection: str) -> None:
        """Delete the collection; a missing one is fine."""
        check_collection_name(self.name, collection, url=self.url)
        with self._call(collection) as client:
            self._spaces.pop(collection, None)
            self._warned_large.discard(collection)
            if client.collection_exists(collection):
                client.delete_collection(collection)

    def space(self, collection: str) -> VectorSpace:
        """The collection's vector space (name, size, distance).

        Raises:
            NotFound: no such collection.
        """
        check_collection_name(self.name, collection, url=self.url)
        cached = self._spaces.get(collection)
        if cached is not None:
            return cached
        with self._call(collection) as client:
            found = self._read_space(client, collection)
        if found is None:
            raise NotFound(self.name, f"collection {collection!r} does not exist", url=self.url)
        self._spaces[collection] = found
        return found

    def _read_space(self, client: Any, collection: str) -> VectorSpace | None:
        if not client.collection_exists(collection):
            return None
        vectors = client.get_collection(collection).config.params.vectors
        if not isinstance(vectors, dict) or len(vectors) != 1:
            # Not one of ours (an unnamed or multi-vector collection): describe it so Conflict is clear.
            return VectorSpace(name="unnamed", dim=getattr(vectors, "size", 1) or 1)
        ((name, params),) = vectors.items()
        by_qdrant = {v: k for k, v in _DISTANCES.items()}
        distance = by_qdrant.get(str(getattr(params.distance, "value", params.distance)))
        if distance is None:
            return VectorSpace(name="unsupported-distance", dim=params.size)
        return VectorSpace(name=name, dim=params.size, distance=distance)

    # -- points -----------------------------------------------------------------------------------

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> int:
        """Insert or replace ``points`` by graph id; returns how many were sent.

        Raises:
            InvalidRequest: a vector has the wrong size or a non-finite value.
            NotFound: no such collection.
        """
        from qdrant_client import models

        space = self.space(collection)
        structs = [
            models.PointStruct(
                id=point_uuid(p.id),
                vector={
                    space.name: check_vector(
                        self.name, collection, space, p.vector, what=f"point {p.id!r}", url=self.url
                    )
                },
                payload=stored_payload(self.name, collection, p, url=self.url),
            )
            for p in points
        ]
        for start in range(0, len(structs), UPSERT_BATCH):
            with self._call(collection) as client:
                client.upsert(collection, points=structs[start : start + UPSERT_BATCH], wait=True)
        if self.is_local and structs and collection not in self._warned_large:
            self._warn_if_large(collection)
        return len(structs)

    def _warn_if_large(self, collection: str) -> None:
        with self._call(collection) as client:
            points = client.count(collection, exact=True).count
        if points > self.large_collection_points:
            self._warned_large.add(collection)
            log.warning(
                "vector_local_mode_large",
                collection=collection,
                points=points,
                threshold=self.large_collection_points,
                hint="qdrant-client local mode searches by brute force in Python; use qdrant-edge "
                "(LOREKEEPER_VECTOR_EMBEDDED_ENGINE=edge) or a Qdrant server",
            )

    def get(self, collection: str, ids: Sequence[str]) -> list[VectorPoint]:
        """The points that exist among ``ids``, with vectors and payloads, in the order asked."""
        space = self.space(collection)
        if not ids:
            return []
        with self._call(collection) as client:
            records = client.retrieve(
                collection,
                ids=list({point_uuid(i) for i in ids}),
                with_payload=True,
                with_vectors=[space.name],
            )
        found = {str(r.id): _to_point(space, r) for r in records}
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
        from qdrant_client import models

        space = self.space(collection)
        query = check_vector(self.name, collection, space, vector, what="the query", url=self.url)
        check_limit(self.name, collection, limit, url=self.url)
        with self._call(collection) as client:
            result = client.query_points(
                collection,
                query=query,
                using=space.name,
                query_filter=build_filter(models, filters),
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return scored_hits(space, result.points)

    def search_batch(
        self,
        collection: str,
        vectors: Sequence[Sequence[float]],
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
    ) -> list[list[VectorHit]]:
        """:meth:`search` for each of ``vectors``, as one ``query_batch_points`` request (one round trip
        to a server; local mode runs them one by one).

        Raises:
            InvalidRequest: a query of the wrong size or with non-finite values, or ``limit < 1``.
            NotFound: no such collection.
        """
        from qdrant_client import models

        space = self.space(collection)
        queries = [
            check_vector(self.name, collection, space, vector, what=f"query {n}", url=self.url)
            for n, vector in enumerate(vectors)
        ]
        check_limit(self.name, collection, limit, url=self.url)
        if not queries:
            return []
        qfilter = build_filter(models, filters)
        requests = [
            models.QueryRequest(
                query=query, using=space.name, filter=qfilter, limit=limit, with_payload=True, with_vector=False
            )
            for query in queries
        ]
        with self._call(collection) as client:
            results = client.query_batch_points(collection, requests=requests)
        return [scored_hits(space, result.points) for result in results]

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        """Delete points by graph id; ids that do not exist are ignored."""
        from qdrant_client import models

        self.space(collection)
        if not ids:
            return
        with self._call(collection) as client:
            client.delete(
                collection,
                points_selector=models.PointIdsList(points=[point_uuid(i) for i in ids]),
                wait=True,
            )

    def delete_by_filter(self, collection: str, filters: SearchFilters) -> None:
        """Delete every point matching ``filters``.

        Raises:
            InvalidRequest: ``filters`` sets no field (that would delete everything).
        """
        from qdrant_client import models

        qfilter = build_delete_filter(models, self.name, collection, filters, url=self.url)
        self.space(collection)
        with self._call(collection) as client:
            client.delete(
                collection,
                points_selector=models.FilterSelector(filter=qfilter),
                wait=True,
            )

    def scroll(
        self, collection: str, *, filters: SearchFilters | None = None, batch_size: int = 256
    ) -> Iterator[VectorPoint]:
        """Every point matching ``filters``, with vectors, fetched ``batch_size`` at a time (by point id)."""
        from qdrant_client import models

        space = self.space(collection)
        if batch_size < 1:
            raise InvalidRequest(self.name, f"collection {collection!r}: batch_size must be at least 1", url=self.url)
        qfilter = build_filter(models, filters)
        offset: Any = None
        while True:
            with self._call(collection) as client:
                records, offset = client.scroll(
                    collection,
                    scroll_filter=qfilter,
                    limit=batch_size,
                    offset=offset,
                    with_payload=True,
                    with_vectors=[space.name],
                )
            for record in records:
                yield _to_point(space, record)
            if offset is None:
                return

    def count(self, collection: str, filters: SearchFilters | None = None) -> int:
        """Exact number of points matching ``filters``."""
        from qdrant_client import models

        self.space(collection)
        with self._call(collection) as client:
            return int(client.count(collection, count_filter=build_filter(models, filters), exact=True).count)

    def optimize(self, collection: str) -> bool:
        """Nothing to do: the server indexes as it writes and local mode searches by brute force."""
        self.space(collection)  # NotFound for a missing collection, as on every backend
        return False

    def health(self) -> None:
        """Raise :class:`Unavailable` unless the server answers (local mode: the folder opens)."""
        with self._call() as client:
            client.get_collections()

    def close(self) -> None:
        """Close the client (local mode releases its folder lock); the index reopens on next use."""
        with self._lock:
            super().close()


def _describe(space: VectorSpace) -> str:
    return f"{space.name!r} of size {space.dim} ({space.distance.value})"


def _to_point(space: VectorSpace, record: Any) -> VectorPoint:
    graph_id, payload = split_payload(record.payload)
    vector = record.vector
    if isinstance(vector, dict):
        vector = vector.get(space.name)
    return VectorPoint(id=graph_id or str(record.id), vector=list(vector or []), payload=payload)


def _server_detail(exc: Any) -> str:
    try:
        status = exc.structured().get("status")
        if isinstance(status, dict) and status.get("error"):
            return str(status["error"])[:300]
    except Exception:  # noqa: BLE001 - a body that is not JSON is described by its status line instead
        pass
    return f"HTTP {exc.status_code} {exc.reason_phrase}".strip()


def _is_transport_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError)


def _translate_grpc(exc: Exception) -> tuple[type[StoreError], str] | None:
    # Only reachable if someone enables prefer_grpc; grpc ships with qdrant-client.
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc is a qdrant-client dependency
        return None
    if not isinstance(exc, grpc.RpcError):
        return None
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else ""
    mapping: dict[Any, type[StoreError]] = {
        grpc.StatusCode.UNAVAILABLE: Unavailable,
        grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
        grpc.StatusCode.RESOURCE_EXHAUSTED: Unavailable,
        grpc.StatusCode.NOT_FOUND: NotFound,
        grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
        grpc.StatusCode.ALREADY_EXISTS: Conflict,
    }
    return mapping.get(code, StoreError), f"gRPC {getattr(code, 'name', code)}: {details}"
