"""Test configuration shared by every suite.

Markers: ``unit`` tests start nothing, neither Ray nor a server process; a test that starts a local Ray
is marked ``ray`` and one that starts a store server as a process is marked ``servers``, instead of
``unit``. The embedded graph counts as a server (it runs redis-server with FalkorDB as a child process);
the local blob folder, tantivy and qdrant's local and edge modes run in this process and do not.

Store fixtures live in ``tests/fixtures/<family>.py``, one plugin per store family, each starting the
protocol-compatible servers it needs (once per session) and skipping server backends whose URL
variables are unset under the ``integration`` marker.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration_env import ORIGINAL

# Never let a developer's own settings leak into the tests; integration fixtures read them from
# tests.integration_env instead.
for _name in ORIGINAL:
    del os.environ[_name]
# The default narrator engine is the embedded model (local); tests pin echo, which needs no model, and
# the few that run the model itself (marked local_model) ask for it by name. Server processes and CLI
# runs that tests start inherit this.
os.environ["LOREKEEPER_NARRATOR_ENGINE"] = "echo"

pytest_plugins = [
    "tests.fixtures.blob",
    "tests.fixtures.text",
    "tests.fixtures.vector",
    "tests.fixtures.graph",
    "tests.fixtures.story",
]


ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _marked_modules(marker: str) -> frozenset[str]:
    """Test modules (rootdir-relative paths) whose source marks a test, or the module, with ``marker``."""
    return frozenset(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if f"pytest.mark.{marker}" in path.read_text(encoding="utf-8")
    )


def work_unit(nodeid: str) -> str:
    """The pytest-xdist work unit of a test: ``cluster`` for the two-node cluster lane (its Ray has ports and a
    folder of its own), ``ray`` for every module with a test that starts a local Ray (so no two local Rays, nor
    two Serve applications, run at once, as in a run without workers), else its module (so a module's fixtures
    are set up once, on one worker)."""
    module = nodeid.split("::", 1)[0]
    if module in _marked_modules("cluster"):
        return "cluster"
    return "ray" if module in _marked_modules("ray") else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n 2 --dist loadscope`` (pyproject) hands out the units of :func:`work_unit`, in the collection order
    (``--no-loadscope-reorder``; :func:`pytest_collection_modifyitems` puts the two long ones first, so each
    worker starts with one of them and the rest is shared out meanwhile). xdist's own ``loadgroup`` cannot be
    used: it renames the items' node ids, which pytest 9 no longer reads."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cluster lane first, then the modules that start Ray, then the rest in the collection order."""
    first = {"cluster": 0, "ray": 1}
    items.sort(key=lambda item: first.get(work_unit(item.nodeid), 2))  # a stable sort


@pytest.fixture(scope="session", autouse=True)
def _session_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Session-scoped fixtures get a data folder of the session's: never the default ``./.lorekeeper``,
    which is shared with every other run (a developer's server, another test run)."""
    with pytest.MonkeyPatch.context() as env:
        _use_data_dir(env, tmp_path_factory.mktemp("session-data"))
        yield


@pytest.fixture(scope="module", autouse=True)
def _module_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module-scoped fixtures (services opened once for a module's tests) get a data folder of the module's.
    Autouse fixtures are set up first within their scope, so this one is in place before any module fixture
    reads the settings; each test then gets its own folder (:func:`_fresh_settings`) and, after it, the
    module's is back."""
    with pytest.MonkeyPatch.context() as env:
        _use_data_dir(env, tmp_path_factory.mktemp("module-data"))
        yield


def _use_data_dir(env: pytest.MonkeyPatch, path: Any) -> None:
    from schemas.settings import get_settings

    env.setenv("LOREKEEPER_DATA_DIR", str(path))
    get_settings.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test starts from default settings with its own data folder."""
    from schemas.settings import get_settings

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()  # the module's folder is back: its settings are read afresh


@pytest.fixture(autouse=True, scope="session")
def _loggers_never_cached() -> Iterator[None]:
    """Logging as the CLI configures it caches each module's logger on first use, so that
    ``structlog.testing.capture_logs`` cannot see it afterwards. In the test process it never caches, from the
    first fixture on (module-scoped fixtures configure logging too, before any test's own fixtures run)."""
    import structlog

    configure = structlog.configure

    def configure_uncached(*args: Any, **kwargs: Any) -> None:
        configure(*args, **{**kwargs, "cache_logger_on_first_use": False})

    # every way in (the CLI's configure_logging, python -m jobs, a test's own log set-up) ends in
    # structlog.configure; Ray's worker processes are not this process and keep their caching
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structlog, "configure", configure_uncached)
        yield


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs a CLI command in this process (typer's CliRunner) configures logging as the CLI
    does: a handler on the runner's stderr, closed when the command returns. Left in place, a later test
    logs to a closed file; both configurations are restored after each test."""
    import logging

    import structlog

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)
