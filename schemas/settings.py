"""Settings: one data folder by default, one URL per store family, secrets from the environment.

Every variable has the prefix ``LOREKEEPER_``. With nothing set, every store is embedded under one
data folder, so the first run needs no server::

    LOREKEEPER_DATA_DIR     ./.lorekeeper
    LOREKEEPER_BLOB_URL     file://<data_dir>/blobs            or s3://BUCKET?endpoint=http://host:9000
    LOREKEEPER_TEXT_URL     <data_dir>/text (tantivy)           or http(s)://opensearch:9200
    LOREKEEPER_VECTOR_URL   <data_dir>/vectors (embedded)       or :memory: or http(s)://qdrant:6333
    LOREKEEPER_GRAPH_URL    <data_dir>/graph (embedded Cypher)  or neo4j:// / bolt://host:7687
    LOREKEEPER_SOURCE_BLOB_URL  unset, or the bucket ingest copies from (its own endpoint and credentials)

The location picks the backend here and only here (:func:`Settings.blob_location` and its siblings);
the store factory maps the resolved location to a backend class. A secret ``X`` may also be read from
the file named by ``X_FILE`` (Docker and Kubernetes secrets). Secrets are ``SecretStr`` and never
appear in reprs, logs or error messages, and credentials embedded in a URL are refused for that reason.
"""

from __future__ import annotations

import os
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from schemas.errors import ConfigError

ENV_PREFIX = "LOREKEEPER_"

# Values that are fine on a laptop and never in production.
PLACEHOLDER_SECRETS = frozenset(
    {"changeme", "change-me", "password", "secret", "admin", "minioadmin", "neo4j", "test", "example"}
)

_SECRET_FIELDS = (
    "blob_access_key",
    "blob_secret_key",
    "source_blob_access_key",
    "source_blob_secret_key",
    "text_username",
    "text_password",
    "vector_api_key",
    "graph_username",
    "graph_password",
)
# The fields production checks for placeholder values: the secrets proper. User names are not secret
# (a stock image's "neo4j" or "admin" user is a fine user), and an S3 access key is an identifier.
_PLACEHOLDER_CHECKED = (
    "blob_secret_key",
    "source_blob_secret_key",
    "text_password",
    "vector_api_key",
    "graph_password",
)


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class BlobBackend(StrEnum):
    LOCAL = "local"
    S3 = "s3"


class TextBackend(StrEnum):
    TANTIVY = "tantivy"
    OPENSEARCH = "opensearch"


class VectorBackend(StrEnum):
    QDRANT_EDGE = "qdrant_edge"
    QDRANT_LOCAL = "qdrant_local"
    QDRANT_SERVER = "qdrant_server"


class EmbeddedVectorEngine(StrEnum):
    """Which embedded engine serves a vector *path* (``:memory:`` is always qdrant-client local mode)."""

    EDGE = "edge"
    QDRANT_LOCAL = "qdrant_local"


class GraphBackend(StrEnum):
    EMBEDDED = "embedded"
    NEO4J = "neo4j"


class CypherDialect(StrEnum):
    NEO4J = "neo4j"
    FALKORDB = "falkordb"


