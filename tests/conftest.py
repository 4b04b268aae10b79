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

import os
from collections.abc import Iterator
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Work units for pytest-xdist (``-n 2 --dist loadgroup`` in pyproject). One per module, so a module's
    fixtures are set up once, on one worker. One, ``ray``, for every module with a test that starts a local Ray,
    so that no two local Rays (nor Serve applications) run at once, as in a run without workers; and one,
    ``cluster``, for the two-node cluster lane, whose Ray has its own ports and folder. These two are the longest,
    so they go first, one to each worker, and the rest is shared out meanwhile. Runs before xdist's own hook,
    which turns each ``xdist_group`` into the unit's name."""
    ray_modules = {item.path for item in items if item.get_closest_marker("ray")}

    def group(item: pytest.Item) -> str:
        if item.get_closest_marker("cluster"):
            return "cluster"
        return "ray" if item.path in ray_modules else item.nodeid.split("::", 1)[0]

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    first = {"cluster": 0, "ray": 1}
    items.sort(key=lambda item: first.get(group(item), 2))  # stable: otherwise in the collection order


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
