"""Checks shared by the deployment tests: offline validation of Kubernetes objects, the rules every
Lorekeeper pod follows, and the project's pins.

Built-in kinds are validated by ``kubernetes-validate`` against the Kubernetes OpenAPI schemas in strict
mode (an unknown field fails, as ``kubectl apply --validate=strict`` would). KubeRay's RayService and
RayJob are validated with ``jsonschema`` against the openAPIV3Schema of the CRDs in
``../shared/k8s/kuberay-crds`` (read in place, never copied), made strict the same way: an object
schema that lists its properties admits no others unless it says ``x-kubernetes-preserve-unknown-fields``.
The Prometheus Operator's CRDs are not available here, so a ServiceMonitor is checked against the few
fields this project uses (:data:`SERVICE_MONITOR_SCHEMA`).

Not checked offline: CEL rules (``x-kubernetes-validations``), admission webhooks, and anything that
needs a cluster.
"""

from __future__ import annotations

import copy
import re
import tomllib
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "k8s" / "kuberay-crds"
# A Kubernetes release that kubernetes-validate ships schemas for and KubeRay supports.
KUBERNETES_VERSION = "1.31.0"

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

_RELABEL_ACTIONS = (
    "replace",
    "keep",
    "drop",
    "hashmod",
    "labelmap",
    "labeldrop",
    "labelkeep",
    "lowercase",
    "uppercase",
    "keepequal",
    "dropequal",
)
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scheme": {"enum": ["http", "https"]},
                            # the operator's RelabelConfig (monitoring.coreos.com/v1), as its CRD states it
                            "metricRelabelings": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "sourceLabels": {
                                            "type": "array",
                                            "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                                        },
                                        "separator": {"type": "string"},
                                        "targetLabel": {"type": "string"},
                                        "regex": {"type": "string"},
                                        "modulus": {"type": "integer"},
                                        "replacement": {"type": "string"},
                                        "action": {
                                            "enum": [
                                                *(a for name in _RELABEL_ACTIONS for a in (name, name.capitalize())),
                                                "HashMod",
                                                "LabelMap",
                                                "LabelDrop",
                                                "LabelKeep",
                                                "KeepEqual",
                                                "DropEqual",
                                            ]
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def ray_pin() -> str:
    """The Ray release pyproject pins (``ray[data]==X``)."""
    pins = [re.fullmatch(r"ray\[[\w,]+\]==([\d.]+)", dep) for dep in pyproject()["project"]["dependencies"]]
    found = [pin.group(1) for pin in pins if pin]
    assert len(found) == 1, "pyproject pins ray exactly once"
    return found[0]


def _strict(schema: Any) -> Any:
    """Close every object schema that lists its properties, as strict field validation does."""
    if isinstance(schema, dict):
        closed = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in closed
            and "additionalProperties" not in closed
            and not closed.get("x-kubernetes-preserve-unknown-fields")
        ):
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → strict openAPIV3Schema, for every served version of the KubeRay CRDs."""
    assert CRD_DIR.is_dir(), f"the KubeRay CRDs are read from {CRD_DIR}"
    schemas = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=_LOADER):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                    schemas[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return schemas


def crd_kinds() -> set[tuple[str, str]]:
    return set(_crds())


def _problems(validator: jsonschema.protocols.Validator, obj: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(str(part) for part in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def problems(obj: dict[str, Any]) -> list[str]:
    """Everything wrong with one object, as ``path: message`` lines (empty when valid)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    name = (obj.get("metadata") or {}).get("name", "")
    found: list[str] = []
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name) or len(name) > 63:
        found.append(f"metadata/name: {name!r} is not a DNS name of at most 63 characters")
    if (api_version, kind) in _crds():
        schema = _crds()[(api_version, kind)]
        found += _problems(jsonschema.Draft7Validator(schema), obj)
    elif api_version.startswith("monitoring.coreos.com/"):
        found += _problems(jsonschema.Draft7Validator(SERVICE_MONITOR_SCHEMA), obj)
    else:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # the first error, as a jsonschema error
            path = "/".join(str(part) for part in exc.absolute_path)
            found.append(f"{path or '<root>'}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            found.append(f"{api_version} {kind}: no schema for Kubernetes {KUBERNETES_VERSION}")
    return [f"{kind} {name}: {problem}" for problem in found]


def load_documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a manifest stream."""
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs inside a workload or a KubeRay resource."""
    spec = obj.get("spec", {})
    if obj["kind"] == "RayService":
        cluster = spec["rayClusterConfig"]
    elif obj["kind"] == "RayJob":
        cluster = spec["rayClusterSpec"]
    elif "template" in spec:
        return [spec["template"]["spec"]]
    else:
        return []
    groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
    return [group["template"]["spec"] for group in groups]


def ingest_entrypoint_params(entrypoint: str) -> dict[str, Any]:
    """Parse a ``python -m jobs ingest …`` command line with the real CLI, without running it."""
    import shlex

    import typer

    from jobs.cli import app

    argv = shlex.split(entrypoint)
    assert argv[:3] == ["python", "-m", "jobs"], entrypoint
    group = typer.main.get_command(app)
    context = group.make_context("jobs", argv[3:])
    name, command, rest = group.resolve_command(context, [*getattr(context, "_protected_args", []), *context.args])
    assert name == "ingest" and command is not None, entrypoint
    return dict(command.make_context(name, rest, parent=context).params)


def serve_config_problems(config: dict[str, Any]) -> list[str]:
    """Check a Serve config against Ray's own schema, and refuse fields that schema would ignore."""
    with warnings.catch_warnings():  # Ray's own pydantic deprecations, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        from ray.serve.schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema

    found = []
    try:
        ServeDeploySchema.model_validate(config)
    except Exception as exc:  # pydantic's ValidationError, whichever pydantic Ray was built with
        found.append(str(exc))
    found += [f"unknown top-level field {key}" for key in set(config) - set(ServeDeploySchema.model_fields)]
    for app in config.get("applications", []):
        found += [f"unknown application field {key}" for key in set(app) - set(ServeApplicationSchema.model_fields)]
        for deployment in app.get("deployments", []):
            unknown = set(deployment) - set(DeploymentSchema.model_fields)
            found += [f"unknown field {key} in deployment {deployment.get('name')}" for key in unknown]
    return found


# -- rules every Lorekeeper pod follows, shared by the chart's and the plain manifests' tests -----------

# The keys of the Secret that holds every credential (the chart's and the plain manifests').
SECRET_KEYS = (
    "blob-access-key",
    "blob-secret-key",
    "text-username",
    "text-password",
    "vector-api-key",
    "graph-username",
    "graph-password",
    "api-keys",
)
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "API_KEY", "ACCESS_KEY", "USERNAME")


