"""The Ray Serve application: Ingress (the FastAPI app and MCP), Narrator, Search and Gate deployments.

::

    HTTP ──▶ Ingress ──┬─▶ Narrator  (engine per replica; routed by campaign id: one table, one replica)
       (FastAPI, MCP)  ├─▶ Search    (hybrid search; the only deployment that opens the vector index)
                       └─▶ Gate      (scene-end canonization on the graph)

Each deployment is built by a ``build_*`` function from a pydantic config; ``build_app`` (the Ray
Serve import path ``serve.deployments:build_app`` of ``serve run`` and ``cluster/serve-config.yaml``)
binds the four. Replica counts, autoscaling and resources come from those configs, and a Serve config file
overrides them per deployment name without touching code.

**Affinity.** A campaign's narration requests carry the campaign id (as Serve's multiplexed id), and
the Narrator's request router (:mod:`serve.routing`) ranks the replicas for it by rendezvous hashing:
a table keeps hitting the replica whose prefix cache holds its prompt (rules, axioms and scene state
come first in every prompt, :mod:`narrator.context`) while it has room, and falls through in the same
order when it has not. Other campaigns spread over the replicas.

**Embedded stores.** The embedded vector engine is owned by one process, so with embedded stores
Search runs one replica; the embedded graph is shared by every process on the node (it attaches to
one server), so Ingress and Gate replicas can read and write it together.

**Campaign recall.** The memory index (a vector collection and a full-text folder) lives with the
knowledge indexes in the Search deployment, which embeds with the model it already holds; Ingress
(turns, takes, memories, recall) and Gate (scene-end outcomes and formed memories) reach it through
:class:`RemoteRecallIndex`, so no other process opens those stores.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, TypeVar

import numpy as np
import structlog
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve import Application
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle

from narrator.engines import Message, NarratorEngine, build_engine
from schemas.model_roles import Seat
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters, SearchHit
from schemas.serving import ServeSettings, get_serve_settings
from schemas.settings import Settings, VectorBackend, get_settings
from schemas.story import GateReport
from serve.remote import RemoteEngine as RemoteEngine  # where the narrator lane's tests import it
from serve.remote import RemoteGate, RemoteNarrator, RemoteRecallIndex, RemoteSearch
from serve.seats import EngineFactory, EngineSet
from story.lineage import Lineage

log = structlog.get_logger(__name__)

DEFAULT_PLUGINS = ("jobs.api:mount",)
SEARCH_THREADS = 32
"""Blocking calls a Search replica runs at once (the direct path's turn-context pool is as wide)."""
_T = TypeVar("_T")
STREAM_BATCH_S = 0.02
"""How long a narrator replica gathers streamed pieces before sending them on (the first goes at once)."""


# -- configs --------------------------------------------------------------------------------------


class Autoscaling(BaseModel):
    """Ray Serve's autoscaling of one deployment (the keys of its ``autoscaling_config``)."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    target_ongoing_requests: float = Field(default=8, gt=0)
    upscale_delay_s: float = Field(default=30.0, ge=0, description="Load above target this long adds replicas.")
    downscale_delay_s: float = Field(default=600.0, ge=0, description="Load below target this long removes them.")


class DeploymentConfig(BaseModel):
    """Replicas and resources of one deployment (a Serve config file may override them by name)."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int | None = Field(default=1, ge=1, description="Fixed replicas; unset to autoscale.")
    autoscaling: Autoscaling | None = None
    max_ongoing_requests: int = Field(default=32, ge=1)
    max_queued_requests: int = Field(default=-1, description="Past this, callers get back-pressure (-1: none).")
    num_cpus: float = Field(default=1, ge=0)
    num_gpus: float = Field(default=0, ge=0)

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = self.autoscaling.model_dump()
        else:
            options["num_replicas"] = self.num_replicas
        return options


class AppConfig(BaseModel):
    """Arguments of the application (``args:`` in a Serve config, or ``serve run … key=value``)."""

    model_config = ConfigDict(extra="forbid")

    # CPU figures are scheduling shares for a laptop-sized default; a Serve config sets a cluster's.
    ingress: DeploymentConfig = Field(default_factory=lambda: DeploymentConfig(num_cpus=0.25, max_ongoing_requests=256))
    narrator: DeploymentConfig | None = Field(
        default=None,
        description="Unset: autoscaled as the serving settings say (LOREKEEPER_NARRATOR_MIN_REPLICAS, …_MAX_REPLICAS, "
        "…_TARGET_ONGOING_REQUESTS, …_UPSCALE_DELAY_S, …_DOWNSCALE_DELAY_S; narrator_deployment).",
    )
    search: DeploymentConfig = Field(default_factory=lambda: DeploymentConfig(num_cpus=0.5, max_ongoing_requests=64))
    gate: DeploymentConfig = Field(default_factory=lambda: DeploymentConfig(num_cpus=0.25, max_ongoing_requests=16))
    plugins: list[str] = Field(default_factory=lambda: list(DEFAULT_PLUGINS))
    mcp: bool = True
    serve: ServeSettings | None = Field(
        default=None,
        description="The serving settings every replica uses (host, keys file, engines); unset, build_app reads "
        "LOREKEEPER_* once, where the application is built, and binds them into every replica.",
    )


def narrator_deployment(settings: ServeSettings) -> DeploymentConfig:
    """The Narrator deployment the serving settings describe: autoscaled between their min and max replicas
    on requests in flight per replica (a narration streams for seconds, so that is its load)."""
    return DeploymentConfig(
        num_replicas=None,
        autoscaling=Autoscaling(
            min_replicas=settings.narrator_min_replicas,
            max_replicas=settings.narrator_max_replicas,
            target_ongoing_requests=settings.narrator_target_ongoing_requests,
            upscale_delay_s=settings.narrator_upscale_delay_s,
            downscale_delay_s=settings.narrator_downscale_delay_s,
        ),
        max_ongoing_requests=16,
        max_queued_requests=64,
        num_cpus=0.5,
    )


# -- the deployments ------------------------------------------------------------------------------


class NarratorReplica:
    """One narrator engine (vLLM on a GPU, an OpenAI-compatible client, or echo) per replica."""

    def __init__(self, settings: ServeSettings, engines: EngineFactory = build_engine) -> None:
        self.settings = settings
        self.engine: NarratorEngine = engines(self.settings)
        self.model = self.engine.model
        self.named = EngineSet(settings, engines)  # the engines a campaign may name for its narration
        log.info("narrator_replica_started", engine=self.settings.narrator_engine.value, model=self.model)

    def _engine(self, name: str | None) -> NarratorEngine:
        """The deployment's engine, or the named engine a campaign chose (built here on first use)."""
        return self.engine if name in (None, "narrator") else self.named.engine(name, Seat.NARRATOR)

    async def stream(
        self,
        messages: list[Message],
        max_tokens: int,
        temperature: float,
        seed: int | None = None,
        engine: str | None = None,
    ) -> AsyncIterator[str]:
        """The narration; the first piece at once, then pieces gathered for ``STREAM_BATCH_S``.

        Every streamed item crosses processes, so one item per token would cost more than the token:
        batching a few milliseconds of them keeps the first token immediate and the rest cheap.
        """
        pending: list[str] = []
        first, flushed = True, time.monotonic()
        generating = self._engine(engine)
        async for piece in generating.stream(messages, max_tokens=max_tokens, temperature=temperature, seed=seed):
            pending.append(piece)
            if first or time.monotonic() - flushed >= STREAM_BATCH_S:
                yield "".join(pending)
                pending.clear()
                first, flushed = False, time.monotonic()
        if pending:
            yield "".join(pending)

    async def structured(
        self, messages: list[Message], schema: dict[str, Any], max_tokens: int, engine: str | None = None
    ) -> str:
        return await self._engine(engine).structured(messages, schema=schema, max_tokens=max_tokens)

    def model_name(self) -> str:
        return self.model

    async def health(self) -> str:
        """The engine's own health (``ok``, or ``idle`` for a model not loaded yet)."""
        check = getattr(self.engine, "health", None)
        return str(await check()) if check is not None else "ok"

    def placement(self) -> str:
        """Which replica answered (routed like a turn of the request's campaign): for operators and tests."""
        return str(serve.get_replica_context().replica_id.unique_id)


class SearchReplica:
    """Hybrid search on the stores of the application's settings, and the campaigns' memory index.

    Its calls block (an embedding, index reads, a full-text commit), so each runs on a pool of this
    replica's own, as wide as the direct path's (``SEARCH_THREADS``): Ray Serve's pool for a replica's
    blocking methods is sized by its CPU share (5 threads at 0.5 CPU), and every table's knowledge search,
    recall and recall write queued there behind one another (at 8 tables a turn's recall write waited
    5.5 s here against 0.7 s in one process: ``benchmarks/serving_overhead.py``).
    """

    def __init__(self, settings: Settings) -> None:
        from search.service import open_searcher
        from serve.services import LocalSearch, SharedQueries
        from story.recall_index import open_recall_index

        self._stack = ExitStack()
        self._pool = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="search-replica")
        self._stack.callback(self._pool.shutdown, wait=False)
        searcher = self._stack.enter_context(open_searcher(settings))
        searcher.embedder = SharedQueries(searcher.embedder)  # one model for knowledge and recall
        self.searcher = LocalSearch(searcher)
        self.searcher.warm()  # the first table's first turn should not wait for the models
        self.recall = open_recall_index(settings, embedder=searcher.embedder)
        self._stack.callback(self.recall.close)

    async def _blocking(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``call`` on this replica's pool, in the request's context (its log fields, Serve's request id)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(context.run, call, *args, **kwargs)
        )

    async def search(
        self, query: str, filters: SearchFilters | None = None, limit: int = 10, rerank: bool | None = None
    ) -> list[SearchHit]:
        return await self._blocking(self.searcher.search, query, filters=filters, limit=limit, rerank=rerank)

    async def probe(self, part: str) -> tuple[str, str | None]:
        """One health probe of what this replica stands on (``text``, ``vectors``, ``embedding``), for
        :meth:`RemoteSearch.probes`: the status and its detail; raises when the part is down."""
        status, detail = await self._blocking(self.searcher.probes()[part])
        return status.value, detail

    # the memory index, for RemoteRecallIndex

    async def recall_write(self, records: list[RecallRecord], vectors: np.ndarray | None = None) -> int:
        return await self._blocking(self.recall.write, records, vectors)

    async def recall_present(self, ids: list[str]) -> set[str]:
        return await self._blocking(self.recall.present, ids)

    async def recall_delete(self, ids: list[str]) -> None:
        await self._blocking(self.recall.delete, ids)

    async def recall_delete_campaign(self, campaign_id: str) -> None:
        await self._blocking(self.recall.delete_campaign, campaign_id)

    async def recall_count(self, campaign_id: str) -> int:
        return await self._blocking(self.recall.count, campaign_id)

    async def recall_stored_texts(self, campaign_id: str) -> dict[str, str]:
        return await self._blocking(self.recall.stored_texts, campaign_id)

    async def recall_search(
        self,
        campaign_id: str,
        query: str,
        lineage: Lineage,
        observer: str | None,
        kinds: list[RecallKind] | None,
        limit: int,
    ) -> list[RecallHit]:
        return await self._blocking(
            self.recall.search, campaign_id, query, lineage=lineage, observer=observer, kinds=kinds, limit=limit
        )

    def __del__(self) -> None:
        stack = getattr(self, "_stack", None)  # None when the constructor failed
        if stack is not None:
            stack.close()


class GateReplica:
    """The scene-end gate on the graph: commits are serialised per campaign inside the story service.

    Its story service is built by the one builder of the direct path (:func:`serve.seats.open_story`):
    with a model configured, the axioms are judged and the memories and summary formed by it here too.
    What a scene's end adds to recall (its canon outcomes, the memories and summary formed) goes to
    the memory index of the Search deployment (``search``).
    """

    def __init__(
        self,
        settings: Settings,
        search: DeploymentHandle | None = None,
        serve_settings: ServeSettings | None = None,
        engines: EngineFactory = build_engine,
    ) -> None:
        from serve.seats import open_story
        from serve.services import LocalGate
        from stores.factory import open_blob_store, open_graph_store

        self._stack = ExitStack()  # the model seats' engines and loops
        self.graph, self.blobs = open_graph_store(settings), open_blob_store(settings)
        recall = RemoteRecallIndex(search) if search else None
        self.story = open_story(
            self.graph,
            self.blobs,
            serve_settings,
            self._stack,
            recall=recall,
            engines=engines,
            checkpoints_kept=settings.checkpoints_kept,
        )
        self.gate = LocalGate(self.story)
        log.info(
            "gate_replica_started",
            memory_former=type(self.story.memory_former).__name__,
            axiom_judge=type(self.story.axiom_judge).__name__ if self.story.axiom_judge else None,
        )

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        return self.gate.commit(scene_id, proposal_ids)

    def end_scene(self, scene_id: str, summary: str | None = None) -> GateReport:
        return self.gate.end_scene(scene_id, summary=summary)

    def __del__(self) -> None:
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()
        for store in (getattr(self, "graph", None), getattr(self, "blobs", None)):
            if store is not None:  # None when the constructor failed
                store.close()


@serve.ingress()
class IngressReplica:
    """The FastAPI app (REST, OpenAI passthrough, MCP) over handles to the other deployments."""

    def __init__(
        self,
        narrator: DeploymentHandle,
        search: DeploymentHandle,
        gate: DeploymentHandle,
        serve_settings: ServeSettings,
        settings: Settings,
        plugins: Sequence[str] = DEFAULT_PLUGINS,
        mcp: bool = True,
        engines: EngineFactory = build_engine,
    ) -> None:
        self.handles = (narrator, search, gate)
        self.engines = engines
        self.serve_settings = serve_settings
        self.settings = settings
        self.plugins = list(plugins)
        self.mcp = mcp
        self._stack = ExitStack()

    async def __serve_build_asgi_app__(self) -> Any:
        from serve.app import create_app
        from serve.services import check_binding, open_services

        narrator, search, gate = self.handles
        model = await narrator.model_name.remote()
        serve_settings = self.serve_settings
        services = self._stack.enter_context(
            open_services(
                self.settings,
                serve_settings,
                search=RemoteSearch(search),
                gate=RemoteGate(gate),
                narrator=RemoteNarrator(narrator, model),
                recall=RemoteRecallIndex(search),
                catch_up=False,
                engines=self.engines,
            )
        )
        # the remote recall index answers through blocking calls, which Ray refuses on the event loop
        await asyncio.to_thread(services.story.catch_up)
        services.open = check_binding(serve_settings, services.keys)
        return create_app(services, plugins=self.plugins, mcp=self.mcp)

    def __del__(self) -> None:
        self._stack.close()


# -- builders -------------------------------------------------------------------------------------


def build_narrator(
    config: DeploymentConfig, settings: ServeSettings, engines: EngineFactory = build_engine
) -> Application:
    """Narrator replicas, with requests routed by campaign (:mod:`serve.routing`)."""
    router = RequestRouterConfig(request_router_class="serve.routing:CampaignAffinityRouter")  # type: ignore[arg-type]
    deployment = serve.deployment(name="Narrator", request_router_config=router, **config.options())(NarratorReplica)
    return deployment.bind(settings, engines)


def build_search(config: DeploymentConfig, settings: Settings) -> Application:
    options = config.options()
    if settings.vector_location().backend is not VectorBackend.QDRANT_SERVER:
        # the embedded vector engine is owned by one process
        options.pop("autoscaling_config", None)
        options["num_replicas"] = 1
    return serve.deployment(name="Search", **options)(SearchReplica).bind(settings)


def build_gate(
    config: DeploymentConfig,
    settings: Settings,
    search: Application | None = None,
    serve_settings: ServeSettings | None = None,
    engines: EngineFactory = build_engine,
) -> Application:
    """Gate replicas; given the Search application, a scene's end reaches the memory index through it.

    ``serve_settings`` and ``engines`` bind the model seats of the gate (the memory former and the
    axiom judge) as on the direct path; without serving settings the gate has neither.
    """
    deployment = serve.deployment(name="Gate", **config.options())(GateReplica)
    return deployment.bind(settings, search, serve_settings, engines)


def build_ingress(
    config: AppConfig,
    narrator: Application,
    search: Application,
    gate: Application,
    *,
    serve_settings: ServeSettings,
    settings: Settings,
    engines: EngineFactory = build_engine,
) -> Application:
    deployment = serve.deployment(name="Ingress", **config.ingress.options())(IngressReplica)
    return deployment.bind(narrator, search, gate, serve_settings, settings, config.plugins, config.mcp, engines)


def build_application(
    config: AppConfig, settings: Settings, serve_settings: ServeSettings, *, engines: EngineFactory = build_engine
) -> Application:
    """The four deployments with ``settings`` (the stores) and ``serve_settings`` bound into every replica,
    so what the caller decided (host, keys, engines, stores) is what each replica sees; no replica reads
    the environment for them. An embedded data folder is made absolute first: it is one folder for every
    replica, whatever each one's working folder is.

    ``engines`` builds every seat's engine in every replica (the narrator's, the ingress's extractor,
    the gate's memory former and axiom judge): production's ``build_engine``, or a test's factory
    bound the same way."""
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    search = build_search(config.search, settings)
    return build_ingress(
        config,
        build_narrator(config.narrator or narrator_deployment(serve_settings), serve_settings, engines),
        search,
        build_gate(config.gate, settings, search, serve_settings, engines),
        serve_settings=serve_settings,
        settings=settings,
        engines=engines,
    )


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The Ray Serve import path (``serve run serve.deployments:build_app``, ``cluster/serve-config.yaml``):
    ``args`` is an :class:`AppConfig` as a dict.

    An entry point: it reads ``LOREKEEPER_*`` here, once, where the application is built (the store
    settings, and the serving settings unless ``args`` carries them), and binds them into every
    replica with :func:`build_application`.
    """
    config = AppConfig.model_validate(args or {})
    return build_application(config, get_settings(), config.serve or get_serve_settings())
