"""The Helm chart, rendered offline with Helm's own engine (helm-python-sdk): it lints, every object of
every CI profile is valid against the Kubernetes schemas and the KubeRay CRDs, values.schema.json
rejects wrong values, it refuses to render without credentials, and what it renders is consistent with
the compose stack, the Serve config and the settings Lorekeeper reads."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

CHART = deploy.ROOT / "helm" / "lorekeeper"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
RELEASE, NAMESPACE = "lorekeeper", "lore"
FULLNAME = "lorekeeper"  # the release name contains the chart name
CONFIG = f"{FULLNAME}-config"
# What a cluster operator must add to the defaults for them to render: no credentials, no store URLs
# and no narrator are defaults.
MINIMAL: dict[str, Any] = {
    "secrets": {"existingSecret": "lorekeeper-secrets"},
    "stores": {"mode": "bundled"},
    "serve": {"narrator": {"baseUrl": "http://narrator.example.com/v1", "model": "narrator"}},
}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def _values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def render(chart: helm.Chart, values: dict[str, Any], release: str = RELEASE) -> dict[str, list[dict[str, Any]]]:
    """Template file name → its objects."""
    rendered = chart.render(values=values, name=release, namespace=NAMESPACE, is_install=True)
    return {
        path.rsplit("/", 1)[-1]: deploy.load_documents(text)
        for path, text in rendered.items()
        if path.endswith(".yaml") and text.strip()
    }


def objects(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [obj for docs in rendered.values() for obj in docs]


def one(rendered: dict[str, list[dict[str, Any]]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects(rendered) if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} rendered"
    return found[0]


def render_error(chart: helm.Chart, values: dict[str, Any]) -> str:
    with pytest.raises(helm.HelmError) as caught:
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return str(caught.value)


@pytest.fixture(scope="module", params=CI_VALUES, ids=lambda path: path.stem)
def profile(request: pytest.FixtureRequest, chart: helm.Chart) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    return request.param.stem, render(chart, _values(request.param))


# -- CI: lint, render every profile, validate every object ------------------------------------------


def test_there_are_the_three_ci_profiles() -> None:
    assert [path.name for path in CI_VALUES] == [
        "external-stores-values.yaml",
        "gpu-values.yaml",
        "laptop-values.yaml",
    ]


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda path: path.stem)
def test_the_chart_lints_clean(values_file: Path) -> None:
    report = helm.lint(CHART, _values(values_file), strict=True, namespace=NAMESPACE, kube_version="v1.31.0")
    assert report["errors"] == []
    # severity 1 is informational (e.g. "icon is recommended")
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_every_rendered_object_is_valid(profile: tuple[str, dict[str, list[dict[str, Any]]]]) -> None:
    _, rendered = profile
    assert [problem for obj in objects(rendered) for problem in deploy.problems(obj)] == []


def test_every_pod_is_secure_and_reads_credentials_from_the_secret(
    profile: tuple[str, dict[str, list[dict[str, Any]]]],
) -> None:
    _, rendered = profile
    for obj in objects(rendered):
        for spec in deploy.pod_specs(obj):
            assert deploy.pod_problems(spec) == [], obj["metadata"]["name"]
    for spec in deploy.pod_specs(one(rendered, "RayService")):
        assert deploy.lorekeeper_container_problems(spec, "lorekeeper-secrets", f"{FULLNAME}-config") == []


def test_the_ray_cluster_is_the_pinned_release_with_bounded_groups(
    profile: tuple[str, dict[str, list[dict[str, Any]]]],
) -> None:
    _, rendered = profile
    cluster = one(rendered, "RayService")["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == deploy.ray_pin()
    assert deploy.worker_group_problems(cluster) == []
    served = yaml.safe_load(one(rendered, "RayService")["spec"]["serveConfigV2"])
    assert deploy.serve_config_problems(served) == []


def test_no_credential_is_rendered_outside_a_secret(profile: tuple[str, dict[str, list[dict[str, Any]]]]) -> None:
    _, rendered = profile
    config = one(rendered, "ConfigMap", CONFIG)["data"]
    assert set(config) <= deploy.settings_variables(), set(config) - deploy.settings_variables()
    assert not [key for key in config if any(word in key for word in deploy.SECRET_WORDS)]
    assert [o for o in objects(rendered) if o["kind"] == "Secret"] == [], "the profiles use an existing Secret"


def test_services_select_pods_and_ports_that_exist(profile: tuple[str, dict[str, list[dict[str, Any]]]]) -> None:
    _, rendered = profile
    pods = [
        (obj["kind"], template["metadata"]["labels"], [p for c in template["spec"]["containers"] for p in c["ports"]])
        for obj in objects(rendered)
        for template in _templates(obj)
    ]
    for service in (o for o in objects(rendered) if o["kind"] == "Service"):
        # KubeRay adds ray.io/serve=true to pods whose Serve proxy is ready
        selector = {k: v for k, v in service["spec"]["selector"].items() if k != "ray.io/serve"}
        chosen = [ports for _, labels, ports in pods if selector.items() <= labels.items()]
        assert chosen, f"Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            assert all(port["targetPort"] in {p["name"] for p in ports} for ports in chosen), port


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    if obj["kind"] == "RayService":
        cluster = spec["rayClusterConfig"]
        return [g["template"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]
    return [spec["template"]] if "template" in spec else []


# -- the profiles ---------------------------------------------------------------------------------------


def test_laptop_bundles_the_stores_of_the_compose_file(chart: helm.Chart) -> None:
    rendered = render(chart, _values(CHART / "ci" / "laptop-values.yaml"))
    sets = {o["metadata"]["name"]: o for o in objects(rendered) if o["kind"] == "StatefulSet"}
    assert set(sets) == {f"{FULLNAME}-{store}" for store in ("minio", "opensearch", "qdrant", "neo4j")}
    compose = yaml.safe_load((deploy.ROOT / "cluster" / "docker-compose.yml").read_text())["services"]
    for store in ("minio", "opensearch", "qdrant", "neo4j"):
        (container,) = sets[f"{FULLNAME}-{store}"]["spec"]["template"]["spec"]["containers"]
        # the same release as compose (Qdrant's unprivileged build carries a suffix)
        assert container["image"].split("-unprivileged")[0] == compose[store]["image"], store
        assert sets[f"{FULLNAME}-{store}"]["spec"]["volumeClaimTemplates"], store
        assert container.get("readinessProbe") and container.get("livenessProbe"), store
        for env in container.get("env", []):
            assert "value" not in env or "$(" in env["value"] or not any(w in env["name"] for w in ("PASSWORD", "KEY"))
    config = one(rendered, "ConfigMap", CONFIG)["data"]
    assert config["LOREKEEPER_GRAPH_URL"] == f"bolt://{FULLNAME}-neo4j:7687"
    assert [o for o in objects(rendered) if o["kind"] in ("Ingress", "ServiceMonitor")] == []


def test_external_stores_render_no_statefulset_and_expose_api_and_mcp(chart: helm.Chart) -> None:
    values = _values(CHART / "ci" / "external-stores-values.yaml")
    rendered = render(chart, values)
    assert not [o for o in objects(rendered) if o["kind"] == "StatefulSet"]
    config = one(rendered, "ConfigMap", CONFIG)["data"]
    assert config["LOREKEEPER_BLOB_URL"] == values["stores"]["external"]["blobUrl"]
    assert config["LOREKEEPER_TEXT_VERIFY_CERTS"] == "true"
    ingress = one(rendered, "Ingress")
    paths = {p["path"]: p["backend"]["service"] for p in ingress["spec"]["rules"][0]["http"]["paths"]}
    assert {"/api", "/mcp", "/v1", "/health"} <= set(paths) and "/metrics" not in paths
    assert {service["name"] for service in paths.values()} == {f"{FULLNAME}-api"}
    assert ingress["spec"]["tls"] == [{"hosts": ["lorekeeper.example.com"], "secretName": "lorekeeper-tls"}]
    monitor = one(rendered, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    scraped = [
        s
        for s in objects(rendered)
        if s["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    ports = {port["name"] for service in scraped for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= ports
    assert one(rendered, "RayService")["spec"]["rayClusterConfig"]["authOptions"] == {
        "mode": "token",
        "secretName": "lorekeeper-ray-token",
    }


def test_gpu_profile_puts_the_narrator_on_a_tainted_gpu_pool(chart: helm.Chart) -> None:
    values = _values(CHART / "ci" / "gpu-values.yaml")
    rendered = render(chart, values)
    service = one(rendered, "RayService")
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    gpu = groups["gpu"]
    assert (gpu["minReplicas"], gpu["maxReplicas"]) == (1, 4)
    spec = gpu["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.example.com/lorekeeper:0.1.0-gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "narrator-models", "readOnly": True}} in spec[
        "volumes"
    ]
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    served = yaml.safe_load(service["spec"]["serveConfigV2"])
    narrator = next(d for d in served["applications"][0]["deployments"] if d["name"] == "Narrator")
    assert narrator["ray_actor_options"]["num_gpus"] == 1
    assert narrator["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 16}
    assert one(rendered, "ConfigMap", CONFIG)["data"]["LOREKEEPER_NARRATOR_ENGINE"] == "vllm"


def test_the_defaults_render_the_serve_config_of_the_repository(chart: helm.Chart) -> None:
    served = yaml.safe_load(one(render(chart, MINIMAL), "RayService")["spec"]["serveConfigV2"])
    assert served == yaml.safe_load((deploy.ROOT / "cluster" / "serve-config.yaml").read_text())


def test_the_chart_matches_the_project_and_the_compose_image(chart: helm.Chart) -> None:
    defaults = chart.values
    version = deploy.pyproject()["project"]["version"]
    assert chart.metadata["appVersion"] == version
    assert defaults["ray"]["version"] == deploy.ray_pin()
    compose = yaml.safe_load((deploy.ROOT / "cluster" / "docker-compose.yml").read_text())
    assert compose["services"]["api"]["image"] == f"{defaults['image']['repository']}:{defaults['image']['cpuTag']}"
    assert defaults["image"]["cpuTag"] == f"{version}-cpu" and defaults["image"]["gpuTag"] == f"{version}-gpu"


def test_the_rendered_settings_are_ones_lorekeeper_accepts(chart: helm.Chart, tmp_path: Path) -> None:
    rendered = render(chart, _values(CHART / "ci" / "external-stores-values.yaml"))
    container = deploy.pod_specs(one(rendered, "RayService"))[0]["containers"][0]
    secrets = {key: f"Str0ng-{key}" for key in deploy.SECRET_KEYS}
    settings, serving = deploy.settings_of(one(rendered, "ConfigMap", CONFIG)["data"], container, tmp_path, secrets)
    assert deploy.backends(settings) == ["s3", "opensearch", "qdrant_server", "neo4j"]
    assert (serving.narrator_engine.value, serving.narrator_base_url, serving.narrator_model) == (
        "openai",
        "https://llm.internal.example.com/v1",
        "narrator-70b",
    )
    assert not serving.loopback and serving.api_keys_file == tmp_path / "api-keys"
    assert settings.graph_location().database == "lorekeeper"
    assert settings.text_verify_certs is True


def test_a_long_release_name_still_fits_kuberays_names(chart: helm.Chart) -> None:
    release = "a-release-name-that-is-long-enough-to-hit-the-limits"
    rendered = render(chart, MINIMAL, release=release)
    name = one(rendered, "RayService")["metadata"]["name"]
    # KubeRay derives <name>-head-svc, <name>-serve-svc and <name>-raycluster-xxxxx from it
    assert len(f"{name}-raycluster-xxxxx") <= 63
    assert [problem for obj in objects(rendered) for problem in deploy.problems(obj)] == []


# -- secrets -------------------------------------------------------------------------------------------


def test_it_refuses_to_render_without_credentials(chart: helm.Chart) -> None:
    values = _merge(MINIMAL, {"secrets": {"existingSecret": ""}})
    message = render_error(chart, values)
    assert "no credentials: set secrets.existingSecret" in message
    assert "there are no default passwords" in message
    for key in ("blobSecretKey", "textPassword", "vectorApiKey", "graphPassword", "apiKeys"):
        assert f"secrets.{key}" in message


def test_it_names_exactly_the_credentials_that_are_missing(chart: helm.Chart) -> None:
    given = {
        "existingSecret": "",
        "blobAccessKey": "k",
        "blobSecretKey": "s",
        "textUsername": "u",
        "textPassword": "p",
        "graphUsername": "g",
        "graphPassword": "q",
    }
    message = render_error(chart, _merge(MINIMAL, {"secrets": given}))
    assert "secrets.vectorApiKey, secrets.apiKeys" in message and "secrets.blobSecretKey" not in message


def test_inline_credentials_go_into_the_charts_secret_only(chart: helm.Chart) -> None:
    inline = {
        "existingSecret": "",
        "blobAccessKey": "lk-access",
        "blobSecretKey": "Blob-S3cret",
        "textUsername": "lorekeeper",
        "textPassword": "Text-S3cret",
        "vectorApiKey": "Vector-S3cret",
        "graphUsername": "lorekeeper",
        "graphPassword": "Graph-S3cret",
        "apiKeys": "api-key-1\napi-key-2",
    }
    rendered = render(chart, _merge(MINIMAL, {"secrets": inline}))
    secret = one(rendered, "Secret")
    assert secret["metadata"]["name"] == f"{FULLNAME}-secrets"
    assert set(secret["stringData"]) == set(deploy.SECRET_KEYS)
    assert secret["stringData"]["api-keys"] == "api-key-1\napi-key-2"
    elsewhere = yaml.safe_dump([o for o in objects(rendered) if o["kind"] != "Secret"])
    for value in ("Blob-S3cret", "Text-S3cret", "Vector-S3cret", "Graph-S3cret", "api-key-1"):
        assert value not in elsewhere
    for spec in deploy.pod_specs(one(rendered, "RayService")):
        assert deploy.lorekeeper_container_problems(spec, f"{FULLNAME}-secrets", f"{FULLNAME}-config") == []


def test_the_narrator_endpoints_key_is_an_optional_file_of_the_secret(chart: helm.Chart, tmp_path: Path) -> None:
    values = _merge(
        _values(CHART / "ci" / "external-stores-values.yaml"), {"serve": {"narrator": {"apiKeyFromSecret": True}}}
    )
    rendered = render(chart, values)
    container = deploy.pod_specs(one(rendered, "RayService"))[0]["containers"][0]
    files = {env["name"]: env["value"] for env in container["env"]}
    assert files["LOREKEEPER_NARRATOR_API_KEY_FILE"] == "/var/run/secrets/lorekeeper/narrator-api-key"
    secrets = {key: f"Str0ng-{key}" for key in [*deploy.SECRET_KEYS, "narrator-api-key"]}
    _, serving = deploy.settings_of(one(rendered, "ConfigMap", CONFIG)["data"], container, tmp_path, secrets)
    assert serving.narrator_api_key.get_secret_value() == "Str0ng-narrator-api-key"
    # off by default: no variable naming a file the Secret may not have
    default = deploy.pod_specs(one(render(chart, _values(CHART / "ci" / "external-stores-values.yaml")), "RayService"))
    assert "LOREKEEPER_NARRATOR_API_KEY_FILE" not in {env["name"] for env in default[0]["containers"][0]["env"]}
    # inline: the chart's Secret carries it, and refuses to render without it
    inline = {key: f"v-{key}" for key in ("blobAccessKey", "blobSecretKey", "textUsername", "textPassword")}
    inline |= {key: f"v-{key}" for key in ("vectorApiKey", "graphUsername", "graphPassword", "apiKeys")}
    with_key = _merge(
        MINIMAL, {"secrets": {**inline, "existingSecret": ""}, "serve": {"narrator": {"apiKeyFromSecret": True}}}
    )
    assert "set secrets.narratorApiKey (there are no default passwords)" in render_error(chart, with_key)
    secret = one(render(chart, _merge(with_key, {"secrets": {"narratorApiKey": "sk-narrator"}})), "Secret")
    assert secret["stringData"]["narrator-api-key"] == "sk-narrator"


def test_the_source_bucket_mcp_and_health_settings_reach_lorekeeper(chart: helm.Chart, tmp_path: Path) -> None:
    external = _values(CHART / "ci" / "external-stores-values.yaml")
    source_url = "s3://library-service?endpoint=https://s3.library.example.com&region=eu-west-1"
    values = _merge(
        external,
        {"sourceBucket": {"url": source_url}, "serve": {"mcp": {"requireKey": False}, "healthTimeoutSeconds": 5}},
    )
    rendered = render(chart, values)
    config = one(rendered, "ConfigMap", CONFIG)["data"]
    assert config["LOREKEEPER_SOURCE_BLOB_URL"] == source_url
    assert "LOREKEEPER_MCP_PORT" not in config  # refused on Ray Serve: MCP is /mcp of the API Service
    container = deploy.pod_specs(one(rendered, "RayService"))[0]["containers"][0]
    files = {env["name"]: env["value"] for env in container["env"]}
    assert files["LOREKEEPER_SOURCE_BLOB_ACCESS_KEY_FILE"] == "/var/run/secrets/lorekeeper/source-blob-access-key"
    assert files["LOREKEEPER_SOURCE_BLOB_SECRET_KEY_FILE"] == "/var/run/secrets/lorekeeper/source-blob-secret-key"
    secrets = {
        key: f"Str0ng-{key}" for key in [*deploy.SECRET_KEYS, "source-blob-access-key", "source-blob-secret-key"]
    }
    settings, serving = deploy.settings_of(config, container, tmp_path, secrets)
    source = settings.source_blob_location()
    assert source is not None and (source.backend.value, source.bucket) == ("s3", "library-service")
    assert settings.source_blob_secret_key.get_secret_value() == "Str0ng-source-blob-secret-key"
    assert serving.mcp_require_key is False and serving.health_timeout_s == 5.0 and serving.mcp_port is None

    # the defaults: keys required, probes wait 2 s, no source bucket and no variable naming its files
    default = render(chart, external)
    config = one(default, "ConfigMap", CONFIG)["data"]
    assert (config["LOREKEEPER_MCP_REQUIRE_KEY"], config["LOREKEEPER_HEALTH_TIMEOUT_S"]) == ("true", "2")
    assert "LOREKEEPER_SOURCE_BLOB_URL" not in config
    names = {env["name"] for env in deploy.pod_specs(one(default, "RayService"))[0]["containers"][0]["env"]}
    assert not {n for n in names if n.startswith("LOREKEEPER_SOURCE_BLOB")}

    # inline credentials: the chart's Secret carries the source bucket's, and refuses to render without them
    inline = {key: f"v-{key}" for key in ("blobAccessKey", "blobSecretKey", "textUsername", "textPassword")}
    inline |= {key: f"v-{key}" for key in ("vectorApiKey", "graphUsername", "graphPassword", "apiKeys")}
    with_source = _merge(MINIMAL, {"secrets": {**inline, "existingSecret": ""}, "sourceBucket": {"url": source_url}})
    message = render_error(chart, with_source)
    assert "set secrets.sourceBlobAccessKey, secrets.sourceBlobSecretKey (there are no default passwords)" in message
    given = {"sourceBlobAccessKey": "src-access", "sourceBlobSecretKey": "Src-S3cret"}
    rendered = render(chart, _merge(with_source, {"secrets": given}))
    secret = one(rendered, "Secret")["stringData"]
    assert (secret["source-blob-access-key"], secret["source-blob-secret-key"]) == ("src-access", "Src-S3cret")
    assert "Src-S3cret" not in yaml.safe_dump([o for o in objects(rendered) if o["kind"] != "Secret"])


def test_the_echo_engine_renders_without_an_endpoint(chart: helm.Chart) -> None:
    values = _merge(MINIMAL, {"serve": {"narrator": {"engine": "echo", "baseUrl": ""}}})
    config = one(render(chart, values), "ConfigMap", CONFIG)["data"]
    assert config["LOREKEEPER_NARRATOR_ENGINE"] == "echo" and "LOREKEEPER_NARRATOR_BASE_URL" not in config


def test_every_value_is_documented_and_typed(chart: helm.Chart) -> None:
    """values.yaml explains every key (a comment on or above it; a name explained once, e.g. storage, or
    Kubernetes' own fields, counts everywhere), and values.schema.json types every key."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    keys = []
    for index, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):(\s|$)", line)
        if match:
            commented = "#" in line.split(":", 1)[1] or (index > 0 and lines[index - 1].strip().startswith("#"))
            keys.append((match.group(2), commented, index + 1))
    # Kubernetes' own fields: resources' requests and limits, a toleration's key, operator and effect
    kubernetes = {"requests", "limits", "key", "operator", "effect"}
    explained = {name for name, commented, _ in keys if commented} | kubernetes
    assert [(line, name) for name, _, line in keys if name not in explained] == []

    schema = json.loads((CHART / "values.schema.json").read_text())

    def typed(values: dict[str, Any], node: dict[str, Any], path: str) -> list[str]:
        missing = []
        for key, value in values.items():
            child = node.get("properties", {}).get(key)
            if child is None:
                missing.append(f"{path}{key}")
            elif isinstance(value, dict) and "properties" in child:
                missing += typed(value, child, f"{path}{key}.")
        return missing

    assert typed(chart.values, schema, "") == []


