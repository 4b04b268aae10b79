"""Every use case of the API once: typed, transport-free operations with their access rules as data.

One module per family (:mod:`~serve.operations.knowledge` — search, health —, :mod:`~serve.operations.library`,
:mod:`~serve.operations.campaigns`, :mod:`~serve.operations.turns`, :mod:`~serve.operations.timeline`,
:mod:`~serve.operations.scenes` — scenes, the gate, rulings —, :mod:`~serve.operations.threads`,
:mod:`~serve.operations.triggers`, :mod:`~serve.operations.memory`, :mod:`~serve.operations.desk`,
:mod:`~serve.operations.presentation`, :mod:`~serve.operations.media`,
:mod:`~serve.operations.keys`). :data:`OPERATIONS` is the table the REST routes
(:mod:`serve.routes.operations`) and the MCP tools (:mod:`serve.mcp`) are generated from; both call
:func:`invoke`, so an operation's access rule, defaults and errors are the same through either door.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from serve.auth import Principal
from serve.operations import (
    campaigns,
    desk,
    keys,
    knowledge,
    library,
    media,
    memory,
    models,
    presentation,
    scenes,
    threads,
    timeline,
    triggers,
    turns,
)
from serve.operations.access import authorize, visible
from serve.operations.base import Access, Call, Empty, On, Operation, Rest, Role, table
from serve.services import Services

OPERATIONS: dict[str, Operation] = table()
"""Every operation by name (its MCP tool's name)."""

REST_ONLY_ROUTES: dict[str, str] = {
    "POST /api/v1/campaigns/{campaign_id}/turns (stream: true)": "a turn streamed as server-sent events; an MCP "
    "tool call has one answer (play_turn)",
    "POST /api/v1/campaigns/{campaign_id}/turns/{turn_id}/takes (stream: true)": "the same for a retake (retake_turn)",
    "POST /v1/chat/completions, GET /v1/models": "the OpenAI-compatible passthrough, for clients that want the "
    "model alone",
    "/api/v1/library/ingest, /api/v1/library/jobs…, POST /api/v1/library/libraries": "the ingest plugin "
    "(admin): uploads and jobs of the ingest service",
    "GET /health, GET /mcp/health, GET /metrics": "probes for the platform (no key), not use cases",
}
"""REST routes that are no operation, each with the reason it has no MCP tool."""

__all__ = [
    "OPERATIONS",
    "REST_ONLY_ROUTES",
    "Access",
    "Call",
    "Empty",
    "On",
    "Operation",
    "Rest",
    "Role",
    "invoke",
    "stream",
]

# imported for their operations
_ = (campaigns, keys, knowledge, library, memory, models, scenes, threads, timeline, triggers, turns)
_desk = (desk,)  # the GM's desk: notes, sessions and arcs, dispositions, pruning, what happened between turns
_families = (media, presentation)  # imported for their operations too


async def invoke(op: Operation, ctx: Services, caller: Principal, ids: dict[str, str], body: BaseModel) -> Any:
    """Run ``op`` for ``caller``: its access rule, then its handler, then what the caller may see of the answer."""
    call = Call(ctx=ctx, caller=caller, ids=ids, body=body)
    await authorize(op, call)
    return await visible(op, call, await op.handler(call))


async def stream(
    op: Operation, ctx: Services, caller: Principal, ids: dict[str, str], body: BaseModel
) -> AsyncIterator[dict[str, Any]]:
    """Checked and started before it is returned: the events of ``op``'s stream form, under the turn capacity
    (the slot goes back when the events end or the stream is dropped)."""
    assert op.stream is not None, f"{op.name} has no stream form"
    call = Call(ctx=ctx, caller=caller, ids=ids, body=body)
    await authorize(op, call)
    slot = turns.take_slot(call)
    try:
        events = await op.stream(call)
    except BaseException:
        slot.release()
        raise

    async def released() -> AsyncIterator[dict[str, Any]]:
        try:
            async for event in events:
                yield await visible(op, call, event)
        finally:
            slot.release()

    forwarded = released()
    # a client gone before the stream starts leaves the generator unstarted (its finally never runs):
    # the slot goes back when the generator is collected
    weakref.finalize(forwarded, slot.release)
    return forwarded
