"""Family tables (rulebook/tables.py): the shipped ones load, a bad table file gives an error naming the
file and the key, and a user's own table file adds a kind without code."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulebook import (
    TableError,
    builtin_table,
    builtin_tables,
    extract_facts,
    load_table,
    load_tables,
    table_from_mapping,
)
from schemas.common import EntityKind
from schemas.rulefacts import DistanceValue, EntrySection, NumberValue

pytestmark = pytest.mark.unit


def test_the_shipped_families_load_with_their_kinds() -> None:
    tables = builtin_tables()
    assert {"dnd5e", "fate", "generic"} <= set(tables)
    dnd = tables["dnd5e"]
    assert {"spell", "creature", "condition", "magic_item", "equipment"} <= set(dnd.kinds)
    assert dnd.kinds["creature"].entity_kind is EntityKind.CREATURE
    assert "Armor Class" in dnd.kinds["creature"].field("armor_class").labels
    assert tables["generic"].kinds == {}
    assert builtin_table("fate").source.endswith("fate.toml")


def _write(tmp_path: Path, text: str, name: str = "house.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("body", "key", "problem"),
    [
        (
            'family = "house"\n[kinds.spell]\n[[kinds.spell.fields]]\nname = "range"\ntype = "distanse"\n',
            "kinds.spell.fields[0].type",
            "number",  # the message lists the types there are
        ),
        (
            'family = "house"\n[kinds.spell]\n[[kinds.spell.fields]]\nname = "range"\ntype = "text"\nlabls = ["R"]\n',
            "kinds.spell.fields[0].labls",
            "unknown key",
        ),
        (
            'family = "house"\n[kinds.spell]\n[[kinds.spell.lines]]\npattern = "^(?P<level>[0-9]"\n',
            "kinds.spell.lines[0]",
            "not a regular expression",
        ),
        (
            'family = "house"\n[kinds.spell]\n[[kinds.spell.lines]]\npattern = "^(?P<level>[0-9])$"\n',
            "kinds.spell",
            "'level', which `fields` does not declare",
        ),
        (
            'family = "house"\n[kinds.spell]\n[[kinds.spell.fields]]\nname = "Casting Time"\ntype = "duration"\n',
            "kinds.spell.fields[0].name",
            "pattern",
        ),
        (
            'family = "house"\n[kinds.beast]\nentity_kind = "monster"\n',
            "kinds.beast.entity_kind",
            "creature",
        ),
        (
            'family = "house"\n[kinds.beast]\n[[kinds.beast.fields]]\nname = "speed"\ntype = "distance"\n'
            'keyed = { name = "speed" }\n',
            "kinds.beast.fields[0].keyed",
            "{key}",
        ),
        (
            'family = "house"\n[kinds.beast]\n[[kinds.beast.rows]]\nheader = ["STR", "DEX"]\nfields = ["strength"]\n',
            "kinds.beast.rows[0]",
            "2 header cells but 1 fields",
        ),
    ],
)
def test_a_bad_table_names_the_file_and_the_key(tmp_path: Path, body: str, key: str, problem: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(TableError) as caught:
        load_table(path)
    err = caught.value
    assert err.source == str(path)
    assert err.key == key
    assert problem in err.problem
    assert str(path) in str(err) and key in str(err)


def test_a_file_that_is_not_toml_or_not_there_is_refused_with_its_name(tmp_path: Path) -> None:
    broken = _write(tmp_path, 'family = "house"\n[kinds.spell\n', "broken.toml")
    with pytest.raises(TableError, match=r"broken\.toml: is not valid TOML"):
        load_table(broken)
    with pytest.raises(TableError, match=r"missing\.toml: cannot be read"):
        load_table(tmp_path / "missing.toml")
    with pytest.raises(TableError, match="no such family"):
        builtin_table("gurps")


def test_a_users_table_adds_a_kind_without_code(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
family = "starships"
[kinds.vehicle]
entity_kind = "vehicle"
chapters = ['ships?', 'vehicles']

[[kinds.vehicle.fields]]
name = "hull"
labels = ["Hull"]
type = "number"
cue = 1.5

[[kinds.vehicle.fields]]
name = "thrust"
labels = ["Thrust", "Drive"]
type = "distance"
unit = "mi"
cue = 1.0
""",
    )
    ships = load_tables([path, "generic"])
    assert [t.family for t in ships] == ["starships", "generic"]
    section = EntrySection(heading_path=["Core Rules", "Ships", "Dart Cutter"], text="Hull: 24\nThrust: 8\nCrew: 3")
    facts = {f.predicate: f for f in extract_facts(section, ships)}
    assert facts["hull"].value == NumberValue(value=24)
    assert facts["thrust"].value == DistanceValue(amount=8, unit="mi")  # the table's unit for a bare number
    assert facts["hull"].subject.kind == "vehicle"
    assert facts["hull"].subject.entity_kind is EntityKind.VEHICLE
    assert facts["crew"].family == "starships" and facts["crew"].confidence < facts["hull"].confidence  # generic


def test_a_table_from_a_mapping_is_checked_the_same_way() -> None:
    with pytest.raises(TableError, match=r"<memory>: family"):
        table_from_mapping({"family": "Not A Slug"})
