"""The compose stack: pinned images, health checks, volumes, loopback ports, no baked secrets; the Ray head,
worker and API built from the CPU image, wired to the stores and to Ray token auth."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
STORES = ("minio", "opensearch", "qdrant", "neo4j")
LOREKEEPER_SERVICES = ("ray-head", "ray-worker", "api")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((CLUSTER / "docker-compose.yml").read_text())


def test_the_four_stores_are_there_and_pinned(compose: dict) -> None:
    services = compose["services"]
    assert {"minio", "opensearch", "qdrant", "neo4j"} <= set(services)
    for name, service in services.items():
        image = service["image"]
        tag = image.rsplit(":", 1)[-1]
        assert ":" in image and tag not in ("latest", "") and re.search(r"\d", tag), f"{name}: pin {image}"
        assert "healthcheck" in service and service["healthcheck"]["test"], f"{name}: no health check"
        assert service.get("volumes"), f"{name}: data must live on a volume"
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: publish {port} on loopback only"


def _is_secret_name(key: str) -> bool:
    # A *_FILE / *_PATH variable names a file and a *_MODE one a switch: neither holds the secret itself.
    if key.upper().endswith(("_FILE", "_PATH", "_MODE")):
        return False
    return any(word in key.upper() for word in ("PASSWORD", "SECRET", "API_KEY", "AUTH", "TOKEN", "ROOT_USER"))


def test_no_secret_is_baked_in(compose: dict) -> None:
    text = (CLUSTER / "docker-compose.yml").read_text()
    for service in compose["services"].values():
        for key, value in (service.get("environment") or {}).items():
            if _is_secret_name(key):
                assert "${" in str(value) and ":?" in str(value), f"{key} must come from the environment, required"
    assert "changeme" not in text.lower()


def test_env_example_names_every_required_variable(compose: dict) -> None:
    example = (CLUSTER / ".env.example").read_text()
    required = set(re.findall(r"\$\{(LOREKEEPER_[A-Z_]+):\?", (CLUSTER / "docker-compose.yml").read_text()))
    defined = set(re.findall(r"^(LOREKEEPER_[A-Z_]+)=", example, flags=re.M))
    assert required <= defined
    # every variable of the example is one Lorekeeper reads
    assert defined <= deploy.settings_variables(), defined - deploy.settings_variables()


def test_ray_head_worker_and_api_run_the_cpu_image(compose: dict) -> None:
    services = compose["services"]
    for name in LOREKEEPER_SERVICES:
        service = services[name]
        assert service["build"] == {"context": "..", "dockerfile": "cluster/Dockerfile.cpu"}, name
        assert (CLUSTER / service["build"]["context"] / service["build"]["dockerfile"]).resolve().is_file()
        assert service["image"].endswith("-cpu"), name
        # the Lorekeeper services start once the stores answer
        for store in STORES:
            assert service["depends_on"][store] == {"condition": "service_healthy"}, (name, store)
    head = " ".join(services["ray-head"]["command"])
    assert "--head" in head and "--port=6379" in head and "--block" in head
    assert "--address=ray-head:6379" in " ".join(services["ray-worker"]["command"])
    assert services["ray-worker"]["depends_on"]["ray-head"] == {"condition": "service_healthy"}
    api = services["api"]
    assert "127.0.0.1:8000:8000" in api["ports"]
    command = " ".join(api["command"])
    assert "--address=ray-head:6379" in command and "serve run" in command
    config = re.search(r"serve run \S* ?(cluster/\S+\.yaml)", command)
    assert config and (ROOT / config.group(1)).is_file(), "the API serves cluster/serve-config.yaml"
    assert "8000/health" in " ".join(api["healthcheck"]["test"])


def test_ray_token_auth_and_api_keys_come_from_secret_files(compose: dict) -> None:
    secrets = compose["secrets"]
    assert set(secrets) == {"ray-auth-token", "api-keys"}
    for secret in secrets.values():
        # files under cluster/secrets/, which git and docker build both ignore
        assert secret["file"].startswith("./secrets/")
    assert "secrets/" in (CLUSTER / ".gitignore").read_text().split()
    assert "cluster/secrets" in (ROOT / ".dockerignore").read_text().split()
    for name in LOREKEEPER_SERVICES:
        service = compose["services"][name]
        env = service["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN_PATH"] == "/run/secrets/ray-auth-token", name
        assert "RAY_AUTH_TOKEN" not in env, f"{name}: the token is a file, never a variable"
        assert env["LOREKEEPER_API_KEYS_FILE"] == "/run/secrets/api-keys", name
        assert set(service["secrets"]) == set(secrets), name


def test_in_network_store_urls_name_compose_services(compose: dict) -> None:
    env = compose["services"]["api"]["environment"]
    published = {
        name: {int(str(port).rsplit(":", 1)[-1]) for port in compose["services"][name].get("ports", [])}
        for name in STORES
    }
    blob = urlsplit(env["LOREKEEPER_BLOB_URL"]).query.removeprefix("endpoint=")
    for url, store in (
        (blob, "minio"),
        (env["LOREKEEPER_TEXT_URL"], "opensearch"),
        (env["LOREKEEPER_VECTOR_URL"], "qdrant"),
        (env["LOREKEEPER_GRAPH_URL"], "neo4j"),
    ):
        parts = urlsplit(url)
        assert parts.hostname == store and parts.port in published[store], url


def _container_settings(compose: dict) -> dict[str, str]:
    """The LOREKEEPER_* variables of the API container, with strong values for the ${VAR:?} secrets."""
    values = {}
    for key, value in compose["services"]["api"]["environment"].items():
        if not key.startswith("LOREKEEPER_"):
            continue
        value = str(value)
        required = re.fullmatch(r"\$\{(\w+):\?[^}]*\}", value)
        default = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
        if required:
            value = f"Str0ng!{required.group(1).lower()}"
        elif default:
            value = default.group(1)
        values[key.removeprefix("LOREKEEPER_").lower()] = value
    return values


def test_the_containers_settings_resolve_to_the_server_backends(compose: dict) -> None:
    from schemas.settings import load_settings

    values = _container_settings(compose)
    assert values.pop("environment") == "production"
    settings = load_settings(**values, environment="development")
    assert settings.blob_location().backend.value == "s3"
    assert settings.text_location().backend.value == "opensearch"
    assert settings.vector_location().backend.value == "qdrant_server"
    assert settings.graph_location().backend.value == "neo4j"


def test_the_containers_serve_settings_bind_every_address_and_need_keys(compose: dict) -> None:
    from schemas.serving import EngineKind, ServeSettings

    env = compose["services"]["api"]["environment"]
    assert {key for key in env if key.startswith("LOREKEEPER_")} <= deploy.settings_variables()
    serving = ServeSettings(**_container_settings(compose))
    # the Serve proxy listens on every address (serve-config.yaml), so the API must not think it is
    # on loopback, where it would run open without keys
    assert not serving.loopback and serving.api_port == 8000
    assert serving.api_keys_file is not None and serving.api_keys_file.name == "api-keys"
    assert serving.narrator_engine is EngineKind.OPENAI and serving.narrator_base_url


def test_the_containers_settings_pass_in_production(compose: dict) -> None:
    from schemas.settings import load_settings

    load_settings(**_container_settings(compose))


# -- the stand-in override (.ci/containers compose) ---------------------------------------------------

STANDINS = ("minio", "opensearch", "neo4j")  # the stores with a stand-in built here; qdrant has none


@pytest.fixture(scope="module")
def standin() -> dict:
    return yaml.safe_load((CLUSTER / "docker-compose.standin.yml").read_text())


def _merged(base: dict, override: dict) -> dict:
    """Compose's merge of an override file: mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_the_standin_override_changes_only_image_and_build_of_the_stores(compose: dict, standin: dict) -> None:
    assert {k for k in standin if not k.startswith("x-")} == {"services"}
    services = standin["services"]
    assert set(services) == set(STANDINS) | set(LOREKEEPER_SERVICES)
    for name in STANDINS:
        assert set(services[name]) == {"image", "build"}, name
        assert services[name]["image"].startswith("localhost/lorekeeper/standin-"), name
        build = services[name]["build"]
        assert build["args"] == {"STANDIN": name}, name
        assert (CLUSTER / build["context"] / build["dockerfile"]).is_file(), name
    # the graph stand-in speaks FalkorDB's Cypher and its Bolt takes one user name: the override's only
    # other change
    falkordb = {"LOREKEEPER_GRAPH_DIALECT": "falkordb", "LOREKEEPER_GRAPH_USERNAME": "falkordb"}
    for name in LOREKEEPER_SERVICES:
        assert services[name] == {"environment": falkordb}, name
    merged = _merged(compose, standin)
    for name, service in compose["services"].items():
        after = merged["services"][name]
        for key in set(service) | set(after):
            if key in ("image", "build") and name in STANDINS:
                continue
            if key == "environment" and name in LOREKEEPER_SERVICES:
                assert after[key] == {**service[key], **falkordb}, name
                continue
            assert after.get(key) == service.get(key), (name, key)  # env, secrets, volumes, healthcheck, depends_on
    assert {k: v for k, v in merged.items() if k != "services" and not k.startswith("x-standin")} == {
        k: v for k, v in compose.items() if k != "services"
    }


