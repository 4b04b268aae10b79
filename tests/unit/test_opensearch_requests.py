"""What the OpenSearch backend sends: mapping, queries, highlights, bulk lines, parameters, errors.

No OpenSearch server installs here, and osmem-server (used by the contract tests) accepts more than a
real cluster might, so the requests are asserted as well. The client under test is the real
opensearch-py client with its real transport (serialisation, parameters, retries); only the last hop,
the HTTP connection, is replaced by one that records each request and answers from a table.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from opensearchpy import OpenSearch, helpers
from opensearchpy.connection import Urllib3HttpConnection
from opensearchpy.exceptions import ConnectionTimeout

from schemas.errors import Conflict, InvalidRequest, NotFound, StoreError, Unavailable
from schemas.search import FILTER_FIELDS, SearchFilters
from schemas.settings import TextBackend, TextLocation
from stores.text.base import TextDocument
from stores.text.opensearch import (
    OpenSearchTextIndex,
    RefreshPolicy,
    delete_actions,
    filter_query,
    highlight_body,
    hit_from_response,
    index_body,
    search_body,
    upsert_actions,
)
from stores.text.tantivy import TantivyTextIndex

pytestmark = pytest.mark.unit

Responder = Callable[["Request"], tuple[int, Any]]


class Request:
    """One recorded HTTP request."""

    def __init__(self, method: str, path: str, params: dict[str, Any], body: bytes | None, timeout: Any) -> None:
        self.method = method
        self.path = path
        # The client sends query parameters as escaped bytes; compare them as text.
        self.params = {key: value.decode() if isinstance(value, bytes) else value for key, value in params.items()}
        self.raw = body.decode("utf-8") if body else ""
        self.timeout = timeout

    def json(self) -> Any:
        return json.loads(self.raw)

    def ndjson(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.raw.splitlines() if line]


class RecordingConnection(Urllib3HttpConnection):
    """An HTTP connection that records requests and answers through ``responder`` instead of a socket."""

    def __init__(self, *, recorder: list[Request], responder: Responder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder
        self.responder = responder

    def perform_request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        params: dict[str, Any] | None = None,
        body: bytes | None = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> tuple[int, dict[str, str], str]:
        request = Request(method, url, dict(params or {}), body, timeout)
        self.recorder.append(request)
        status, payload = self.responder(request)
        raw = payload if isinstance(payload, str) else json.dumps(payload)
        if not 200 <= status < 300 and status not in ignore:
            self._raise_error(status, raw, "application/json")
        return status, {"content-type": "application/json"}, raw


def bulk_ok(request: Request) -> tuple[int, Any]:
    """Answer a bulk request item by item: index → created, delete → deleted unless the id says missing."""
    lines = request.ndjson()
    items = []
    position = 0
    while position < len(lines):
        op, meta = next(iter(lines[position].items()))
        position += 1 if op == "delete" else 2
        if op == "delete" and meta["_id"].startswith("missing"):
            items.append({op: {"_id": meta["_id"], "status": 404, "result": "not_found"}})
        else:
            items.append(
                {
                    op: {
                        "_id": meta["_id"],
                        "status": 200,
                        "result": "deleted" if op == "delete" else "created",
                    }
                }
            )
    return 200, {
        "took": 1,
        "errors": any(item[next(iter(item))]["status"] >= 300 for item in items),
        "items": items,
    }


def recording_index(responder: Responder, **options: Any) -> tuple[OpenSearchTextIndex, list[Request]]:
    index = OpenSearchTextIndex(
        "https://search.example:9200", name="chunks", username="writer", password="hunter2", **options
    )
    recorder: list[Request] = []
    index._client = OpenSearch(
        **index.client_options(), connection_class=RecordingConnection, recorder=recorder, responder=responder
    )
    return index, recorder


def docs(count: int) -> list[TextDocument]:
    return [
        TextDocument(id=f"d{n}", title=f"T{n}", text=f"text {n}", fields={"library": "lib", "item": [f"i{n}"]})
        for n in range(count)
    ]


# -- bodies ---------------------------------------------------------------------------------------------


def test_index_body_is_an_explicit_strict_mapping() -> None:
    english = {"type": "text", "analyzer": "english"}
    assert index_body() == {
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "id": {"type": "keyword"},
                "title": english,
                "heading": english,
                "text": english,
                **{name: {"type": "keyword"} for name in FILTER_FIELDS},
                "data": {"type": "object", "enabled": False},
            },
        }
    }


def test_search_body_with_filters_boosts_and_highlights() -> None:
    filters = SearchFilters(library=["lib-a", "lib-b"], status="active")
    assert search_body("armor class", filters=filters, limit=7) == {
        "size": 7,
        "track_total_hits": False,
        "query": {
            "bool": {
                "must": [
                    {
                        "multi_match": {
                            "query": "armor class",
                            "fields": ["title^2", "heading^0.5", "text"],
                            "type": "best_fields",
                            "tie_breaker": 1.0,
                        }
                    }
                ],
                "filter": [{"terms": {"library": ["lib-a", "lib-b"]}}, {"terms": {"status": ["active"]}}],
            }
        },
        "highlight": {
            "pre_tags": ["<em>"],
            "post_tags": ["</em>"],
            "encoder": "html",
            "fields": {
                "text": {"fragment_size": 150, "number_of_fragments": 1},
                "heading": {"fragment_size": 150, "number_of_fragments": 1},
                "title": {"fragment_size": 150, "number_of_fragments": 1},
            },
        },
    }


def test_search_body_without_filters_or_highlights() -> None:
    body = search_body('AC (armor) "class', highlight=False)
    assert "highlight" not in body
    assert body["query"]["bool"]["filter"] == []
    # The user's text is passed verbatim to multi_match, which does not parse query syntax.
    assert body["query"]["bool"]["must"][0]["multi_match"]["query"] == 'AC (armor) "class'


def test_the_server_makes_highlights_within_the_search_and_tantivy_defers_them() -> None:
    # hybrid search asks OpenSearch for snippets with the leg's hits (no second round trip) and tantivy,
    # whose snippets cost this process, only for the hits it returns
    assert OpenSearchTextIndex.deferred_highlights is False
    assert TantivyTextIndex.deferred_highlights is True


def test_highlight_body_is_the_search_body_for_those_ids_without_source() -> None:
    body = highlight_body("armor class", ["c1", "c2"])
    assert body["size"] == 2
    assert body["_source"] is False
    assert body["highlight"] == search_body("armor class")["highlight"]
    assert body["query"]["bool"]["must"] == search_body("armor class")["query"]["bool"]["must"]
    assert body["query"]["bool"]["filter"] == [{"ids": {"values": ["c1", "c2"]}}]


def test_filter_query() -> None:
    assert filter_query(None) == {"match_all": {}}
    assert filter_query(SearchFilters()) == {"match_all": {}}
    assert filter_query(SearchFilters(campaign="c1", item=["a", "b"])) == {
        "bool": {"filter": [{"terms": {"item": ["a", "b"]}}, {"terms": {"campaign": ["c1"]}}]}
    }


def test_upsert_actions_key_by_id_and_flatten_fields() -> None:
    doc = TextDocument(
        id="chunk:1",
        title="T",
        heading="H",
        text="body",
        fields={"library": "lib", "item": ["x"]},
        data={"page": 3},
    )
    (action,) = upsert_actions("chunks", [doc])
    assert action == {
        "_op_type": "index",
        "_index": "chunks",
        "_id": "chunk:1",
        "_source": {
            "id": "chunk:1",
            "title": "T",
            "heading": "H",
            "text": "body",
            "library": "lib",
            "item": ["x"],
            "data": {"page": 3},
        },
    }
    # What streaming_bulk turns it into: an action line and a source line.
    head, source = helpers.expand_action(action)
    assert head == {"index": {"_index": "chunks", "_id": "chunk:1"}}
    assert source == action["_source"]


def test_delete_actions_are_distinct() -> None:
    assert delete_actions("chunks", ["a", "b", "a"]) == [
        {"_op_type": "delete", "_index": "chunks", "_id": "a"},
        {"_op_type": "delete", "_index": "chunks", "_id": "b"},
    ]


def test_hit_from_response_orders_highlights_text_first() -> None:
    hit = hit_from_response(
        {
            "_id": "d1",
            "_score": 3.5,
            "_source": {
                "id": "d1",
                "title": "Armor",
                "text": "Armor class",
                "library": ["a"],
                "data": {"p": 1},
            },
            "highlight": {"title": ["<em>Armor</em>"], "text": ["<em>Armor</em> class"]},
        }
    )
    assert hit.highlights == ["<em>Armor</em> class", "<em>Armor</em>"]
    assert (hit.id, hit.score, hit.fields, hit.data, hit.heading) == (
        "d1",
        3.5,
        {"library": ["a"]},
        {"p": 1},
        "",
    )


# -- the client and what goes over the wire -------------------------------------------------------------


def test_client_options_and_auth_header() -> None:
    index = OpenSearchTextIndex(
        "https://search.example:9200/",
        name="chunks",
        username="writer",
        password="hunter2",
        verify_certs=False,
        timeout_s=2.5,
    )
    options = index.client_options()
    assert options["hosts"] == ["https://search.example:9200"]
    assert options["http_auth"] == ("writer", "hunter2")
    assert (
        options["verify_certs"],
        options["timeout"],
        options["max_retries"],
        options["retry_on_timeout"],
    ) == (
        False,
        2.5,
        1,
        False,
    )
    connection = OpenSearch(**options).transport.connection_pool.connections[0]
    assert connection.use_ssl and connection.timeout == 2.5
    assert connection.headers["authorization"] == "Basic " + base64.b64encode(b"writer:hunter2").decode()
    assert "hunter2" not in repr(index) and "hunter2" not in str(index.__dict__)


def test_from_location() -> None:
    from pydantic import SecretStr

    location = TextLocation(
        backend=TextBackend.OPENSEARCH,
        url="http://os:9200",
        username=SecretStr("u"),
        password=SecretStr("p"),
        verify_certs=False,
        index="lore",
    )
    index = OpenSearchTextIndex.from_location(location, timeout_s=3)
    assert (index.url, index.name, index.verify_certs, index.timeout_s) == (
        "http://os:9200",
        "lore",
        False,
        3,
    )
    assert index.client_options()["http_auth"] == ("u", "p")
    assert index.write_timeout_s == 30


def test_ensure_creates_the_index_with_the_mapping() -> None:
    def responder(request: Request) -> tuple[int, Any]:
        if request.method == "HEAD":
            return 404, ""
        return 200, {"acknowledged": True}

    index, sent = recording_index(responder)
    index.ensure()
    assert [(r.method, r.path) for r in sent] == [("HEAD", "/chunks"), ("PUT", "/chunks")]
    assert sent[1].json() == index_body()


def test_ensure_adds_missing_keyword_fields() -> None:
    existing = {k: v for k, v in index_body()["mappings"]["properties"].items() if k != "status"}

    def responder(request: Request) -> tuple[int, Any]:
        if request.method == "HEAD":
            return 200, ""
        if request.method == "GET":
            return 200, {"chunks": {"mappings": {"properties": existing}}}
        return 200, {"acknowledged": True}

    index, sent = recording_index(responder)
    index.ensure()
    assert [(r.method, r.path) for r in sent] == [
        ("HEAD", "/chunks"),
        ("GET", "/chunks/_mapping"),
        ("PUT", "/chunks/_mapping"),
    ]
    assert sent[2].json() == {"properties": {"status": {"type": "keyword"}}}


def test_upsert_chunks_and_refreshes_once_at_the_end() -> None:
    index, sent = recording_index(bulk_ok, chunk_size=500)
    assert index.upsert(docs(1200)) == 1200
    assert [(r.method, r.path) for r in sent] == [("POST", "/_bulk")] * 3
    assert [r.params["refresh"] for r in sent] == ["false", "false", "wait_for"]
    assert all(r.timeout == 30 for r in sent)  # the write timeout, not the 5 s read timeout
    lines = sent[0].ndjson()
    assert len(lines) == 1000
    assert lines[0] == {"index": {"_index": "chunks", "_id": "d0"}}
    assert lines[1] == {
        "id": "d0",
        "title": "T0",
        "heading": "",
        "text": "text 0",
        "library": "lib",
        "item": ["i0"],
        "data": {},
    }


def test_upsert_with_refresh_none() -> None:
    index, sent = recording_index(bulk_ok, refresh=RefreshPolicy.NONE)
    index.upsert(docs(3))
    assert [r.params["refresh"] for r in sent] == ["false"]


def test_upsert_reports_refused_documents() -> None:
    def responder(request: Request) -> tuple[int, Any]:
        error = {"type": "mapper_parsing_exception", "reason": "failed to parse field [library]"}
        items = [
            {"index": {"_id": "d0", "status": 201, "result": "created"}},
            {"index": {"_id": "d1", "status": 400, "error": error}},
        ]
        return 200, {"errors": True, "items": items}

    index, _ = recording_index(responder)
    with pytest.raises(InvalidRequest) as caught:
        index.upsert(docs(2))
    message = caught.value.message
    assert "1 of 2 documents failed" in message and "'d1'" in message and "mapper_parsing_exception" in message


def test_delete_counts_only_existing_documents() -> None:
    index, sent = recording_index(bulk_ok)
    assert index.delete(["a", "missing-1", "a", "b"]) == 2
    assert sent[0].ndjson() == [
        {"delete": {"_index": "chunks", "_id": "a"}},
        {"delete": {"_index": "chunks", "_id": "missing-1"}},
        {"delete": {"_index": "chunks", "_id": "b"}},
    ]


def test_delete_by_filter_request() -> None:
    index, sent = recording_index(lambda request: (200, {"deleted": 4, "failures": []}))
    assert index.delete_by_filter(SearchFilters(library="lib", status=["draft", "old"])) == 4
    (request,) = sent
    assert (request.method, request.path) == ("POST", "/chunks/_delete_by_query")
    assert request.params["refresh"] == "true" and request.params["conflicts"] == "proceed"
    assert request.json() == {
        "query": {"bool": {"filter": [{"terms": {"library": ["lib"]}}, {"terms": {"status": ["draft", "old"]}}]}}
    }
    with pytest.raises(InvalidRequest):
        index.delete_by_filter(SearchFilters())
    assert len(sent) == 1


def test_search_and_count_requests() -> None:
    def responder(request: Request) -> tuple[int, Any]:
        if request.path.endswith("/_count"):
            return 200, {"count": 9}
        hit = {"_id": "d1", "_score": 1.5, "_source": {"id": "d1", "text": "armor", "status": "active"}}
        return 200, {"hits": {"hits": [hit]}}

    index, sent = recording_index(responder)
    filters = SearchFilters(status="active")
    hits = index.search("armor", filters=filters, limit=3)
    assert [(h.id, h.score, h.fields) for h in hits] == [("d1", 1.5, {"status": "active"})]
    assert (sent[0].method, sent[0].path) == ("POST", "/chunks/_search")
    assert sent[0].json() == search_body("armor", filters=filters, limit=3)
    assert index.count(filters) == 9
    assert (sent[1].path, sent[1].json()) == ("/chunks/_count", {"query": filter_query(filters)})
    with pytest.raises(InvalidRequest):
        index.search("armor", limit=10_001)


def test_get_request_and_not_found() -> None:
    def responder(request: Request) -> tuple[int, Any]:
        if request.path == "/chunks/_doc/present":
            source = {
                "id": "present",
                "title": "",
                "heading": "",
                "text": "t",
                "item": ["x"],
                "data": {"a": 1},
            }
            return 200, {"_id": "present", "found": True, "_source": source}
        return 404, {"_id": "absent", "found": False}

    index, _ = recording_index(responder)
    assert index.get("present") == TextDocument(id="present", text="t", fields={"item": ["x"]}, data={"a": 1})
    with pytest.raises(NotFound):
        index.get("absent")


# -- errors are translated at the edge -------------------------------------------------------------------


def _error(status: int, kind: str, reason: str) -> Responder:
    return lambda request: (
        status,
        {"error": {"type": kind, "reason": reason, "root_cause": []}, "status": status},
    )


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (400, "parsing_exception", InvalidRequest),
        (404, "index_not_found_exception", NotFound),
        (409, "version_conflict_engine_exception", Conflict),
        (429, "es_rejected_execution_exception", Unavailable),
        (503, "cluster_block_exception", Unavailable),
        (401, "security_exception", StoreError),
        (500, "illegal_state_exception", StoreError),
    ],
)
def test_http_errors_are_translated(status: int, kind: str, expected: type[StoreError]) -> None:
    index, _ = recording_index(_error(status, kind, "went wrong"), max_retries=0)
    with pytest.raises(expected) as caught:
        index.count()
    message = caught.value.message
    assert message.startswith("opensearch at https://search.example:9200: count")
    assert "hunter2" not in message
    if expected is InvalidRequest:
        assert "parsing_exception: went wrong" in message
    if status == 401:
        assert "LOREKEEPER_TEXT_USERNAME" in message
    if status == 404:
        assert "does not exist (call ensure())" in message


def test_timeout_is_unavailable_and_not_retried() -> None:
    def responder(request: Request) -> tuple[int, Any]:
        raise ConnectionTimeout("TIMEOUT", "read timed out", None)

    index, sent = recording_index(responder, timeout_s=1.5, max_retries=3)
    with pytest.raises(Unavailable, match=r"no answer within 1\.5s"):
        index.search("armor")
    assert len(sent) == 1


def test_red_cluster_is_unavailable() -> None:
    index, sent = recording_index(lambda request: (200, {"status": "red"}))
    with pytest.raises(Unavailable, match="red"):
        index.health()
    assert (sent[0].path, sent[0].timeout) == ("/_cluster/health", 5.0)
