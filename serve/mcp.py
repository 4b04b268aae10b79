"""The MCP server at ``/mcp`` (streamable HTTP, MCP SDK): knowledge tools for any client, play tools for tables.

Tools: ``search_knowledge``, ``search_by_category``, ``list_libraries``, ``list_collections``,
``get_item``, ``get_concepts``, ``get_health``; for play ``get_state_as_of``, ``get_provenance`` and
``propose_change``; for a campaign's memory ``recall``, ``list_memories``, ``add_memory``,
``retract_memory`` and ``list_summaries``. Resources: ``lorekeeper://library-types`` and ``lorekeeper://libraries``.

Auth is the REST API's: the same ``Authorization: Bearer KEY``, checked before a request reaches the
MCP session, and the same campaign scopes checked inside each play tool. Every call is logged at
debug level (``mcp_tool_called`` … ``mcp_tool_response`` with sizes and durations) and counted
(``lorekeeper_mcp_tool_invocations_total{tool,status}``, ``lorekeeper_mcp_tool_duration_seconds{tool}``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import structlog
from fastapi import FastAPI
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Receive, Scope, Send

from schemas.errors import InvalidRequest, LorekeeperError, NotFound
from schemas.knowledge import CHUNKING_DEFAULTS, Classification, LibraryType
from schemas.recall import RecallKind, RecallRequest, RecallResponse
from schemas.search import SearchFilters
from schemas.serving import MemoryCreate, MemoryRetract
from schemas.story import Authority, ChangeType, Evidence, Memory, SubjectiveKind
from serve.auth import Principal, Unauthorized
from serve.services import Services
from stores.source_facts import SourceFactStore

log = structlog.get_logger(__name__)

MCP_CALLS = Counter("lorekeeper_mcp_tool_invocations_total", "MCP tool calls by tool and outcome.", ["tool", "status"])
MCP_DURATION = Histogram(
    "lorekeeper_mcp_tool_duration_seconds",
    "MCP tool call time.",
    ["tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

T = TypeVar("T")
_PRINCIPAL = "lorekeeper.principal"


def _caller(ctx: Context[Any, Any, Any]) -> Principal:
    request = ctx.request_context.request
    principal = getattr(request, "scope", {}).get(_PRINCIPAL) if request is not None else None
    if principal is None:
        raise Unauthorized("send an API key as 'Authorization: Bearer KEY'")
    return principal  # type: ignore[no-any-return]


def _tool(name: str) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    """Log, time and count a tool; turn a Lorekeeper error into the tool's error message."""

    def wrap(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> T:
            started = time.perf_counter()
            log.debug("mcp_tool_called", tool=name, arguments=sorted(k for k in kwargs if k != "ctx"))
            status = "ok"
            try:
                result = await fn(*args, **kwargs)
            except LorekeeperError as exc:
                status = exc.code
                raise ValueError(f"{exc.code}: {exc.client_message}") from None
            except Exception:
                status = "error"
                raise
            finally:
                elapsed = time.perf_counter() - started
                MCP_CALLS.labels(tool=name, status=status).inc()
                MCP_DURATION.labels(tool=name).observe(elapsed)
            size = len(json.dumps(result, default=str))
            log.debug("mcp_tool_response", tool=name, status=status, bytes=size, duration_ms=round(elapsed * 1000, 2))
            return result

        return call

    return wrap


def build_mcp(services: Services, *, protect_hosts: bool) -> FastMCP[Any]:
    """The MCP server over ``services`` (its HTTP app is mounted by :func:`mount_mcp`)."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=protect_hosts,
        allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )
    server: FastMCP[Any] = FastMCP(
        "lorekeeper",
        instructions=(
            "Lorekeeper: search ingested rulebooks and lore (with citations), read the canon of a campaign "
            "as of any turn, recall what happened in it by meaning, and propose changes that the scene-end "
            "gate may make canon."
        ),
        stateless_http=True,
        json_response=True,
        streamable_http_path="/mcp",
        transport_security=security,
    )
    _knowledge_tools(server, services)
    _catalog_tools(server, services)
    _play_tools(server, services)
    _memory_tools(server, services)
    _resources(server, services)
    return server


def _knowledge_tools(server: FastMCP[Any], services: Services) -> None:
    """``search_knowledge`` and ``search_by_category``: hybrid search, each hit with its citation."""
    run = services.run

    async def _search(
        tool: str, query: str, filters: SearchFilters, limit: int, rerank: bool | None
    ) -> list[dict[str, Any]]:
        if services.search is None:
            raise NotFound("search", "search is not configured on this server")
        started = time.perf_counter()
        hits = await run(services.search.search, query, filters=filters, limit=limit, rerank=rerank)
        log.debug(
            "mcp_search_vector_results",
            tool=tool,
            hits=len(hits),
            with_vector=sum(1 for h in hits if "vector" in h.scores),
            with_graph=sum(1 for h in hits if "graph" in h.scores),
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
        )
        if any("rerank" in h.scores for h in hits):
            log.debug("mcp_search_rerank", tool=tool, reranked=len(hits))
        return [h.model_dump(mode="json") for h in hits]

    @server.tool()
    @_tool("search_knowledge")
    async def search_knowledge(
        query: str,
        limit: int = 8,
        library: str | None = None,
        classification: Classification | None = None,
        item: str | None = None,
        rerank: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Search the ingested rulebooks and lore; each hit cites its book, pages, heading path and chunk id."""
        filters = SearchFilters(
            library=[library] if library else None,
            classification=[classification.value] if classification else None,
            item=[item] if item else None,
        )
        return await _search("search_knowledge", query, filters, max(1, min(limit, 50)), rerank)

    @server.tool()
    @_tool("search_by_category")
    async def search_by_category(
        query: str, library_type: LibraryType, limit: int = 8, rerank: bool | None = None
    ) -> list[dict[str, Any]]:
        """Search only libraries of one type (rulebook, lore, setting, adventure, reference …)."""
        filters = SearchFilters(library_type=[library_type.value])
        return await _search("search_by_category", query, filters, max(1, min(limit, 50)), rerank)


def _catalog_tools(server: FastMCP[Any], services: Services) -> None:
    """What is ingested (libraries, collections, items, concepts) and whether the server answers."""
    run = services.run

    @server.tool()
    @_tool("list_libraries")
    async def list_libraries() -> list[dict[str, Any]]:
        """The libraries: their ids, names and types."""
        libraries = await run(services.catalog.list_libraries)
        return [lib.model_dump(mode="json") for lib in libraries]

    @server.tool()
    @_tool("list_collections")
    async def list_collections(library_uid: str) -> list[dict[str, Any]]:
        """The collections of a library."""
        collections = await run(services.catalog.list_collections, library_uid)
        return [c.model_dump(mode="json") for c in collections]

    @server.tool()
    @_tool("get_item")
    async def get_item(item_uid: str) -> dict[str, Any]:
        """One ingested item (a book or file): title, type, size, classification, status."""
        item = await run(services.catalog.get_item, item_uid)
        return item.model_dump(mode="json")  # type: ignore[no-any-return]

    @server.tool()
    @_tool("get_concepts")
    async def get_concepts(library_uid: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Concepts extracted from the knowledge (most mentioned first), optionally of one library."""
        started = time.perf_counter()
        concepts = await run(services.catalog.list_concepts, library_uid=library_uid, limit=max(1, min(limit, 1000)))
        log.debug("mcp_graph_traverse", tool="get_concepts", nodes=len(concepts), ms=_ms(started))
        return concepts  # type: ignore[no-any-return]

    @server.tool()
    @_tool("get_entry_facts")
    async def get_entry_facts(entry: str, item_uid: str | None = None) -> list[dict[str, Any]]:
        """A rulebook entry's typed facts ("Goblin": armor_class 15, hit_points 7 …), each with its
        item, page and chunk id; from one item when given, else from every ready item."""
        store = SourceFactStore(services.catalog.graph)
        if item_uid is not None:
            await run(services.catalog.get_item, item_uid)  # an unknown item is not_found, not []
            facts = await run(store.for_item, item_uid, entry=entry)
        else:
            facts = await run(store.find, entry)
        return [f.model_dump(mode="json") for f in facts]

    @server.tool()
    @_tool("get_health")
    async def get_health() -> dict[str, Any]:
        """Whether the server and its graph answer."""
        checks = await services.health()
        healthy = all(v == "ok" for v in checks.values())
        return {"status": "ok" if healthy else "degraded", **checks, "search": services.search is not None}


def _play_tools(server: FastMCP[Any], services: Services) -> None:
    """For tables: a campaign's world as of a turn, a turn's provenance, and proposing a change."""
    run = services.run

    @server.tool()
    @_tool("get_state_as_of")
    async def get_state_as_of(
        campaign_id: str, ctx: Context[Any, Any, Any], turn_id: str | None = None, branch_id: str | None = None
    ) -> dict[str, Any]:
        """The world of a campaign as of a turn (default: its head): entities, facts, relationships, threads."""
        _caller(ctx).require_campaign(campaign_id)
        started = time.perf_counter()
        if turn_id is not None:
            await services.turn_in(campaign_id, turn_id)
        view = await run(services.story.state, campaign_id, turn_id=turn_id, branch_id=branch_id)
        log.debug("mcp_graph_traverse", tool="get_state_as_of", entities=len(view.entities), ms=_ms(started))
        return view.model_dump(mode="json")  # type: ignore[no-any-return]

    @server.tool()
    @_tool("get_provenance")
    async def get_provenance(campaign_id: str, turn_id: str, ctx: Context[Any, Any, Any]) -> dict[str, Any]:
        """Why the narrator knew what it knew at a turn (prompt, passages) and what the turn made canon."""
        _caller(ctx).require_campaign(campaign_id)
        await services.turn_in(campaign_id, turn_id)
        provenance = await run(services.story.provenance, turn_id)
        return provenance.model_dump(mode="json")  # type: ignore[no-any-return]

    @server.tool()
    @_tool("list_house_rules")
    async def list_house_rules(
        campaign_id: str, ctx: Context[Any, Any, Any], turn_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The GM's rulings against the rulebook in force as of a turn (default: the head): entry, field,
        the book's value and the ruled one, who ruled, at which turn, on which branch."""
        _caller(ctx).require_campaign(campaign_id)
        if turn_id is not None:
            await services.turn_in(campaign_id, turn_id)
        rules = await run(services.story.house_rules, campaign_id, turn_id=turn_id)
        return [r.model_dump(mode="json") for r in rules]

    @server.tool()
    @_tool("propose_change")
    async def propose_change(
        scene_id: str,
        type: ChangeType,
        content: dict[str, Any],
        ctx: Context[Any, Any, Any],
        authority: Authority = Authority.PLAYER,
        confidence: float = 1.0,
        turn_id: str | None = None,
        evidence: Evidence | None = None,
    ) -> dict[str, Any]:
        """Propose a typed change on a scene; it becomes canon only if the gate accepts it when the scene ends."""
        caller = _caller(ctx)
        await services.scene_for(caller, scene_id)
        caller.require_authority(authority)
        proposal = await run(
            services.story.propose,
            scene_id,
            type=type,
            content=content,
            authority=authority,
            confidence=confidence,
            turn_id=turn_id,
            evidence=(evidence or Evidence()).model_dump(mode="json"),
            proposed_by=f"mcp:{caller.key_id}",
        )
        return proposal.model_dump(mode="json")  # type: ignore[no-any-return]


def _memory_tools(server: FastMCP[Any], services: Services) -> None:
    """For tables: recall a campaign's past by meaning, list, add and retract memories, read summaries.

    Scoped like the REST routes (:mod:`serve.routes.memory`): the key's campaigns only, a turn reached
    through its campaign, and retracting a memory takes a GM (or admin) key.
    """
    run = services.run

    async def _at(caller: Principal, campaign_id: str, turn_id: str | None) -> None:
        caller.require_campaign(campaign_id)
        if turn_id is not None:
            await services.turn_in(campaign_id, turn_id)

    @server.tool()
    @_tool("recall")
    async def recall(
        campaign_id: str,
        query: str,
        ctx: Context[Any, Any, Any],
        as_of_turn_id: str | None = None,
        observer_entity_id: str | None = None,
        kinds: list[RecallKind] | None = None,
        limit: int = 10,
    ) -> dict[str, Any]:
        """What the campaign remembers about QUERY, by meaning: turns, summaries, canon facts and memories on
        the line of the head (or of as_of_turn_id), optionally only what observer_entity_id witnessed; each
        hit names the turn it belongs to."""
        request = RecallRequest(
            query=query,
            as_of_turn_id=as_of_turn_id,
            observer_entity_id=observer_entity_id,
            kinds=kinds,
            limit=max(1, min(limit, 100)),
        )
        await _at(_caller(ctx), campaign_id, request.as_of_turn_id)
        started = time.perf_counter()
        hits = await run(
            services.story.recall,
            campaign_id,
            request.query,
            as_of_turn_id=request.as_of_turn_id,
            observer_entity_id=request.observer_entity_id,
            kinds=request.kinds,
            limit=request.limit,
        )
        log.debug("mcp_recall_results", tool="recall", hits=len(hits), ms=_ms(started))
        response = RecallResponse(campaign_id=campaign_id, query=query, as_of_turn_id=as_of_turn_id, hits=hits)
        return response.model_dump(mode="json")

    @server.tool()
    @_tool("list_memories")
    async def list_memories(
        campaign_id: str,
        ctx: Context[Any, Any, Any],
        observer_entity_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The memories held on the line of the head (or of turn_id), optionally one entity's; retracted
        memories are left out."""
        await _at(_caller(ctx), campaign_id, turn_id)
        found = await run(services.story.memories, campaign_id, observer_entity_id=observer_entity_id, turn_id=turn_id)
        return [m.model_dump(mode="json") for m in found]

    @server.tool()
    @_tool("add_memory")
    async def add_memory(
        campaign_id: str,
        observer_entity_id: str,
        text: str,
        ctx: Context[Any, Any, Any],
        kind: SubjectiveKind = SubjectiveKind.MEMORY,
        subject_entity_ids: list[str] | None = None,
        anchor_turn_id: str | None = None,
        salience: float = 0.5,
    ) -> dict[str, Any]:
        """Record what a character remembers, believes (claim) or feels (emotion), anchored to a turn (the
        head by default): it is recalled only from that turn's future."""
        body = MemoryCreate(
            observer_entity_id=observer_entity_id,
            text=text,
            kind=kind,
            subject_entity_ids=subject_entity_ids or [],
            anchor_turn_id=anchor_turn_id,
            salience=salience,
        )
        await _at(_caller(ctx), campaign_id, body.anchor_turn_id)
        anchor = body.anchor_turn_id
        if anchor is None:
            campaign = await run(services.story.get_campaign, campaign_id)
            if campaign.head_turn_id is None:
                raise InvalidRequest("story", f"campaign {campaign_id!r} has no turn yet to anchor a memory to")
            anchor = campaign.head_turn_id
        memory = Memory(campaign_id=campaign_id, anchor_turn_id=anchor, **body.model_dump(exclude={"anchor_turn_id"}))
        added = await run(services.story.add_memory, memory)
        return added.model_dump(mode="json")  # type: ignore[no-any-return]

    @server.tool()
    @_tool("retract_memory")
    async def retract_memory(
        campaign_id: str, memory_id: str, reason: str, ctx: Context[Any, Any, Any]
    ) -> dict[str, Any]:
        """Withdraw a memory that no longer holds (GM): it stays in the story, marked retracted with when and
        why, and is no longer listed or recalled."""
        caller = _caller(ctx)
        caller.require_campaign(campaign_id)
        caller.require_authority(Authority.GM)
        body = MemoryRetract(reason=reason)
        retracted = await run(services.story.retract_memory, campaign_id, memory_id, reason=body.reason)
        return retracted.model_dump(mode="json")  # type: ignore[no-any-return]

    @server.tool()
    @_tool("list_summaries")
    async def list_summaries(
        campaign_id: str, ctx: Context[Any, Any, Any], turn_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The scene, session and arc summaries on the line of the head (or of turn_id), oldest first."""
        await _at(_caller(ctx), campaign_id, turn_id)
        found = await run(services.story.summaries, campaign_id, turn_id=turn_id)
        return [summary.model_dump(mode="json") for summary in found]


def _resources(server: FastMCP[Any], services: Services) -> None:
    """The library types with their chunking defaults, and the libraries."""

    @server.resource("lorekeeper://library-types", mime_type="application/json")
    def library_types() -> str:
        """Library types and the chunking defaults each carries."""
        return json.dumps({t.value: CHUNKING_DEFAULTS[t].model_dump(mode="json") for t in LibraryType})

    @server.resource("lorekeeper://libraries", mime_type="application/json")
    async def libraries() -> str:
        """The libraries of this server."""
        found = await asyncio.to_thread(services.catalog.list_libraries)
        return json.dumps([lib.model_dump(mode="json") for lib in found])


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


class _Authenticated:
    """Checks the bearer key before the MCP session sees the request, and passes the principal on."""

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
        try:
            principal = await self.services.authenticate(key or None)
        except LorekeeperError as exc:
            from fastapi.responses import JSONResponse

            response = JSONResponse(exc.to_dict(), status_code=exc.status_code, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope[_PRINCIPAL] = principal
        await self.app(scope, receive, send)


def mount_mcp(app: FastAPI, services: Services) -> Callable[[FastAPI], Any]:
    """Mount the MCP server at ``/mcp``; returns the lifespan that runs its session manager."""
    from starlette.routing import Route

    server = build_mcp(services, protect_hosts=services.open)
    # A route, not a mount: "/mcp" itself answers (a mount would redirect it to "/mcp/").
    endpoint = _Authenticated(server.streamable_http_app(), services)
    app.router.routes.append(Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"]))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return lifespan
