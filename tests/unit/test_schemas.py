"""The data model's rules: what a malformed record looks like, and that good ones round-trip."""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.common import content_id, find_hidden_increment, new_id
from schemas.events import (
    STATE_EVENT_KINDS,
    CurrentLocationSet,
    EntityAttributeSet,
    FactAdded,
    StateEvent,
    parse_state_event,
    parse_state_events,
)
from schemas.export import SCHEMA_MODELS, export_json_schemas, schema_filename
from schemas.knowledge import (
    CHUNKING_DEFAULTS,
    Chunk,
    Concept,
    IngestJob,
    Item,
    Library,
    LibraryType,
    chunking_defaults,
)
from schemas.media import MediaAsset
from schemas.story import (
    Axiom,
    Branch,
    DiceRoll,
    Fact,
    Memory,
    PromptSnapshot,
    ProposedChange,
    Speaker,
    Turn,
    TurnPresentation,
)

pytestmark = pytest.mark.unit

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
HASH = "a" * 64


def _messages(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    return " | ".join(e["msg"] for e in exc.value.errors())


# -------------------------------------------------------------------------------------------
# ids and timestamps


def test_new_id_has_prefix_and_is_unique() -> None:
    a, b = new_id("turn"), new_id("turn")
    assert a.startswith("turn_") and len(a) == len("turn_") + 32
    assert a != b


def test_new_id_rejects_bad_prefix() -> None:
    with pytest.raises(ValueError, match="lowercase"):
        new_id("Turn!")


def test_content_id_is_deterministic() -> None:
    assert content_id("item", b"same bytes") == content_id("item", b"same bytes")
    assert content_id("item", b"same bytes") != content_id("item", b"other bytes")


def test_bad_id_is_rejected_with_guidance() -> None:
    with pytest.raises(ValidationError) as exc:
        Memory(campaign_id="c 1", observer_entity_id="e1", text="x", anchor_turn_id="t1")
    assert "not a valid id" in _messages(exc)


def test_naive_timestamp_is_rejected() -> None:
    with pytest.raises(ValidationError) as exc:
        Turn(campaign_id="c1", branch_id="b1", text="look", created_at=datetime(2024, 5, 1, 12))
    assert "no timezone" in _messages(exc)


def test_aware_timestamp_is_converted_to_utc() -> None:
    paris = timezone(timedelta(hours=2))
    turn = Turn(campaign_id="c1", branch_id="b1", text="look", created_at=datetime(2024, 5, 1, 14, tzinfo=paris))
    assert turn.created_at == T0
    assert turn.created_at.tzinfo is UTC


def test_extra_fields_are_forbidden() -> None:
    with pytest.raises(ValidationError) as exc:
        Speaker(kind="player", mood="happy")
    assert exc.value.errors()[0]["type"] == "extra_forbidden"


# -------------------------------------------------------------------------------------------
# canon rules


def test_axiom_rejects_player_authority() -> None:
    with pytest.raises(ValidationError) as exc:
        Axiom(world_id="w1", text="Magic needs a spoken word.", authority="player")
    message = _messages(exc)
    assert "cannot have player authority" in message
    assert "fact" in message  # tells the user what to do instead


@pytest.mark.parametrize("authority", ["source", "gm", "system"])
def test_axiom_accepts_non_player_authority(authority: str) -> None:
    assert Axiom(world_id="w1", text="Iron burns fey.", authority=authority).authority == authority


@pytest.mark.parametrize("confidence", [-0.01, 1.01, 2, float("nan")])
def test_confidence_outside_unit_interval_is_rejected(confidence: float) -> None:
    with pytest.raises(ValidationError):
        Fact(subject_entity_id="e1", predicate="age", value=30, authority="gm", confidence=confidence)
    with pytest.raises(ValidationError):
        ProposedChange(
            scene_id="s1",
            type="fact",
            content={"subject_entity_id": "e1", "predicate": "age", "value": 30},
            authority="gm",
            confidence=confidence,
        )


@pytest.mark.parametrize("confidence", [0, 0.5, 1])
def test_confidence_bounds_are_inclusive(confidence: float) -> None:
    fact = Fact(subject_entity_id="e1", predicate="age", value=30, authority="gm", confidence=confidence)
    assert fact.confidence == confidence


def test_fact_needs_exactly_one_of_object_or_value() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        Fact(subject_entity_id="e1", predicate="ally_of", authority="gm")
    with pytest.raises(ValidationError, match="exactly one"):
        Fact(subject_entity_id="e1", predicate="ally_of", object_entity_id="e2", value="x", authority="gm")


def test_retconned_fact_cannot_stay_active() -> None:
    with pytest.raises(ValidationError, match="retconned"):
        Fact(subject_entity_id="e1", predicate="age", value=3, authority="gm", canon_level="retconned")


def test_entity_speaker_needs_entity_id() -> None:
    with pytest.raises(ValidationError) as exc:
        Speaker(kind="entity")
    assert "needs entity_id" in _messages(exc)
    assert Speaker(kind="entity", entity_id="ent_1").entity_id == "ent_1"
    with pytest.raises(ValidationError, match="has no entity_id"):
        Speaker(kind="narrator", entity_id="ent_1")


def test_turn_rules() -> None:
    with pytest.raises(ValidationError, match="needs text"):
        Turn(campaign_id="c1", branch_id="b1", input_mode="action", text="  ")
    assert Turn(campaign_id="c1", branch_id="b1", input_mode="continue").text == ""
    with pytest.raises(ValidationError, match="narration"):
        Turn(campaign_id="c1", branch_id="b1", text="look", status="accepted")
    with pytest.raises(ValidationError, match="depth"):
        Turn(campaign_id="c1", branch_id="b1", text="look", parent_turn_id="t0", depth=0)


def test_branch_fork_needs_parent_and_turn_together() -> None:
    with pytest.raises(ValidationError, match="both parent_branch_id and fork_turn_id"):
        Branch(campaign_id="c1", parent_branch_id="b0")


def test_memory_is_observer_scoped() -> None:
    with pytest.raises(ValidationError) as exc:
        Memory(campaign_id="c1", text="The inn burned.", anchor_turn_id="t1")
    assert any(e["loc"] == ("observer_entity_id",) for e in exc.value.errors())


def test_simple_dice_roll_is_checked() -> None:
    assert DiceRoll(expression="1d20+3", rolls=[17], total=20).total == 20
    with pytest.raises(ValidationError, match="expected 20"):
        DiceRoll(expression="1d20+3", rolls=[17], total=21)
    with pytest.raises(ValidationError, match="between 1 and 20"):
        DiceRoll(expression="d20", rolls=[21], total=21)
    # complex expressions are the engine's word
    assert DiceRoll(expression="4d6kh3", rolls=[6, 5, 1, 3], total=14).total == 14


def test_prompt_sections_must_keep_the_stable_order() -> None:
    sections = [
        {"kind": "narrator_rules", "token_count": 100, "content_hash": HASH},
        {"kind": "player_input", "token_count": 10, "content_hash": HASH},
    ]
    snap = PromptSnapshot(turn_id="t1", model="m", sections=sections, content_hash=HASH)
    assert snap.total_tokens == 110
    with pytest.raises(ValidationError, match="must follow the order"):
        PromptSnapshot(turn_id="t1", model="m", sections=sections[::-1], content_hash=HASH)


# -------------------------------------------------------------------------------------------
# state events


def test_unknown_event_kind_lists_the_known_kinds() -> None:
    with pytest.raises(ValidationError) as exc:
        parse_state_event({"kind": "teleport", "entity_id": "e1"})
    error = exc.value.errors()[0]
    assert error["type"] == "unknown_event_kind"
    assert "teleport" in error["msg"]
    for kind in STATE_EVENT_KINDS:
        assert kind in error["msg"]


def test_missing_event_kind_lists_the_known_kinds() -> None:
    with pytest.raises(ValidationError) as exc:
        parse_state_event({"entity_id": "e1"})
    assert exc.value.errors()[0]["type"] == "missing_event_kind"
    assert "set_entity_attribute" in exc.value.errors()[0]["msg"]


@pytest.mark.parametrize("value", ["+2", "-1", "hp+3", "+= 2", "hp -= 4", "gold - 5", "hp++"])
def test_hidden_increment_in_absolute_assignment_is_rejected(value: str) -> None:
    with pytest.raises(ValidationError) as exc:
        parse_state_event({"kind": "set_entity_attribute", "entity_id": "e1", "attribute": "hp", "value": value})
    assert 'op="increment"' in _messages(exc)


def test_hidden_increment_message_suggests_the_amount() -> None:
    with pytest.raises(ValidationError) as exc:
        parse_state_event({"kind": "set_entity_attribute", "entity_id": "e1", "attribute": "hp", "value": "hp+3"})
    assert "amount=3" in _messages(exc)


def test_hidden_increment_is_rejected_everywhere_values_are_absolute() -> None:
    with pytest.raises(ValidationError, match="relative change"):
        parse_state_event(
            {
                "kind": "entity_created",
                "entity_id": "e1",
                "entity_kind": "character",
                "name": "Aria",
                "attributes": {"gold": "+10"},
            }
        )
    with pytest.raises(ValidationError, match="relative change"):
        parse_state_event(
            {
                "kind": "fact_added",
                "subject_entity_id": "e1",
                "predicate": "gold",
                "value": "-5",
                "authority": "gm",
            }
        )


@pytest.mark.parametrize("value", ["+2 longsword", "2-3", "well-known", "Route 66-2", "a+b", -1, 2.5, True])
def test_absolute_values_that_only_look_signed_pass(value: object) -> None:
    event = parse_state_event({"kind": "set_entity_attribute", "entity_id": "e1", "attribute": "x", "value": value})
    assert isinstance(event, EntityAttributeSet)
    assert event.value == value


def test_find_hidden_increment() -> None:
    assert find_hidden_increment("+2") == "+2"
    assert find_hidden_increment("hp -= 4") == "-4"
    assert find_hidden_increment("x++") == "?"
    assert find_hidden_increment("a dagger") is None


def test_explicit_increment_is_allowed() -> None:
    event = parse_state_event(
        {
            "kind": "set_entity_attribute",
            "entity_id": "e1",
            "attribute": "hp",
            "op": "increment",
            "amount": -3,
        }
    )
    assert isinstance(event, EntityAttributeSet)
    assert event.amount == -3 and event.value is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"op": "increment"}, "needs a numeric `amount`"),
        ({"op": "increment", "amount": 2, "value": 5}, "not a `value`"),
        ({"op": "increment", "amount": 0}, "changes nothing"),
        ({"op": "set", "amount": 2}, "only for op='increment'"),
        ({"op": "set"}, "needs a `value`"),
    ],
)
def test_attribute_op_rules(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_state_event({"kind": "set_entity_attribute", "entity_id": "e1", "attribute": "hp", **fields})


def test_event_touches_its_ids() -> None:
    event = parse_state_event(
        {
            "kind": "fact_added",
            "fact_id": "f2",
            "subject_entity_id": "e1",
            "predicate": "ally_of",
            "object_entity_id": "e2",
            "authority": "gm",
            "replaces": "f1",
            "turn_id": "t9",
        }
    )
    assert isinstance(event, FactAdded)
    assert event.entity_ids == ("e1", "e2")
    assert event.fact_ids == ("f2", "f1")
    assert event.event_id.startswith("evt_")


def test_location_cannot_contain_itself() -> None:
    with pytest.raises(ValidationError, match="inside itself"):
        CurrentLocationSet(entity_id="e1", location_entity_id="e1")


def test_state_event_round_trips_through_json() -> None:
    events = parse_state_events(
        [
            {"kind": "entity_created", "entity_id": "e1", "entity_kind": "vehicle", "name": "The Rocinante"},
            {
                "kind": "possession_set",
                "item_entity_id": "e3",
                "holder_entity_id": None,
                "location_entity_id": "e4",
            },
            {"kind": "scene_set", "active_scene_id": "s2", "present_entity_ids": ["e1"]},
        ]
    )
    adapter = TypeAdapter(list[StateEvent])
    again = parse_state_events(adapter.dump_json(events))
    assert again == events


# -------------------------------------------------------------------------------------------
# proposals


def _state_change(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "scene_id": "s1",
        "turn_id": "t1",
        "type": "state_change",
        "content": {"events": [{"kind": "set_entity_status", "entity_id": "e1", "status": "dead"}]},
        "evidence": {"turn_ids": ["t1"]},
        "authority": "system",
        "confidence": 0.8,
    }
    data.update(overrides)
    return data


def test_proposed_change_content_is_keyed_by_type() -> None:
    change = ProposedChange.model_validate(_state_change())
    assert change.content.type == "state_change"
    with pytest.raises(ValidationError, match="content is of type"):
        ProposedChange.model_validate(
            _state_change(type="fact", content={"type": "state_change", "events": change.content.events})
        )


def test_proposed_change_rejects_unknown_event_inside() -> None:
    with pytest.raises(ValidationError, match="unknown state event kind"):
        ProposedChange.model_validate(_state_change(content={"events": [{"kind": "explode"}]}))


def test_player_proposal_needs_a_resolution_to_be_accepted() -> None:
    with pytest.raises(ValidationError, match="needs its resolution"):
        ProposedChange.model_validate(_state_change(authority="player", status="accepted"))
    accepted = ProposedChange.model_validate(
        _state_change(
            authority="player",
            status="accepted",
            resolution={
                "method": "dice",
                "outcome": "success",
                "roll": {"expression": "1d20+2", "rolls": [15], "total": 17, "target": 15},
            },
        )
    )
    assert accepted.resolution is not None


def test_rejected_proposal_needs_rationale_and_validated_copy_checks_it() -> None:
    change = ProposedChange.model_validate(_state_change())
    with pytest.raises(ValidationError, match="rationale"):
        change.validated_copy(status="rejected")
    rejected = change.validated_copy(status="rejected", rationale="contradicts canon")
    assert rejected.status == "rejected"


def test_source_proposal_needs_chunk_evidence() -> None:
    with pytest.raises(ValidationError, match="chunk_ids"):
        ProposedChange.model_validate(_state_change(authority="source"))


# -------------------------------------------------------------------------------------------
# knowledge


def test_page_range_order() -> None:
    base = {"uid": "c1", "item_uid": "i1", "sequence": 0, "text_key": "chunks/c1.txt", "token_count": 12}
    assert Chunk(**base, page_start=3, page_end=3).page_end == 3
    with pytest.raises(ValidationError, match="after page_end"):
        Chunk(**base, page_start=5, page_end=4)
    with pytest.raises(ValidationError):
        Chunk(**base, page_start=0, page_end=1)
    with pytest.raises(ValidationError, match="both page_start and page_end"):
        Chunk(**base, page_start=2)


def test_blob_key_cannot_escape() -> None:
    with pytest.raises(ValidationError, match="object-store key"):
        Chunk(uid="c1", item_uid="i1", sequence=0, text_key="../etc/passwd", token_count=1)


def _job(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {"source": "path", "source_ref": "/books/core.pdf", "created_at": T0}
    data.update(overrides)
    return data


def test_ingest_job_timestamps_in_order() -> None:
    with pytest.raises(ValidationError, match="before started_at"):
        IngestJob.model_validate(
            _job(
                status="failed",
                error="boom",
                started_at=T0 + timedelta(minutes=5),
                completed_at=T0 + timedelta(minutes=1),
            )
        )
    with pytest.raises(ValidationError, match="before created_at"):
        IngestJob.model_validate(_job(status="processing", started_at=T0 - timedelta(seconds=1)))


def test_completed_ingest_job_needs_completed_at() -> None:
    with pytest.raises(ValidationError, match="needs completed_at"):
        IngestJob.model_validate(_job(status="completed", item_uid="item_1", started_at=T0, progress={"fraction": 1.0}))
    done = IngestJob.model_validate(
        _job(
            status="completed",
            item_uid="item_1",
            started_at=T0,
            completed_at=T0 + timedelta(minutes=2),
            progress={"fraction": 1.0, "stage": "writing"},
            chunks_created=120,
        )
    )
    assert IngestJob.model_validate_json(done.model_dump_json()) == done


def test_uploaded_ingest_job_needs_s3_key() -> None:
    with pytest.raises(ValidationError, match="s3_key"):
        IngestJob.model_validate(_job(source="upload", source_ref="core.pdf"))


def test_every_library_type_has_chunking_defaults() -> None:
    assert set(CHUNKING_DEFAULTS) == set(LibraryType)
    assert chunking_defaults("rulebook").keep_stat_blocks_whole
    with pytest.raises(ValueError, match="known types"):
        chunking_defaults("cookbook")


def test_library_override_applies_and_is_validated() -> None:
    library = Library(name="Monsters", type="bestiary", chunking_override={"target_tokens": 600})
    effective = library.effective_chunking()
    assert effective.target_tokens == 600
    assert effective.max_tokens == CHUNKING_DEFAULTS[LibraryType.BESTIARY].max_tokens
    with pytest.raises(ValidationError, match="chunking_override does not fit"):
        Library(name="Monsters", type="bestiary", chunking_override={"target_tokens": 5000})


def test_item_supersession_rules() -> None:
    base = {
        "uid": "item_2",
        "library_uid": "lib_1",
        "title": "Core Rules",
        "file_type": "pdf",
        "size_bytes": 10,
        "content_hash": HASH.upper(),
        "source_ref": "core.pdf",
    }
    assert Item(**base).content_hash == HASH  # normalized to lowercase
    with pytest.raises(ValidationError, match="version >= 2"):
        Item(**base, supersedes_uid="item_1")
    with pytest.raises(ValidationError, match="superseded_by_uid"):
        Item(**base, status="superseded")


def test_concept_normalized_name_is_filled() -> None:
    concept = Concept(uid="concept_1", name="The  Dragon's Hoard.")
    assert concept.normalized_name == "the dragon's hoard"
    assert Concept.model_validate_json(concept.model_dump_json()) == concept


def test_media_asset_mime_matches_kind() -> None:
    with pytest.raises(ValidationError, match="image/"):
        MediaAsset(
            kind="image",
            origin="uploaded",
            blob_key="media/x.png",
            mime="audio/ogg",
            size_bytes=1,
            content_hash=HASH,
            width=1,
            height=1,
        )


# -------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize(
    "model",
    [
        Turn(
            campaign_id="c1",
            branch_id="b1",
            parent_turn_id="t0",
            depth=1,
            input_mode="dialogue",
            speaker={"kind": "entity", "entity_id": "e1"},
            text="Who goes there?",
            narration="A lantern swings.",
            status="accepted",
            generation={"model": "qwen", "prompt_tokens": 900, "completion_tokens": 80, "latency_ms": 700},
        ),
        ProposedChange.model_validate(_state_change()),
        Fact(subject_entity_id="e1", predicate="ally_of", object_entity_id="e2", authority="source"),
        TurnPresentation(
            turn_id="t1",
            blocks=[
                {"type": "narration", "text": "Rain."},
                {"type": "dialogue", "speaker": {"kind": "entity", "entity_id": "e1"}, "text": "Halt!"},
                {"type": "dice_roll", "roll": {"expression": "2d6", "rolls": [3, 4], "total": 7}},
                {"type": "system_note", "text": "Scene saved.", "level": "info"},
                {"type": "image", "media_asset_id": "media_1", "alt_text": "A rainy gate."},
            ],
        ),
        Library(name="Core", type="rulebook", chunking_override={"overlap_tokens": 0}),
    ],
    ids=lambda m: type(m).__name__,
)
def test_round_trip_json(model: BaseModel) -> None:
    text = model.model_dump_json()
    again = type(model).model_validate_json(text)
    assert again == model
    assert again.model_dump_json() == text


# -------------------------------------------------------------------------------------------
# JSON Schema export


def test_export_writes_valid_json_for_every_registered_model(tmp_path: Path) -> None:
    paths = export_json_schemas(tmp_path / "schemas")
    assert [p.name for p in paths] == [schema_filename(name) for name in SCHEMA_MODELS]
    for name, path in zip(SCHEMA_MODELS, paths, strict=True):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema["title"] == name
        assert schema["type"] == "object"


def test_export_is_deterministic(tmp_path: Path) -> None:
    first = {p.name: p.read_text() for p in export_json_schemas(tmp_path / "a")}
    second = {p.name: p.read_text() for p in export_json_schemas(tmp_path / "b")}
    assert first == second


def test_registry_holds_the_main_models() -> None:
    for name in ("Turn", "ProposedChange", "ProposedStateChange", "IngestJob", "Chunk", "Axiom", "MediaAsset"):
        assert name in SCHEMA_MODELS
    assert "BaseStateEvent" not in SCHEMA_MODELS
    assert all(issubclass(model, BaseModel) for model in SCHEMA_MODELS.values())


def test_event_schema_uses_kind_discriminator() -> None:
    schema = SCHEMA_MODELS["ProposedStateChange"].model_json_schema()
    items = schema["properties"]["events"]["items"]
    assert items["discriminator"]["propertyName"] == "kind"
    assert set(items["discriminator"]["mapping"]) == set(STATE_EVENT_KINDS)
