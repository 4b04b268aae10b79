"""The id field of the story's records, shared by the story model modules: a fresh prefixed id by default."""

from typing import Any

from pydantic import Field

from schemas.common import new_id

__all__ = ["default_id"]


def default_id(prefix: str) -> Any:
    return Field(default_factory=lambda: new_id(prefix), description=f"Id ('{prefix}_…').")
