"""The Dockerfiles: the Ray base image of the pinned Ray and Python, non-root, a health check, no baked
secrets, the right extras; the build context leaves secrets out; the health-check script works."""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest
from dockerfile_parse import DockerfileParser

from tests.unit.deploy_checks import pyproject, ray_pin

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
DOCKERFILES = {"cpu": CLUSTER / "Dockerfile.cpu", "gpu": CLUSTER / "Dockerfile.gpu"}
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "API_KEY", "ACCESS_KEY", "CREDENTIAL", "PRIVATE")


def _python_tag() -> str:
    low = re.search(r">=\s*(\d+)\.(\d+)", pyproject()["project"]["requires-python"])
    assert low
    return f"py{low.group(1)}{low.group(2)}"


def _instructions(path: Path) -> list[tuple[str, str]]:
    with path.open("rb") as handle:
        parser = DockerfileParser(fileobj=handle)
        return [(item["instruction"], item["value"]) for item in parser.structure if item["instruction"] != "COMMENT"]


@pytest.fixture(scope="module", params=sorted(DOCKERFILES))
def dockerfile(request: pytest.FixtureRequest) -> tuple[str, list[tuple[str, str]]]:
    return request.param, _instructions(DOCKERFILES[request.param])


def base_image(instructions: list[tuple[str, str]]) -> str:
    """The image a Dockerfile builds on, with a ``FROM ${ARG}`` resolved to the ARG's default: one external
    base, every later stage built on an earlier stage of the same file."""
    bases = [value.split() for instruction, value in instructions if instruction == "FROM"]
    stages = [words[2] for words in bases if len(words) == 3 and words[1].upper() == "AS"]
    external = [words[0] for words in bases if words[0] not in stages]
    assert len(external) == 1 and bases[0][0] == external[0], f"one base image, the first stage's: {bases}"
    named = re.fullmatch(r"\$\{?(\w+)\}?", external[0])
    if not named:
        return external[0]
    defaults = dict(value.split("=", 1) for instruction, value in instructions if instruction == "ARG" and "=" in value)
    return defaults[named.group(1)]


def test_the_base_is_the_ray_image_of_the_pinned_ray_and_python(dockerfile: tuple[str, list]) -> None:
    flavour, instructions = dockerfile
    bases = [base_image(instructions)]
    platform = "cpu" if flavour == "cpu" else r"cu\d{3}"
    # a CUDA-versioned tag, never the moving -gpu alias or latest
    assert re.fullmatch(rf"rayproject/ray:{re.escape(ray_pin())}-{_python_tag()}-{platform}", bases[0]), bases[0]


def test_it_runs_as_a_non_root_user(dockerfile: tuple[str, list]) -> None:
    _, instructions = dockerfile
    users = [value.strip() for instruction, value in instructions if instruction == "USER"]
    assert users, "USER must be set"
    assert users[-1].split(":")[0] not in ("root", "0"), "the final USER must not be root"
    # nothing is installed into the user's environment as root
    as_root = False
    for instruction, value in instructions:
        if instruction == "USER":
            as_root = value.strip().split(":")[0] in ("root", "0")
        if instruction == "RUN" and as_root:
            assert "pip install" not in value, "pip runs as the image's user"


def test_it_has_a_health_check_that_the_image_contains(dockerfile: tuple[str, list]) -> None:
    _, instructions = dockerfile
    checks = [value for instruction, value in instructions if instruction == "HEALTHCHECK"]
    assert len(checks) == 1 and "NONE" not in checks[0].upper()
    options, command = checks[0].split("CMD", 1)
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in options
    argv = json.loads(command.strip())
    script = next(arg for arg in argv if arg.endswith(".py"))
    workdir = [value for instruction, value in instructions if instruction == "WORKDIR"][-1]
    # COPY . ./ into WORKDIR: the script's path in the image maps back to the repository
    assert (ROOT / Path(script).relative_to(workdir)).is_file(), script