# -- values.schema.json and the template checks reject wrong values -------------------------------------

WRONG_VALUES = [
    ({"stores": {"mode": "cloud"}}, "/stores/mode"),
    ({"image": {"cpuTag": "latest"}}, "/image/cpuTag"),
    ({"stores": {"bundled": {"minio": {"image": "minio/minio:latest"}}}}, "/stores/bundled/minio/image"),
    ({"ray": {"cpuWorkers": {"maxReplicas": "many"}}}, "/ray/cpuWorkers/maxReplicas"),
    ({"ray": {"gpuWorkers": {"replicas": -1}}}, "/ray/gpuWorkers/replicas"),
    ({"ray": {"cpuWorkers": {"minReplica": 1}}}, "minReplica"),
    ({"replicaCount": 3}, "replicaCount"),
    ({"serve": {"narrator": {"engine": "tgi"}}}, "/serve/narrator/engine"),
    ({"stores": {"external": {"blobUrl": "http://minio:9000"}}}, "/stores/external/blobUrl"),
    ({"stores": {"external": {"graphUrl": "http://neo4j:7474"}}}, "/stores/external/graphUrl"),
    ({"ray": {"auth": {"mode": "password"}}}, "/ray/auth/mode"),
    ({"ingestJob": {"source": "s3://bucket/'; rm -rf /"}}, "/ingestJob/source"),
    ({"ingestJob": {"type": "novel"}}, "/ingestJob/type"),
    ({"extraEnv": [{"name": "LOREKEEPER_GRAPH_PASSWORD", "value": "x"}]}, "/extraEnv/0/name"),
    ({"environment": "staging"}, "/environment"),
    ({"secrets": {"existingSecret": "Lorekeeper_Secrets"}}, "/secrets/existingSecret"),
    ({"nameOverride": "Lore"}, "/nameOverride"),
    ({"ingress": {"paths": []}}, "/ingress/paths"),
    ({"sourceBucket": {"url": "https://s3.example.com/library"}}, "/sourceBucket/url"),
    ({"serve": {"healthTimeoutSeconds": 0}}, "/serve/healthTimeoutSeconds"),
    ({"serve": {"mcp": {"port": 8001}}}, "port"),
]


