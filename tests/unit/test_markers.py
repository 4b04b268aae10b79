"""The markers rule of tests/conftest.py, checked where the source shows it: a test marked ``unit`` starts
neither Ray nor a server process.

Read from each module's syntax tree, so it sees only the direct cases: a module that calls a Ray starter
(``ray.init``, ``start_ray``, ``run_ingest``, ``serve.run``, ``on_local_ray``) or starts a server itself
(``EmbeddedFalkorGraphStore``, ``FalkorServer``, ``ServerProcess``, ``start_osmem``), and a test that asks
for a server fixture by name. A store opened through settings inside a helper is not seen here.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"

RAY_STARTERS = {"start_ray", "run_ingest", "on_local_ray"}
RAY_METHODS = {("ray", "init"), ("serve", "run")}
SERVER_STARTERS = {"EmbeddedFalkorGraphStore", "FalkorServer", "ServerProcess", "start_osmem"}
SERVER_FIXTURES = {
    "embedded_graph",
    "story",
    "story_on",
    "falkor_bolt_server",
    "falkor_bolt_graph",
    "nanio_server",
    "nanio_blob_store",
    "osmem_text_url",
    "osmem_text_index",
}


def _mark_names(node: ast.expr) -> set[str]:
    """Names X of ``pytest.mark.X`` (called or not) in a marker expression or a list of them."""
    if isinstance(node, ast.List | ast.Tuple):
        return set().union(*(_mark_names(e) for e in node.elts))
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return {node.attr}
    return set()


def _called(tree: ast.AST) -> set[str]:
    """What a piece of code calls: plain names, and ``ray.init`` / ``serve.run`` as ``ray.init`` etc."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                found.add(func.id)
            elif isinstance(func, ast.Attribute):
                found.add(func.attr)
                if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in RAY_METHODS:
                    found.add(f"{func.value.id}.{func.attr}")
    return found


def _starts_ray(calls: set[str]) -> bool:
    return bool(calls & RAY_STARTERS) or any(f"{a}.{b}" in calls for a, b in RAY_METHODS)


class Module:
    def __init__(self, source: str) -> None:
        self.tree = ast.parse(source)
        self.marks: set[str] = set()
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
            ):
                self.marks |= _mark_names(node.value)
        self.calls = _called(self.tree)

    def tests(self) -> list[tuple[str, set[str], set[str], set[str]]]:
        """(name, its markers with the module's and its class's, its parameters, what its body calls)."""
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                class_marks = set().union(*(_mark_names(d) for d in node.decorator_list))
                funcs = [(f, class_marks) for f in node.body if isinstance(f, ast.FunctionDef)]
            elif node in self.tree.body and isinstance(node, ast.FunctionDef):
                funcs = [(node, set())]
            else:
                continue
            for func, class_marks in funcs:
                if func.name.startswith("test"):
                    marks = self.marks | class_marks | set().union(*(_mark_names(d) for d in func.decorator_list))
                    params = {a.arg for a in func.args.args}
                    out.append((func.name, marks, params, _called(func)))
        return out

    def all_marks(self) -> set[str]:
        return self.marks.union(*(marks for _, marks, _, _ in self.tests()))


MODULES = sorted(UNIT.glob("test_*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_module_that_starts_ray_or_servers_carries_the_marker_and_not_unit_for_all(path: Path) -> None:
    module = Module(path.read_text(encoding="utf-8"))
    if _starts_ray(module.calls):
        assert "ray" in module.all_marks(), f"{path.name} starts Ray: mark it (or its tests that do) 'ray'"
        assert "unit" not in module.marks, f"{path.name} starts Ray: 'unit' cannot cover the whole module"
    if module.calls & SERVER_STARTERS:
        assert "servers" in module.all_marks(), f"{path.name} starts a server: mark it (or its tests) 'servers'"
        assert "unit" not in module.marks, f"{path.name} starts a server: 'unit' cannot cover the whole module"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_unit_test_asks_for_no_server_and_starts_nothing_itself(path: Path) -> None:
    for name, marks, params, calls in Module(path.read_text(encoding="utf-8")).tests():
        if "unit" not in marks:
            continue
        assert not params & SERVER_FIXTURES, f"{path.name}::{name} is 'unit' but uses {params & SERVER_FIXTURES}"
        assert not _starts_ray(calls), f"{path.name}::{name} is 'unit' but starts Ray"
        assert not calls & SERVER_STARTERS, f"{path.name}::{name} is 'unit' but starts {calls & SERVER_STARTERS}"
        assert not marks & {"ray", "servers"}, f"{path.name}::{name} is 'unit' and also {marks & {'ray', 'servers'}}"


def test_the_markers_are_declared_and_run_by_default() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {line.split(":", 1)[0] for line in options["markers"]}
    assert {"unit", "ray", "servers"} <= declared
    assert "ray" not in options["addopts"] and "servers" not in options["addopts"]


def test_the_check_sees_what_it_looks_for() -> None:
    sample = Module(
        "import pytest\n"
        "pytestmark = [pytest.mark.unit, pytest.mark.slow]\n"
        "def test_a(story):\n    pass\n"
        "@pytest.mark.servers\ndef test_b():\n    EmbeddedFalkorGraphStore('x')\n"
        "def test_c():\n    import ray\n    ray.init()\n"
    )
    tests = {name: (marks, params, calls) for name, marks, params, calls in sample.tests()}
    assert sample.marks == {"unit", "slow"}
    assert tests["test_a"][1] & SERVER_FIXTURES == {"story"}
    assert tests["test_b"][0] == {"unit", "slow", "servers"} and tests["test_b"][2] & SERVER_STARTERS
    assert _starts_ray(tests["test_c"][2]) and _starts_ray(sample.calls)
