"""Family tables: which kinds of entry a game family's books hold and how their fields are printed.

A table is a TOML file, one per game family (``dnd5e``, ``fate``, ``generic`` ship in
``rulebook/families/``; a user adds a family or a house layout by writing one more file, no code).
It names, per kind of entry (spell, creature, condition, magic item, equipment …):

* ``fields``: the predicates, each with the labels it is printed under ("Armor Class", "AC"), its
  value type (:class:`schemas.rulefacts.ValueType`), how much finding it says about the kind
  (``cue``), and how to read compound values: a parenthetical after the value that is another field
  ("Hit Points 7 (2d6)" → ``paren``), words after the value that are another field ("1d8 slashing" →
  ``rest``), a keyed list ("Speed 30 ft., fly 60 ft." → ``keyed``), the words a list may hold
  ("V, S, M" → ``vocabulary``), words that stand for numbers (Fate's ladder → ``words``);
* ``lines``: unlabelled lines near the top of an entry, as regular expressions whose named groups
  are fields ("3rd-level evocation", "Large dragon, chaotic evil");
* ``rows``: a header row followed by numbers (the ability scores under "STR DEX CON …");
* ``sentences``: patterns in the prose ("8d6 fire damage", "has 7 charges"), read with less confidence;
* ``chapters`` and ``names``: headings of the entry's chapters, and entry names, that point at the kind.

:func:`load_table` reads and checks one file; every mistake raises :class:`TableError` naming the
file and the key ("kinds.spell.fields[2].type"). The parser is :func:`rulebook.facts.extract_facts`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from schemas.common import EntityKind
from schemas.errors import LorekeeperError
from schemas.rulefacts import ValueType

__all__ = [
    "FamilyTable",
    "FieldSpec",
    "KeyedSpec",
    "KindSpec",
    "LineSpec",
    "RowSpec",
    "SentenceSpec",
    "SubField",
    "TableError",
    "builtin_table",
    "group_field",
    "builtin_tables",
    "load_table",
    "load_tables",
    "table_from_mapping",
]

Snake = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=80)]


class TableError(LorekeeperError):
    """A family table that cannot be used: it names the file, the key and what is wrong."""

    status_code = 422
    code = "rule_table_invalid"

    def __init__(self, source: str, key: str, problem: str) -> None:
        where = f"{source}: {key}: " if key else f"{source}: "
        super().__init__(f"{where}{problem}", source=source, key=key, problem=problem)
        self.source = source
        self.key = key
        self.problem = problem


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def group_field(group: str) -> str:
    """The field a regex group fills: ``school__b`` fills ``school`` (a regex cannot name two groups alike)."""
    return group.split("__", 1)[0]


def _compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as err:
        raise ValueError(f"not a regular expression ({err})") from None


class SubField(_Spec):
    """A second field read from the same printed value (a parenthetical, or the words after it)."""

    field: Snake
    type: ValueType = ValueType.TEXT


class KeyedSpec(_Spec):
    """A comma-separated list of ``key value`` items, each its own predicate ("fly 60 ft." → speed_fly).

    ``name`` is the predicate with ``{key}`` in it; ``bare`` the predicate of an item with no key
    ("30 ft." → speed); ``aliases`` map printed keys to the key used ("dex" → "dexterity");
    ``types`` give a key its own value type ("passive perception" → number).
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*(?:\{key\}[a-z0-9_]*)?$|^\{key\}[a-z0-9_]*$")
    bare: Snake | None = None
    aliases: dict[str, str] = Field(default_factory=dict)
    types: dict[str, ValueType] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _has_key(self) -> Self:
        if "{key}" not in self.name:
            raise ValueError("`name` must hold {key}, the item's key, e.g. 'speed_{key}'")
        return self


class FieldSpec(_Spec):
    """One field of a kind: its predicate, printed labels, value type and how to read its value."""

    name: Snake
    labels: list[str] = Field(default_factory=list)
    type: ValueType
    cue: float = Field(default=1.0, ge=0, description="How much a label of it found says the entry is this kind.")
    unit: str | None = Field(default=None, description="Unit of a bare number (a distance field: 'ft').")
    vocabulary: list[str] | None = None
    paren: SubField | None = None
    rest: SubField | None = None
    keyed: KeyedSpec | None = None
    words: dict[str, float] | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> Self:
        for label in self.labels:
            if not label.strip():
                raise ValueError("a label must not be blank")
        if self.vocabulary is not None and self.type is not ValueType.LIST:
            raise ValueError("`vocabulary` is for list fields")
        if self.unit is not None and self.type is not ValueType.DISTANCE:
            raise ValueError("`unit` is for distance fields (the unit of a bare number)")
        return self


class LineSpec(_Spec):
    """An unlabelled line near the top of an entry; its named groups are fields of the kind."""

    pattern: str
    cue: float = Field(default=1.0, ge=0)
    set: dict[str, str] = Field(default_factory=dict, description="Fields set to these texts when the line matches.")
    ignore_case: bool = True
    window: int | None = Field(
        default=None, ge=1, le=60, description="Lines from the top it is tried on; unset: the kind's line_window."
    )
    _regex: re.Pattern[str] = PrivateAttr()

    @model_validator(mode="after")
    def _compile_it(self) -> Self:
        self._regex = _compile(self.pattern, re.I if self.ignore_case else 0)
        return self

    @property
    def regex(self) -> re.Pattern[str]:
        return self._regex


class RowSpec(_Spec):
    """A header row ("STR DEX CON INT WIS CHA") followed by one number per header, as fields."""

    header: list[str] = Field(min_length=1)
    fields: list[Snake] = Field(min_length=1)
    cue: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _same_length(self) -> Self:
        if len(self.header) != len(self.fields):
            raise ValueError(f"{len(self.header)} header cells but {len(self.fields)} fields")
        return self


