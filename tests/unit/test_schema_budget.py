"""Structured answers fit their budget: the narrowed schemas of the extractor, the former and the judge."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import llguidance
import pytest

from narrator.axioms import AxiomAnswer, axiom_schema
from narrator.engines import VLLMEngine
from narrator.extraction import EXTRACTOR_OMITS, extraction_schema, parse_extraction
from narrator.formation import SceneFormationAnswer, formation_schema
from narrator.schema_budget import MARGIN, PLAIN_TEXT, _cost, fit_schema, with_choices
from schemas.serving import ExtractionBatch

pytestmark = pytest.mark.unit

WORDS = ["the", "old", "mill", "stands", "by", "the", "river", "and", "the", "bell", "rings", "at", "noon"]


def longest(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """A document of ``node`` as long as its bounds allow (the costliest branch, full lists, full strings)."""
    if "$ref" in node:
        return longest(defs[node["$ref"].rsplit("/", 1)[-1]], defs, depth + 1)
    for union in ("anyOf", "oneOf"):
        if union in node:
            branch = max(node[union], key=lambda b: _cost(b, defs, ()))
            return longest(branch, defs, depth + 1)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    kind = node.get("type")
    if kind == "string":
        if node.get("pattern", PLAIN_TEXT) != PLAIN_TEXT:  # an identifier
            return ("ent_" + "a1b2c3d4" * 40)[: node["maxLength"]]
        text = " ".join(WORDS * 40)
        return text[: node["maxLength"]]
    if kind in ("number", "integer"):
        return 0.875 if kind == "number" else 12345
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "array":
        return [longest(node.get("items", {}), defs, depth + 1) for _ in range(node["maxItems"])]
    props = node.get("properties") or {}
    doc = {name: longest(value, defs, depth + 1) for name, value in props.items()}
    if not props and "maxProperties" in node:
        doc = {f"key{i}": "value" for i in range(node["maxProperties"])}
    return doc


def compiles(schema: dict[str, Any]) -> None:
    llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(VLLMEngine._guidable(schema)), defaults={"whitespace_flexible": False, "lenient": False}
    )


@pytest.mark.parametrize("budget", [240, 320, 480, 1024])
def test_the_extractors_longest_document_is_estimated_inside_the_budget(budget: int) -> None:
    schema = extraction_schema(budget)
    compiles(schema)  # every bound is one the guidance backend takes, strictly
    assert _cost(schema, schema["$defs"], ()) <= budget * MARGIN
    doc = longest(schema, schema["$defs"])
    assert 1 <= len(doc["proposals"]) == schema["properties"]["proposals"]["maxItems"]
    # every document of the narrowed schema is one of the whole schema; what no JSON schema can say (a
    # fact has an object or a value, not both) still drops that one proposal, as it does unnarrowed
    jsonschema.validate(doc, ExtractionBatch.model_json_schema())
    good, dropped = parse_extraction(json.dumps(doc, separators=(",", ":")))
    assert len(good) + len(dropped) == len(doc["proposals"])
    assert all("Value error" in note for note in dropped), dropped


def test_a_larger_budget_buys_more_items_and_longer_text() -> None:
    small, large = extraction_schema(480), extraction_schema(4096)
    assert small["properties"]["proposals"]["maxItems"] < large["properties"]["proposals"]["maxItems"]
    name = lambda s: s["$defs"]["ProposedEntity"]["properties"]["name"]["maxLength"]  # noqa: E731
    assert name(small) < name(large)
    assert extraction_schema() == ExtractionBatch.model_json_schema()  # no budget: the whole model


def test_an_object_takes_no_key_its_schema_does_not_name() -> None:
    """Unsaid, JSON schema admits any other key: SmolLM2 wrote '"":","' pairs in a memory until cut at 480."""
    schema = formation_schema(["ent_a"], 480)
    memory = {"observer_entity_id": "ent_a", "kind": "memory", "text": "Aria met Bram."}
    jsonschema.validate({"summary": "They met.", "memories": [memory]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"summary": "They met.", "memories": [{**memory, "": ","}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"summary": "They met.", "": ","}, schema)
    for name, node in [("root", schema), *schema["$defs"].items()]:
        if node.get("properties"):
            assert node.get("additionalProperties") is False or "maxProperties" in node, name


def test_every_number_is_a_few_tokens() -> None:
    """Unbounded, a JSON number has no digit limit: a small model wrote "0.5555…" until its budget ran out."""
    schema = formation_schema(["ent_a"], 480)
    salience = schema["$defs"]["FormedMemoryDraft"]["properties"]["salience"]
    assert salience["multipleOf"] == 0.01 and salience["minimum"] == 0 and salience["maximum"] == 1
    amount = extraction_schema(480)["$defs"]["EntityAttributeSet"]["properties"]["amount"]
    numbers = [b for b in amount.get("anyOf", [amount]) if b.get("type") in ("number", "integer")]
    assert numbers and all("minimum" in b and "maximum" in b for b in numbers)


def test_free_text_holds_no_newline_a_small_model_could_loop_on() -> None:
    """``maxLength`` counts characters, but a newline is written as two; SmolLM2 was cut at 480 tokens."""
    schema = formation_schema(["ent_a"], 480)
    jsonschema.validate({"summary": "Aria met Bram at the forge."}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"summary": "Aria met Bram.\n\n\n"}, schema)
    entity_id = extraction_schema(480)["$defs"]["ProposedFact"]["properties"]["subject_entity_id"]
    assert entity_id["pattern"].startswith("^[A-Za-z0-9]")  # an identifier keeps its own pattern


def test_what_the_system_fills_in_is_left_out_and_each_branch_names_itself() -> None:
    schema = extraction_schema(480)
    for name, node in schema["$defs"].items():
        props = node.get("properties") or {}
        assert not (set(props) & EXTRACTOR_OMITS - set(node.get("required", []))), name
        for prop, value in props.items():
            if "const" in value:
                assert prop in node["required"], (name, prop)  # the discriminator is always written
    full = ExtractionBatch.model_json_schema()
    assert "event_id" in full["$defs"]["EntityCreated"]["properties"]  # the original is untouched
    assert fit_schema(full, 480, omit=EXTRACTOR_OMITS) == schema


def test_the_judge_names_only_what_it_was_shown_and_the_former_only_who_was_there() -> None:
    from schemas.story import Axiom
    from story.axioms import ProposalText

    axioms = [
        Axiom(id="ax_1", world_id="w", text="The dead stay dead."),
        Axiom(id="ax_2", world_id="w", text="No guns."),
    ]
    asked = [ProposalText(proposal_id="prop_9", authority="player", text="Mira rises from the grave")]
    schema = axiom_schema(axioms, asked, 480)
    verdict = schema["$defs"]["AxiomVerdict"]["properties"]
    assert verdict["axiom_id"]["enum"] == ["ax_1", "ax_2"] and verdict["proposal_id"]["enum"] == ["prop_9"]
    compiles(schema)
    doc = longest(schema, schema["$defs"])
    jsonschema.validate(doc, AxiomAnswer.model_json_schema())
    assert AxiomAnswer.model_validate(doc).verdicts and _cost(schema, schema["$defs"], ()) <= 480 * MARGIN

    schema = formation_schema(["ent_b", "ent_a"], 480)
    assert schema["$defs"]["FormedMemoryDraft"]["properties"]["observer_entity_id"]["enum"] == ["ent_a", "ent_b"]
    compiles(schema)
    SceneFormationAnswer.model_validate(longest(schema, schema["$defs"]))
    plain = {"properties": {"x": {"type": "string"}}}
    assert with_choices(plain, {"x": []}) == plain  # no values given: left as it was


@pytest.mark.local_model
@pytest.mark.timeout(900)  # loading and ~200 tokens: under a minute on a quiet laptop, minutes on a loaded one
def test_the_real_models_extraction_closes_within_a_small_budget() -> None:
    """With the whole schema SmolLM2 was cut off on 5 of 6 scenes at 192 tokens; narrowed, it closes."""
    import asyncio

    from narrator.extraction import extraction_messages
    from narrator.local_engine import LocalEngine
    from schemas.story import Entity, EntityKind, WorldStateView

    engine = LocalEngine()
    budget = 240
    schema = extraction_schema(budget)
    state = WorldStateView(
        campaign_id="camp_t", branch_id="branch_t", turn_id=None, state_hash="0" * 64,
        entities=[Entity(id="ent_mira", world_id="w", kind=EntityKind.CHARACTER, name="Mira")],
    )  # fmt: skip
    messages = extraction_messages(
        state, "I search the cellar.", "Mira finds a rusted iron key behind the barrels and pockets it."
    )
    try:
        raw = asyncio.run(engine.structured(messages, schema=schema, max_tokens=budget))
        # the estimate holds for the real tokenizer on the longest document this schema admits
        loaded = asyncio.run(engine.ready())
        text = json.dumps(longest(schema, schema["$defs"]), separators=(",", ":"))
        assert len(loaded.tokenizer.encode(text, add_special_tokens=False)) <= budget
    finally:
        asyncio.run(engine.close())
    good, dropped = parse_extraction(raw)
    assert not dropped, dropped  # a whole document, every proposal in it valid
    assert len(good) <= schema["properties"]["proposals"]["maxItems"]


def test_references_name_only_entities_of_the_story_and_a_new_entity_gets_its_id_from_the_story() -> None:
    """SmolLM2 gave a new entity the id "123456789012345678901234" and the gate rejected it (unknown_entity)."""
    schema = extraction_schema(480, ["ent_mira", "ent_bram"])
    defs = schema["$defs"]
    assert defs["ProposedFact"]["properties"]["subject_entity_id"]["enum"] == ["ent_bram", "ent_mira"]
    assert defs["ProposedEvent"]["properties"]["participant_entity_ids"]["items"] == {"enum": ["ent_bram", "ent_mira"]}
    assert "entity_id" not in defs["ProposedEntity"]["properties"]  # the story makes the id
    assert "entity_id" in defs["EntityAttributeSet"]["properties"]  # required where it names an existing one
    compiles(schema)
    jsonschema.validate(longest(schema, defs), ExtractionBatch.model_json_schema())
    # no entities yet: references stay free (a first scene introduces its cast)
    assert "enum" not in extraction_schema(480)["$defs"]["ProposedFact"]["properties"]["subject_entity_id"]


def test_the_same_change_twice_in_one_answer_is_proposed_once() -> None:
    """The model often repeats a proposal; staged twice, the gate made it canon twice."""
    key = {"type": "event", "title": "Mira finds a rusty iron key"}
    raw = json.dumps({"proposals": [{"content": key, "confidence": 0.9}, {"content": key, "confidence": 0.8}]})
    good, dropped = parse_extraction(raw)
    assert len(good) == 1 and good[0].confidence == 0.9
    assert dropped == ["proposal 1: the same change as an earlier one in this answer"]


def test_a_property_named_like_a_keyword_is_kept_and_bounded() -> None:
    """A ``properties`` map's keys are names: one called "default" was dropped as if it were the keyword."""
    schema = {"type": "object", "properties": {"default": {"type": "string"}, "type": {"type": "string"}}}
    fitted = fit_schema(schema, 200)
    assert set(fitted["properties"]) == {"default", "type"}
    assert fitted["properties"]["default"]["maxLength"] <= 240
