"""docs/architecture.md names real things: every path and every dotted module it names exists.

The map of the code is only useful while it is true, so each ``foo/bar.py``-like path (in code
spans or the layout and flow diagrams) must exist in the repository, and each backticked dotted
name that starts with one of the project's packages must import as a module or be an attribute of
one (``jobs.pipeline.run_ingest``, ``serve.services.GateBackend``).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.packages import PACKAGES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
_ROOTS = "|".join((*PACKAGES, "tests"))
_PATH = re.compile(rf"(?<![\w./-])((?:{_ROOTS}|docs|cluster|helm|benchmarks)/[\w./-]*\w)")
_DOTTED = re.compile(rf"`((?:{_ROOTS})(?:\.\w+)+)`")


def _paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in _PATH.finditer(text)}


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_path_the_architecture_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = _paths(text)
    assert len(paths) > 30, sorted(paths)  # the page maps the code: it names many files
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == [], missing


def test_every_module_the_architecture_names_imports() -> None:
    names = set(_DOTTED.findall(DOC.read_text(encoding="utf-8")))
    assert len(names) > 10, sorted(names)
    broken = sorted(n for n in names if not _resolves(n))
    assert broken == [], broken


def test_the_checks_catch_a_wrong_name() -> None:
    assert "story/nowhere.py" in _paths("the engine in story/nowhere.py")
    assert not (ROOT / "story/nowhere.py").exists()
    assert not _resolves("serve.app.build_app")  # it moved to serve.deployments
    assert _resolves("serve.deployments.build_app")
