"""The seats a model plays and the one place the story service is built with them.

A model plays four seats: the narrator, the proposal extractor, the scene summarizer / memory former
and the axiom judge. The first two belong to the turn flow; the last two to the story service, which
runs them when a scene ends or commits. :func:`open_story` builds the story service with those two
bound, and every path calls it: the direct path (:func:`serve.services.open_services`) and the Gate
replica of Ray Serve (:class:`serve.deployments.GateReplica`), so a scene that ends on Ray Serve has
its axioms judged and its memories formed by the model exactly as it would in one process.

**Model roles per campaign.** A server has engines by name (:class:`EngineSet`: ``narrator``,
``extractor`` and those of ``LOREKEEPER_ENGINES``); a campaign names which plays each seat
(:class:`~schemas.model_roles.ModelRoles`), and a seat it leaves unset plays on the deployment's engine
for it. The turn flow asks :func:`turn_engines` which engines narrate and extract a campaign's turn;
at a scene's end :class:`RoutedFormer` and :class:`RoutedJudge` hand the work to the former or judge of
the engine the scene's campaign named, each built on first use with its own engine and loop.

Engines come from an :data:`EngineFactory`, ``build_engine``'s signature: production binds
:func:`narrator.engines.build_engine`; a test binds a factory of test engines the same way, through
the deployment builders (``build_application(..., engines=...)``), which hand it to every replica.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Protocol

import structlog

from narrator.axioms import LLMAxiomJudge
from narrator.engines import NarratorEngine, build_engine
from narrator.extraction import extractor_budget
from narrator.formation import LLMFormer
from narrator.turn import TurnEngines
from schemas.errors import InvalidRequest, NotFound
from schemas.model_roles import ModelRoles, Seat
from schemas.serving import EngineKind, ServeSettings
from schemas.story import Axiom, Scene, Turn
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from story.axioms import AxiomJudge, AxiomRulings, ProposalText
from story.checkpoints import DEFAULT_KEPT
from story.formation import FormedScene, NamedEntity, SceneMemoryFormer
from story.media_engines import media_engine
from story.recall_index import RecallIndex
from story.service import StoryService

log = structlog.get_logger(__name__)


class EngineFactory(Protocol):
    """Builds the engine of a seat from the serving settings (``build_engine``'s signature).

    ``role`` is ``narrator`` or one of the model seats that run on the extractor's settings:
    ``extractor``, ``summarizer`` (the memory former) and ``judge`` (the axiom judge).
    """

    def __call__(self, settings: ServeSettings, *, role: str = "narrator") -> NarratorEngine: ...


class EngineSet:
    """The engines this server has, by name: ``narrator`` and ``extractor`` (the deployment's own) and the
    named ones of ``LOREKEEPER_ENGINES``; each engine is built on first use, once per name and seat.

    Args:
        serve: the serving settings (the deployment's engines and the named ones).
        engines: builds an engine from settings (``build_engine``'s signature).
        roles_of: a campaign's model roles (a blocking read of the campaign); None: every campaign plays on
            the deployment's engines.
    """

    def __init__(
        self,
        serve: ServeSettings,
        engines: EngineFactory = build_engine,
        roles_of: Callable[[str], ModelRoles | None] | None = None,
    ) -> None:
        self.serve = serve
        self.factory = engines
        self.roles_of = roles_of
        self._built: dict[tuple[str, Seat], NarratorEngine] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        """The engines a campaign may name, the deployment's first."""
        own = ["narrator", "extractor"] if self.serve.extractor_engine is not None else ["narrator"]
        return own + sorted(self.serve.engines)

    def check(self, roles: ModelRoles | None) -> None:
        """Refuse roles naming an engine this server does not have.

        Raises:
            InvalidRequest: a seat names an unknown engine (the message lists the ones there are).
        """
        unknown = {seat: name for seat, name in (roles.named() if roles else {}).items() if name not in self.names()}
        if unknown:
            wrong = ", ".join(f"{seat}={name!r}" for seat, name in sorted(unknown.items()))
            raise InvalidRequest("model_roles", f"no engine {wrong} on this server; it has {self.names()}")

    def default(self, seat: Seat) -> str | None:
        """The deployment's engine for a seat: the narrator's for narration (and extraction, with no extractor
        configured, as before roles existed); the extractor's for the scene seats (none: no model there)."""
        has_extractor = self.serve.extractor_engine is not None
        if seat is Seat.NARRATOR or (seat is Seat.EXTRACTOR and not has_extractor):
            return "narrator"
        if seat is not Seat.EXTRACTOR and self.serve.extractor_engine is EngineKind.VLLM:
            return None  # an in-process vLLM extractor is not built a second time for scene ends
        return "extractor" if has_extractor else None

    def chosen(self, campaign_id: str, seat: Seat) -> tuple[str | None, bool]:
        """The engine that plays ``seat`` for the campaign, and whether the campaign named it (blocking)."""
        roles = self.roles_of(campaign_id) if self.roles_of is not None else None
        name = roles.named().get(seat.value) if roles is not None else None
        if name is not None and name in self.names():
            return name, True
        return self.default(seat), False

    def settings_for(self, name: str, seat: Seat) -> tuple[ServeSettings, str]:
        """The settings and the ``build_engine`` role that build engine ``name`` for ``seat``."""
        if name == "narrator":
            return self.serve, "narrator"
        if name == "extractor":
            return self.serve, seat.value if seat is not Seat.NARRATOR else "extractor"
        spec = self.serve.engines[name]
        fields = {"engine": spec.kind, "base_url": spec.base_url, "model": spec.model}
        update = {f"{who}_{k}": v for who in ("narrator", "extractor") for k, v in fields.items()}
        return self.serve.model_copy(update=update), "narrator"

    def describe(self, name: str | None) -> tuple[str | None, str | None]:
        """The kind and model of engine ``name``."""
        if name is None:
            return None, None
        settings, role = self.settings_for(name, Seat.NARRATOR if name == "narrator" else Seat.EXTRACTOR)
        if role == "narrator":
            return settings.narrator_engine.value, settings.narrator_model
        kind = settings.extractor_engine or settings.narrator_engine
        return kind.value, settings.extractor_model or settings.narrator_model

    def engine(self, name: str, seat: Seat) -> NarratorEngine:
        """Engine ``name`` for ``seat`` in this process, built on first use (closed by :meth:`close`)."""
        with self._lock:
            built = self._built.get((name, seat))
            if built is None:
                settings, role = self.settings_for(name, seat)
                built = self._built[(name, seat)] = self.factory(settings, role=role)
            return built

    def close(self, closer: Callable[[NarratorEngine], None]) -> None:
        with self._lock:
            built, self._built = list(self._built.values()), {}
        for engine in built:
            closer(engine)


class RoutedFormer:
    """The scene-end former of the engine the scene's campaign named for ``summarizer`` (a
    :class:`~story.formation.SceneMemoryFormer`); the deployment's former when it named none."""

    def __init__(self, engines: EngineSet, default: SceneMemoryFormer) -> None:
        self.engines, self.default = engines, default
        self._named: dict[str, LLMFormer] = {}
        self._lock = threading.Lock()
        self.name = getattr(default, "name", "routed")

    def form(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        present: Sequence[NamedEntity],
        *,
        entities: Sequence[NamedEntity] = (),
    ) -> FormedScene:
        name, chosen = self.engines.chosen(scene.campaign_id, Seat.SUMMARIZER)
        former = self._former(name) if chosen and name is not None else self.default
        return former.form(scene, turns, present, entities=entities)

    def _former(self, name: str) -> LLMFormer:
        with self._lock:
            if name not in self._named:
                engine = self.engines.engine(name, Seat.SUMMARIZER)
                self._named[name] = LLMFormer(engine, max_tokens=extractor_budget(self.engines.serve, engine))
            return self._named[name]

    def close(self) -> None:
        with self._lock:
            named, self._named = list(self._named.values()), {}
        for former in named:
            former.close()


class RoutedJudge:
    """The axiom judge of the engine the proposals' campaign named for ``judge`` (an
    :class:`~story.axioms.AxiomJudge`); the deployment's judge when it named none."""

    def __init__(self, engines: EngineSet, default: AxiomJudge | None, campaign_of: Callable[[str], str]) -> None:
        self.engines, self.default, self.campaign_of = engines, default, campaign_of
        self._named: dict[str, LLMAxiomJudge] = {}
        self._lock = threading.Lock()
        self.name = default.name if default is not None else "llm"

    def judge(self, axioms: Sequence[Axiom], proposals: Sequence[ProposalText]) -> AxiomRulings:
        judge = self.default
        if proposals:
            name, chosen = self.engines.chosen(self.campaign_of(proposals[0].proposal_id), Seat.JUDGE)
            if chosen and name is not None:
                judge = self._judge(name)
        if judge is None:
            return AxiomRulings(unchecked=[a.text for a in axioms])
        return judge.judge(axioms, proposals)

    def _judge(self, name: str) -> LLMAxiomJudge:
        with self._lock:
            if name not in self._named:
                engine = self.engines.engine(name, Seat.JUDGE)
                self._named[name] = LLMAxiomJudge(engine, max_tokens=extractor_budget(self.engines.serve, engine))
            return self._named[name]

    def close(self) -> None:
        with self._lock:
            named, self._named = list(self._named.values()), {}
        for judge in named:
            judge.close()


class NarratorRouting(Protocol):
    """The narrator router of the services (:class:`serve.services.NarratorRouter`)."""

    def for_campaign(self, campaign_id: str) -> NarratorEngine: ...


def turn_engines(
    story: StoryService,
    serve: ServeSettings,
    narrators: NarratorRouting,
    extractor: NarratorEngine | None,
    engines: EngineFactory,
    stack: ExitStack,
    closer: Callable[[NarratorEngine], None],
) -> Callable[[str], TurnEngines]:
    """Which engines narrate and extract a campaign's turn (its model roles).

    The deployment's engines are the ones given (``narrators``, ``extractor``); a named engine is built in
    this process on first use (``stack`` closes it with ``closer``), except a narrator where the narration
    runs elsewhere: a router with a ``named`` method (the Narrator replicas, which build it themselves).
    """
    named = EngineSet(serve, engines, campaign_roles(story))
    stack.callback(named.close, closer)
    narrator_for = narrators.for_campaign
    remote = narrators if hasattr(narrators, "named") else None

    def engines_for(campaign_id: str) -> TurnEngines:
        deployment = narrator_for(campaign_id)
        narrating = named.chosen(campaign_id, Seat.NARRATOR)[0] or "narrator"
        if narrating == "narrator":
            narrator = deployment
        elif remote is not None:
            narrator = remote.named(campaign_id, narrating, named.describe(narrating)[1] or narrating)  # type: ignore[attr-defined]
        else:
            narrator = named.engine(narrating, Seat.NARRATOR)
        extracting, chosen = named.chosen(campaign_id, Seat.EXTRACTOR)
        extracting = extracting or "narrator"
        if not chosen and extractor is not None:  # the deployment's extractor, however it was given
            extracting, extracted_by = "extractor", extractor
        elif extracting == "narrator":
            extracted_by = deployment
        elif extracting == "extractor" and extractor is not None:
            extracted_by = extractor
        else:
            extracted_by = named.engine(extracting, Seat.EXTRACTOR)
        return TurnEngines(narrator, extracted_by, narrator_name=narrating, extractor_name=extracting)

    return engines_for


def campaign_roles(story: StoryService) -> Callable[[str], ModelRoles | None]:
    """A campaign's model roles, read from the story (a missing campaign: none)."""

    def roles_of(campaign_id: str) -> ModelRoles | None:
        try:
            return story.get_campaign(campaign_id).model_roles
        except NotFound:
            return None

    return roles_of


def bind_scene_seats(
    story: StoryService, serve: ServeSettings, stack: ExitStack, engines: EngineFactory = build_engine
) -> None:
    """Bind the memory former and the axiom judge of ``serve`` to ``story``; ``stack`` closes them.

    Both are bound when an extractor engine is configured (with a ``local`` narrator it is, by
    default), each with an engine and an event loop of its own: scenes end in worker threads, away
    from the loop the turn flow's engines live on. An in-process vLLM extractor is not built a
    second time just for scene ends: then memories stay extractive and the axioms unchecked.
    """
    default_former: SceneMemoryFormer | None = story.memory_former
    default_judge: AxiomJudge | None = None
    if serve.extractor_engine is EngineKind.VLLM:
        log.info("memory_formation_extractive", reason="an in-process vLLM extractor is not shared with scene ends")
    elif serve.extractor_engine is not None:
        engine = engines(serve, role="summarizer")
        former = LLMFormer(engine, max_tokens=extractor_budget(serve, engine))
        stack.callback(former.close)
        default_former = former
        engine = engines(serve, role="judge")
        default_judge = LLMAxiomJudge(engine, max_tokens=extractor_budget(serve, engine))
        stack.callback(default_judge.close)
    # a campaign may name another engine for either seat: the routed seats hand the work to it
    named = EngineSet(serve, engines, campaign_roles(story))
    if default_former is not None:
        routed_former = RoutedFormer(named, default_former)
        stack.callback(routed_former.close)
        story.memory_former = routed_former
    routed_judge = RoutedJudge(named, default_judge, _proposal_campaign(story))
    stack.callback(routed_judge.close)
    story.axiom_judge = routed_judge


def _proposal_campaign(story: StoryService) -> Callable[[str], str]:
    def campaign_of(proposal_id: str) -> str:
        return story.get_scene(story.get_proposal(proposal_id).scene_id).campaign_id

    return campaign_of


def open_story(
    graph: GraphStore,
    blobs: BlobStore,
    serve: ServeSettings | None,
    stack: ExitStack,
    *,
    recall: RecallIndex | None = None,
    engines: EngineFactory = build_engine,
    checkpoints_kept: int = DEFAULT_KEPT,
) -> StoryService:
    """The story service on these stores, prepared, with its model seats bound (:func:`bind_scene_seats`).

    The one builder of the story service for serving: the direct path and the Gate replica both call it.
    Without serving settings (a gate built with none bound) it has no model seats: extractive memories,
    axioms reported unchecked.
    """
    story = StoryService(graph, blobs, recall=recall, checkpoints_kept=checkpoints_kept)
    story.prepare()
    if serve is not None:
        bind_scene_seats(story, serve, stack, engines)
        story.media.engine = media_engine(serve.media_engine)  # ConfigError naming the setting when unknown
    return story
