"""What the API stands on, composed once per ingress: stores, the story service, keys, and three backends.

The three backends are where Ray Serve and a single process differ, and nothing else does:

* **search** — a :class:`SearchBackend`: the hybrid searcher in this process, or the Search deployment;
* **gate** — a :class:`GateBackend`: the story service's gate in this process, or the Gate deployment;
* **narrator** — a :class:`NarratorRouter`: one engine for every campaign in this process, or the
  Narrator deployment with the campaign id as the routing key (affinity for the prefix cache).

The routes (:mod:`serve.app`), the turn flow (:mod:`narrator.turn`) and the MCP tools
(:mod:`serve.mcp`) see only these, so a test on the in-process backends exercises the same code the
cluster runs, and the serving benchmark compares the two paths on the same routes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import structlog

from models.embedding import Embedder
from narrator.engines import NarratorEngine, build_engine
from narrator.turn import SearchBackend, TurnFlow
from schemas.errors import ConfigError, InvalidRequest
from schemas.health import Health
from schemas.search import SearchFilters, SearchHit
from schemas.serving import ServeSettings
from schemas.settings import Settings
from schemas.story import GateReport
from serve.auth import OPEN, ApiKeys, Principal
from serve.health import BlockingProbe, HealthProbes, embedding_probe, engine_probe, logged, overall, store_probe
from serve.seats import EngineFactory, open_story, turn_engines
from serve.warming import Warming
from stores.blob.base import BlobStore
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store, open_source_blob_store
from stores.graph.base import GraphStore
from stores.source_facts import SourceFactStore
from story.recall_index import RecallIndex
from story.service import StoryService

log = structlog.get_logger(__name__)


class GateBackend(Protocol):
    """The scene-end canonization gate (blocking)."""

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport: ...

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport: ...


class NarratorRouter(Protocol):
    """The engine that narrates for a campaign (the same one, or a replica chosen by campaign)."""

    def for_campaign(self, campaign_id: str) -> NarratorEngine: ...

    @property
    def default(self) -> NarratorEngine: ...


class LocalSearch:
    """The hybrid searcher of this process, behind :class:`SearchBackend`."""

    def __init__(self, searcher: Any) -> None:
        self.searcher = searcher

    def warm(self) -> None:
        """Load the models and the concept vocabulary now rather than on the first query."""
        load = getattr(self.searcher, "load", None)
        if load is not None:
            load()

    def probes(self) -> dict[str, BlockingProbe]:
        """The health probes of what search stands on: the full-text and vector indexes, the embedding model."""
        s = self.searcher
        return {
            "text": store_probe(s.text),
            "vectors": store_probe(s.vectors),
            "embedding": embedding_probe(s.embedder),
        }

    def search(
        self, query: str, *, filters: SearchFilters | None = None, limit: int = 10, rerank: bool | None = None
    ) -> list[SearchHit]:
        try:
            return list(self.searcher.search(query, filters=filters, limit=limit, rerank=rerank))
        except ConfigError as exc:
            if rerank:  # asked for re-ranking where no re-ranker is configured: the request's fault
                raise InvalidRequest("search", f"re-ranking is not available here: {exc.message}") from None
            raise


class SharedQueries:
    """One embedding model behind the knowledge searcher and the memory index, each query embedded once.

    A turn asks both the same question (the player's input) at the same moment, from two threads:
    the second asker waits for the first one's vector instead of running the model again, and the
    last few queries' vectors are kept. Documents pass straight through.
    """

    def __init__(self, inner: Embedder, *, keep: int = 256) -> None:
        self.inner = inner
        self.keep = keep
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, Future[np.ndarray]] = OrderedDict()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            pending = self._queries.get(text)
            owner = pending is None
            if pending is None:
                pending = self._queries[text] = Future()
                while len(self._queries) > self.keep:
                    self._queries.popitem(last=False)
            else:
                self._queries.move_to_end(text)
        if owner:
            try:
                pending.set_result(self.inner.embed_query(text))
            except BaseException as exc:
                with self._lock:  # a failure is not kept: the next asker tries again
                    if self._queries.get(text) is pending:
                        del self._queries[text]
                pending.set_exception(exc)
        return pending.result()

    def __getattr__(self, name: str) -> Any:  # load(), max_tokens … of the model behind
        return getattr(self.inner, name)


class LocalGate:
    """The story service's gate, in this process."""

    def __init__(self, story: StoryService) -> None:
        self.story = story

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        return self.story.commit(scene_id, proposal_ids)

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport:
        return self.story.end_scene(scene_id, summary=summary)


class SingleEngine:
    """One engine narrates for every campaign (a laptop, a test, or a single narrator replica)."""

    def __init__(self, engine: NarratorEngine) -> None:
        self.engine = engine

    def for_campaign(self, campaign_id: str) -> NarratorEngine:
        return self.engine

    @property
    def default(self) -> NarratorEngine:
        return self.engine


class Capacity:
    """How many turns this ingress replica narrates at once; past it, callers are told to come back.

    A refusal is immediate (429 with Retry-After) rather than a queue that grows until timeouts: a
    table waiting on a spinner is worse than one told to retry in a second.
    """

    def __init__(self, limit: int, *, retry_after_s: int = 2) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.active = 0

    def acquire(self) -> Slot | None:
        """A slot, or None when every slot is taken."""
        if self.active >= self.limit:
            return None
        self.active += 1
        return Slot(self)


class Slot:
    """One turn's place; releasing it twice is harmless (a stream's ``finally`` and its safety net)."""

    __slots__ = ("_capacity", "__weakref__")

    def __init__(self, capacity: Capacity) -> None:
        self._capacity: Capacity | None = capacity

    def release(self) -> None:
        if self._capacity is not None:
            self._capacity.active = max(0, self._capacity.active - 1)
            self._capacity = None


@dataclass
class Services:
    """Everything a route needs, built once per ingress replica."""

    settings: Settings
    serve: ServeSettings
    story: StoryService
    catalog: Catalog
    keys: ApiKeys
    search: SearchBackend | None
    gate: GateBackend
    narrator: NarratorRouter
    flow: TurnFlow
    capacity: Capacity
    open: bool = False
    """True when the API runs without keys (loopback only)."""
    source_blobs: BlobStore | None = None
    """The bucket ingest copies from (``LOREKEEPER_SOURCE_BLOB_URL``), when one is set: probed by health."""
    probes: HealthProbes | None = None
    warming: Warming = field(default_factory=Warming)
    """What is still loading in the background (``/health`` lists it; ready once empty)."""

    async def authenticate(self, key: str | None) -> Principal:
        """The caller behind ``key``; without one, open only while no key exists (the first key closes it).

        Raises:
            Unauthorized: no key where one is needed, or an unknown or revoked one.
        """
        if key is None and await self.is_open():
            return OPEN
        return await self.run(self.keys.verify, key)  # type: ignore[no-any-return]

    async def is_open(self) -> bool:
        """Whether keyless callers are served now: a loopback API on which no key has ever existed."""
        return self.open and not await self.run(self.keys.any_configured)

    @property
    def source_facts(self) -> SourceFactStore:
        """The library's rulebook facts (what the knowledge operations read)."""
        return SourceFactStore(self.catalog.graph)

    async def health(self) -> Health:
        """Every part this server stands on, probed at once, each within ``LOREKEEPER_HEALTH_TIMEOUT_S``: the
        graph, the blob store, the source bucket (when set), the full-text and vector indexes and the
        embedding model (where search runs: here, or the Search deployment), and the narrator engine.
        Logged as ``mcp_health_check``."""
        started = time.perf_counter()
        if self.probes is None:
            self.probes = HealthProbes(self.serve.health_timeout_s)
        blocking = {"graph": store_probe(self.story.graph), "blob": store_probe(self.story.blobs)}
        off: tuple[str, ...] = ()
        if self.source_blobs is not None:
            blocking["source_blob"] = store_probe(self.source_blobs)
        else:
            off += ("source_blob",)
        search_probes = getattr(self.search, "probes", None)
        if search_probes is not None:
            blocking.update(search_probes())
        else:
            off += ("text", "vectors", "embedding")
        # whether keyless callers are served is asked of the graph too, so it is bounded the same way: a graph
        # that is down or slow (the checks say so) reports closed, never open
        checks, is_open = await asyncio.gather(
            self.probes.check(blocking, {"narrator": engine_probe(self.narrator.default)}, off),
            self.probes.value("open", lambda: self.open and not self.keys.any_configured(), False),
        )
        took = round((time.perf_counter() - started) * 1000, 2)
        searching = self.search is not None
        return logged(Health(status=overall(checks), checks=checks, search=searching, open=is_open, took_ms=took))

    async def run(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking store call off the event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)


def close_engine(engine: NarratorEngine) -> None:
    """Close an engine these services built (an open vLLM engine keeps the process from exiting)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(engine.close())
        return
    # inside a running loop (an async caller closing the stack): close from a thread of its own
    import threading

    closer = threading.Thread(target=lambda: asyncio.run(engine.close()), name="engine-close")
    closer.start()
    closer.join(timeout=60)


def _stores(settings: Settings, stack: ExitStack) -> tuple[GraphStore, BlobStore, BlobStore | None]:
    """The graph, the blob store and the source bucket (``LOREKEEPER_SOURCE_BLOB_URL``, when set: health probes
    it), each closed with the stack."""
    graph = open_graph_store(settings)
    stack.callback(graph.close)
    blobs = open_blob_store(settings)
    stack.callback(blobs.close)
    source = open_source_blob_store(settings)
    if source is not None:
        stack.callback(source.close)
    return graph, blobs, source


def check_binding(serve: ServeSettings, keys: ApiKeys) -> bool:
    """Whether the API may run open; refuse to serve a non-loopback address without keys.

    Raises:
        ConfigError: bound to a non-loopback address with no key configured.
    """
    if keys.any_configured():
        return False
    if serve.loopback:
        log.warning("api_open", host=serve.api_host, reason="no API keys configured; bound to loopback only")
        return True
    raise ConfigError(
        "LOREKEEPER_API_KEYS_FILE",
        f"the API is bound to {serve.api_host!r}, not loopback, and no API key exists: create one with "
        "`lorekeeper keys create NAME --admin` or mount a keys file",
    )


@contextmanager
def open_services(
    settings: Settings,
    serve: ServeSettings,
    *,
    search: SearchBackend | None = None,
    gate: GateBackend | None = None,
    narrator: NarratorRouter | None = None,
    extractor: NarratorEngine | None = None,
    with_search: bool = True,
    recall: RecallIndex | None = None,
    with_recall: bool = True,
    catch_up: bool = True,
    engines: EngineFactory = build_engine,
) -> Iterator[Services]:
    """Open the stores and compose the services; the stores close when the block ends.

    Backends not given are built in this process from settings: the hybrid searcher on the
    configured stores (unless ``with_search`` is false), the campaign memory index (unless
    ``with_recall`` is false), the story service's gate, and the narrator engine of
    ``LOREKEEPER_NARRATOR_ENGINE`` (``engines`` builds each seat's engine; a test binds its own). The
    searcher and the memory index built here share one embedding model (:class:`SharedQueries`): one
    model load per process, and a turn's input embedded once for both.

    With ``catch_up`` the story catches up before the services are handed out
    (:meth:`~story.service.StoryService.catch_up`: the scene ends a crash cut short finished, every
    campaign's recall index reconciled with the graph); a caller on an event loop whose recall index
    answers through blocking calls (the Ray ingress) runs it itself, off the loop.
    """
    with ExitStack() as stack:
        graph, blobs, source_blobs = _stores(settings, stack)
        embedder: SharedQueries | None = None
        if search is None and with_search:
            from search.service import open_searcher

            searcher = stack.enter_context(open_searcher(settings))
            embedder = searcher.embedder = SharedQueries(searcher.embedder)
            search = LocalSearch(searcher)
        if recall is None and with_recall:
            from story.recall_index import open_recall_index

            recall = open_recall_index(settings, embedder=embedder)
            stack.callback(recall.close)
        # the one builder of the story service, the Gate replica's too: the former and the judge bound
        kept = settings.checkpoints_kept
        story = open_story(graph, blobs, serve, stack, recall=recall, engines=engines, checkpoints_kept=kept)
        keys = ApiKeys(graph, keys_file=serve.api_keys_file)
        if narrator is None:
            engine = engines(serve)
            stack.callback(close_engine, engine)
            narrator = SingleEngine(engine)
        if extractor is None and serve.extractor_engine is not None:
            extractor = engines(serve, role="extractor")
            stack.callback(close_engine, extractor)
        if catch_up:
            story.catch_up()
        engines_for = turn_engines(story, serve, narrator, extractor, engines, stack, close_engine)
        flow = TurnFlow(
            story,
            narrator.default,
            settings=serve,
            extractor=extractor,
            searcher=search,
            narrator_for=narrator.for_campaign,
            engines_for=engines_for,
        )
        yield Services(
            settings=settings,
            serve=serve,
            story=story,
            catalog=Catalog(graph),
            keys=keys,
            search=search,
            gate=gate or LocalGate(story),
            narrator=narrator,
            flow=flow,
            capacity=Capacity(serve.max_concurrent_turns),
            source_blobs=source_blobs,
        )
