"""The error tree: picklable for Ray, status codes for the API, no secrets in messages."""

from __future__ import annotations

import pickle

import pytest

from schemas.errors import (
    ConfigError,
    Conflict,
    InvalidRequest,
    LorekeeperError,
    NotFound,
    NotSupported,
    StoreError,
    Unavailable,
    redact_url,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotFound("graph", "no node with uid x", url="bolt://u:pw@h:7687"), 404),
        (Conflict("graph", "uid taken"), 409),
        (InvalidRequest("text", "bad query"), 400),
        (Unavailable("vector", "connection refused", url="http://q:6333/?api_key=k"), 503),
        (NotSupported("blob", "no presigned URLs on a local folder"), 501),
        (ConfigError("LOREKEEPER_GRAPH_URL", "unsupported scheme"), 500),
    ],
)
def test_errors_pickle_with_their_fields(error: LorekeeperError, status: int) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.status_code == status
    assert copy.to_dict() == error.to_dict()
    if isinstance(error, StoreError):
        assert copy.store == error.store and copy.url == error.url
    if isinstance(error, ConfigError):
        assert copy.variable == error.variable


def test_store_errors_redact_urls() -> None:
    err = Unavailable("graph", "down", url="bolt://neo4j:hunter2@db:7687/x?token=abc")
    assert "hunter2" not in str(err) and "abc" not in str(err)
    assert "bolt://db:7687" in str(err)
    assert str(err).startswith("graph at bolt://db:7687")


def test_redact_url_edge_cases() -> None:
    assert redact_url(None) == ""
    assert redact_url("/plain/path") == "/plain/path"
    assert redact_url("s3://bucket?endpoint=http://x") == "s3://bucket"
    assert redact_url("http://[::1]:9200") == "http://[::1]:9200"


def test_hierarchy() -> None:
    for cls in (NotFound, Conflict, InvalidRequest, Unavailable, NotSupported):
        assert issubclass(cls, StoreError) and issubclass(cls, LorekeeperError)
