"""The compose stack's ingest and MCP settings: the MCP key and health timeout of docker-compose.yml, and the
source bucket its override (docker-compose.source-bucket.yml) adds to every Lorekeeper container, with
the credentials as secret files; each resolves to the settings Lorekeeper reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
LOREKEEPER_SERVICES = ("ray-head", "ray-worker", "api")
SOURCE_URL = "s3://library-service?endpoint=https://s3.library.example.com&region=eu-west-1"


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def _value(raw: object, given: dict[str, str]) -> str:
    """A compose value with ``${VAR:-default}`` and ``${VAR:?message}`` resolved from ``given``."""
    text = str(raw)
    default = re.fullmatch(r"\$\{(\w+):-([^}]*)\}", text)
    required = re.fullmatch(r"\$\{(\w+):\?[^}]*\}", text)
    if default:
        return given.get(default.group(1), default.group(2))
    if required:
        assert required.group(1) in given, f"{required.group(1)} is required"
        return given[required.group(1)]
    return text


def test_mcp_key_and_health_timeout_reach_the_containers_with_their_defaults() -> None:
    from schemas.serving import ServeSettings

    compose = _load("docker-compose.yml")
    for service in LOREKEEPER_SERVICES:
        env = compose["services"][service]["environment"]
        assert "LOREKEEPER_MCP_PORT" not in env  # refused on Ray Serve: MCP is /mcp of the API
        assert {"LOREKEEPER_MCP_REQUIRE_KEY", "LOREKEEPER_HEALTH_TIMEOUT_S"} <= set(env)
        assert {key for key in env if key.startswith("LOREKEEPER_")} <= deploy.settings_variables()
    env = compose["services"]["api"]["environment"]

    def serving(given: dict[str, str]) -> ServeSettings:
        return ServeSettings(
            api_host="0.0.0.0",
            mcp_require_key=_value(env["LOREKEEPER_MCP_REQUIRE_KEY"], given),
            health_timeout_s=_value(env["LOREKEEPER_HEALTH_TIMEOUT_S"], given),
        )

    assert (serving({}).mcp_require_key, serving({}).health_timeout_s) == (True, 2.0)
    chosen = serving({"LOREKEEPER_MCP_REQUIRE_KEY": "false", "LOREKEEPER_HEALTH_TIMEOUT_S": "5"})
    assert (chosen.mcp_require_key, chosen.health_timeout_s) == (False, 5.0)


def test_the_source_bucket_override_gives_every_container_its_url_and_secret_files(tmp_path: Path) -> None:
    from schemas.settings import load_settings

    base, override = _load("docker-compose.yml"), _load("docker-compose.source-bucket.yml")
    assert set(override["services"]) == set(LOREKEEPER_SERVICES)
    assert {name: spec["file"] for name, spec in override["secrets"].items()} == {
        "source-blob-access-key": "./secrets/source-blob-access-key",
        "source-blob-secret-key": "./secrets/source-blob-secret-key",
    }
    text = (CLUSTER / "docker-compose.source-bucket.yml").read_text()
    assert not re.search(r"SOURCE_BLOB_(ACCESS|SECRET)_KEY:", text), "credentials are files, never values"
    for service in LOREKEEPER_SERVICES:
        added = override["services"][service]
        # compose replaces a service's secrets list from the override: it must keep the base file's
        assert set(base["services"][service]["secrets"]) <= set(added["secrets"])
        assert {"source-blob-access-key", "source-blob-secret-key"} <= set(added["secrets"])
        env = added["environment"]
        assert set(env) <= deploy.settings_variables()
        # the container's view: each *_FILE names a mounted secret; written here as compose mounts them
        values: dict[str, str] = {}
        for key, raw in env.items():
            value = _value(raw, {"LOREKEEPER_SOURCE_BLOB_URL": SOURCE_URL})
            if key.endswith("_FILE"):
                name = value.removeprefix("/run/secrets/")
                assert name in added["secrets"], f"{service}: {key} names no mounted secret"
                (tmp_path / name).write_text(f"Str0ng-{name}\n")
                value = str(tmp_path / name)
            values[key.removeprefix("LOREKEEPER_").lower()] = value
        settings = load_settings(data_dir=tmp_path / "data", **values)
        source = settings.source_blob_location()
        assert source is not None and (source.backend.value, source.bucket) == ("s3", "library-service")
        assert settings.source_blob_access_key is not None and settings.source_blob_secret_key is not None
        assert settings.source_blob_secret_key.get_secret_value() == "Str0ng-source-blob-secret-key"
    with pytest.raises(AssertionError, match="LOREKEEPER_SOURCE_BLOB_URL is required"):
        _value(override["services"]["api"]["environment"]["LOREKEEPER_SOURCE_BLOB_URL"], {})
