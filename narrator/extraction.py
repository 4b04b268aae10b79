"""What a narration makes true, as typed proposals: the extractor's request and the parse of its answer.

The extractor (the narrator's engine, or one of its own) answers with structured output against
:class:`~schemas.serving.ExtractionBatch`. Whole-answer repair is limited to cutting a JSON object
out of surrounding prose; each proposal is then validated on its own, so one bad proposal never
costs the others, and every drop is reported with its reason.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from narrator.engines import STRUCTURED_MAX_TOKENS
from narrator.schema_budget import fit_schema, with_choices
from schemas.serving import ExtractionBatch, ServeSettings
from schemas.story import WorldStateView

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)

EXTRACTION_INSTRUCTIONS = (
    "You extract what a narration makes true in the game world, as typed proposals. Use only entity ids "
    "from the list below; to introduce a new entity, propose it with type 'entity'. Write absolute values, "
    "never increments. Propose nothing the narration does not state. Answer with JSON only."
)


def extraction_messages(state: WorldStateView, text: str, narration: str) -> list[dict[str, str]]:
    """The extractor's chat: the instructions with the scene's entities, then the turn."""
    cast = "\n".join(f"- {e.id}: {e.name} ({e.kind.value})" for e in state.entities) or "(no entities yet)"
    return [
        {"role": "system", "content": f"{EXTRACTION_INSTRUCTIONS}\n\nEntities:\n{cast}"},
        {"role": "user", "content": f"Player: {text}\nNarration: {narration}"},
    ]


def extractor_budget(settings: ServeSettings, engine: object) -> int:
    """The longest structured answer to ask ``engine`` for: ``LOREKEEPER_EXTRACTOR_MAX_TOKENS`` when set, else
    the engine's own budget (``structured_max_tokens``: the local model's is small), else 1024."""
    if settings.extractor_max_tokens is not None:
        return settings.extractor_max_tokens
    return int(getattr(engine, "structured_max_tokens", STRUCTURED_MAX_TOKENS))


EXTRACTOR_OMITS = frozenset(
    {
        # what the story fills in itself when it stages a proposal: ids of the event, turn, scene and record
        "event_id", "turn_id", "scene_id", "fact_id", "happening_id", "relationship_id",
        # what is the gate's or the GM's to decide, not the extractor's
        "canon_level", "depends_on", "replaces", "visibility", "invalidation", "superseded_by",
        # free-form extras a small model fills at length; the GM adds them in review
        "aliases", "attributes",
        # a new entity's id: the story makes one (a model invents ids such as "123456789012345678901234")
        "entity_id",
    }
)  # fmt: skip
"""Optional fields of :class:`~schemas.serving.ExtractionBatch` the extractor's schema leaves out (see
:func:`extraction_schema`); an answer without them is still an answer of the full model."""


@functools.cache
def _full_schema() -> dict[str, Any]:
    return ExtractionBatch.model_json_schema()  # built once: building it costs ~50 ms


REFERENCES = (
    "subject_entity_id", "object_entity_id", "source_entity_id", "target_entity_id", "location_entity_id",
    "holder_entity_id", "item_entity_id", "participant_entity_ids", "involved_entity_ids", "present_entity_ids",
)  # fmt: skip
"""The fields that name an entity already in the story: held to the state's ids when the extractor is
given them (an id the model makes up is an ``unknown_entity`` rejection at the gate)."""


def extraction_schema(max_tokens: int | None = None, entity_ids: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON schema the extractor writes against: the whole :class:`~schemas.serving.ExtractionBatch`,
    or, given the answer's budget, one narrowed so its documents close within it
    (:func:`narrator.schema_budget.fit_schema`, without :data:`EXTRACTOR_OMITS`), its :data:`REFERENCES`
    held to ``entity_ids`` when given.

    Built once per budget and cast, and shared: read it, never change it. Narrowing costs tens of ms of
    CPU (~60 ms at load), and every turn asks for it; a campaign's cast changes only with its canon."""
    if max_tokens is None:
        return _full_schema()
    return _narrowed(max_tokens, tuple(entity_ids))


@functools.lru_cache(maxsize=256)
def _narrowed(max_tokens: int, entity_ids: tuple[str, ...]) -> dict[str, Any]:
    schema = with_choices(_full_schema(), dict.fromkeys(REFERENCES, list(entity_ids)))
    return fit_schema(schema, max_tokens, omit=EXTRACTOR_OMITS)


def read_json_answer(raw: str, whose: str) -> tuple[Any, list[str]]:
    """A model's JSON answer, cut out of surrounding prose or a code fence when it is wrapped in one.

    Returns:
        The decoded document and notes: the repair made, or why nothing could be read (then the
        document is None and the one note says "<whose> answer is not JSON: …").
    """
    try:
        return json.loads(raw), []
    except ValueError:
        match = _JSON_OBJECT.search(raw or "")
        try:
            doc = json.loads(match.group(0)) if match else None
        except ValueError:
            doc = None
        if doc is None:
            return None, [f"{whose} answer is not JSON: {(raw or '')[:120]!r}"]
        return doc, ["repaired: the JSON object was cut out of surrounding text"]


def parse_extraction(raw: str) -> tuple[list[Any], list[str]]:
    """The proposals in an extractor answer, with the reasons for what had to be dropped.

    Whole-answer repair is limited to cutting a JSON object out of surrounding text (a model that
    wrapped its JSON in prose or a code fence); each proposal is then validated on its own, so one
    bad proposal never costs the others.
    """
    doc, dropped = read_json_answer(raw, "the extractor's")
    if doc is None and dropped:
        return [], dropped
    items = doc.get("proposals") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return [], [*dropped, "the extractor's answer has no 'proposals' list"]
    good, seen = [], set[str]()
    for index, item in enumerate(items[:50]):
        try:
            proposal = ExtractionBatch.model_validate({"proposals": [item]}).proposals[0]
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"][2:]) or "proposal"
            dropped.append(f"proposal {index}: {where}: {first['msg']}")
            continue
        # a small model repeats itself: the same change twice in one answer would be canon twice
        key = proposal.content.model_dump_json()
        if key in seen:
            dropped.append(f"proposal {index}: the same change as an earlier one in this answer")
            continue
        seen.add(key)
        good.append(proposal)
    return good, dropped
