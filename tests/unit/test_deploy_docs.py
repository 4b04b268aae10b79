"""docs/deploy.md: every command in its ``bash`` blocks is checked here.

``helm`` commands on the chart are rendered with Helm's engine (helm-python-sdk) from the values files
and ``--set`` flags they name, linted, and every object they render is validated against the
Kubernetes schemas and the KubeRay CRDs; ``lorekeeper``, ``python -m jobs``, ``ray`` and ``serve``
commands are parsed by the real command-line parsers; ``docker``, ``kubectl``, ``kind`` and cloud
commands must name files, images, Compose services, Secrets and Services that exist. A command this
module does not know fails the test, so the page cannot grow an unchecked command.
"""

from __future__ import annotations

import re
import shlex
import warnings
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import click
import helm_python as helm
import pytest
import typer
import yaml

from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

DOC = deploy.ROOT / "docs" / "deploy.md"
CHART = deploy.ROOT / "helm" / "lorekeeper"
COMPOSE = deploy.ROOT / "cluster" / "docker-compose.yml"
SERVE_CONFIG = deploy.ROOT / "cluster" / "serve-config.yaml"
_OPERATORS = {"|", "&&", ";", "||"}
# Commands with nothing to check beyond the files they name: shell built-ins and plain tools.
PLAIN = {"set", ".", "export", "mkdir", "cp", "openssl", "head", "cat"}


@dataclass
class Command:
    argv: list[str]
    line: str
    # the command whose output this one reads (``a | b``: b.piped_from is a)
    piped_from: Command | None = None
    redirect: str | None = None
    checked: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return shlex.join(self.argv)


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def commands(text: str) -> list[Command]:
    """The simple commands of every bash block, split at pipes, ``&&`` and ``;``, with redirections."""
    found = []
    for block in bash_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
            current: list[str] = []
            previous: Command | None = None
            piped = False
            redirect = None
            index = 0
            while index <= len(tokens):
                token = tokens[index] if index < len(tokens) else None
                if token in (">", ">>"):
                    redirect = tokens[index + 1]
                    index += 2
                    continue
                if token is None or token in _OPERATORS:
                    if current:
                        command = Command(current, line, previous if piped else None, redirect)
                        found.append(command)
                        previous = command
                    piped = token == "|"
                    current, redirect = [], None
                else:
                    current.append(token)
                index += 1
    return found


@cache
def doc_commands() -> tuple[Command, ...]:
    return tuple(commands(DOC.read_text()))


def options(argv: list[str], *names: str) -> list[str]:
    """Every value of the options ``names`` (``-f X``, ``--values X`` or ``--values=X``)."""
    values = []
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv):
                values.append(argv[index + 1])
            elif arg.startswith(f"{name}="):
                values.append(arg.split("=", 1)[1])
    return values


# -- helm ------------------------------------------------------------------------------------------------

_HELM_VALUE_FLAGS = {"-f", "--values", "--set", "--set-string", "-n", "--namespace", "--show-only", "--version"}
_HELM_SWITCHES = {"--create-namespace", "--wait", "--atomic", "--reuse-values", "--strict"}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


@dataclass
class HelmRun:
    verb: str
    release: str
    namespace: str
    values: dict[str, Any]
    values_files: list[str]
    show_only: list[str]
    rendered: dict[str, list[dict[str, Any]]]


def helm_positionals(argv: list[str]) -> list[str]:
    positionals, index = [], 2
    while index < len(argv):
        arg = argv[index]
        if arg in _HELM_VALUE_FLAGS:
            index += 2
            continue
        assert not arg.startswith("--") or arg in _HELM_SWITCHES or "=" in arg, f"unknown helm flag {arg}"
        if not arg.startswith("-"):
            positionals.append(arg)
        index += 1
    return positionals