class SentenceSpec(_Spec):
    """A pattern in an entry's prose; its named groups are fields (first match, or all for ``all``)."""

    pattern: str
    confidence: float = Field(default=0.7, ge=0, le=1)
    all: bool = False
    ignore_case: bool = True
    _regex: re.Pattern[str] = PrivateAttr()

    @model_validator(mode="after")
    def _compile_it(self) -> Self:
        self._regex = _compile(self.pattern, re.I if self.ignore_case else 0)
        return self

    @property
    def regex(self) -> re.Pattern[str]:
        return self._regex


class KindSpec(_Spec):
    """A kind of entry: its fields and the cues that recognise it."""

    entity_kind: EntityKind = EntityKind.CONCEPT
    min_score: float = Field(default=2.0, ge=0)
    chapters: list[str] = Field(default_factory=list, description="Regexes a heading above the entry matches.")
    chapter_cue: float = Field(default=1.0, ge=0)
    names: list[str] = Field(default_factory=list, description="Entry names that are this kind.")
    names_cue: float = Field(default=1.5, ge=0)
    line_window: int = Field(default=3, ge=1, description="How many lines from the top the `lines` are tried on.")
    paragraphs: Snake | None = Field(default=None, description="A list field of the body's remaining paragraphs.")
    fields: list[FieldSpec] = Field(default_factory=list)
    lines: list[LineSpec] = Field(default_factory=list)
    rows: list[RowSpec] = Field(default_factory=list)
    sentences: list[SentenceSpec] = Field(default_factory=list)
    _chapters: list[re.Pattern[str]] = PrivateAttr(default_factory=list)
    _by_name: dict[str, FieldSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Self:
        self._chapters = [_compile(rf"(?:{c})", re.I) for c in self.chapters]
        names: dict[str, FieldSpec] = {}
        for spec in self.fields:
            if spec.name in names:
                raise ValueError(f"field {spec.name!r} is declared twice")
            names[spec.name] = spec
        self._by_name = names
        for n, line in enumerate(self.lines):
            for group in (*map(group_field, line.regex.groupindex), *line.set):
                if group not in names:
                    raise ValueError(f"lines[{n}] names field {group!r}, which `fields` does not declare")
        for n, row in enumerate(self.rows):
            for name in row.fields:
                if name not in names:
                    raise ValueError(f"rows[{n}] names field {name!r}, which `fields` does not declare")
        for n, sentence in enumerate(self.sentences):
            if not sentence.regex.groupindex:
                raise ValueError(f"sentences[{n}] has no named group: it would read no field")
            for group in map(group_field, sentence.regex.groupindex):
                if group not in names:
                    raise ValueError(f"sentences[{n}] names field {group!r}, which `fields` does not declare")
        return self

    @property
    def chapter_patterns(self) -> list[re.Pattern[str]]:
        return self._chapters

    def field(self, name: str) -> FieldSpec:
        """The field declared as ``name``."""
        return self._by_name[name]

    @property
    def labelled(self) -> list[FieldSpec]:
        """The fields printed under a label."""
        return [f for f in self.fields if f.labels]


class FamilyTable(_Spec):
    """A game family's table: its kinds of entry, and whether generic "Label: value" fields are read."""

    family: Snake
    description: str = ""
    generic_fields: bool = Field(default=True, description='Read "Label: value" and bold "Label." fields too.')
    generic_confidence: float = Field(default=0.6, ge=0, le=1)
    ignore_labels: list[str] = Field(default_factory=list, description="Generic labels that are no field.")
    kinds: dict[Snake, KindSpec] = Field(default_factory=dict)
    source: str = Field(default="<memory>", description="Where the table was read from (set by the loader).")


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def table_from_mapping(data: Mapping[str, Any], source: str = "<memory>") -> FamilyTable:
    """A table from parsed TOML (or any mapping).

    Raises:
        TableError: naming ``source`` and the first key that is wrong.
    """
    try:
        return FamilyTable.model_validate({**data, "source": source})
    except ValidationError as err:
        first = err.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key (a typo?)"
        raise TableError(source, _key_path(tuple(first["loc"])), message) from None


def load_table(path: str | Path) -> FamilyTable:
    """Read one family table from a TOML file.

    Raises:
        TableError: the file is missing, is not TOML, or a key is wrong (its message names the
            file and the key).
    """
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise TableError(source, "", f"cannot be read ({err.strerror or err})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TableError(source, "", f"is not valid TOML ({err})") from None
    return table_from_mapping(data, source)


_FAMILIES = resources.files("rulebook") / "families"


@cache
def builtin_tables() -> dict[str, FamilyTable]:
    """The tables shipped in ``rulebook/families``, by family name."""
    tables: dict[str, FamilyTable] = {}
    for entry in sorted(_FAMILIES.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            table = table_from_mapping(data, f"rulebook/families/{entry.name}")
            tables[table.family] = table
    return tables


def builtin_table(family: str) -> FamilyTable:
    """One shipped table by family name.

    Raises:
        TableError: no shipped table has that family.
    """
    tables = builtin_tables()
    if family not in tables:
        raise TableError("rulebook/families", family, f"no such family (shipped: {', '.join(sorted(tables))})")
    return tables[family]


def load_tables(specs: Iterable[str | Path]) -> list[FamilyTable]:
    """Tables by shipped family name ("dnd5e") or by path to a TOML file, in the order given."""
    out: list[FamilyTable] = []
    for spec in specs:
        text = str(spec)
        if text.endswith(".toml") or "/" in text or isinstance(spec, Path):
            out.append(load_table(spec))
        else:
            out.append(builtin_table(text))
    return out