@pytest.mark.parametrize(("wrong", "where"), WRONG_VALUES, ids=[where for _, where in WRONG_VALUES])
def test_the_values_schema_rejects_wrong_values(chart: helm.Chart, wrong: dict[str, Any], where: str) -> None:
    values = _merge(MINIMAL, wrong)
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema(values)
    assert where in str(caught.value)
    # and rendering (helm template/install) refuses them the same way
    assert where in render_error(chart, values)


def test_the_values_schema_accepts_every_profile_and_the_defaults(chart: helm.Chart) -> None:
    chart.validate_schema(MINIMAL)
    for path in CI_VALUES:
        chart.validate_schema(_values(path))


TEMPLATE_CHECKS = [
    ({"ray": {"cpuWorkers": {"minReplicas": 3, "replicas": 3, "maxReplicas": 2}}}, "ray.cpuWorkers: need minReplicas"),
    ({"serve": {"narrator": {"minReplicas": 5, "maxReplicas": 2}}}, "serve.narrator: minReplicas 5 is above"),
    ({"serve": {"narrator": {"baseUrl": ""}}}, "serve.narrator.baseUrl is required"),
    ({"serve": {"narrator": {"engine": "vllm", "numGpus": 1}}}, "needs GPU workers: set ray.gpuWorkers.enabled"),
    (
        {"ray": {"gpuWorkers": {"enabled": True}}, "serve": {"narrator": {"engine": "vllm"}}},
        "serve.narrator.engine=vllm needs serve.narrator.numGpus >= 1",
    ),
    ({"serve": {"narrator": {"model": ""}}}, "serve.narrator.model is required"),
    (
        {"ray": {"gpuWorkers": {"enabled": True}}, "serve": {"narrator": {"engine": "vllm", "numGpus": 1}}},
        "ray.gpuWorkers.nodeSelector is required with GPU workers",
    ),
    ({"stores": {"mode": "external"}}, "stores.external.blobUrl is required with stores.mode=external"),
    ({"ingress": {"enabled": True, "tls": {"enabled": True}}}, "ingress.tls.secretName is required"),
    ({"ingestJob": {"enabled": True, "source": "s3://b/p", "library": "core"}}, "ingestJob.name is required"),
    ({"ingestJob": {"enabled": True, "name": "run1", "library": "core"}}, "ingestJob.source is required"),
]


