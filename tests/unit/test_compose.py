"""The compose file of the store stack: pinned images, health checks, volumes, loopback ports, no baked secrets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"


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


def test_no_secret_is_baked_in(compose: dict) -> None:
    text = (CLUSTER / "docker-compose.yml").read_text()
    for service in compose["services"].values():
        for key, value in (service.get("environment") or {}).items():
            if any(word in key.upper() for word in ("PASSWORD", "SECRET", "API_KEY", "AUTH", "ROOT_USER")):
                assert "${" in str(value) and ":?" in str(value), f"{key} must come from the environment, required"
    assert "changeme" not in text.lower()


def test_env_example_names_every_required_variable(compose: dict) -> None:
    example = (CLUSTER / ".env.example").read_text()
    required = set(re.findall(r"\$\{(LOREKEEPER_[A-Z_]+):\?", (CLUSTER / "docker-compose.yml").read_text()))
    defined = set(re.findall(r"^(LOREKEEPER_[A-Z_]+)=", example, flags=re.M))
    assert required <= defined
    from schemas.settings import Settings

    # every variable of the example is one Lorekeeper reads
    fields = {f"LOREKEEPER_{name.upper()}" for name in Settings.model_fields}
    assert defined <= fields
