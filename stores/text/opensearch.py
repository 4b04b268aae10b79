"""The server full-text index: OpenSearch through opensearch-py 3.x (keyword-only API arguments).

The request bodies are built by the module-level functions below (mapping, query, highlight, bulk
actions), so they can be asserted without a server; :class:`OpenSearchTextIndex` sends them and
translates opensearch-py's exceptions into the store error tree at the edge.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from opensearchpy import OpenSearch, helpers
from opensearchpy.exceptions import (
    AuthenticationException,
    AuthorizationException,
    ConflictError,
    ConnectionError,
    ConnectionTimeout,
    ImproperlyConfigured,
    NotFoundError,
    OpenSearchException,
    RequestError,
    TransportError,
)
from pydantic import SecretStr

from schemas.errors import Conflict, InvalidRequest, NotFound, StoreError, Unavailable
from schemas.search import FILTER_FIELDS, SearchFilters
from schemas.settings import TextLocation
from stores.lazy import LazyClient
from stores.text.analysis import (
    FIELD_TIE_BREAKER,
    HIGHLIGHT_FIELDS,
    HIGHLIGHT_FRAGMENT_CHARS,
    HIGHLIGHT_POST,
    HIGHLIGHT_PRE,
    MAX_LIMIT,
    SEARCH_FIELDS,
    document_source,
    keyword_fields,
)
from stores.text.base import TextDocument, TextHit

STORE = "opensearch"

# The analyzer that matches the embedded backend's English stemming (see stores/text/tantivy.py).
TEXT_ANALYZER = "english"


class RefreshPolicy(StrEnum):
    """When a write becomes visible to search (OpenSearch's ``refresh`` parameter).

    ``WAIT_FOR`` returns once the next scheduled refresh has made the write visible: read-your-writes
    without forcing extra segments. ``NONE`` suits bulk re-indexing followed by one :meth:`refresh`.
    ``IMMEDIATE`` forces a refresh per request, for tests and tiny indexes only.
    """

    NONE = "false"
    WAIT_FOR = "wait_for"
    IMMEDIATE = "true"


# -- request bodies ---------------------------------------------------------------------------------


def index_body() -> dict[str, Any]:
    """The index creation body: an explicit, strict mapping.

    ``dynamic: strict`` turns a stray field into a per-document error instead of a silent new mapping;
    ``data`` is kept in ``_source`` and returned with hits, but never indexed (``enabled: false``).
    """
    properties: dict[str, Any] = {"id": {"type": "keyword"}}
    for name in SEARCH_FIELDS:
        properties[name] = {"type": "text", "analyzer": TEXT_ANALYZER}
    for name in FILTER_FIELDS:
        properties[name] = {"type": "keyword"}
    properties["data"] = {"type": "object", "enabled": False}
    return {"mappings": {"dynamic": "strict", "properties": properties}}


def filter_clauses(filters: SearchFilters | None) -> list[dict[str, Any]]:
    """One ``terms`` clause per set filter field: any-of within a field, every clause must match."""
    if filters is None:
        return []
    return [{"terms": {name: list(values)}} for name, values in filters.conditions().items()]


def filter_query(filters: SearchFilters | None) -> dict[str, Any]:
    """A query that only filters (no scoring): ``match_all`` when nothing is filtered."""
    clauses = filter_clauses(filters)
    if not clauses:
        return {"match_all": {}}
    return {"bool": {"filter": clauses}}


def boosted_fields() -> list[str]:
    """``multi_match`` field names with their boosts: ``["title^2", "heading^0.5", "text"]``."""
    return [f"{name}^{boost:g}" if boost != 1.0 else name for name, boost in SEARCH_FIELDS.items()]


def search_body(
    query: str, *, filters: SearchFilters | None = None, limit: int = 10, highlight: bool = True
) -> dict[str, Any]:
    """The ``_search`` body: multi_match over boosted fields, filters in filter context, highlights.

    The query text goes into ``multi_match``, which analyses it as plain words and interprets no
    syntax, so hostile strings cannot fail the request (unlike ``query_string``).
    """
    must = {
        "multi_match": {
            "query": query,
            "fields": boosted_fields(),
            "type": "best_fields",
            "tie_breaker": FIELD_TIE_BREAKER,
        }
    }
    body: dict[str, Any] = {
        "size": limit,
        "track_total_hits": False,
        "query": {"bool": {"must": [must], "filter": filter_clauses(filters)}},
    }
    if highlight:
        body["highlight"] = {
            "pre_tags": [HIGHLIGHT_PRE],
            "post_tags": [HIGHLIGHT_POST],
            # Escape the stored text around the tags: snippets are inserted into pages as HTML.
            "encoder": "html",
            "fields": {
                name: {"fragment_size": HIGHLIGHT_FRAGMENT_CHARS, "number_of_fragments": 1} for name in HIGHLIGHT_FIELDS
            },
        }
    return body


def highlight_body(query: str, ids: Sequence[str]) -> dict[str, Any]:
    """A ``_search`` body for the highlights of documents ``ids``: :func:`search_body`'s query and
    highlights, those ids only, no ``_source``."""
    body = search_body(query, limit=len(ids), highlight=True)
    body["query"]["bool"]["filter"].append({"ids": {"values": list(ids)}})
    body["_source"] = False
    return body


def upsert_actions(index: str, docs: Sequence[TextDocument]) -> list[dict[str, Any]]:
    """Bulk ``index`` actions keyed by the document id: writing the same id again replaces it."""
    return [{"_op_type": "index", "_index": index, "_id": doc.id, "_source": document_source(doc)} for doc in docs]


def delete_actions(index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Bulk ``delete`` actions, one per distinct id."""
    return [{"_op_type": "delete", "_index": index, "_id": doc_id} for doc_id in dict.fromkeys(ids)]


def hit_from_response(raw: dict[str, Any]) -> TextHit:
    """A :class:`TextHit` from one element of ``hits.hits``."""
    source = raw.get("_source") or {}
    highlights = raw.get("highlight") or {}
    return TextHit(
        id=raw["_id"],
        score=float(raw.get("_score") or 0.0),
        title=source.get("title", ""),
        heading=source.get("heading", ""),
        text=source.get("text", ""),
        highlights=[fragment for name in HIGHLIGHT_FIELDS for fragment in highlights.get(name, [])],
        fields=keyword_fields(source),
        data=source.get("data") or {},
    )


def _stored_document(response: dict[str, Any]) -> TextDocument:
    """A :class:`TextDocument` from a ``get`` answer or one ``docs`` element of an ``_mget`` answer."""
    source = response.get("_source") or {}
    return TextDocument(
        id=response["_id"],
        title=source.get("title", ""),
        heading=source.get("heading", ""),
        text=source.get("text", ""),
        fields=keyword_fields(source),
        data=source.get("data") or {},
    )


# -- the index ---------------------------------------------------------------------------------------


class OpenSearchTextIndex(LazyClient):
    """Full-text index on an OpenSearch cluster.

    Args:
        url: ``http(s)://host:port`` of the cluster (no credentials in it).
        name: the index name.
        username: basic-auth user, with ``password``.
        password: basic-auth password.
        verify_certs: check the server's TLS certificate.
        timeout_s: per-request timeout for reads and health checks. A read takes at most
            ``(1 + max_retries) * timeout_s`` before ``Unavailable``.
        max_retries: retries on connection errors and 502/503/504 (never on a timeout).
        write_timeout_s: per-request timeout for bulk chunks and delete-by-query, which do more work
            than a lookup; defaults to ``max(timeout_s, 30)``.
        refresh: when writes become visible to search (see :class:`RefreshPolicy`).
        chunk_size: documents per bulk request.
    """

    deferred_highlights = False
    """The cluster makes snippets in the search request itself: asking :meth:`highlights` afterwards
    would be one more round trip."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "lorekeeper-chunks",
        username: SecretStr | str | None = None,
        password: SecretStr | str | None = None,
        verify_certs: bool = True,
        timeout_s: float = 5.0,
        max_retries: int = 1,
        write_timeout_s: float | None = None,
        refresh: RefreshPolicy = RefreshPolicy.WAIT_FOR,
        chunk_size: int = 500,
    ) -> None:
        if (username is None) != (password is None):
            raise ValueError("give both username and password, or neither")
        self.url = url.rstrip("/")
        self.name = name
        self.username = SecretStr(username) if isinstance(username, str) else username
        self.password = SecretStr(password) if isinstance(password, str) else password
        self.verify_certs = verify_certs
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.write_timeout_s = write_timeout_s if write_timeout_s is not None else max(timeout_s, 30.0)
        self.refresh_policy = RefreshPolicy(refresh)
        self.chunk_size = chunk_size

    @classmethod
    def from_location(cls, location: TextLocation, *, timeout_s: float) -> OpenSearchTextIndex:
        """Build from resolved settings (the factory's entry point)."""
        if location.url is None:
            raise ValueError("an OpenSearch location needs a url")
        return cls(
            location.url,
            name=location.index,
            username=location.username,
            password=location.password,
            verify_certs=location.verify_certs,
            timeout_s=timeout_s,
        )

    def __repr__(self) -> str:
        return f"OpenSearchTextIndex(url={self.url!r}, name={self.name!r})"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``opensearchpy.OpenSearch``; they hold the password, never log them."""
        auth = None
        if self.username is not None and self.password is not None:
            auth = (self.username.get_secret_value(), self.password.get_secret_value())
        return {
            "hosts": [self.url],
            "http_auth": auth,
            "verify_certs": self.verify_certs,
            "ssl_show_warn": self.verify_certs,
            "timeout": self.timeout_s,
            "max_retries": self.max_retries,
            # A timed-out request may still be running on the cluster: retrying it would stack load
            # and stretch the caller's wait past the bound the docstring promises.
            "retry_on_timeout": False,
            "http_compress": True,
        }

    def _open(self) -> OpenSearch:
        try:
            return OpenSearch(**self.client_options())
        except ImproperlyConfigured as exc:
            raise StoreError(STORE, f"bad client configuration: {exc}", url=self.url) from exc

    # -- lifecycle ---------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the index with its mapping if missing; add keyword fields new to the schema.

        Raises:
            Conflict: the index maps a field with another type than this code expects (reindex it).
        """
        wanted = index_body()["mappings"]["properties"]
        with self._translate("ensure index"):
            if not self.client.indices.exists(index=self.name):
                try:
                    self.client.indices.create(index=self.name, body=index_body())
                    return
                except RequestError as exc:
                    # Another worker created it between our check and our create: fine.
                    if exc.error != "resource_already_exists_exception":
                        raise
            mappings: dict[str, Any] = self.client.indices.get_mapping(index=self.name)
            # Keyed by the concrete index name, which differs from self.name when that is an alias.
            current: dict[str, Any] = next(iter(mappings.values()), {})
            existing: dict[str, Any] = current.get("mappings", {}).get("properties", {})
            clashes = sorted(
                name
                for name, spec in wanted.items()
                if name in existing and existing[name].get("type", "object") != spec["type"]
            )
            if clashes:
                raise Conflict(
                    STORE,
                    f"index {self.name!r} maps {clashes} with other types than expected; "
                    "it is derived data: delete it and run `lorekeeper reindex`",
                    url=self.url,
                )
            missing = {name: spec for name, spec in wanted.items() if name not in existing}
            if missing:
                # A filter field added to FILTER_FIELDS after the index was created: mappings are
                # additive, so existing documents stay valid and new ones can carry the field.
                self.client.indices.put_mapping(index=self.name, body={"properties": missing})

    def refresh(self) -> None:
        """Make every acknowledged write visible to search."""
        with self._translate("refresh"):
            self.client.indices.refresh(index=self.name)

    def health(self) -> None:
        """Return if the cluster answers and is not red; raise ``Unavailable`` within the timeout."""
        with self._translate("health check"):
            status = self.client.cluster.health(request_timeout=self.timeout_s).get("status")
        if status == "red":
            raise Unavailable(STORE, "cluster health is red", url=self.url)

    # -- writes ------------------------------------------------------------------------------------

    def upsert(self, docs: Sequence[TextDocument]) -> int:
        """Index documents by id in bulk (replacing existing ones). Returns how many were written.

        Raises:
            InvalidRequest: some documents were refused (the others are written); the message names
                the first refused id and the reason.
        """
        if not docs:
            return 0
        written = 0
        failures: list[dict[str, Any]] = []
        for ok, item in self._bulk(upsert_actions(self.name, docs), "upsert"):
            if ok:
                written += 1
            else:
                failures.append(item)
        if failures:
            raise self._bulk_error("upsert", failures, len(docs))
        return written

    def delete(self, ids: Sequence[str]) -> int:
        """Delete by id; missing ids are ignored. Returns how many existed."""
        actions = delete_actions(self.name, ids)
        if not actions:
            return 0
        deleted = 0
        failures: list[dict[str, Any]] = []
        for ok, item in self._bulk(actions, "delete"):
            result = item.get("delete", {})
            if ok and result.get("result") == "deleted":
                deleted += 1
            elif not ok and result.get("status") != 404:
                failures.append(item)
        if failures:
            raise self._bulk_error("delete", failures, len(actions))
        return deleted

    def delete_by_filter(self, filters: SearchFilters) -> int:
        """Delete every document matching ``filters``. Returns how many.

        Raises:
            InvalidRequest: ``filters`` sets no field — refusing to delete the whole index by accident.
        """
        if not filter_clauses(filters):
            raise InvalidRequest(
                STORE,
                "delete_by_filter needs at least one filter; refusing to delete every document",
                url=self.url,
            )
        with self._translate("delete by filter"):
            response = self.client.delete_by_query(
                index=self.name,
                body={"query": filter_query(filters)},
                # delete_by_query takes only true/false; any policy but NONE means "visible on return".
                refresh=self.refresh_policy is not RefreshPolicy.NONE,
                conflicts="proceed",
                request_timeout=self.write_timeout_s,
            )
        if response.get("failures"):
            first = response["failures"][0]
            cause = first.get("cause", first)
            raise StoreError(STORE, f"delete by filter partly failed: {cause}", url=self.url)
        return int(response.get("deleted", 0))

    def _bulk(self, actions: list[dict[str, Any]], action: str) -> Iterator[tuple[bool, dict[str, Any]]]:
        """Send ``actions`` in chunks; only the last chunk asks for the refresh policy.

        One ``wait_for`` per call instead of one per chunk: each would wait for the next scheduled
        refresh (a second by default), so a 2,000-document upsert would wait four times.
        """
        chunks = [actions[i : i + self.chunk_size] for i in range(0, len(actions), self.chunk_size)]
        with self._translate(action):
            for number, chunk in enumerate(chunks, start=1):
                refresh = self.refresh_policy if number == len(chunks) else RefreshPolicy.NONE
                yield from helpers.streaming_bulk(
                    self.client,
                    chunk,
                    chunk_size=len(chunk),
                    raise_on_error=False,
                    max_retries=self.max_retries,  # retries documents answered 429 (back-pressure)
                    initial_backoff=1,
                    max_backoff=max(1, int(self.timeout_s)),
                    refresh=refresh.value,
                    request_timeout=self.write_timeout_s,
                )

    def _bulk_error(self, action: str, failures: list[dict[str, Any]], total: int) -> StoreError:
        op, first = next(iter(failures[0].items()))
        error = first.get("error") or {}
        reason = f"{error.get('type')}: {error.get('reason')}" if isinstance(error, dict) else str(error)
        message = (
            f"{action}: {len(failures)} of {total} documents failed (the others were written); "
            f"first: {op} {first.get('_id')!r} → {first.get('status')} {reason}"
        )
        statuses = {item.get("status") for failure in failures for item in failure.values()}
        if statuses <= {409}:
            return Conflict(STORE, message, url=self.url)
        if statuses & {429, 502, 503, 504}:
            return Unavailable(STORE, message, url=self.url)
        return InvalidRequest(STORE, message, url=self.url)

    # -- reads -------------------------------------------------------------------------------------

    def get(self, doc_id: str) -> TextDocument:
        """The stored document.

        Raises:
            NotFound: no document has this id (or the index does not exist).
        """
        with self._translate(f"get {doc_id!r}"):
            response = self.client.get(index=self.name, id=doc_id)
        return _stored_document(response)

    def get_many(self, ids: Sequence[str]) -> list[TextDocument]:
        """The stored documents among ``ids`` (one ``_mget``), in the order asked, missing ones skipped.

        Raises:
            NotFound: the index does not exist.
        """
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        with self._translate(f"get {len(wanted)} documents"):
            response = self.client.mget(index=self.name, body={"ids": wanted})
        return [_stored_document(doc) for doc in response.get("docs", ()) if doc.get("found")]

    def count(self, filters: SearchFilters | None = None) -> int:
        """How many documents match ``filters`` (all documents without filters)."""
        with self._translate("count"):
            response = self.client.count(index=self.name, body={"query": filter_query(filters)})
        return int(response["count"])

    def search(
        self, query: str, *, filters: SearchFilters | None = None, limit: int = 10, highlight: bool = True
    ) -> list[TextHit]:
        """BM25 over title^2, heading^0.5 and text, fields summed, keyword filters ANDed.

        Args:
            query: the user's words, as plain text (no query syntax is interpreted).
            filters: exact matches on keyword fields (any-of within a field, all fields must match).
            limit: most hits to return, 1 to ``MAX_LIMIT``.
            highlight: add ``<em>``-marked snippets of the matching fields.

        Raises:
            InvalidRequest: ``limit`` is out of range.
        """
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(STORE, f"limit must be between 1 and {MAX_LIMIT}, got {limit}", url=self.url)
        body = search_body(query, filters=filters, limit=limit, highlight=highlight)
        with self._translate("search"):
            response = self.client.search(index=self.name, body=body)
        return [hit_from_response(raw) for raw in response["hits"]["hits"]]

    def highlights(self, query: str, ids: Sequence[str]) -> dict[str, list[str]]:
        """The snippets :meth:`search` gives these documents for ``query``: the same body, filtered to
        the ids, without the stored source."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        body = highlight_body(query, wanted)
        with self._translate("highlight"):
            response = self.client.search(index=self.name, body=body)
        return {raw["_id"]: hit_from_response(raw).highlights for raw in response["hits"]["hits"]}

    # -- errors ------------------------------------------------------------------------------------

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        """Turn opensearch-py exceptions into the store error tree, naming the index and the URL.

        Messages carry OpenSearch's error type and reason, never the request (which could hold
        credentials in headers) and never the password.
        """
        try:
            yield
        except StoreError:
            raise
        except ConnectionTimeout as exc:
            raise Unavailable(
                STORE, f"{action}: no answer within {self.timeout_s:g}s (index {self.name!r})", url=self.url
            ) from exc
        except ConnectionError as exc:
            raise Unavailable(
                STORE,
                f"{action}: cannot connect ({_connection_reason(exc)}) (index {self.name!r})",
                url=self.url,
            ) from exc
        except NotFoundError as exc:
            missing_index = exc.error == "index_not_found_exception"
            what = f"index {self.name!r} does not exist (call ensure())" if missing_index else "not found"
            raise NotFound(STORE, f"{action}: {what}", url=self.url) from exc
        except ConflictError as exc:
            raise Conflict(STORE, f"{action}: {_reason(exc)}", url=self.url) from exc
        except RequestError as exc:
            raise InvalidRequest(STORE, f"{action}: {_reason(exc)}", url=self.url) from exc
        except (AuthenticationException, AuthorizationException) as exc:
            raise StoreError(
                STORE,
                f"{action}: refused ({exc.status_code}); check LOREKEEPER_TEXT_USERNAME and _PASSWORD "
                f"and the user's permissions on index {self.name!r}",
                url=self.url,
            ) from exc
        except TransportError as exc:
            if exc.status_code in (429, 502, 503, 504):
                raise Unavailable(STORE, f"{action}: {_reason(exc)}", url=self.url) from exc
            raise StoreError(STORE, f"{action}: {_reason(exc)}", url=self.url) from exc
        except OpenSearchException as exc:
            raise StoreError(STORE, f"{action}: {type(exc).__name__}: {exc}", url=self.url) from exc


def _reason(exc: TransportError) -> str:
    """``status type: reason`` from an OpenSearch error response."""
    info = exc.info if isinstance(exc.info, dict) else {}
    error = info.get("error")
    if isinstance(error, dict):
        return f"{exc.status_code} {error.get('type', exc.error)}: {error.get('reason', '')}".rstrip(": ")
    return f"{exc.status_code} {exc.error}"


def _connection_reason(exc: ConnectionError) -> str:
    # urllib3 prefixes its messages with an object repr ("<HTTPConnection object at 0x…>: Failed to
    # establish a new connection: [Errno 111] Connection refused"); keep the informative tail.
    text = str(exc.info) if exc.info is not None else str(exc.error)
    return text.rsplit(">: ", 1)[-1][:200]
