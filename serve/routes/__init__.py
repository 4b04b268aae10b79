"""The HTTP API's routes, one module per route family; :func:`routers` lists them in the order they mount.

Rules every route follows: the caller is the key behind ``Authorization: Bearer KEY``
(:mod:`serve.deps`); a campaign key reaches its own campaigns only, and a scene, turn or fact is
reached through its campaign, so another campaign's record answers exactly like a missing one (404);
blocking store calls run off the event loop (``services.run``); errors are raised, never answered
by hand (:mod:`serve.errors` answers them).
"""

from __future__ import annotations

from fastapi import APIRouter

from serve.routes import campaigns, house_rules, memory, openai, ops, scenes, search, timeline, turns


def routers() -> list[APIRouter]:
    """Every router of the API, in mounting order."""
    return [
        campaigns.router(),
        turns.router(),
        timeline.router(),
        scenes.router(),
        house_rules.router(),
        memory.router(),
        search.router(),
        openai.router(),
        ops.router(),
    ]
