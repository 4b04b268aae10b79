"""Free text (schemas.text): bounds, NUL and lone surrogates refused in requests, stored records read as stored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.serving import CampaignCreate, CheckpointCreate, MemoryCreate, MemoryRetract, TurnRequest, WorldCreate
from schemas.story import Entity, Memory, Turn
from schemas.text import LONG_TEXT_MAX, NAME_MAX, NOTE_MAX, TEXT_MAX, check_text
from stores.catalog import from_props, to_props

pytestmark = pytest.mark.unit

BAD = {
    "NUL": "a\x00b",
    "lone surrogate": "a\ud800b",
    "trailing low surrogate": "ab\udfff",
}


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize(
    ("model", "field", "base"),
    [
        (MemoryCreate, "text", {"observer_entity_id": "ent_a", "text": "x"}),
        (MemoryRetract, "reason", {"reason": "x"}),
        (TurnRequest, "text", {"text": "x"}),
        (WorldCreate, "name", {"name": "x"}),
        (WorldCreate, "description", {"name": "x", "description": "x"}),
        (CheckpointCreate, "description", {"name": "x", "description": "x"}),
    ],
)
def test_requests_refuse_nul_and_lone_surrogates(model: type, field: str, base: dict, value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate({**base, field: value})
    (error,) = caught.value.errors()
    assert error["loc"] == (field,)
    assert "NUL" in error["msg"] or "surrogate" in error["msg"]


def test_list_items_are_checked_too() -> None:
    with pytest.raises(ValidationError) as caught:
        CampaignCreate.model_validate(
            {"world_id": "world_1", "name": "x", "profile": {"genre": "fantasy"}, "narrator_rules": ["ok", "\x00"]}
        )
    assert caught.value.errors()[0]["loc"] == ("narrator_rules", 1)


@pytest.mark.parametrize(
    ("model", "field", "base", "bound"),
    [
        (MemoryCreate, "text", {"observer_entity_id": "ent_a"}, TEXT_MAX),
        (MemoryRetract, "reason", {}, NOTE_MAX),
        (TurnRequest, "text", {}, TEXT_MAX),
        (WorldCreate, "name", {}, NAME_MAX),
    ],
)
def test_bounds_hold_at_their_edge(model: type, field: str, base: dict, bound: int) -> None:
    model.model_validate({**base, field: "é" * bound})
    with pytest.raises(ValidationError) as caught:
        model.model_validate({**base, field: "é" * (bound + 1)})
    assert f"at most {bound:,}" in caught.value.errors()[0]["msg"]


def test_pairs_and_other_text_pass() -> None:
    text = "🐉 dragon\tfire\nΩ — ‘quoted’ \u200b"
    assert check_text(text, max_length=100) == text
    assert MemoryCreate(observer_entity_id="ent_a", text=text).text == text  # kept verbatim


def test_names_are_stripped_and_not_blank() -> None:
    assert WorldCreate(name="  Brinemark ").name == "Brinemark"
    with pytest.raises(ValidationError):
        WorldCreate(name="   ")


def test_attribute_values_are_free_text() -> None:
    with pytest.raises(ValidationError) as caught:
        Entity(world_id="world_1", kind="character", name="Ayla", attributes={"motto": "x\x00"})
    assert caught.value.errors()[0]["loc"] == ("attributes", "motto")
    with pytest.raises(ValidationError):
        Entity(world_id="world_1", kind="character", name="Ayla", attributes={"\ud800": 1})


def test_json_schema_states_the_bounds() -> None:
    properties = MemoryCreate.model_json_schema()["properties"]
    assert properties["text"]["maxLength"] == TEXT_MAX and properties["text"]["minLength"] == 1
    assert Turn.model_json_schema()["properties"]["narration"]["anyOf"][0]["maxLength"] == LONG_TEXT_MAX
    reason = MemoryRetract.model_json_schema()["properties"]["reason"]
    assert reason["maxLength"] == NOTE_MAX


def test_stored_records_over_a_bound_stay_readable() -> None:
    """A record written before a bound (or by an older version) is read as it was stored."""
    memory = Memory(campaign_id="camp_1", observer_entity_id="ent_a", text="x", anchor_turn_id="turn_1")
    props = to_props(memory, key="id") | {"text": "y" * (TEXT_MAX + 5), "retraction_reason": "z" * 2500}
    props["retracted_at"] = memory.created_at.isoformat()
    read = from_props(Memory, props, key="id")
    assert len(read.text) == TEXT_MAX + 5 and len(read.retraction_reason or "") == 2500
    with pytest.raises(ValidationError):  # but never written so again
        Memory.model_validate(read.model_dump())