def settings_variables() -> set[str]:
    """Every LOREKEEPER_* variable Lorekeeper reads: the stores' settings and the serving ones."""
    from schemas.serving import ServeSettings
    from schemas.settings import Settings

    return {f"LOREKEEPER_{name.upper()}" for name in [*Settings.model_fields, *ServeSettings.model_fields]}


def pod_problems(spec: dict[str, Any]) -> list[str]:
    """Non-root, no privilege escalation, pinned images, resources, and no secret in a plain env value."""
    found = []
    pod_security = spec.get("securityContext", {})
    if pod_security.get("runAsNonRoot") is not True or pod_security.get("runAsUser") in (None, 0):
        found.append("pod: runAsNonRoot with a non-zero runAsUser")
    for container in spec["containers"]:
        name = container["name"]
        image = container["image"]
        if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
            found.append(f"{name}: pin the image ({image})")
        security = container.get("securityContext", {})
        if security.get("allowPrivilegeEscalation") is not False or "ALL" not in security.get("capabilities", {}).get(
            "drop", []
        ):
            found.append(f"{name}: no privilege escalation, drop ALL capabilities")
        if not container.get("resources", {}).get("requests") and not container.get("resources", {}).get("limits"):
            found.append(f"{name}: set resources")
        for env in container.get("env", []):
            secret_like = any(word in env["name"].upper() for word in SECRET_WORDS)
            if secret_like and not env["name"].endswith("_FILE") and "value" in env:
                found.append(f"{name}: {env['name']} must come from a Secret (valueFrom or a _FILE)")
    return found


