"""Settings are bound, never fetched: only entry points read the environment's settings.

An entry point is a CLI command, an app factory a server imports by name, or the Ray Serve import
path; everything else receives its ``Settings`` / ``ServeSettings`` as an argument, so what an entry
point decided is what every layer and every Ray replica sees.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.packages import PACKAGES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
READERS = {"get_settings", "get_serve_settings"}
# (module, function) pairs allowed to read them; None: the whole module is an entry point
ENTRY_POINTS = {
    ("lorekeeper/cli.py", None),
    ("lorekeeper/serve_cli.py", None),
    ("lorekeeper/command_context.py", "read_settings"),  # what every `lorekeeper` command reads first
    ("lorekeeper/play.py", "play_command"),  # `lorekeeper play`
    ("jobs/cli.py", None),  # `lorekeeper ingest` and the Ray Job entrypoint `python -m jobs ingest`
    ("jobs/api.py", "create_app"),  # `uvicorn jobs.api:create_app --factory`
    ("serve/deployments.py", "build_app"),  # `serve run serve.deployments:build_app`
}


def _readers(path: Path) -> list[tuple[str | None, int]]:
    """(enclosing top-level function or None, line) of each call to a settings reader."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str | None, int]] = []
    for top in tree.body:
        owner = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else None
        for node in ast.walk(top):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in READERS:
                found.append((owner, node.lineno))
    return found


def _fetched(root: Path) -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("schemas/"):  # where the readers are defined
                continue
            for owner, line in _readers(path):
                if (rel, None) not in ENTRY_POINTS and (rel, owner) not in ENTRY_POINTS:
                    out.append(f"{rel}:{line} ({owner})")
    return out


def test_only_entry_points_read_settings_from_the_environment() -> None:
    assert _fetched(ROOT) == []


def test_the_check_sees_a_fallback(tmp_path: Path) -> None:
    module = tmp_path / "stores" / "factory.py"
    module.parent.mkdir()
    module.write_text("def open_store(settings=None):\n    settings = settings or get_settings()\n")
    assert _fetched(tmp_path) == ["stores/factory.py:2 (open_store)"]
