"""Settings: defaults, one URL per family picking the backend, clear errors naming the variable."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.settings import (
    BlobBackend,
    CypherDialect,
    GraphBackend,
    TextBackend,
    VectorBackend,
    get_settings,
    load_settings,
)

pytestmark = pytest.mark.unit


def test_defaults_are_embedded_under_one_data_folder(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path)
    assert s.blob_location().backend is BlobBackend.LOCAL
    assert s.blob_location().root == tmp_path / "blobs"
    assert s.text_location().backend is TextBackend.TANTIVY
    assert s.text_location().path == tmp_path / "text"
    assert s.vector_location().backend is VectorBackend.QDRANT_EDGE
    assert s.graph_location().backend is GraphBackend.EMBEDDED
    assert s.graph_location().dialect is CypherDialect.FALKORDB


def test_environment_variables_choose_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_BLOB_URL", "s3://lore?endpoint=http://127.0.0.1:9000&region=eu-west-1")
    monkeypatch.setenv("LOREKEEPER_BLOB_ACCESS_KEY", "AKIA-test")
    monkeypatch.setenv("LOREKEEPER_BLOB_SECRET_KEY", "s3cr3t-value")
    monkeypatch.setenv("LOREKEEPER_TEXT_URL", "https://search.internal:9200/")
    monkeypatch.setenv("LOREKEEPER_VECTOR_URL", "http://qdrant:6333")
    monkeypatch.setenv("LOREKEEPER_GRAPH_URL", "neo4j://graph:7687")
    monkeypatch.setenv("LOREKEEPER_GRAPH_USERNAME", "neo4j")
    monkeypatch.setenv("LOREKEEPER_GRAPH_PASSWORD", "pw-123456")
    get_settings.cache_clear()
    s = get_settings()
    blob = s.blob_location()
    assert (blob.backend, blob.bucket, blob.endpoint, blob.secure, blob.region) == (
        BlobBackend.S3,
        "lore",
        "127.0.0.1:9000",
        False,
        "eu-west-1",
    )
    assert s.text_location().url == "https://search.internal:9200"
    assert s.vector_location().backend is VectorBackend.QDRANT_SERVER
    graph = s.graph_location()
    assert graph.backend is GraphBackend.NEO4J and graph.dialect is CypherDialect.NEO4J
    assert graph.password is not None and graph.password.get_secret_value() == "pw-123456"


def test_memory_and_file_urls() -> None:
    s = load_settings(vector_url=":memory:", text_url=":memory:", blob_url="file:///tmp/lk-blobs")
    assert s.vector_location().backend is VectorBackend.QDRANT_LOCAL and s.vector_location().path is None
    assert s.text_location().path is None
    assert s.blob_location().root == Path("/tmp/lk-blobs")


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"blob_url": "ftp://host/x"}, "LOREKEEPER_BLOB_URL"),
        ({"text_url": "redis://host"}, "LOREKEEPER_TEXT_URL"),
        ({"vector_url": "grpc://host"}, "LOREKEEPER_VECTOR_URL"),
        ({"graph_url": "mysql://host"}, "LOREKEEPER_GRAPH_URL"),
        ({"graph_url": "bolt://user:hunter2@host"}, "LOREKEEPER_GRAPH_URL"),
        ({"blob_access_key": "k", "blob_secret_key": "s"}, "LOREKEEPER_BLOB_ACCESS_KEY"),
        ({"blob_url": "s3://b?endpoint=http://h:9000", "blob_access_key": "k"}, "LOREKEEPER_BLOB_SECRET_KEY"),
        ({"blob_url": "s3://b?endpoint=http://h:9000&colour=red"}, "LOREKEEPER_BLOB_URL"),
        ({"vector_url": "http://q:6333", "vector_embedded_engine": "edge"}, "LOREKEEPER_VECTOR_EMBEDDED_ENGINE"),
        ({"vector_url": ":memory:", "vector_embedded_engine": "edge"}, "LOREKEEPER_VECTOR_EMBEDDED_ENGINE"),
        ({"vector_api_key": "k"}, "LOREKEEPER_VECTOR_API_KEY"),
        ({"graph_password": "p", "graph_username": "u"}, "LOREKEEPER_GRAPH_PASSWORD"),
        ({"graph_dialect": "neo4j"}, "LOREKEEPER_GRAPH_DIALECT"),
        ({"graph_url": "neo4j://h:7687", "graph_dialect": "falkordb"}, "LOREKEEPER_GRAPH_URL"),
        ({"store_timeout_s": 0}, "LOREKEEPER_STORE_TIMEOUT_S"),
    ],
)
def test_bad_or_contradictory_settings_name_the_variable(overrides: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(**overrides)
    assert info.value.variable == variable
    assert str(info.value).startswith(variable)
    assert "hunter2" not in str(info.value)


def test_secrets_from_files_and_never_in_reprs(tmp_path: Path) -> None:
    secret_file = tmp_path / "graph-password"
    secret_file.write_text("correct-horse-battery\n")
    s = load_settings(graph_url="bolt://db:7687", graph_username="lore", graph_password_file=secret_file)
    assert s.graph_location().password.get_secret_value() == "correct-horse-battery"
    assert "correct-horse-battery" not in repr(s)
    assert "correct-horse-battery" not in repr(s.graph_location())
    assert "correct-horse-battery" not in s.model_dump_json()


def test_secret_file_and_value_together_is_contradictory(tmp_path: Path) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("x")
    with pytest.raises(ConfigError, match="LOREKEEPER_GRAPH_PASSWORD_FILE"):
        load_settings(
            graph_url="bolt://db:7687", graph_username="u", graph_password="y", graph_password_file=secret_file
        )
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(graph_url="bolt://db:7687", graph_username="u", graph_password_file=tmp_path / "missing")


def test_production_refuses_placeholder_secrets() -> None:
    common = {"graph_url": "bolt://db:7687", "graph_username": "neo4j"}
    load_settings(environment="development", graph_password="neo4j", **common)
    # a stock user name is fine: only the secrets proper are checked
    load_settings(environment="production", graph_password="long-real-secret", **common)
    with pytest.raises(ConfigError, match="LOREKEEPER_GRAPH_PASSWORD: a placeholder"):
        load_settings(
            environment="production", graph_username="lore", graph_password="changeme", graph_url="bolt://db:7687"
        )


def test_settings_pickle_for_ray_workers() -> None:
    s = load_settings(blob_url="s3://b?endpoint=http://h:9000", blob_access_key="a", blob_secret_key="b")
    copy = pickle.loads(pickle.dumps(s))
    assert copy.blob_location() == s.blob_location()


def test_ingest_roots_are_folders_separated_by_colons(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().ingest_root_paths() is None
    monkeypatch.setenv("LOREKEEPER_INGEST_ROOTS", "/srv/books:/srv/lore")
    assert load_settings().ingest_root_paths() == [Path("/srv/books"), Path("/srv/lore")]
