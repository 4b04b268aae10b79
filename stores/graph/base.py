"""The graph store protocol: the system of record, spoken to in parameterised Cypher.

Both backends run the same query text through the official ``neo4j`` driver; where the engines'
Cypher differs, the difference lives in :mod:`stores.graph.dialect` and nowhere else. Results come
back as plain Python values: nodes and relationships become dicts of their properties (with
``_labels`` / ``_type`` added), so callers never see driver objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from schemas.settings import CypherDialect

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class UniqueConstraint:
    label: str
    property: str = "uid"


@dataclass(frozen=True, slots=True)
class PropertyIndex:
    label: str
    property: str


@dataclass(frozen=True, slots=True)
class GraphSchema:
    """Constraints and indexes created at start-up (idempotently)."""

    constraints: tuple[UniqueConstraint, ...] = ()
    indexes: tuple[PropertyIndex, ...] = field(default_factory=tuple)


@runtime_checkable
class GraphTransaction(Protocol):
    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        """Run one statement inside the transaction and return its records."""
        ...


@runtime_checkable
class GraphStore(Protocol):
    """Parameterised Cypher with all-or-nothing transactions.

    ``run`` is one auto-committed statement; ``transaction()`` yields a :class:`GraphTransaction` that
    commits when the block ends and rolls back (writing nothing) if it raises. A uniqueness violation
    raises ``Conflict``; a syntax error ``InvalidRequest``; an unreachable server ``Unavailable``.
    """

    name: str
    dialect: CypherDialect

    def ensure_schema(self, schema: GraphSchema) -> None: ...

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]: ...

    def transaction(self) -> AbstractContextManager[GraphTransaction]: ...

    def stream(self, query: str, params: Mapping[str, Any] | None = None) -> Iterator[Record]:
        """Records of a read query, one at a time, for results too large to hold."""
        ...

    def health(self) -> None: ...

    def close(self) -> None: ...
