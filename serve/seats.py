"""The seats a model plays and the one place the story service is built with them.

A model plays four seats: the narrator, the proposal extractor, the scene summarizer / memory former
and the axiom judge. The first two belong to the turn flow; the last two to the story service, which
runs them when a scene ends or commits. :func:`open_story` builds the story service with those two
bound, and every path calls it: the direct path (:func:`serve.services.open_services`) and the Gate
replica of Ray Serve (:class:`serve.deployments.GateReplica`), so a scene that ends on Ray Serve has
its axioms judged and its memories formed by the model exactly as it would in one process.

Engines come from an :data:`EngineFactory`, ``build_engine``'s signature: production binds
:func:`narrator.engines.build_engine`; a test binds a factory of test engines the same way, through
the deployment builders (``build_application(..., engines=...)``), which hand it to every replica.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Protocol

import structlog

from narrator.axioms import LLMAxiomJudge
from narrator.engines import NarratorEngine, build_engine
from narrator.formation import LLMFormer
from schemas.serving import EngineKind, ServeSettings
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from story.recall_index import RecallIndex
from story.service import StoryService

log = structlog.get_logger(__name__)


class EngineFactory(Protocol):
    """Builds the engine of a seat from the serving settings (``build_engine``'s signature).

    ``role`` is ``narrator`` or one of the model seats that run on the extractor's settings:
    ``extractor``, ``summarizer`` (the memory former) and ``judge`` (the axiom judge).
    """

    def __call__(self, settings: ServeSettings, *, role: str = "narrator") -> NarratorEngine: ...


def bind_scene_seats(
    story: StoryService, serve: ServeSettings, stack: ExitStack, engines: EngineFactory = build_engine
) -> None:
    """Bind the memory former and the axiom judge of ``serve`` to ``story``; ``stack`` closes them.

    Both are bound when an extractor engine is configured (with a ``local`` narrator it is, by
    default), each with an engine and an event loop of its own: scenes end in worker threads, away
    from the loop the turn flow's engines live on. An in-process vLLM extractor is not built a
    second time just for scene ends: then memories stay extractive and the axioms unchecked.
    """
    if serve.extractor_engine is EngineKind.VLLM:
        log.info("memory_formation_extractive", reason="an in-process vLLM extractor is not shared with scene ends")
        return
    if serve.extractor_engine is None:
        return
    former = LLMFormer(engines(serve, role="summarizer"), max_tokens=serve.extractor_max_tokens)
    stack.callback(former.close)
    story.memory_former = former
    judge = LLMAxiomJudge(engines(serve, role="judge"), max_tokens=serve.extractor_max_tokens)
    stack.callback(judge.close)
    story.axiom_judge = judge


def open_story(
    graph: GraphStore,
    blobs: BlobStore,
    serve: ServeSettings | None,
    stack: ExitStack,
    *,
    recall: RecallIndex | None = None,
    engines: EngineFactory = build_engine,
) -> StoryService:
    """The story service on these stores, prepared, with its model seats bound (:func:`bind_scene_seats`).

    The one builder of the story service for serving: the direct path and the Gate replica both call it.
    Without serving settings (a gate built with none bound) it has no model seats: extractive memories,
    axioms reported unchecked.
    """
    story = StoryService(graph, blobs, recall=recall)
    story.prepare()
    if serve is not None:
        bind_scene_seats(story, serve, stack, engines)
    return story
