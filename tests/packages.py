"""The project's packages, as pyproject.toml lists them for the type checker (one list for every test)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES: tuple[str, ...] = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["packages"]
)
