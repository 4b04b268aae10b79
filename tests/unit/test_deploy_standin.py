"""The stand-in for the Ray base image (cluster/ray-standin/Containerfile, built by .ci/containers where no
registry is reachable) provides what cluster/Dockerfile.* rely on from the real image: the user and group,
Python with pip first on PATH where the Ray image has it, Ray of the pinned release, the working directory."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from tests.unit.deploy_checks import pyproject, ray_pin
from tests.unit.test_deploy_docker import DOCKERFILES, base_image

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "cluster" / "ray-standin" / "Containerfile"
LANE = ROOT / ".ci" / "containers"
RAY_HOME = "/home/ray"
PYTHON_PREFIX = "/home/ray/anaconda3"  # the Ray images' Python (conda there, a venv in the stand-in)


def _instructions(path: Path) -> list[tuple[str, str]]:
    with path.open("rb") as handle:
        parser = DockerfileParser(fileobj=handle)
        return [(item["instruction"], item["value"]) for item in parser.structure if item["instruction"] != "COMMENT"]


def _args(instructions: list[tuple[str, str]]) -> dict[str, str]:
    return dict(value.split("=", 1) for instruction, value in instructions if instruction == "ARG" and "=" in value)


def _last(instructions: list[tuple[str, str]], name: str) -> str:
    return [value for instruction, value in instructions if instruction == name][-1].strip()


def _env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, value in instructions:
        if instruction == "ENV":
            env.update(dict(item.split("=", 1) for item in shlex.split(value)))
    return env


@pytest.fixture(scope="module")
def standin() -> list[tuple[str, str]]:
    return _instructions(STANDIN)


def test_the_standin_builds_the_pinned_ray_and_python(standin: list[tuple[str, str]]) -> None:
    args = _args(standin)
    assert args["RAY_VERSION"] == ray_pin()
    low = re.search(r">=\s*(\d+\.\d+)", pyproject()["project"]["requires-python"])
    assert low and args["PYTHON_VERSION"] == low.group(1)
    tag = base_image(_instructions(DOCKERFILES["cpu"])).split(":", 1)[1]
    assert tag == f"{ray_pin()}-py{args['PYTHON_VERSION'].replace('.', '')}-cpu", "the stand-in stands in for this tag"
    pip = " ".join(value for instruction, value in standin if instruction == "RUN" and "pip install" in value)
    # the image's health check probes Ray's dashboard agent, which needs Ray's default extra
    assert '"ray[default]==${RAY_VERSION}"' in pip and "ray.__version__ == '${RAY_VERSION}'" in pip


def test_the_standin_has_the_ray_user_and_working_directory(standin: list[tuple[str, str]]) -> None:
    useradd = next(value for instruction, value in standin if instruction == "RUN" and "useradd" in value)
    words = shlex.split(useradd)
    options = {words[i]: words[i + 1] for i, word in enumerate(words[:-1]) if word.startswith("--")}
    assert options["--uid"] == "1000" and options["--gid"] == "100" and options["--home-dir"] == RAY_HOME
    assert words[-1] == "ray" and "--create-home" in words
    assert _last(standin, "USER") == "ray" and _last(standin, "WORKDIR") == RAY_HOME
    assert _env(standin)["HOME"] == RAY_HOME


@pytest.mark.parametrize("flavour", sorted(DOCKERFILES))
def test_the_dockerfile_relies_only_on_what_the_standin_provides(standin: list[tuple[str, str]], flavour: str) -> None:
    image = _instructions(DOCKERFILES[flavour])
    # the base is a build argument the lane can point at the stand-in; .ci/containers reads its default
    assert re.fullmatch(r"\$\{?RAY_IMAGE\}?( AS \w+)?", next(v for i, v in image if i == "FROM"))
    assert re.search(r"^ARG RAY_IMAGE=\S+$", DOCKERFILES[flavour].read_text(), re.M)
    # the final user is the stand-in's user, and what is copied belongs to it and its group (gid 100 is
    # `users` in Debian and Ubuntu alike)
    assert _last(image, "USER") == "ray"
    chowns = [re.search(r"--chown=(\S+)", v) for i, v in image if i == "COPY"]
    assert chowns and all(m and m.group(1) == "ray:users" for m in chowns)
    assert _last(image, "WORKDIR").startswith(f"{RAY_HOME}/")
    # pip and python are found on PATH, first in the Ray image's Python prefix
    path = _env(standin)["PATH"].split(":")
    assert path[0] == f"{PYTHON_PREFIX}/bin"
    venv = next(v for i, v in standin if i == "RUN" and "-m venv" in v)
    assert f"-m venv {PYTHON_PREFIX}" in venv
    runs = " ".join(v for i, v in image if i == "RUN")
    assert re.search(r"(^|\s)pip install ", runs) and "python -c" in runs
    check = _last(image, "HEALTHCHECK")
    assert '"python"' in check, "the health check runs the PATH's python"


def test_the_lane_builds_the_standin_and_the_image_on_it() -> None:
    lane = LANE.read_text()
    assert "sed -n 's/^ARG RAY_IMAGE=//p' cluster/Dockerfile.cpu" in lane
    assert "-f cluster/ray-standin/Containerfile" in lane
    assert '-f cluster/Dockerfile.cpu --build-arg RAY_IMAGE="$STANDIN"' in lane
    assert "--format docker" in lane, "the OCI format drops HEALTHCHECK"
    assert "nice -n 19 ionice -c3" in lane


def test_the_lane_builds_the_gpu_image_up_to_its_cuda_install() -> None:
    """Dockerfile.gpu's `system` stage holds everything but the CUDA wheels, which its last stage installs;
    the lane builds that stage on the stand-in tagged as the CUDA base."""
    image = _instructions(DOCKERFILES["gpu"])
    stages = [v.split() for i, v in image if i == "FROM"]
    assert [words[-1] for words in stages] == ["system", "gpu"] and stages[1][0] == "system"
    after_system = image[[i for i, (name, _) in enumerate(image) if name == "FROM"][1] :]
    before = image[: len(image) - len(after_system)]
    assert not any("pip install" in v for i, v in before if i == "RUN"), "no pip install before the CUDA stage"
    assert any(i == "RUN" and '".[gpu' in v for i, v in after_system), "the gpu extra in the last stage"
    assert any(i == "COPY" for i, _ in before) and any(i == "USER" and v == "ray" for i, v in before)
    lane = LANE.read_text()
    assert "sed -n 's/^ARG RAY_IMAGE=//p' cluster/Dockerfile.gpu" in lane
    assert '-f cluster/Dockerfile.gpu --target system --build-arg RAY_IMAGE="$GPU_STANDIN"' in lane