def test_the_standins_serve_what_the_real_services_are_probed_and_reached_on() -> None:
    """Each stand-in's entry point takes its service's variables, ports and probe paths."""
    entry = (CLUSTER / "store-standins" / "standin.py").read_text()
    containerfile = (CLUSTER / "store-standins" / "Containerfile").read_text()
    for needed in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "/minio/health/live", "port=9000"):
        assert needed in entry, needed
    for needed in ("OPENSEARCH_INITIAL_ADMIN_PASSWORD", '("0.0.0.0", 9200)', "wrap_socket", "NEO4J_AUTH"):
        assert needed in entry, needed
    assert "bolt_port=7687" in entry and '("0.0.0.0", 7474)' in entry
    # the compose health checks call curl (minio, opensearch) and wget (neo4j)
    assert "curl wget" in containerfile and "ENTRYPOINT" in containerfile
    settings_env = {"LOREKEEPER_GRAPH_DIALECT", "LOREKEEPER_GRAPH_USERNAME"}
    assert settings_env <= deploy.settings_variables()


def test_the_lane_file_only_drops_what_the_lanes_host_refuses() -> None:
    """docker-compose.lane.yml resets OpenSearch's ulimits and the Lorekeeper services' extra_hosts, nothing else."""
    text = (CLUSTER / "docker-compose.lane.yml").read_text()
    body = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    expected = ["services:", "  opensearch:", "    ulimits: !reset {}"]
    for name in LOREKEEPER_SERVICES:
        expected += [f"  {name}:", "    extra_hosts: !reset []"]
    assert body == expected
