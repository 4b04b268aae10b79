"""The LLM former: at a scene's end, a model reads the scene and writes, per character present, what they
remember, were told (claims) and feel (emotions), and an abstractive summary of the scene.

It is a :class:`~story.formation.SceneMemoryFormer`: the story service runs it when a scene ends
(:func:`story.scene_end.form_scene`). The model answers with structured output against
:class:`SceneFormationAnswer` (guided decoding on vLLM, ``response_format`` elsewhere), and the
answer is read like the extractor's (:mod:`narrator.extraction`): a JSON object cut out of
surrounding prose is the only whole-answer repair, then the summary and each memory are validated
on their own, so one bad memory never costs the others. Memories for someone not present, or about
ids the world does not know, are dropped or trimmed, with the reason noted.

Whatever goes wrong (the engine fails or times out, the answer is not JSON, it holds neither a
summary nor a memory) the scene is formed by :class:`~story.formation.ExtractiveFormer` instead,
and the event ``memory_formation_fell_back`` says why: a scene's end never waits on a broken model
for its memories. A character the model left without a memory of the scene gets the extractive
one, so everyone present remembers something.

The story service is blocking and a scene ends in a worker thread, while an engine is a coroutine
API bound to the event loop it first ran on (an HTTP client's connection pool, vLLM's output
loop). So the former runs its engine on an event loop of its own, in a thread of its own, and is
given an engine of its own (:func:`serve.services.open_services` builds one from the extractor's
settings) rather than sharing the turn flow's, which lives on the server's loop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from narrator.engine_loop import EngineLoop
from narrator.engines import Message, NarratorEngine
from narrator.extraction import read_json_answer
from narrator.schema_budget import fit_schema, with_choices
from schemas.story import Memory, Scene, SubjectiveKind, Turn
from story.formation import ExtractiveFormer, FormedScene, NamedEntity, clip
from story.recall import speaker_name

log = structlog.get_logger(__name__)


FORMATION_INSTRUCTIONS = (
    "A scene of a tabletop role-playing game has just ended. Form the memories of the characters present "
    "and summarise the scene.\n"
    "For each character present, write in the third person, naming people by name:\n"
    "- one 'memory': what they witnessed and did in the scene (one to three sentences);\n"
    "- a 'claim' for each thing someone else told them: who told them what (it may be false);\n"
    "- an 'emotion' only where the scene clearly moved them: how they feel, about whom or what, and why.\n"
    "Give each a salience from 0 (trivial) to 1 (unforgettable) for that character, and list in "
    "subject_entity_ids the ids of whom or what it is about. Use only the ids listed below; characters "
    "not present get nothing. The summary tells the scene in two to five sentences, in the past tense, "
    "naming who did what and what came of it. Answer with JSON only."
)


class FormedMemoryDraft(BaseModel):
    """One memory as the model states it."""

    model_config = ConfigDict(extra="ignore")

    observer_entity_id: str = Field(min_length=1, max_length=200, description="Id of the character present.")
    kind: SubjectiveKind = Field(description="memory (witnessed), claim (was told) or emotion (feels).")
    text: str = Field(min_length=1, max_length=1000, description="The memory, in the third person.")
    subject_entity_ids: list[str] = Field(default_factory=list, max_length=12, description="Whom it is about.")
    salience: float = Field(default=0.5, ge=0.0, le=1.0, description="How much it matters to the character.")


class SceneFormationAnswer(BaseModel):
    """What the model writes for one scene: its summary and the memories of those present."""

    summary: str = Field(min_length=1, max_length=3000, description="The scene in two to five sentences.")
    memories: list[FormedMemoryDraft] = Field(default_factory=list, max_length=80)


@functools.cache
def _full_schema() -> dict[str, Any]:
    return SceneFormationAnswer.model_json_schema()


def formation_schema(observers: Sequence[str] = (), max_tokens: int | None = None) -> dict[str, Any]:
    """The JSON schema the model writes against: :class:`SceneFormationAnswer`, its observers held to the
    characters present when given, and narrowed to close within ``max_tokens`` when given
    (:mod:`narrator.schema_budget`)."""
    schema = with_choices(_full_schema(), {"observer_entity_id": list(observers)})
    return schema if max_tokens is None else fit_schema(schema, max_tokens)


def formation_messages(
    scene: Scene,
    turns: Sequence[Turn],
    present: Sequence[NamedEntity],
    entities: Sequence[NamedEntity],
    *,
    max_chars: int = 12_000,
) -> list[Message]:
    """The former's chat: instructions with who was present and who else is known, then the scene.

    A transcript longer than ``max_chars`` keeps its first third and its end (how it ended matters most).
    """
    present_ids = {p.entity_id for p in present}
    here = "\n".join(f"- {p.entity_id}: {p.name}" for p in present) or "(nobody)"
    others = [e for e in entities if e.entity_id not in present_ids][:80]
    known = "\n".join(f"- {e.entity_id}: {e.name} ({e.kind})" for e in others) or "(nobody else)"
    names = {e.entity_id: e.name for e in [*entities, *present]}
    lines: list[str] = []
    for turn in turns:
        who = names.get(turn.speaker.entity_id or "") or speaker_name(turn)
        if turn.text.strip():
            lines.append(f"{who} ({turn.input_mode.value}): {turn.text.strip()}")
        if turn.narration and turn.narration.strip():
            lines.append(f"Narrator: {turn.narration.strip()}")
    transcript = "\n".join(lines)
    if len(transcript) > max_chars:
        head = max_chars // 3
        transcript = transcript[:head] + "\n[…]\n" + transcript[-(max_chars - head) :]
    outcomes = "\n".join(f"- {o}" for o in scene.canonical_outcomes) or "(none)"
    title = scene.title or "(untitled)"
    return [
        {
            "role": "system",
            "content": f"{FORMATION_INSTRUCTIONS}\n\nCharacters present:\n{here}\n\nOthers in the world:\n{known}",
        },
        {
            "role": "user",
            "content": f"Scene: {title}\n\nTranscript:\n{transcript}\n\nWhat became canon at its end:\n{outcomes}",
        },
    ]


def parse_formation(
    raw: str, present: set[str], known: set[str]
) -> tuple[str | None, list[FormedMemoryDraft], list[str]]:
    """The summary and memories in a model's answer, with the reasons for what had to be dropped.

    Args:
        raw: the model's answer.
        present: ids of the characters present (a memory of anyone else is dropped).
        known: ids of every entity of the world (other subject ids are removed from a memory).
    """
    doc, notes = read_json_answer(raw, "the former's")
    if doc is None and notes:
        return None, [], notes
    if not isinstance(doc, dict):
        return None, [], [*notes, "the former's answer is not a JSON object"]
    summary = doc.get("summary")
    if not (isinstance(summary, str) and summary.strip()):
        notes.append("no summary")
        summary = None
    items = doc.get("memories")
    if not isinstance(items, list):
        return summary, [], [*notes, "no 'memories' list"]
    drafts: list[FormedMemoryDraft] = []
    for index, item in enumerate(items[:80]):
        try:
            draft = FormedMemoryDraft.model_validate(item)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "memory"
            notes.append(f"memory {index}: {where}: {first['msg']}")
            continue
        if draft.observer_entity_id not in present:
            notes.append(f"memory {index}: {draft.observer_entity_id!r} was not present")
            continue
        unknown = [i for i in draft.subject_entity_ids if i not in known]
        if unknown:
            notes.append(f"memory {index}: unknown subjects {', '.join(unknown)} removed")
        subjects = [i for i in dict.fromkeys(draft.subject_entity_ids) if i in known and i != draft.observer_entity_id]
        drafts.append(draft.model_copy(update={"text": draft.text.strip(), "subject_entity_ids": subjects}))
    return (summary.strip() if summary else None), drafts, notes


class LLMFormer:
    """Forms a scene's memories and summary with a model; the extractive former when the model fails.

    Args:
        engine: the engine to ask (the former's own: it runs on the former's event loop).
        max_tokens: the longest answer.
        timeout_s: how long a scene's end waits for the model before forming it extractively.
        max_chars: the longest transcript sent (see :func:`formation_messages`).
        fallback: the former used when the model fails, and for those it left without a memory.
        owns_engine: whether :meth:`close` closes the engine too.
    """

    name = "llm"

    def __init__(
        self,
        engine: NarratorEngine,
        *,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
        max_chars: int = 12_000,
        fallback: ExtractiveFormer | None = None,
        owns_engine: bool = True,
    ) -> None:
        self.engine = engine
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.fallback = fallback or ExtractiveFormer()
        self.owns_engine = owns_engine
        self._loop = EngineLoop(engine, name="memory-formation", owns_engine=owns_engine)

    def close(self) -> None:
        """Close the engine (when the former owns it) and stop the former's loop."""
        self._loop.close()

    # -- forming -------------------------------------------------------------------------------------

    def form(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        present: Sequence[NamedEntity],
        *,
        entities: Sequence[NamedEntity] = (),
    ) -> FormedScene:
        if scene.end_turn_id is None or not turns:
            return self.fallback.form(scene, turns, present, entities=entities)
        messages = formation_messages(scene, turns, present, entities, max_chars=self.max_chars)
        try:
            raw = self._loop.run(
                self.engine.structured(
                    messages,
                    schema=formation_schema([p.entity_id for p in present], self.max_tokens),
                    max_tokens=self.max_tokens,
                ),
                self.timeout_s,
            )
        except Exception as exc:  # any engine failure (down, refused, timed out): form the scene without it
            return self._fell_back(scene, turns, present, entities, f"{type(exc).__name__}: {exc}")
        present_ids = {p.entity_id for p in present}
        known = present_ids | {e.entity_id for e in entities}
        summary, drafts, notes = parse_formation(raw, present_ids, known)
        if summary is None and not drafts:
            return self._fell_back(scene, turns, present, entities, "; ".join(notes) or "an empty answer")
        memories = [
            Memory(
                campaign_id=scene.campaign_id,
                observer_entity_id=d.observer_entity_id,
                kind=d.kind,
                text=clip(d.text, 1000),
                subject_entity_ids=d.subject_entity_ids,
                anchor_turn_id=scene.end_turn_id,
                salience=d.salience,
            )
            for d in drafts
        ]
        remembering = {m.observer_entity_id for m in memories if m.kind is SubjectiveKind.MEMORY}
        missing = [p for p in present if p.entity_id not in remembering]
        extractive: FormedScene | None = None
        if missing or summary is None:
            extractive = self.fallback.form(scene, turns, present, entities=entities)
            wanted = {p.entity_id for p in missing}
            memories += [
                m for m in extractive.memories if m.kind is SubjectiveKind.MEMORY and m.observer_entity_id in wanted
            ]
            if missing:
                notes.append(f"extractive scene memories for {', '.join(sorted(wanted))}")
        if summary is None and extractive is not None:
            summary = extractive.summary
            notes.append("extractive summary")
        return FormedScene(summary=summary, memories=memories, former=self.name, notes=notes)

    def _fell_back(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        present: Sequence[NamedEntity],
        entities: Sequence[NamedEntity],
        reason: str,
    ) -> FormedScene:
        log.warning("memory_formation_fell_back", scene_id=scene.id, model=self.engine.model, reason=reason[:500])
        formed = self.fallback.form(scene, turns, present, entities=entities)
        return FormedScene(
            summary=formed.summary,
            memories=formed.memories,
            former=f"{self.fallback.name} (fallback)",
            notes=[*formed.notes, f"the model failed: {reason[:200]}"],
        )