class _Location(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BlobLocation(_Location):
    backend: BlobBackend
    bucket: str = Field(description="Default bucket (a subfolder for the local backend).")
    root: Path | None = Field(default=None, description="Local folder holding one subfolder per bucket.")
    endpoint: str | None = Field(default=None, description="host:port of the S3 endpoint.")
    secure: bool = True
    region: str | None = None
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None


class TextLocation(_Location):
    backend: TextBackend
    path: Path | None = Field(default=None, description="Index folder; None keeps the index in memory.")
    url: str | None = None
    username: SecretStr | None = None
    password: SecretStr | None = None
    verify_certs: bool = True
    index: str


class VectorLocation(_Location):
    backend: VectorBackend
    path: Path | None = Field(default=None, description="Storage folder; None keeps it in memory.")
    url: str | None = None
    api_key: SecretStr | None = None


class GraphLocation(_Location):
    backend: GraphBackend
    dialect: CypherDialect
    path: Path | None = None
    url: str | None = None
    username: SecretStr | None = None
    password: SecretStr | None = None
    database: str | None = None


def _env(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def _refuse_userinfo(field: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ConfigError(
            _env(field),
            "credentials must not be embedded in the URL; set them in their own variables "
            f"(for example {_env(field.rsplit('_', 1)[0] + '_password')} or its _FILE twin)",
        )


def _scheme(url: str) -> str:
    # A Windows drive letter or a bare path has no scheme of interest.
    scheme = urlsplit(url).scheme.lower()
    return scheme if len(scheme) > 1 else ""


class Settings(BaseSettings):
    """Everything Lorekeeper reads from its environment. Build it with :func:`get_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    environment: Environment = Field(
        default=Environment.DEVELOPMENT,
        description="development allows open APIs on loopback and placeholder secrets; production does not.",
    )
    data_dir: Path = Field(
        default=Path(".lorekeeper"),
        description="Folder of every embedded store; created on first use.",
    )
    store_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="Connect/request timeout for store servers, in seconds."
    )
    ingest_roots: str | None = Field(
        default=None,
        description="Folders the ingest API may read paths from, separated by ':' (default: the working folder).",
    )
    ingest_executor: Literal["auto", "local", "ray"] = Field(
        default="auto",
        description="Where the ingest API's jobs run: 'ray' (local Ray, or the cluster at RAY_ADDRESS), "
        "'local' (the API's process), or 'auto' (local for a small job, Ray for a large one).",
    )

    checkpoints_kept: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Automatic world-state checkpoints kept per branch (the newest); named ones are always kept.",
    )
    prune_after_turns: int = Field(
        default=20,
        ge=0,
        le=100_000,
        description="A prune (POST /campaigns/{id}/prune) leaves alone what is this many turns or fewer behind the "
        "head: disposable takes, versions and branches go only once the story moved on past them.",
    )

    rule_facts: bool = Field(
        default=True,
        description="Read rulebook entries (stat blocks, spells, items …) into typed source facts at ingest.",
    )
    rule_families: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Family tables for rule facts, comma-separated: shipped names (dnd5e, fate, generic) or "
        "TOML paths; empty: every shipped table, each entry's kind detected.",
    )

    @field_validator("rule_families", mode="before")
    @classmethod
    def _split_families(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    def ingest_root_paths(self) -> list[Path] | None:
        """The folders of ``ingest_roots``, or None when unset."""
        return [Path(p) for p in (self.ingest_roots or "").split(os.pathsep) if p] or None

    blob_url: str | None = Field(default=None, description="file://PATH or s3://BUCKET?endpoint=URL&region=R")
    blob_bucket: str = Field(default="lorekeeper", description="Bucket used when the URL names none.")
    blob_access_key: SecretStr | None = Field(default=None, description="S3 access key.")
    blob_secret_key: SecretStr | None = Field(default=None, description="S3 secret key.")
    blob_access_key_file: Path | None = None
    blob_secret_key_file: Path | None = None

    source_blob_url: str | None = Field(
        default=None,
        description="The bucket ingest copies from (a library service's): s3://BUCKET?endpoint=URL&region=R or "
        "file://PATH; unset: an s3_key names an object in the product's own bucket.",
    )
    source_blob_bucket: str = Field(default="lorekeeper-source", description="Source bucket when the URL names none.")
    source_blob_access_key: SecretStr | None = Field(default=None, description="Source bucket access key (read-only).")
    source_blob_secret_key: SecretStr | None = Field(default=None, description="Source bucket secret key.")
    source_blob_access_key_file: Path | None = None
    source_blob_secret_key_file: Path | None = None

    text_url: str | None = Field(default=None, description="A tantivy folder, :memory:, or http(s)://OpenSearch")
    text_index: str = Field(default="lorekeeper-chunks", description="Full-text index (OpenSearch) name.")
    memory_text_index: str = Field(
        default="lorekeeper-memory",
        description="Full-text index of campaign recall (OpenSearch name; a tantivy folder beside the text folder).",
    )
    memory_collection: str = Field(default="memory", description="Vector collection of campaign recall.")
    text_username: SecretStr | None = None
    text_password: SecretStr | None = None
    text_username_file: Path | None = None
    text_password_file: Path | None = None
    text_verify_certs: bool = True

    vector_url: str | None = Field(default=None, description=":memory:, a folder, or http(s)://Qdrant")
    vector_embedded_engine: EmbeddedVectorEngine | None = Field(
        default=None,
        description="Engine for a vector folder: edge (qdrant-edge-py, default) or qdrant_local.",
    )
    vector_api_key: SecretStr | None = None
    vector_api_key_file: Path | None = None

    graph_url: str | None = Field(default=None, description="A folder (embedded) or neo4j:// / bolt:// URL")
    graph_dialect: CypherDialect | None = Field(
        default=None, description="Cypher dialect of a bolt:// server; neo4j unless it is a FalkorDB server."
    )
    graph_username: SecretStr | None = None
    graph_password: SecretStr | None = None
    graph_username_file: Path | None = None
    graph_password_file: Path | None = None
    graph_database: str | None = Field(default=None, description="Neo4j database name.")

    # search (docs/search.md)
    reranker_model: str | None = Field(
        default=None,
        description="Local folder of a cross-encoder that re-ranks search results; unset = no re-ranking. "
        "Nothing is fetched from a model hub.",
    )
    reranker_device: str = Field(default="cpu", description="Device of the re-ranker: cpu, cuda or cuda:N.")
    reranker_threads: int | None = Field(
        default=None,
        gt=0,
        description="torch threads while re-ranking on CPU; unset = every core (on 2 cores: 1.5-2x faster than "
        "1 thread when the machine is otherwise idle, 2x slower when other processes keep it busy: set 1 there).",
    )
    rerank_candidates: int = Field(
        default=10, ge=1, le=200, description="How many of the best fused hits the re-ranker reads per query."
    )
    search_vector_weight: float | None = Field(
        default=None, ge=0, description="RRF weight of the vector leg; unset = the tuned preset's (docs/search.md)."
    )
    search_text_weight: float | None = Field(
        default=None, ge=0, description="RRF weight of the full-text (BM25) leg; unset = the preset's."
    )
    search_graph_weight: float | None = Field(
        default=None, ge=0, description="RRF weight of the graph (concept) leg; unset = the preset's."
    )
    search_coverage_weight: float | None = Field(
        default=None,
        ge=0,
        description="RRF weight of the coverage leg (candidates re-read for the share of the query's words and "
        "values they state; 0 turns it off); unset = the preset's.",
    )
    search_rrf_k: int | None = Field(default=None, gt=0, description="RRF constant k; unset = the preset's.")
    search_threads: int | None = Field(
        default=1,
        gt=0,
        description="torch threads of the query embedding in a search process; unset = every core. One query "
        "is too small to share: on a busy 2-core machine 2 threads took 70-140 ms per query embedding, 1 thread "
        "10-16 ms. (The re-ranker sets its own threads around each call.)",
    )

    @model_validator(mode="after")
    def _read_secret_files(self) -> Settings:
        for name in _SECRET_FIELDS:
            path: Path | None = getattr(self, f"{name}_file")
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ConfigError(_env(f"{name}_file"), f"both {_env(name)} and {_env(name + '_file')} are set")
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(_env(f"{name}_file"), f"cannot read the secret file ({exc.strerror})") from None
            object.__setattr__(self, name, SecretStr(value))
        return self

    @model_validator(mode="after")
    def _check(self) -> Settings:
        # Resolve every location once so a bad URL fails at start-up, not at first use.
        self.blob_location()
        self.source_blob_location()
        self.text_location()
        self.vector_location()
        self.graph_location()
        if self.environment is Environment.PRODUCTION:
            for name in _PLACEHOLDER_CHECKED:
                secret: SecretStr | None = getattr(self, name)
                if secret is not None and secret.get_secret_value().lower() in PLACEHOLDER_SECRETS:
                    raise ConfigError(_env(name), "a placeholder secret is not allowed in production")
        return self

    # -- locations: the one place where a setting picks a backend ---------------------------------

    def blob_location(self) -> BlobLocation:
        return _blob_location(
            "blob", self.blob_url, self.blob_bucket, self.blob_access_key, self.blob_secret_key, self.data_dir
        )

    def source_blob_location(self) -> BlobLocation | None:
        """The bucket ingest copies from (``LOREKEEPER_SOURCE_BLOB_URL``), or None when unset.

        Its own endpoint and credentials (read-only by intent): a library service's bucket, from which
        a job copies the object into the product's layout. With it unset, an ``s3_key`` names an object
        in the product's own bucket.
        """
        if not self.source_blob_url:  # empty (a blank ${VAR:-} of compose) is unset, not a folder
            if self.source_blob_access_key is not None or self.source_blob_secret_key is not None:
                raise ConfigError(
                    _env("source_blob_access_key"),
                    "source bucket credentials are set but LOREKEEPER_SOURCE_BLOB_URL is not",
                )
            return None
        return _blob_location(
            "source_blob",
            self.source_blob_url,
            self.source_blob_bucket,
            self.source_blob_access_key,
            self.source_blob_secret_key,
            self.data_dir,
        )

    def text_location(self) -> TextLocation:
        url = self.text_url
        scheme = _scheme(url) if url else ""
        has_creds = self.text_username is not None or self.text_password is not None
        if scheme in ("http", "https"):
            assert url is not None
            _refuse_userinfo("text_url", url)
            if (self.text_username is None) != (self.text_password is None):
                raise ConfigError(_env("text_password"), "set both LOREKEEPER_TEXT_USERNAME and _PASSWORD")
            return TextLocation(
                backend=TextBackend.OPENSEARCH,
                url=url.rstrip("/"),
                username=self.text_username,
                password=self.text_password,
                verify_certs=self.text_verify_certs,
                index=self.text_index,
            )
        if scheme not in ("", "file"):
            raise ConfigError(_env("text_url"), f"unsupported scheme {scheme!r}; expected a folder or http(s)://")
        if has_creds:
            raise ConfigError(_env("text_username"), "credentials are set but LOREKEEPER_TEXT_URL is embedded")
        if url == ":memory:":
            return TextLocation(backend=TextBackend.TANTIVY, path=None, index=self.text_index)
        path = Path(urlsplit(url).path) if url and scheme == "file" else Path(url or self.data_dir / "text")
        return TextLocation(backend=TextBackend.TANTIVY, path=path, index=self.text_index)

    def memory_text_location(self) -> TextLocation:
        """The full-text index of campaign recall: the same server under ``memory_text_index``, or a
        tantivy folder beside the knowledge one (``<text folder>-memory``)."""
        location = self.text_location()
        if location.path is not None:
            path = location.path.with_name(f"{location.path.name}-memory")
            return location.model_copy(update={"path": path, "index": self.memory_text_index})
        return location.model_copy(update={"index": self.memory_text_index})

    def vector_location(self) -> VectorLocation:
        url = self.vector_url
        scheme = _scheme(url) if url and url != ":memory:" else ""
        if scheme in ("http", "https"):
            assert url is not None
            _refuse_userinfo("vector_url", url)
            if self.vector_embedded_engine is not None:
                raise ConfigError(
                    _env("vector_embedded_engine"),
                    "an embedded engine is set but the URL is a server",
                )
            return VectorLocation(backend=VectorBackend.QDRANT_SERVER, url=url.rstrip("/"), api_key=self.vector_api_key)
        if scheme not in ("", "file"):
            raise ConfigError(
                _env("vector_url"), f"unsupported scheme {scheme!r}; expected :memory:, a folder or http(s)://"
            )
        if self.vector_api_key is not None:
            raise ConfigError(_env("vector_api_key"), "an API key is set but LOREKEEPER_VECTOR_URL is embedded")
        if url == ":memory:":
            if self.vector_embedded_engine is EmbeddedVectorEngine.EDGE:
                raise ConfigError(_env("vector_embedded_engine"), "the edge engine needs a folder, not :memory:")
            return VectorLocation(backend=VectorBackend.QDRANT_LOCAL, path=None)
        path = Path(urlsplit(url).path) if url and scheme == "file" else Path(url or self.data_dir / "vectors")
        engine = self.vector_embedded_engine or EmbeddedVectorEngine.EDGE
        backend = VectorBackend.QDRANT_EDGE if engine is EmbeddedVectorEngine.EDGE else VectorBackend.QDRANT_LOCAL
        return VectorLocation(backend=backend, path=path)

    def graph_location(self) -> GraphLocation:
        url = self.graph_url
        scheme = _scheme(url) if url else ""
        if scheme in ("neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc"):
            assert url is not None
            _refuse_userinfo("graph_url", url)
            if (self.graph_username is None) != (self.graph_password is None):
                raise ConfigError(_env("graph_password"), "set both LOREKEEPER_GRAPH_USERNAME and _PASSWORD")
            dialect = self.graph_dialect or CypherDialect.NEO4J
            if dialect is CypherDialect.FALKORDB and scheme.startswith("neo4j"):
                raise ConfigError(_env("graph_url"), "FalkorDB speaks bolt:// only, not neo4j:// routing")
            return GraphLocation(
                backend=GraphBackend.NEO4J,
                dialect=dialect,
                url=url,
                username=self.graph_username,
                password=self.graph_password,
                database=self.graph_database,
            )
        if scheme not in ("", "file"):
            raise ConfigError(
                _env("graph_url"), f"unsupported scheme {scheme!r}; expected a folder, neo4j:// or bolt://"
            )
        if self.graph_password is not None or self.graph_username is not None:
            raise ConfigError(_env("graph_password"), "credentials are set but LOREKEEPER_GRAPH_URL is embedded")
        if self.graph_dialect is CypherDialect.NEO4J:
            raise ConfigError(_env("graph_dialect"), "the embedded graph is FalkorDB; neo4j needs a server URL")
        path = Path(urlsplit(url).path) if url and scheme == "file" else Path(url or self.data_dir / "graph")
        return GraphLocation(backend=GraphBackend.EMBEDDED, dialect=CypherDialect.FALKORDB, path=path)


def _blob_location(
    field: str,
    url: str | None,
    default_bucket: str,
    access_key: SecretStr | None,
    secret_key: SecretStr | None,
    data_dir: Path,
) -> BlobLocation:
    """A blob location from one family of settings (``field`` is ``blob`` or ``source_blob``)."""
    url_var, access_var, secret_var = _env(f"{field}_url"), _env(f"{field}_access_key"), _env(f"{field}_secret_key")
    has_keys = access_key is not None or secret_key is not None
    if url is None or _scheme(url) in ("", "file"):
        root = Path(urlsplit(url).path) if url and _scheme(url) == "file" else Path(url or "")
        if not url:
            root = data_dir / "blobs"
        if has_keys:
            raise ConfigError(access_var, f"S3 credentials are set but {url_var} is a local folder")
        return BlobLocation(backend=BlobBackend.LOCAL, root=root, bucket=default_bucket)
    if _scheme(url) != "s3":
        raise ConfigError(url_var, f"unsupported scheme {_scheme(url)!r}; expected file://PATH or s3://BUCKET")
    _refuse_userinfo(f"{field}_url", url)
    parts = urlsplit(url)
    bucket = parts.netloc or default_bucket
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = set(query) - {"endpoint", "region"}
    if unknown:
        raise ConfigError(url_var, f"unknown query parameters {sorted(unknown)}")
    endpoint = query.get("endpoint", "https://s3.amazonaws.com")
    ep = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if ep.scheme not in ("http", "https") or not ep.hostname:
        raise ConfigError(url_var, "endpoint must be http(s)://host[:port]")
    if (access_key is None) != (secret_key is None):
        raise ConfigError(secret_var, f"set both {access_var} and {secret_var}")
    return BlobLocation(
        backend=BlobBackend.S3,
        bucket=bucket,
        endpoint=ep.netloc,
        secure=ep.scheme == "https",
        region=query.get("region"),
        access_key=access_key,
        secret_key=secret_key,
    )


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment (and ``overrides``), translating errors to :class:`ConfigError`.

    Raises:
        ConfigError: naming the ``LOREKEEPER_*`` variable at fault.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc") or ("settings",)
        variable = _env(str(loc[0])) if loc and loc[0] != "__root__" else "LOREKEEPER settings"
        # pydantic puts the offending input into its message only for some errors; ours never echo it.
        raise ConfigError(variable, first.get("msg", "invalid value").removeprefix("Value error, ")) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, built once. Tests call ``get_settings.cache_clear()``."""
    return load_settings()
