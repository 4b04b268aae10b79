"""The pytest-xdist work units of tests/conftest.py: every module with a test that starts a local Ray is in the
one ``ray`` unit (no two local Rays at once), the cluster lane is its own, and every other module is one unit.

The units are read from the modules' source text; these tests hold that reading to the markers as
tests/unit/test_markers.py reads them from the syntax tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, work_unit
from tests.unit.test_markers import Module

pytestmark = pytest.mark.unit

MODULES = sorted((ROOT / "tests" / "unit").glob("test_*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_module_is_in_the_ray_unit_exactly_when_a_test_of_it_is_marked_ray(path: Path) -> None:
    module = Module(path.read_text(encoding="utf-8"))
    nodeid = f"{_relative(path)}::test_x[a-b]"
    expected = "ray" if "ray" in module.all_marks() else _relative(path)
    assert work_unit(nodeid) == expected


def test_the_cluster_lane_is_a_unit_of_its_own() -> None:
    assert work_unit("tests/cluster/test_cluster.py::test_ingest_job_runs_on_both_nodes") == "cluster"


def test_the_tests_of_a_module_and_of_its_classes_are_one_unit() -> None:
    module = "tests/contract/test_blob.py"
    ids = [f"{module}::TestLocalBlobStore::test_put", f"{module}::TestS3BlobStoreNanio::test_put[x::y]", module]
    assert {work_unit(nodeid) for nodeid in ids} == {module}