@pytest.mark.parametrize(("wrong", "message"), TEMPLATE_CHECKS, ids=[m for _, m in TEMPLATE_CHECKS])
def test_the_templates_refuse_inconsistent_values(chart: helm.Chart, wrong: dict[str, Any], message: str) -> None:
    assert message in render_error(chart, _merge(MINIMAL, wrong))


# -- the ingestion RayJob ------------------------------------------------------------------------------


def test_the_ingest_job_is_off_in_the_release(profile: tuple[str, dict[str, list[dict[str, Any]]]]) -> None:
    _, rendered = profile
    assert "ingest-rayjob.yaml" not in rendered


@pytest.mark.parametrize("use_gpus", [False, True], ids=["cpu", "gpu"])
def test_the_ingest_job_runs_the_real_entrypoint(chart: helm.Chart, use_gpus: bool) -> None:
    job_values = {
        "enabled": True,
        "name": "core-2025",
        "source": "s3://lorekeeper-corpus/rulebooks/core/",
        "library": "Core Rules",
        "type": "rulebook",
        "collection": "srd",
        "useGpuWorkers": use_gpus,
    }
    values = _merge(_values(CHART / "ci" / "gpu-values.yaml"), {"ingestJob": job_values})
    job = one(render(chart, values), "RayJob")
    assert deploy.problems(job) == []
    assert job["metadata"]["name"] == f"{FULLNAME}-ingest-core-2025"
    params = deploy.ingest_entrypoint_params(job["spec"]["entrypoint"])  # the CLI takes the log options too
    assert job["spec"]["entrypoint"].split()[3:7] == ["--log-json", "--log-level", "INFO", "ingest"]
    assert params["paths"] == ["s3://lorekeeper-corpus/rulebooks/core/"]
    assert (params["library"], params["collection"], params["library_type"].value) == ("Core Rules", "srd", "rulebook")
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["ttlSecondsAfterFinished"] == 3600
    cluster = job["spec"]["rayClusterSpec"]
    assert deploy.worker_group_problems(cluster) == []
    assert [g["groupName"] for g in cluster["workerGroupSpecs"]] == (["cpu", "gpu"] if use_gpus else ["cpu"])
    for spec in deploy.pod_specs(job):
        assert deploy.pod_problems(spec) == []
        assert deploy.lorekeeper_container_problems(spec, "lorekeeper-secrets", f"{FULLNAME}-config") == []
        # the job's pods are not behind the API Service
        labels = [g["template"]["metadata"]["labels"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]
        assert all(label["lorekeeper.io/cluster"] == "ingest" for label in labels)


def test_values_files_do_not_carry_credentials() -> None:
    for path in [CHART / "values.yaml", *CI_VALUES]:
        secrets = _values(path).get("secrets", {})
        assert {key: value for key, value in secrets.items() if key != "existingSecret" and value} == {}, path
    assert re.search(r"^\s*(password|secret)\s*:", (CHART / "values.yaml").read_text(), re.M | re.I) is None
