"""The embedded graph: a private FalkorDB server per data folder, spoken to over a unix socket.

The server process (start, folder locks, state record, watchdog, stop) is
:class:`~stores.graph.falkordb_server.FalkorServer`, re-exported here. This module is the store:

* healing: every connection remembers the server it was opened on; when any store object of the
  process restarts the server (new pid, new password), the others reconnect on their next call.

:class:`EmbeddedFalkorGraphStore` implements the graph protocol over it with ``GRAPH.QUERY``, the
shared dialect module (query rewrites, parameter rendering, all-or-nothing transactions) and FalkorDB's
typed "compact" replies, converted to the same plain Python as the Neo4j store returns.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schemas.errors import Conflict, InvalidRequest, NotSupported, StoreError, Unavailable
from schemas.settings import CypherDialect, GraphLocation
from stores.graph import dialect as dl
from stores.graph.base import GraphSchema, GraphTransaction, Record
from stores.graph.falkordb_server import STORE_NAME, FalkorServer, no_retry
from stores.lazy import LazyClient
from stores.metrics import GRAPH_QUERY_DURATION

__all__ = ["GRAPH", "STORE_NAME", "CompactDecoder", "EmbeddedFalkorGraphStore", "FalkorServer"]

#: The graph every embedded store uses (also the one FalkorDB's Bolt endpoint serves).
GRAPH = "falkordb"


# -- FalkorDB compact replies → plain Python -----------------------------------------------------

_T_NULL, _T_STRING, _T_INTEGER, _T_BOOLEAN, _T_DOUBLE, _T_ARRAY = 1, 2, 3, 4, 5, 6
_T_EDGE, _T_NODE, _T_PATH, _T_MAP, _T_POINT, _T_VECTORF32 = 7, 8, 9, 10, 11, 12
_T_DATETIME, _T_DATE, _T_TIME, _T_DURATION = 13, 14, 15, 16


class CompactDecoder:
    """Decodes ``GRAPH.QUERY --compact`` replies; label, type and key ids resolve through the graph.

    Args:
        fetch_names: returns the graph's names of one kind (``labels``, ``relationshipTypes``,
            ``propertyKeys``) in id order; called again when an id is not known yet.
    """

    def __init__(self, fetch_names: Callable[[str], list[str]]) -> None:
        self._fetch = fetch_names
        self._names: dict[str, list[str]] = {"labels": [], "relationshipTypes": [], "propertyKeys": []}
        self._lock = threading.Lock()

    def _name(self, kind: str, index: int) -> str:
        names = self._names[kind]
        if index >= len(names):
            with self._lock:
                names = self._names[kind] = self._fetch(kind)
            if index >= len(names):
                raise StoreError(STORE_NAME, f"unknown {kind} id {index} in a reply")
        return names[index]

    def records(self, reply: list[Any]) -> list[Record]:
        if len(reply) < 3:  # a write without RETURN answers with statistics only
            return []
        header, rows = reply[0], reply[1]
        columns = [_text(col[1]) for col in header]
        return [{col: self.value(cell) for col, cell in zip(columns, row, strict=True)} for row in rows]

    def value(self, cell: list[Any]) -> Any:
        kind, raw = int(cell[0]), cell[1]
        if kind == _T_NULL:
            return None
        if kind == _T_STRING:
            return _text(raw)
        if kind == _T_INTEGER:
            return int(raw)
        if kind == _T_BOOLEAN:
            return _text(raw) == "true"
        if kind == _T_DOUBLE:
            return float(raw)
        if kind == _T_ARRAY:
            return [self.value(item) for item in raw]
        if kind == _T_MAP:
            return {_text(raw[i]): self.value(raw[i + 1]) for i in range(0, len(raw), 2)}
        if kind == _T_NODE:
            return self._node(raw)
        if kind == _T_EDGE:
            return self._edge(raw)
        if kind == _T_PATH:
            nodes, edges = self.value(raw[0]), self.value(raw[1])
            items: list[Any] = [nodes[0]] if nodes else []
            for edge, node in zip(edges, nodes[1:], strict=False):
                items += [edge, node]
            return items
        if kind == _T_DATETIME:
            return _dt.datetime.fromtimestamp(int(raw), tz=_dt.UTC)
        if kind == _T_DATE:
            return _dt.datetime.fromtimestamp(int(raw), tz=_dt.UTC).date()
        if kind == _T_TIME:
            return (_dt.datetime.min + _dt.timedelta(seconds=int(raw) % 86400)).time()
        if kind == _T_DURATION:
            return _dt.timedelta(seconds=int(raw))
        if kind == _T_POINT:
            return {"latitude": float(raw[0]), "longitude": float(raw[1])}
        if kind == _T_VECTORF32:
            return [float(x) for x in raw]
        raise StoreError(STORE_NAME, f"unknown value type {kind} in a reply")

    def _props(self, raw: list[Any]) -> dict[str, Any]:
        return {self._name("propertyKeys", int(p[0])): self.value([p[1], p[2]]) for p in raw}

    def _node(self, raw: list[Any]) -> dict[str, Any]:
        out = self._props(raw[2])
        out["_labels"] = sorted(self._name("labels", int(i)) for i in raw[1])
        return out

    def _edge(self, raw: list[Any]) -> dict[str, Any]:
        out = self._props(raw[4])
        out["_type"] = self._name("relationshipTypes", int(raw[1]))
        return out


def _text(raw: Any) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


# -- the store ------------------------------------------------------------------------------------


class _Connection:
    """What the store opens lazily: the shared server (counted) and a redis client on its socket."""

    def __init__(self, server: FalkorServer, *, timeout_s: float, query_timeout_s: float) -> None:
        import redis

        self.server = server
        self.server_pid = server.pid  # the server this client was opened on (its password, its socket)
        self.redis = redis.Redis(
            unix_socket_path=str(server.socket_path),
            password=server.password,
            protocol=2,
            socket_connect_timeout=timeout_s,
            socket_timeout=query_timeout_s,
            retry=no_retry(),
            max_connections=64,
        )
        self.decoder = CompactDecoder(self._fetch_names)

    def _fetch_names(self, kind: str) -> list[str]:
        reply = self.redis.execute_command("GRAPH.RO_QUERY", GRAPH, f"CALL db.{kind}()", "--compact")
        return [_text(row[0][1]) for row in reply[1]]

    def close(self) -> None:
        try:
            self.redis.close()
        finally:
            self.server.release()


class EmbeddedFalkorGraphStore(LazyClient):
    """The embedded graph store: FalkorDB in a private server process under ``path``.

    Nothing starts until first use; the first use starts (or attaches to) the folder's server.

    Args:
        path: the data folder (append-only file, config, state, log, lock).
        timeout_s: bound on connecting to the server, in seconds. A query may run longer (up to
            ``query_timeout_s``) because an embedded engine is never "unreachable", only busy.
        query_timeout_s: bound on one query's reply; default ``max(120, 24 * timeout_s)``.
    """

    dialect = CypherDialect.FALKORDB

    def __init__(self, path: str | Path, *, timeout_s: float = 5.0, query_timeout_s: float | None = None) -> None:
        self.path = Path(path).expanduser().absolute()
        self.timeout_s = float(timeout_s)
        self.query_timeout_s = float(query_timeout_s or max(120.0, 24 * self.timeout_s))
        self.name = STORE_NAME
        self.url = f"file://{self.path}"

    @classmethod
    def from_location(cls, location: GraphLocation, *, timeout_s: float = 5.0) -> EmbeddedFalkorGraphStore:
        """Build the store a :class:`GraphLocation` describes (nothing starts until first use)."""
        if location.path is None:
            raise InvalidRequest(STORE_NAME, "the embedded graph needs a data folder")
        return cls(location.path, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.path)!r})"

    def _open(self) -> _Connection:
        server = FalkorServer.for_path(self.path, start_timeout_s=max(60.0, self.timeout_s)).acquire()
        try:
            return _Connection(server, timeout_s=self.timeout_s, query_timeout_s=self.query_timeout_s)
        except Exception:
            server.release()
            raise

    def _conn(self) -> _Connection:
        """The open connection; a failure to (re)start or reach the server becomes our error."""
        try:
            conn = self.client
            if conn.server_pid != conn.server.pid or not conn.server.alive():
                # It died after the last call finished (or while it was failing and the death was
                # not yet visible), or another store object of this process already restarted it
                # with a new password: start afresh or reattach rather than fail here.
                self._drop(conn)
                conn = self.client
            return conn
        except Exception as exc:
            raise self._translate(exc) from exc

    @property
    def server(self) -> FalkorServer:
        """The server process behind this store (started if needed)."""
        return self.client.server

    # -- errors -------------------------------------------------------------------------------------

    def _translate(self, exc: BaseException, conn: _Connection | None = None) -> StoreError:
        import redis

        rex = redis.exceptions
        if isinstance(exc, StoreError):
            return exc
        detail = " ".join(str(exc).split())[:300]
        if isinstance(exc, dl.UnsupportedQuery):
            return NotSupported(self.name, str(exc), url=self.url)
        if isinstance(exc, dl.DialectError):
            return InvalidRequest(self.name, str(exc), url=self.url)
        if isinstance(exc, rex.AuthenticationError):
            if conn is not None:
                # A server restarted by another process has a new password: reattach on next use.
                self._drop(conn)
            return Unavailable(self.name, "the server refused the stored credentials", url=self.url)
        if isinstance(exc, rex.ConnectionError | rex.TimeoutError | OSError):
            if conn is not None and not conn.server.alive():
                # The server died (crash, kill): drop this connection so the next call restarts it
                # from its append-only file. This call still fails: its write may or may not be in.
                self._drop(conn)
                return Unavailable(
                    self.name, f"the server process died ({detail}); it restarts on next use", url=self.url
                )
            return Unavailable(self.name, f"no answer from the server ({type(exc).__name__}: {detail})", url=self.url)
        if isinstance(exc, rex.ResponseError):
            if "constraint violation" in detail:
                return Conflict(self.name, detail, url=self.url)
            if "timed out" in detail or "Max pending queries" in detail:
                return Unavailable(self.name, detail, url=self.url)
            return InvalidRequest(self.name, detail, url=self.url)
        return StoreError(self.name, f"unexpected failure ({type(exc).__name__}: {detail})", url=self.url)

    def _drop(self, conn: _Connection) -> None:
        lock = self.__dict__.setdefault("_open_lock", threading.Lock())
        with lock:
            if self._client is conn:
                self._client = None
                with contextlib.suppress(Exception):
                    conn.close()

    # -- queries ------------------------------------------------------------------------------------

    def _execute(self, text: str, params: Mapping[str, Any], *, read_only: bool = False) -> list[Record]:
        """Run an already translated query; parameters are rendered into its ``CYPHER`` header."""
        try:
            query = dl.inline_params(text, params)
        except dl.DialectError as exc:
            raise self._translate(exc) from None
        conn = self._conn()
        started = time.perf_counter()
        try:
            reply = conn.redis.execute_command(
                "GRAPH.RO_QUERY" if read_only else "GRAPH.QUERY", GRAPH, query, "--compact"
            )
            return conn.decoder.records(reply)
        except Exception as exc:
            raise self._translate(exc, conn) from exc
        finally:
            kind = "read" if read_only or not dl.is_write(text) else "write"
            GRAPH_QUERY_DURATION.labels(query_type=kind).observe(time.perf_counter() - started)

    def _prepare(self, query: str) -> str:
        try:
            return dl.translate(query, CypherDialect.FALKORDB)
        except dl.DialectError as exc:
            raise self._translate(exc) from None

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        """Run one statement, atomically, and return its records as plain dicts.

        Raises:
            Conflict: a uniqueness constraint was violated (nothing of the statement is written).
            InvalidRequest: the query or a parameter is malformed, or FalkorDB refused it.
            NotSupported: Neo4j syntax with no FalkorDB rewrite.
            Unavailable: the server does not answer (it is restarted on the next call if it died).
        """
        return self._execute(self._prepare(query), params or {})

    def stream(self, query: str, params: Mapping[str, Any] | None = None) -> Iterator[Record]:
        """Yield the records of a query. FalkorDB sends a reply whole, so this saves no server memory."""
        text = self._prepare(query)
        yield from self._execute(text, params or {}, read_only=not dl.is_write(text))

    @contextmanager
    def transaction(self) -> Iterator[GraphTransaction]:
        """An all-or-nothing transaction (see :class:`~stores.graph.dialect.DeferredWriteTransaction`)."""
        tx = dl.DeferredWriteTransaction(self._execute, store=self.name, url=self.url)
        try:
            yield tx
        except BaseException:
            tx.rollback()
            raise
        tx.commit()

    def ensure_schema(self, schema: GraphSchema) -> None:
        """Create the indexes and uniqueness constraints of ``schema``; safe to call at every start-up.

        Raises:
            Conflict: existing nodes already violate a uniqueness constraint (it is not kept).
        """
        import redis

        try:
            statements = dl.schema_ddl(schema, self.dialect, graph=GRAPH)
        except dl.DialectError as exc:
            raise self._translate(exc) from None
        conn = self._conn()
        for stmt in statements:
            if isinstance(stmt, dl.RedisCommand):
                try:
                    conn.redis.execute_command(*stmt.args)
                except redis.exceptions.ResponseError as exc:
                    if "already exists" not in str(exc):
                        raise self._translate(exc, conn) from exc
                except Exception as exc:
                    raise self._translate(exc, conn) from exc
                continue
            try:
                self._execute(stmt, {})
            except InvalidRequest as exc:
                if "already indexed" not in exc.message:
                    raise
        self._await_constraints(schema)

    def _await_constraints(self, schema: GraphSchema) -> None:
        # GRAPH.CONSTRAINT answers PENDING and checks existing nodes in the background.
        wanted = {(c.label, c.property) for c in schema.constraints}
        deadline = time.monotonic() + max(30.0, self.timeout_s)
        while wanted:
            rows = self._execute(
                "CALL db.constraints() YIELD label, properties, status RETURN label, properties, status",
                {},
                read_only=True,
            )
            status = {(r["label"], r["properties"][0]): r["status"] for r in rows if len(r["properties"]) == 1}
            failed = sorted(k for k in wanted if status.get(k) == "FAILED")
            if failed:
                conn = self._conn()
                for label, prop in failed:
                    with contextlib.suppress(Exception):
                        conn.redis.execute_command(
                            "GRAPH.CONSTRAINT", "DROP", GRAPH, "UNIQUE", "NODE", label, "PROPERTIES", "1", prop
                        )
                names = ", ".join(f"{label}.{prop}" for label, prop in failed)
                raise Conflict(self.name, f"existing nodes violate the uniqueness of {names}", url=self.url)
            wanted = {k for k in wanted if status.get(k) != "OPERATIONAL"}
            if wanted and time.monotonic() > deadline:
                raise Unavailable(self.name, "uniqueness constraints still pending", url=self.url)
            if wanted:
                time.sleep(0.02)

    def health(self) -> None:
        """Raise ``Unavailable`` unless the server answers (starting it if needed)."""
        conn = self._conn()
        try:
            conn.redis.ping()
        except Exception as exc:
            raise self._translate(exc, conn) from exc
