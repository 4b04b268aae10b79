"""The HTTP API's routes: every operation's REST door (generated from the operation table), the
OpenAI-compatible passthrough, and the ops probes; :func:`routers` lists them in the order they mount.

The operations (:mod:`serve.operations`) hold the use cases, their access rules and defaults; a
route here is transport only. Errors are raised, never answered by hand (:mod:`serve.errors` answers
them).
"""

from __future__ import annotations

from fastapi import APIRouter

from serve.routes import openai, operations, ops


def routers() -> list[APIRouter]:
    """Every router of the API, in mounting order."""
    return [operations.router(), openai.router(), ops.router()]
