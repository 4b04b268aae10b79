"""The graph store on a Bolt server through the official ``neo4j`` driver.

For Neo4j itself (``neo4j://`` or ``bolt://``) this is a thin, strict wrapper: explicit transactions,
auto-commit statements without driver-side retries (so a failure surfaces within ``timeout_s``), driver
exceptions translated to ours, results converted to plain Python.

With ``dialect=FALKORDB`` it talks to a FalkorDB server's experimental Bolt endpoint. That endpoint's
transactions are no-ops and its parameter encoding is unsafe (see :mod:`stores.graph.dialect`), so
parameters are rendered into the query text and transactions use
:class:`~stores.graph.dialect.DeferredWriteTransaction`. The embedded store does not use this path
(docs/adr/0001-embedded-graph.md says why).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import SecretStr

from schemas.errors import Conflict, InvalidRequest, NotSupported, StoreError, Unavailable, redact_url
from schemas.settings import CypherDialect, GraphLocation
from stores.graph import dialect as dl
from stores.graph.base import GraphSchema, GraphTransaction, Record
from stores.lazy import LazyClient
from stores.metrics import GRAPH_QUERY_DURATION


def _neo4j() -> Any:
    import neo4j  # imported lazily: a process that never opens the store never loads the driver

    return neo4j


def to_plain(value: Any) -> Any:
    """Convert a value returned by the neo4j driver into plain Python.

    Node → dict of properties plus ``_labels`` (sorted); Relationship → dict plus ``_type``; Path → a
    list alternating nodes and relationships; neo4j temporal types → ``datetime``/``date``/``time``/
    ``timedelta``; spatial points → dicts; lists and maps recursively.
    """
    neo4j = _neo4j()
    graph, ntime, spatial = neo4j.graph, neo4j.time, neo4j.spatial
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, graph.Node):
        out = {k: to_plain(v) for k, v in value.items()}
        out["_labels"] = sorted(value.labels)
        return out
    if isinstance(value, graph.Relationship):
        out = {k: to_plain(v) for k, v in value.items()}
        out["_type"] = value.type
        return out
    if isinstance(value, graph.Path):
        items: list[Any] = [to_plain(value.start_node)]
        for rel in value.relationships:
            items.append(to_plain(rel))
            items.append(to_plain(rel.end_node))
        return items
    if isinstance(value, ntime.DateTime | ntime.Date | ntime.Time):
        return value.to_native()
    if isinstance(value, ntime.Duration):
        if value.months:
            return value.iso_format()
        return _dt.timedelta(days=value.days, seconds=value.seconds, microseconds=value.nanoseconds // 1000)
    if isinstance(value, spatial.Point):
        out = {"srid": value.srid, "x": value[0], "y": value[1]}
        if len(value) > 2:
            out["z"] = value[2]
        return out
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value


def _record(rec: Any) -> Record:
    return {key: to_plain(rec[key]) for key in rec.keys()}  # noqa: SIM118 - a Record is not a dict


class _Neo4jTransaction:
    """A GraphTransaction over a real driver transaction."""

    def __init__(self, store: Neo4jGraphStore, tx: Any) -> None:
        self._store, self._tx = store, tx

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        try:
            return [_record(r) for r in self._tx.run(query, dict(params or {}))]
        except Exception as exc:
            raise self._store._translate(exc) from exc


class Neo4jGraphStore(LazyClient):
    """Graph store on a Neo4j (or FalkorDB) server reached over Bolt.

    Args:
        url: ``bolt://host:port`` or ``neo4j://host:port`` (FalkorDB: ``bolt://`` only).
        username: user name; ``None`` for a server without authentication.
        password: password, as ``SecretStr`` or ``str``; never shown in messages.
        database: Neo4j database name; ``None`` for the server's default. FalkorDB's Bolt endpoint
            ignores it (it always serves the graph named ``falkordb``).
        dialect: the server's Cypher dialect.
        timeout_s: bound on connecting and on acquiring a connection, in seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        username: str | SecretStr | None = None,
        password: str | SecretStr | None = None,
        database: str | None = None,
        dialect: CypherDialect = CypherDialect.NEO4J,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.dialect = dialect
        self.database = database
        self.timeout_s = float(timeout_s)
        self.name = "neo4j graph" if dialect is CypherDialect.NEO4J else "falkordb graph (bolt)"
        self._username = username.get_secret_value() if isinstance(username, SecretStr) else username
        self._password = password if isinstance(password, SecretStr) or password is None else SecretStr(password)
        if dialect is CypherDialect.FALKORDB and not url.lower().startswith("bolt"):
            raise InvalidRequest(self.name, "FalkorDB speaks bolt:// only, not neo4j:// routing", url=url)

    @classmethod
    def from_location(cls, location: GraphLocation, *, timeout_s: float = 5.0) -> Neo4jGraphStore:
        """Build the store a :class:`GraphLocation` describes (nothing connects until first use)."""
        if not location.url:
            raise InvalidRequest("neo4j graph", "a server location needs a url")
        return cls(
            location.url,
            username=location.username,
            password=location.password,
            database=location.database,
            dialect=location.dialect,
            timeout_s=timeout_s,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={redact_url(self.url)!r}, dialect={self.dialect.value!r})"

    # -- connection ---------------------------------------------------------------------------------

    def _open(self) -> Any:
        neo4j = _neo4j()
        auth = None
        if self._username is not None or self._password is not None:
            auth = (self._username or "", self._password.get_secret_value() if self._password else "")
        try:
            return neo4j.GraphDatabase.driver(
                self.url,
                auth=auth,
                connection_timeout=self.timeout_s,
                connection_acquisition_timeout=self.timeout_s,
                # bound every wait: no hidden retries behind run(), no minute-long default deadlines
                max_transaction_retry_time=0.0,
                liveness_check_timeout=max(1.0, self.timeout_s),
                notifications_min_severity="OFF",
                telemetry_disabled=True,
                user_agent="lorekeeper",
            )
        except Exception as exc:
            raise self._translate(exc) from exc

    def _session(self) -> Any:
        kwargs: dict[str, Any] = {"disable_auto_commit_retries": True}
        if self.database and self.dialect is CypherDialect.NEO4J:
            kwargs["database"] = self.database
        return self.client.session(**kwargs)

    # -- errors -------------------------------------------------------------------------------------

    def _translate(self, exc: BaseException) -> StoreError:
        """Map a driver (or socket) exception to our error tree, without secrets in the message."""
        if isinstance(exc, StoreError):
            return exc
        neo4j = _neo4j()
        ex = neo4j.exceptions
        detail = f"{type(exc).__name__}: {_short(exc)}"
        if isinstance(exc, ex.AuthError):
            return Unavailable(self.name, f"authentication failed ({type(exc).__name__})", url=self.url)
        if isinstance(exc, ex.IncompleteCommit):
            return Unavailable(self.name, f"connection lost during commit; outcome unknown ({detail})", url=self.url)
        if isinstance(exc, ex.ServiceUnavailable | ex.SessionExpired | ex.ConnectionPoolError | OSError | TimeoutError):
            return Unavailable(self.name, f"cannot reach the server ({detail})", url=self.url)
        if isinstance(exc, ex.TransientError):
            return Unavailable(self.name, f"transient failure, retry ({detail})", url=self.url)
        if isinstance(exc, ex.ConstraintError):
            return Conflict(self.name, f"constraint violated ({detail})", url=self.url)
        message = str(getattr(exc, "message", None) or exc)
        if self.dialect is CypherDialect.FALKORDB and "constraint violation" in message:
            return Conflict(self.name, f"constraint violated ({detail})", url=self.url)
        if self.dialect is CypherDialect.FALKORDB and getattr(exc, "code", None) == _FALKOR_BOLT_ERROR:
            # FalkorDB's Bolt endpoint answers every failure with this one code and no message.
            return InvalidRequest(
                self.name,
                "FalkorDB refused the query; its Bolt endpoint does not say why (a syntax or runtime "
                "error, or a uniqueness violation)",
                url=self.url,
            )
        if isinstance(exc, ex.Neo4jError | ex.DriverError) and not isinstance(exc, ex.DatabaseError):
            return InvalidRequest(self.name, f"the server refused the query ({detail})", url=self.url)
        if isinstance(exc, dl.UnsupportedQuery):
            return NotSupported(self.name, str(exc), url=self.url)
        if isinstance(exc, dl.DialectError):
            return InvalidRequest(self.name, str(exc), url=self.url)
        return StoreError(self.name, f"unexpected failure ({detail})", url=self.url)

    # -- queries ------------------------------------------------------------------------------------

    def _prepare(self, query: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        if self.dialect is CypherDialect.NEO4J:
            return query, dict(params or {})
        try:
            return dl.inline_params(dl.translate(query, self.dialect), params), {}
        except dl.DialectError as exc:
            raise self._translate(exc) from None

    def _run_prepared(self, query: str, params: dict[str, Any]) -> list[Record]:
        started = time.perf_counter()
        try:
            with self._session() as session:
                return [_record(r) for r in session.run(query, params)]
        except Exception as exc:
            raise self._translate(exc) from exc
        finally:
            kind = "write" if dl.is_write(query) else "read"
            GRAPH_QUERY_DURATION.labels(query_type=kind).observe(time.perf_counter() - started)

    def _run_translated(self, text: str, params: Mapping[str, Any]) -> list[Record]:
        """Run FalkorDB text (already translated) with its parameters rendered into it."""
        try:
            query = dl.inline_params(text, params)
        except dl.DialectError as exc:
            raise self._translate(exc) from None
        return self._run_prepared(query, {})

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        """Run one auto-committed statement and return its records as plain dicts.

        Raises:
            Conflict: a uniqueness constraint was violated.
            InvalidRequest: the query is malformed or refused.
            Unavailable: the server cannot be reached within ``timeout_s``.
        """
        text, bolt_params = self._prepare(query, params)
        return self._run_prepared(text, bolt_params)

    def stream(self, query: str, params: Mapping[str, Any] | None = None) -> Iterator[Record]:
        """Yield the records of a read query one at a time (the session stays open while iterating)."""
        text, bolt_params = self._prepare(query, params)
        try:
            with self._session() as session:
                for rec in session.run(text, bolt_params):
                    yield _record(rec)
        except GeneratorExit:
            raise
        except Exception as exc:
            raise self._translate(exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[GraphTransaction]:
        """An explicit transaction: commits when the block ends, rolls back if it raises.

        On FalkorDB the writes are queued and applied together at commit (see
        :class:`~stores.graph.dialect.DeferredWriteTransaction`).
        """
        if self.dialect is CypherDialect.FALKORDB:
            ftx = dl.DeferredWriteTransaction(self._run_translated, store=self.name, url=self.url)
            try:
                yield ftx
            except BaseException:
                ftx.rollback()
                raise
            ftx.commit()
            return
        try:
            session = self._session()
            tx = session.begin_transaction()
        except Exception as exc:
            raise self._translate(exc) from exc
        try:
            try:
                yield _Neo4jTransaction(self, tx)
            except BaseException:
                with contextlib.suppress(Exception):  # the caller's exception matters more
                    tx.rollback()
                raise
            try:
                tx.commit()
            except Exception as exc:
                raise self._translate(exc) from exc
        finally:
            with contextlib.suppress(Exception):  # a broken session must not mask the real error
                session.close()

    def ensure_schema(self, schema: GraphSchema) -> None:
        """Create the constraints and indexes of ``schema``; safe to call at every start-up.

        On FalkorDB over Bolt, indexes are created but uniqueness constraints cannot be (they need the
        redis command ``GRAPH.CONSTRAINT``): they are checked to exist instead.

        Raises:
            NotSupported: a FalkorDB server lacks a constraint of ``schema``.
        """
        try:
            statements = dl.schema_ddl(schema, self.dialect)
        except dl.DialectError as exc:
            raise self._translate(exc) from None
        existing: set[tuple[str, str]] = set()
        if self.dialect is CypherDialect.FALKORDB:
            # its Bolt errors carry no message, so "already indexed" cannot be told apart: look first
            rows = self._run_prepared("CALL db.indexes() YIELD label, properties RETURN label, properties", {})
            existing = {(r["label"], p) for r in rows for p in r["properties"]}
        for stmt in statements:
            if isinstance(stmt, dl.RedisCommand):
                continue
            if self.dialect is CypherDialect.FALKORDB and _index_target(stmt) in existing:
                continue
            try:
                self._run_prepared(stmt, {})
            except InvalidRequest as exc:
                if "already indexed" not in exc.message:
                    raise
        if self.dialect is CypherDialect.FALKORDB and schema.constraints:
            rows = self._run_prepared("CALL db.constraints() YIELD label, properties, status RETURN *", {})
            present = {(r["label"], tuple(r["properties"])) for r in rows if r.get("status") != "FAILED"}
            missing = [f"{c.label}.{c.property}" for c in schema.constraints if (c.label, (c.property,)) not in present]
            if missing:
                raise NotSupported(
                    self.name,
                    f"uniqueness constraints missing on {', '.join(missing)}; FalkorDB creates them only "
                    "with GRAPH.CONSTRAINT over the redis protocol",
                    url=self.url,
                )

    def health(self) -> None:
        """Raise ``Unavailable`` unless the server answers a trivial query."""
        self.run("RETURN 1 AS ok")

    def close(self) -> None:
        """Close the driver; the store reopens on next use."""
        with contextlib.suppress(Exception):  # a driver that fails to close is gone either way
            super().close()


_FALKOR_BOLT_ERROR = "Neo.DatabaseError.General.UnknownError"


def _index_target(statement: str) -> tuple[str, str] | None:
    """``(label, property)`` of a ``CREATE INDEX FOR (n:Label) ON (n.prop)`` statement."""
    match = re.search(r"FOR \(n:(\w+)\) ON \(n\.(\w+)\)", statement)
    return (match.group(1), match.group(2)) if match else None


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
