"""The plain KubeRay manifests in cluster/kuberay/: valid against the Kubernetes schemas and the KubeRay
CRDs, serving cluster/serve-config.yaml, with bounded CPU and GPU worker groups, secure pods whose
credentials are files of a Secret, and an ingestion entrypoint the real CLI accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

CLUSTER = deploy.ROOT / "cluster"
SERVE_CONFIG = CLUSTER / "serve-config.yaml"


def _objects(name: str) -> dict[str, dict[str, Any]]:
    documents = deploy.load_documents((CLUSTER / "kuberay" / name).read_text())
    return {doc["kind"]: doc for doc in documents}


@pytest.fixture(scope="module")
def service() -> dict[str, dict[str, Any]]:
    return _objects("rayservice.yaml")


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    return _objects("rayjob-ingest.yaml")["RayJob"]


@pytest.mark.parametrize("name", ["rayservice.yaml", "rayjob-ingest.yaml"])
def test_every_object_is_valid_against_its_schema(name: str) -> None:
    documents = deploy.load_documents((CLUSTER / "kuberay" / name).read_text())
    assert documents
    assert [problem for doc in documents for problem in deploy.problems(doc)] == []


def test_a_wrong_field_or_type_fails_validation(service: dict[str, dict[str, Any]]) -> None:
    broken = copy.deepcopy(service["RayService"])
    broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["minReplica"] = 1
    broken["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    found = deploy.problems(broken)
    assert any("'minReplica' was unexpected" in problem for problem in found)
    assert any("num-cpus: 0 is not of type 'string'" in problem for problem in found)


def test_the_rayservice_serves_the_serve_config_with_a_gpu_per_narrator(service: dict[str, dict[str, Any]]) -> None:
    served = yaml.safe_load(service["RayService"]["spec"]["serveConfigV2"])
    assert deploy.serve_config_problems(served) == []
    expected = yaml.safe_load(SERVE_CONFIG.read_text())
    narrator = next(d for d in expected["applications"][0]["deployments"] if d["name"] == "Narrator")
    narrator["ray_actor_options"]["num_gpus"] = 1
    assert served == expected


def test_the_serve_config_is_one_ray_accepts() -> None:
    config = yaml.safe_load(SERVE_CONFIG.read_text())
    assert deploy.serve_config_problems(config) == []
    (app,) = config["applications"]
    assert app["import_path"] == "serve.deployments:build_app" and app["route_prefix"] == "/"
    assert [d["name"] for d in app["deployments"]] == ["Ingress", "Narrator", "Search", "Gate"]
    narrator = app["deployments"][1]["autoscaling_config"]
    assert 1 <= narrator["min_replicas"] <= narrator["max_replicas"] and narrator["target_ongoing_requests"] > 0
    # a misspelt field is caught even where Ray's schema would silently ignore it
    app["deployments"][0]["num_replica"] = 3
    assert deploy.serve_config_problems(config) == ["unknown field num_replica in deployment Ingress"]


def test_the_serve_config_names_the_deployments_the_app_builds() -> None:
    """serve.deployments:build_app, built offline as `serve deploy` would, has exactly the config's deployments."""
    import importlib.util
    import warnings

    if importlib.util.find_spec("serve.deployments") is None:
        pytest.skip("serve/app.py is not in this tree yet")
    with warnings.catch_warnings():  # Ray's own pydantic deprecations, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        from ray.serve._private.build_app import build_app

        from serve.deployments import build_app as build_lorekeeper

    (app,) = yaml.safe_load(SERVE_CONFIG.read_text())["applications"]
    built = build_app(build_lorekeeper(app["args"]), name=app["name"])
    assert sorted(d.name for d in built.deployments) == sorted(d["name"] for d in app["deployments"])
    assert built.ingress_deployment_name == "Ingress"


def test_head_cpu_and_gpu_groups_are_bounded_and_placed(service: dict[str, dict[str, Any]]) -> None:
    cluster = service["RayService"]["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == deploy.ray_pin()
    assert [group["groupName"] for group in cluster["workerGroupSpecs"]] == ["cpu", "gpu"]
    assert deploy.worker_group_problems(cluster) == []
    gpu = cluster["workerGroupSpecs"][1]
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_pods_are_secure_and_read_credentials_from_the_secret(
    service: dict[str, dict[str, Any]], job: dict[str, Any]
) -> None:
    for obj in (service["RayService"], job):
        for spec in deploy.pod_specs(obj):
            assert deploy.pod_problems(spec) == []
            assert deploy.lorekeeper_container_problems(spec, "lorekeeper-secrets", "lorekeeper-config") == []


def test_the_config_map_holds_settings_lorekeeper_reads_and_no_secret(service: dict[str, dict[str, Any]]) -> None:
    data = service["ConfigMap"]["data"]
    assert set(data) <= deploy.settings_variables(), set(data) - deploy.settings_variables()
    assert not [key for key in data if any(word in key for word in deploy.SECRET_WORDS)]


def test_the_config_map_and_secret_files_resolve_to_the_server_stores(
    service: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    container = deploy.pod_specs(service["RayService"])[0]["containers"][0]
    secrets = {key: f"Str0ng-{key}" for key in deploy.SECRET_KEYS}
    settings, serving = deploy.settings_of(service["ConfigMap"]["data"], container, tmp_path, secrets)
    assert settings.environment.value == "production"
    assert settings.graph_password.get_secret_value() == "Str0ng-graph-password"
    assert deploy.backends(settings) == ["s3", "opensearch", "qdrant_server", "neo4j"]
    assert serving.narrator_engine.value == "vllm" and serving.narrator_model == "meta-llama/Llama-3.1-8B-Instruct"
    assert not serving.loopback and serving.api_keys_file == tmp_path / "api-keys"


def test_the_ingest_job_runs_the_real_entrypoint_and_cleans_up(job: dict[str, Any]) -> None:
    spec = job["spec"]
    params = deploy.ingest_entrypoint_params(spec["entrypoint"])
    assert params["paths"] and all(path.startswith("s3://") for path in params["paths"])
    assert params["library"] and params["library_type"].value == "rulebook"
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    assert spec["rayClusterSpec"]["rayVersion"] == deploy.ray_pin()
    assert deploy.worker_group_problems(spec["rayClusterSpec"]) == []


def test_the_ingest_entrypoint_keeps_ingest_a_subcommand() -> None:
    # `python -m jobs ingest X` once took "ingest" for a path (a Typer app of one command)
    params = deploy.ingest_entrypoint_params("python -m jobs ingest s3://bucket/prefix --library core --type lore")
    assert params["paths"] == ["s3://bucket/prefix"] and params["library_type"].value == "lore"
