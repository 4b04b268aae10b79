"""Lorekeeper's own error tree.

Backend exceptions (neo4j, opensearch-py, minio, qdrant-client, tantivy, …) are translated into these
at the edge of each store, so callers handle one family of errors whatever backend is configured.

Every exception here is picklable (Ray ships exceptions between processes) and carries the HTTP
status code an API should answer with. Messages are built from typed arguments and never contain
secrets: URLs are redacted before they are put into a message.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str | None) -> str:
    """Return ``url`` without user info or query string, so it is safe for logs and messages."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if not parts.scheme:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class LorekeeperError(Exception):
    """Base of every error Lorekeeper raises on purpose."""

    status_code: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the message and context so subclasses with their own __init__ pickle too.
        return (_rebuild, (type(self), self.message, self.context))

    @property
    def client_message(self) -> str:
        """The message for a client: the full one, minus what only the operator should see."""
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The JSON body an API returns for this error."""
        return {"error": self.code, "message": self.client_message}


def _rebuild(cls: type[LorekeeperError], message: str, context: dict[str, Any]) -> LorekeeperError:
    err = cls.__new__(cls)
    LorekeeperError.__init__(err, message, **context)
    for key, value in context.items():
        setattr(err, key, value)
    return err


class ConfigError(LorekeeperError):
    """A setting is missing, malformed or contradicts another one."""

    status_code = 500
    code = "config_error"

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}", variable=variable, problem=problem)
        self.variable = variable
        self.problem = problem


class StoreError(LorekeeperError):
    """An operation on one of the four stores failed."""

    status_code = 500
    code = "store_error"

    def __init__(self, store: str, message: str, *, url: str | None = None) -> None:
        where = f" at {redact_url(url)}" if url else ""
        super().__init__(f"{store}{where}: {message}", store=store, url=redact_url(url), detail=message)
        self.store = store
        self.url = redact_url(url)
        self.detail = message

    @property
    def client_message(self) -> str:
        """The store and what went wrong, without where the store lives: a data folder's path or a
        server's address is the operator's business (the logs carry the full message)."""
        return f"{self.store}: {self.detail}"


class NotFound(StoreError):
    """The id, key or collection does not exist."""

    status_code = 404
    code = "not_found"


class Conflict(StoreError):
    """The write clashes with what is stored (a uniqueness constraint, a stale version)."""

    status_code = 409
    code = "conflict"


class InvalidRequest(StoreError):
    """The store refused the request as malformed (bad query, wrong vector size, bad key)."""

    status_code = 400
    code = "invalid_request"


class Unavailable(StoreError):
    """The store cannot be reached or did not answer in time; retrying later may succeed."""

    status_code = 503
    code = "store_unavailable"


class NotSupported(StoreError):
    """The backend cannot do this operation (for example a presigned URL on a local folder)."""

    status_code = 501
    code = "not_supported"
