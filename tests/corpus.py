"""Where the shared test corpus is (it is read in place, never copied into the project)."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def corpus_file(relative: str) -> Path:
    """A file of the shared corpus; skips the test when the corpus is not beside the checkout."""
    path = CORPUS / relative
    if not path.exists():
        pytest.skip(f"the shared corpus is not at {CORPUS}")
    return path