def helm_values(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The values a helm command passes: its files in order, then its --set flags in order."""
    values: dict[str, Any] = {}
    files = options(argv, "-f", "--values")
    for path in files:
        assert (deploy.ROOT / path).is_file(), f"{path} does not exist"
        values = _merge(values, yaml.safe_load((deploy.ROOT / path).read_text()) or {})
    for index, arg in enumerate(argv):
        if arg == "--set":
            values = _merge(values, helm.parse_set_string(argv[index + 1]))
        elif arg == "--set-string":
            values = _merge(values, helm.parse_set_string_values(argv[index + 1]))
    return values, files


def run_helm(command: Command) -> HelmRun | None:
    """Render (or lint) a helm command on the chart; None for commands on other charts or repos."""
    argv = command.argv
    verb = argv[1]
    if verb == "repo":
        assert argv[2] == "add" and argv[4].startswith("https://"), command
        return None
    if verb == "lint":
        assert argv[2] == "helm/lorekeeper", command
        values, files = helm_values(argv)
        report = helm.lint(CHART, values, strict=True, namespace="default", kube_version="v1.31.0")
        assert report["errors"] == [], (str(command), report["errors"])
        return HelmRun(verb, "", "default", values, files, [], {})
    assert verb in ("install", "upgrade", "template"), command
    release, chart = helm_positionals(argv)[:2]
    if chart != "helm/lorekeeper":
        assert chart == "kuberay/kuberay-operator", f"{chart}: only the KubeRay operator comes from a repository"
        # the operator release the chart declares it needs (Chart.yaml, lorekeeper.io/requires)
        required = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]["lorekeeper.io/requires"]
        minimum = tuple(int(part) for part in required.split(">=")[1].split("."))
        (version,) = options(argv, "--version")
        assert tuple(int(part) for part in version.split(".")) >= minimum, version
        return None
    namespace = (options(argv, "-n", "--namespace") or ["default"])[0]
    values, files = helm_values(argv)
    show_only = options(argv, "--show-only")
    with helm.Chart.load(CHART) as loaded:
        loaded.validate_schema(values)
        text = loaded.render(values=values, name=release, namespace=namespace, is_install=verb != "upgrade")
    rendered = {
        path.split("/", 1)[1]: deploy.load_documents(body)
        for path, body in text.items()
        if path.endswith(".yaml") and body.strip()
    }
    for path in show_only:
        assert rendered.get(path), f"{command}: --show-only {path} renders nothing"
    return HelmRun(verb, release, namespace, values, files, show_only, rendered)


@cache
def helm_runs() -> tuple[tuple[Command, HelmRun], ...]:
    runs = []
    for command in doc_commands():
        if command.argv[0] == "helm":
            run = run_helm(command)
            if run is not None:
                runs.append((command, run))
    return tuple(runs)


def rendered_objects(run: HelmRun) -> list[dict[str, Any]]:
    paths = run.show_only or list(run.rendered)
    return [obj for path in paths for obj in run.rendered[path]]


@cache
def release_objects() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) → object, over everything the page's helm commands and plain manifests create."""
    found = {}
    for _, run in helm_runs():
        for obj in rendered_objects(run):
            found[(obj["kind"], obj["metadata"]["name"])] = obj
    for path in (deploy.ROOT / "cluster" / "kuberay").glob("*.yaml"):
        for obj in deploy.load_documents(path.read_text()):
            found[(obj["kind"], obj["metadata"]["name"])] = obj
    return found


# -- the other programs ----------------------------------------------------------------------------------


def parse_typer(app: typer.Typer, prog: str, args: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse a command line with a Typer app's real parser, without running it: (command, params)."""
    group = typer.main.get_command(app)
    context = group.make_context(prog, list(args))
    name, sub, rest = group.resolve_command(context, [*getattr(context, "_protected_args", []), *context.args])
    assert sub is not None, args
    if isinstance(sub, click.Group):
        inner = sub.make_context(name, rest, parent=context)
        name2, leaf, rest2 = sub.resolve_command(inner, [*getattr(inner, "_protected_args", []), *inner.args])
        return f"{name} {name2}", dict(leaf.make_context(name2, rest2, parent=inner).params)
    return name, dict(sub.make_context(name, rest, parent=context).params)


@cache
def made_by_the_page() -> frozenset[str]:
    """Paths an earlier step of the page creates (copies, folders, redirections)."""
    made = set()
    for command in doc_commands():
        if command.argv[0] == "cp":
            made.add(command.argv[-1])
        elif command.argv[0] == "mkdir":
            made.update(arg for arg in command.argv[1:] if not arg.startswith("-"))
        if command.redirect:
            made.add(command.redirect)
    return frozenset(made)


def check_local_paths(paths: list[str]) -> None:
    for path in paths:
        if "://" not in path and path not in made_by_the_page():
            assert (deploy.ROOT / path).exists(), f"{path} does not exist"


def check_lorekeeper(argv: list[str]) -> None:
    from lorekeeper.cli import app

    name, params = parse_typer(app, "lorekeeper", argv[1:])
    if name == "ingest":
        check_local_paths(params["paths"])


def check_python(argv: list[str]) -> None:
    assert argv[1] == "-m", argv
    module = argv[2]
    if module == "jobs":
        from jobs.cli import app

        name, _ = parse_typer(app, "jobs", argv[3:])
        assert name == "ingest"
    elif module == "venv":
        assert argv[3:] == [".venv"]
    elif module == "pytest":
        assert options(argv[3:], "-m") == ["integration"]
    else:
        pytest.fail(f"unchecked python module {module}")


def check_pip(argv: list[str]) -> None:
    assert argv[1:3] == ["install", "-e"], argv
    target = argv[3]
    extras = re.fullmatch(r"\.\[([\w,]+)\]", target)
    assert extras, target
    known = set(deploy.pyproject()["project"]["optional-dependencies"])
    assert set(extras.group(1).split(",")) <= known, target


def check_ray(argv: list[str]) -> None:
    from ray.scripts.scripts import cli

    assert argv[1] == "job", argv
    job = cli.commands["job"]
    sub = job.commands[argv[2]]
    args = argv[3:]
    entrypoint: list[str] = []
    if "--" in args:
        args, entrypoint = args[: args.index("--")], args[args.index("--") + 1 :]
    sub.make_context(argv[2], list(argv[3:]))
    address = options(args, "--address")[0]
    assert urlsplit(address).port == 8265, address  # the compose head's dashboard, published on loopback
    if argv[2] == "submit":
        assert entrypoint[:3] == ["python", "-m", "jobs"], entrypoint
        check_python(entrypoint)


def check_serve(argv: list[str]) -> None:
    with warnings.catch_warnings():  # Ray's own pydantic deprecations, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        from ray.serve.scripts import cli

    assert argv[1] == "run", argv
    context = cli.commands["run"].make_context("run", list(argv[2:]))
    target = context.params["config_or_import_path"]
    served = yaml.safe_load(SERVE_CONFIG.read_text())
    # the same application as the cluster's Serve config
    assert target == served["applications"][0]["import_path"], target


@cache
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def image_tags() -> set[str]:
    with helm.Chart.load(CHART) as chart:
        image = chart.values["image"]
    return {f"{image['repository']}:{image['cpuTag']}", f"{image['repository']}:{image['gpuTag']}"}


def gpu_profile_images() -> set[str]:
    gpu = yaml.safe_load((CHART / "ci" / "gpu-values.yaml").read_text())["image"]
    return {f"{gpu['repository']}:{gpu['cpuTag']}", f"{gpu['repository']}:{gpu['gpuTag']}"}


def check_docker(argv: list[str]) -> None:
    verb = argv[1]
    if verb == "build":
        dockerfile = options(argv, "-f")[0]
        tag = options(argv, "-t")[0]
        assert (deploy.ROOT / dockerfile).is_file() and argv[-1] == "."
        assert tag in image_tags(), tag
        assert tag.rsplit("-", 1)[-1] == dockerfile.rsplit(".", 1)[-1], (
            "the CPU image from Dockerfile.cpu, GPU from .gpu"
        )
    elif verb == "tag":
        assert argv[2] in image_tags() and argv[3] in gpu_profile_images(), argv
        assert argv[2].rsplit(":", 1)[1] == argv[3].rsplit(":", 1)[1]
    elif verb == "push":
        assert argv[2] in gpu_profile_images(), argv
    elif verb == "compose":
        # compose's own options, then the subcommand and its arguments
        index, own = 2, {}
        while argv[index].startswith("-"):
            own[argv[index]] = argv[index + 1]
            index += 2
        assert own.pop("-f") == "cluster/docker-compose.yml", argv
        assert own.pop("--env-file", "cluster/.env") == "cluster/.env"  # made from cluster/.env.example
        assert own == {}, own
        sub, rest = argv[index], argv[index + 1 :]
        assert sub in ("up", "ps", "restart", "logs", "down"), sub
        services = set(compose()["services"])
        scales = options(rest, "--scale")
        assert {scale.split("=")[0] for scale in scales} <= services, scales
        named = [arg for arg in rest if not arg.startswith("-") and arg not in scales]
        assert set(named) <= services, named
    else:
        pytest.fail(f"unchecked docker command {verb}")


def check_kind(argv: list[str]) -> None:
    if argv[1:3] == ["load", "docker-image"]:
        assert argv[3] in image_tags(), argv
    else:
        assert argv[1:3] == ["create", "cluster"], argv


def check_gcloud(argv: list[str]) -> None:
    assert argv[1:4] == ["container", "node-pools", "create"], argv
    accelerator = dict(part.split("=", 1) for part in options(argv, "--accelerator")[0].split(","))
    gpu = yaml.safe_load((CHART / "ci" / "gpu-values.yaml").read_text())["ray"]["gpuWorkers"]
    # the pool GKE labels is the one the GPU profile selects, with the GPUs per node it asks for
    assert gpu["nodeSelector"] == {"cloud.google.com/gke-accelerator": accelerator["type"]}
    assert int(accelerator["count"]) >= gpu["gpusPerWorker"]
    assert int(options(argv, "--max-nodes")[0]) >= gpu["maxReplicas"]


def check_kubectl(command: Command) -> None:
    argv = command.argv
    args = [a for a in argv[1:] if a not in ("-n", *options(argv, "-n"))]
    verb = args[0]
    objects = release_objects()
    if verb == "create" and args[1] == "namespace":
        return
    if verb == "create" and args[1:3] == ["secret", "generic"]:
        name = args[3]
        keys = {opt.split("=", 1)[0] for opt in options(argv, "--from-literal", "--from-file")}
        assert keys == set(deploy.SECRET_KEYS), keys ^ set(deploy.SECRET_KEYS)
        profiles = [yaml.safe_load(p.read_text()) for p in sorted((CHART / "ci").glob("*.yaml"))]
        assert {p["secrets"]["existingSecret"] for p in profiles} == {name}
        return
    if verb == "create" and options(argv, "-f"):
        (path,) = options(argv, "-f")
        if path == "-":
            assert command.piped_from is not None and command.piped_from.argv[:2] == ["helm", "template"]
        else:
            check_local_paths([path])
        return
    if verb == "taint":
        key = args[3].split("=")[0]
        effect = args[3].rsplit(":", 1)[1]
        gpu = yaml.safe_load((CHART / "values.yaml").read_text())["ray"]["gpuWorkers"]
        assert {"key": key, "operator": "Exists", "effect": effect} in gpu["tolerations"]
        return
    if verb == "get":
        kind = {"rayservice": "RayService", "rayjob": "RayJob"}[args[1]]
        assert (kind, args[2]) in objects, (kind, args[2])
        return
    if verb == "port-forward":
        assert ("Service", args[1].removeprefix("svc/")) in objects, args[1]
        return
    if verb == "logs":
        name = args[-1].removeprefix("job/")
        # KubeRay's submitter Job is named after its RayJob
        assert ("RayJob", name) in objects, name
        return
    pytest.fail(f"unchecked kubectl command {command}")


def check_curl(argv: list[str]) -> None:
    url = next(a for a in argv[1:] if a.startswith("http"))
    with helm.Chart.load(CHART) as chart:
        routes = chart.values["ingress"]["paths"]
    assert any(urlsplit(url).path.startswith(route) for route in routes), url


def check(command: Command) -> None:
    program = command.argv[0]
    if program == "helm":
        return  # rendered by test_every_helm_command_renders_valid_objects
    checks = {
        "lorekeeper": check_lorekeeper,
        "python": check_python,
        "pip": check_pip,
        "ray": check_ray,
        "serve": check_serve,
        "docker": check_docker,
        "kind": check_kind,
        "gcloud": check_gcloud,
        "curl": check_curl,
    }
    if program == "kubectl":
        check_kubectl(command)
    elif program in checks:
        checks[program](command.argv)
    elif program in PLAIN:
        check_local_paths([a for a in command.argv[1:] if a.startswith("cluster/")])
        if program == "cp":
            assert command.argv[-1] == command.argv[1].removesuffix(".example"), command
    else:
        pytest.fail(f"docs/deploy.md runs {program}, which no test checks: {command}")


# -- tests -----------------------------------------------------------------------------------------------


def test_the_parser_splits_pipes_continuations_and_redirections() -> None:
    text = "```bash\nhelm template a b \\\n  --set x=1 | kubectl create -f -\nopenssl rand -hex 4 > f  # c\n```\n"
    found = commands(text)
    assert [c.argv[0] for c in found] == ["helm", "kubectl", "openssl"]
    assert found[1].piped_from is found[0] and found[0].argv[-2:] == ["--set", "x=1"]
    assert found[2].redirect == "f" and found[2].argv == ["openssl", "rand", "-hex", "4"]


def test_the_page_has_commands_for_every_step() -> None:
    programs = {command.argv[0] for command in doc_commands()}
    assert {"lorekeeper", "docker", "helm", "kubectl", "ray"} <= programs
    used = {path for _, run in helm_runs() for path in run.values_files}
    # every CI profile is a command of the page
    assert used == {f"helm/lorekeeper/ci/{p.name}" for p in (CHART / "ci").glob("*.yaml")}


@pytest.mark.parametrize("command", doc_commands(), ids=lambda c: f"{c.argv[0]}:{' '.join(c.argv[1:3])}")
def test_every_command_is_checked(command: Command) -> None:
    check(command)


def test_every_helm_command_renders_valid_objects() -> None:
    assert helm_runs()
    for command, run in helm_runs():
        problems = [problem for obj in rendered_objects(run) for problem in deploy.problems(obj)]
        assert problems == [], str(command)
        for obj in rendered_objects(run):
            for spec in deploy.pod_specs(obj):
                assert deploy.pod_problems(spec) == [], (str(command), obj["metadata"]["name"])


def test_the_ingest_command_renders_a_job_the_cli_accepts() -> None:
    jobs = [
        (command, obj)
        for command, run in helm_runs()
        for obj in rendered_objects(run)
        if obj["kind"] == "RayJob" and run.show_only == ["templates/ingest-rayjob.yaml"]
    ]
    assert len(jobs) == 1, "one helm template of the ingestion RayJob"
    command, job = jobs[0]
    params = deploy.ingest_entrypoint_params(job["spec"]["entrypoint"])
    values, _ = helm_values(command.argv)
    assert params["paths"] == [values["ingestJob"]["source"]]
    assert params["library"] == values["ingestJob"]["library"] == "Core Rules"
    assert deploy.worker_group_problems(job["spec"]["rayClusterSpec"]) == []


def test_the_narrator_scaling_command_raises_replicas_and_gpu_pods_together() -> None:
    scaling = [
        (command, run)
        for command, run in helm_runs()
        if run.verb == "upgrade" and "serve" in run.values and "maxReplicas" in str(options(command.argv, "--set"))
    ]
    assert len(scaling) == 1
    _, run = scaling[0]
    (service,) = [obj for obj in rendered_objects(run) if obj["kind"] == "RayService"]
    served = yaml.safe_load(service["spec"]["serveConfigV2"])
    narrator = next(d for d in served["applications"][0]["deployments"] if d["name"] == "Narrator")
    gpu = next(g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "gpu")
    wanted = narrator["autoscaling_config"]["max_replicas"] * narrator["ray_actor_options"]["num_gpus"]
    gpus = gpu["maxReplicas"] * int(gpu["rayStartParams"]["num-gpus"])
    assert narrator["autoscaling_config"]["max_replicas"] == 8
    assert gpus >= wanted, "the GPU pods can hold every narrator replica"


def test_the_sections_other_files_point_at_exist() -> None:
    headings = {line.lstrip("#").strip() for line in DOC.read_text().splitlines() if line.startswith("#")}
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    for quoted in re.findall(r'docs/deploy\.md, "([^"]+)"', notes + (CHART / "values.yaml").read_text()):
        assert quoted in headings, quoted
    for path in (CHART / "ci").glob("*.yaml"):
        for quoted in re.findall(r'docs/deploy\.md, "([^"]+)"', path.read_text()):
            assert quoted in headings, (path.name, quoted)


def test_the_doc_links_to_files_that_exist() -> None:
    for path in re.findall(r"`((?:cluster|helm|docs|tests)/[\w./-]+)`", DOC.read_text()):
        made = path.rstrip("/") in made_by_the_page()
        assert made or (deploy.ROOT / path).exists() or (deploy.ROOT / "tests" / "unit" / path).exists(), path


def test_a_renamed_value_or_file_fails_the_check() -> None:
    broken = commands(
        "```bash\nhelm install x helm/lorekeeper -f helm/lorekeeper/ci/laptop-values.yaml"
        " --set serve.narrator.maxReplica=2\n```\n"
    )
    with pytest.raises(helm.HelmValuesError):
        run_helm(broken[0])
    missing = commands("```bash\ndocker build -f cluster/Dockerfile.tpu -t lorekeeper:0.1.0-cpu .\n```\n")
    with pytest.raises(AssertionError):
        check(missing[0])
    unknown = commands("```bash\nterraform apply\n```\n")
    with pytest.raises(pytest.fail.Exception):
        check(unknown[0])


def test_local_paths_in_the_doc_resolve() -> None:
    # the laptop ingestion reads the shared corpus in place
    (command,) = [c for c in doc_commands() if c.argv[:2] == ["lorekeeper", "ingest"]]
    assert (deploy.ROOT / command.argv[2]).is_dir()
