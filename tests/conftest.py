"""Test configuration shared by every suite.

Store fixtures live in ``tests/fixtures/<family>.py``, one plugin per store family, each starting the
protocol-compatible servers it needs (once per session) and skipping server backends whose URL
variables are unset under the ``integration`` marker.
"""

from __future__ import annotations

import os

import pytest

from tests.integration_env import ORIGINAL

# Never let a developer's own settings leak into the tests; integration fixtures read them from
# tests.integration_env instead.
for _name in ORIGINAL:
    del os.environ[_name]

pytest_plugins = [
    "tests.fixtures.blob",
    "tests.fixtures.text",
    "tests.fixtures.vector",
    "tests.fixtures.graph",
    "tests.fixtures.story",
]


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test starts from default settings with its own data folder."""
    from schemas.settings import get_settings

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    get_settings.cache_clear()