def test_no_secret_is_baked_into_env_or_arg(dockerfile: tuple[str, list]) -> None:
    _, instructions = dockerfile
    for instruction, value in instructions:
        if instruction in ("ENV", "ARG"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", value) or value.split()[:1]:
                assert not any(word in name.upper() for word in SECRET_WORDS), f"{instruction} {name}"
                assert not name.startswith("LOREKEEPER_"), f"{name}: settings arrive at run time"
        if instruction == "ADD":
            assert "://" not in value, "ADD of a URL: download in a RUN with a checksum instead"
        if instruction == "COPY":
            assert ".env" not in value and "secrets" not in value


def test_the_extras_and_torch_builds(dockerfile: tuple[str, list]) -> None:
    flavour, instructions = dockerfile
    pips = [value for instruction, value in instructions if instruction == "RUN" and "pip install" in value]
    assert len(pips) == 1
    pip = pips[0]
    assert f'"ray[data,serve]=={ray_pin()}"' in pip, "Ray stays the base image's release"
    extras = pyproject()["project"]["optional-dependencies"]
    if flavour == "cpu":
        assert '".[cpu,formats]"' in pip and "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
        assert "torch==2.13.0" in extras["cpu"]
        assert "pip uninstall -y torchvision torchaudio torchcodec" in pip
    else:
        assert '".[gpu,formats]"' in pip and "download.pytorch.org/whl/cpu" not in pip
        assert any(dep.startswith("vllm") for dep in extras["gpu"])
    assert any(instruction == "EXPOSE" and "8000" in value.split() for instruction, value in instructions)


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_build_context_leaves_secrets_and_local_state_out() -> None:
    ignored = set(_dockerignore())
    for pattern in (".env", "**/.env", "cluster/secrets", ".git", ".venv", ".lorekeeper"):
        assert pattern in ignored, pattern


def test_the_build_context_is_an_allowlist_of_the_packages() -> None:
    """Only what pip install . and the images need is sent: a folder someone makes beside them (a second
    virtual environment of 5 GB was one) never reaches the builder."""
    patterns = _dockerignore()
    assert patterns[0] == "*", "everything is left out first"
    allowed = {pattern[1:] for pattern in patterns if pattern.startswith("!")}
    packages = {name.rstrip("*") for name in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert allowed == {"pyproject.toml", "README.md", "cluster", *packages}
    for top in ROOT.iterdir():
        if top.name not in allowed:
            assert not any(p.startswith("!") and p[1:].split("/")[0] == top.name for p in patterns), top.name


def test_the_build_context_keeps_what_the_image_needs() -> None:
    ignored = set(_dockerignore())
    packages = [name.rstrip("*") for name in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]]
    for needed in ["pyproject.toml", "README.md", "cluster", *packages]:
        assert (ROOT / needed).exists(), needed
        assert needed not in ignored and f"{needed}/" not in ignored, f"{needed} is needed by pip install ."


# -- the health-check script ----------------------------------------------------------------------------


def _load_healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lorekeeper_healthcheck", CLUSTER / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def healthcheck() -> ModuleType:
    return _load_healthcheck()


@pytest.fixture()
def http_server() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            seen.append(self.headers.get("Authorization"))
            self.send_response(200 if self.path == "/health" else 503)
            self.end_headers()
            self.wfile.write(b"success")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_passes_on_2xx_and_fails_otherwise(
    healthcheck: ModuleType, http_server: tuple[str, list], capsys: pytest.CaptureFixture[str]
) -> None:
    base, seen = http_server
    assert healthcheck.main([f"{base}/health"]) == 0
    assert healthcheck.main([f"{base}/broken"]) == 1
    assert "HTTP 503" in capsys.readouterr().out
    assert seen == [None, None], "no token leaves for a non-Ray URL"


def test_healthcheck_fails_fast_when_nothing_listens(healthcheck: ModuleType) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the port is closed again: nothing listens there
    assert healthcheck.main([f"http://127.0.0.1:{port}/health", "--timeout", "2"]) == 1


def test_healthcheck_sends_the_ray_token_from_its_file_to_ray_only(
    healthcheck: ModuleType, http_server: tuple[str, list], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, seen = http_server
    token = tmp_path / "ray-auth-token"
    token.write_text("s3cr3t-token\n")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    assert healthcheck.main([f"{base}/health", "--ray"]) == 0
    assert healthcheck.main([f"{base}/health"]) == 0
    assert seen == ["Bearer s3cr3t-token", None]
    assert healthcheck.RAYLET_HEALTH_URL.startswith("http://127.0.0.1:52365/")


def test_healthcheck_without_a_url_probes_what_the_container_names(
    healthcheck: ModuleType, http_server: tuple[str, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The images' HEALTHCHECK has no URL: an API container names its own /health (on whatever port it
    listens), so the check never probes a fixed port that another process on a host network may hold."""
    base, seen = http_server
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cr3t-token")
    monkeypatch.setenv("LOREKEEPER_HEALTHCHECK_URL", f"{base}/health")
    assert healthcheck.main([]) == 0
    monkeypatch.setenv("LOREKEEPER_HEALTHCHECK_URL", f"{base}/broken")
    assert healthcheck.main([]) == 1
    assert seen == [None, None], "the Ray token goes to Ray's endpoints only"


def test_healthcheck_probes_the_raylet_on_the_agent_port_the_node_was_given(
    healthcheck: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LOREKEEPER_HEALTHCHECK_URL", raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("LOREKEEPER_RAY_AGENT_PORT", str(port))
    assert healthcheck.main(["--timeout", "2"]) == 1
    assert f"http://127.0.0.1:{port}/api/local_raylet_healthz unreachable" in capsys.readouterr().out
    # --ray probes the raylet even where the container names an API
    monkeypatch.setenv("LOREKEEPER_HEALTHCHECK_URL", "http://127.0.0.1:1/health")
    assert healthcheck.main(["--ray", "--timeout", "2"]) == 1
    assert f":{port}/api/local_raylet_healthz" in capsys.readouterr().out
    monkeypatch.setenv("LOREKEEPER_RAY_AGENT_PORT", "agent")
    assert healthcheck.main(["--ray"]) == 1
    assert "LOREKEEPER_RAY_AGENT_PORT must be a TCP port, not 'agent'" in capsys.readouterr().out


def test_the_images_health_check_names_no_fixed_target(dockerfile: tuple[str, list]) -> None:
    """A URL or --ray in the image's HEALTHCHECK would pin every container of it to one endpoint; the
    container says what to probe (LOREKEEPER_HEALTHCHECK_URL, LOREKEEPER_RAY_AGENT_PORT)."""
    _, instructions = dockerfile
    check = next(value for instruction, value in instructions if instruction == "HEALTHCHECK")
    argv = json.loads(check.split("CMD", 1)[1].strip())
    assert argv == ["python", "/home/ray/lorekeeper/cluster/healthcheck.py"], argv
