"""No test writes to the default data folder (``./.lorekeeper``, shared with a developer's server and every other
run): fixtures of every scope read settings whose data folder is one of the test run's own temporary folders.

A module-scoped fixture is set up before the per-test folder of ``tests/conftest.py``; without a folder of its
own it opened the stores under ``./.lorekeeper`` (12 campaigns of other runs were found there, the embedded
vector index was 'in use by another process', and one module's cleanup emptied that shared graph).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DEFAULT = Path(".lorekeeper").resolve()


def _data_dir() -> Path:
    from schemas.settings import get_settings

    return get_settings().data_dir.resolve()


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _data_dir()


@pytest.fixture(scope="module")
def module_dir() -> Path:
    return _data_dir()


@pytest.fixture(scope="module")
def module_env() -> str | None:
    return os.environ.get("LOREKEEPER_DATA_DIR")


def _under_basetemp(path: Path, factory: pytest.TempPathFactory) -> bool:
    return path.is_relative_to(factory.getbasetemp().resolve())


def test_fixtures_of_every_scope_use_a_data_folder_of_the_run(
    session_dir: Path, module_dir: Path, module_env: str | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    test_dir = _data_dir()
    for scope, path in (("session", session_dir), ("module", module_dir), ("test", test_dir)):
        assert path != DEFAULT, f"a {scope}-scoped fixture uses the default data folder {DEFAULT}"
        assert _under_basetemp(path, tmp_path_factory), (scope, path)
    assert module_env is not None and Path(module_env).resolve() == module_dir
    assert len({session_dir, module_dir, test_dir}) == 3  # a module's stores are not the session's or a test's


def test_each_test_has_its_own_folder_and_the_module_keeps_its_own(
    module_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    here = _data_dir()
    assert here != module_dir and _under_basetemp(here, tmp_path_factory)
    assert Path(os.environ["LOREKEEPER_DATA_DIR"]).resolve() == here