def lorekeeper_container_problems(spec: dict[str, Any], secret_name: str, config_name: str) -> list[str]:
    """A Ray container of Lorekeeper: settings from the ConfigMap, every credential a file of the Secret."""
    found = []
    mounted = {volume["name"]: volume["secret"]["secretName"] for volume in spec["volumes"] if "secret" in volume}
    for container in spec["containers"]:
        name = container["name"]
        if {"configMapRef": {"name": config_name}} not in container.get("envFrom", []):
            found.append(f"{name}: settings come from the ConfigMap {config_name}")
        mounts = {
            mount["mountPath"]: mount["name"]
            for mount in container.get("volumeMounts", [])
            if mounted.get(mount["name"]) == secret_name
        }
        files = {env["name"]: env.get("value", "") for env in container.get("env", []) if env["name"].endswith("_FILE")}
        for variable in (
            "LOREKEEPER_BLOB_ACCESS_KEY_FILE",
            "LOREKEEPER_BLOB_SECRET_KEY_FILE",
            "LOREKEEPER_TEXT_USERNAME_FILE",
            "LOREKEEPER_TEXT_PASSWORD_FILE",
            "LOREKEEPER_VECTOR_API_KEY_FILE",
            "LOREKEEPER_GRAPH_USERNAME_FILE",
            "LOREKEEPER_GRAPH_PASSWORD_FILE",
        ):
            path = files.get(variable, "")
            if not any(path.startswith(f"{mount}/") for mount in mounts):
                found.append(f"{name}: {variable} must name a file of the mounted Secret {secret_name}")
        unknown = set(files) - settings_variables()
        if unknown:
            found.append(f"{name}: Lorekeeper reads no {sorted(unknown)}")
    return found


def worker_group_problems(cluster: dict[str, Any]) -> list[str]:
    """Autoscaling bounds, and GPU groups that ask for GPUs on a tainted, selected node pool."""
    found = []
    if cluster.get("enableInTreeAutoscaling") is not True:
        found.append("enableInTreeAutoscaling: the Ray autoscaler scales the worker groups")
    if cluster.get("authOptions", {}).get("mode") != "token":
        found.append("authOptions.mode: token (Ray token authentication)")
    for group in cluster.get("workerGroupSpecs", []):
        name = group["groupName"]
        if not group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]:
            found.append(f"{name}: minReplicas <= replicas <= maxReplicas")
        spec = group["template"]["spec"]
        gpus = [c["resources"].get("limits", {}).get("nvidia.com/gpu") for c in spec["containers"]]
        if any(gpus):
            if not spec.get("nodeSelector"):
                found.append(f"{name}: a GPU group selects the GPU node pool")
            if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
                found.append(f"{name}: a GPU group tolerates the nvidia.com/gpu taint")
            if group["rayStartParams"].get("num-gpus") != str(gpus[0]):
                found.append(f"{name}: num-gpus matches the nvidia.com/gpu limit")
            if not all(c["image"].endswith("-gpu") for c in spec["containers"]):
                found.append(f"{name}: GPU workers run the GPU image")
    return found


def settings_of(
    config: dict[str, str], container: dict[str, Any], secrets_dir: Path, secrets: dict[str, str]
) -> tuple[Any, Any]:
    """The Settings and ServeSettings a Lorekeeper container would build: its ConfigMap plus the Secret's files.

    ``secrets`` maps Secret keys to values; they are written under ``secrets_dir`` as the kubelet would
    mount them, and each ``LOREKEEPER_*_FILE`` variable is pointed there.
    """
    from schemas.serving import ServeSettings
    from schemas.settings import load_settings

    values: dict[str, Any] = {key.removeprefix("LOREKEEPER_").lower(): value for key, value in config.items()}
    for env in container["env"]:
        if not env["name"].endswith("_FILE"):
            continue
        key = Path(env["value"]).name
        path = secrets_dir / key
        path.write_text(secrets[key] + "\n")
        values[env["name"].removeprefix("LOREKEEPER_").lower()] = str(path)
    # both read the same LOREKEEPER_* variables and ignore the other's
    return load_settings(**values), ServeSettings(**values)


def backends(settings: Any) -> list[str]:
    return [
        settings.blob_location().backend.value,
        settings.text_location().backend.value,
        settings.vector_location().backend.value,
        settings.graph_location().backend.value,
    ]
