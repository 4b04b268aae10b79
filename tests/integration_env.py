"""The ``LOREKEEPER_*`` variables the test run started with.

``tests/conftest.py`` clears every ``LOREKEEPER_*`` variable so a developer's own settings never leak
into unit and contract tests; integration fixtures read the server URLs and credentials from here.
"""

from __future__ import annotations

import os

ORIGINAL: dict[str, str] = {name: value for name, value in os.environ.items() if name.startswith("LOREKEEPER_")}


def integration_env(name: str) -> str | None:
    """The value ``name`` had when the test run started (None if unset or empty)."""
    return ORIGINAL.get(name) or None


def integration_settings():  # noqa: ANN201 - Settings is imported lazily
    """Settings built from the original ``LOREKEEPER_*`` variables (for integration fixtures)."""
    from schemas.settings import load_settings

    return load_settings(**{name.removeprefix("LOREKEEPER_").lower(): value for name, value in ORIGINAL.items()})
