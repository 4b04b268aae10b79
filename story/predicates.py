"""Predicates as fields of the rulebook's family tables: the one reading the gate's rulebook check
(:mod:`story.source_check`) and its contradiction check against campaign canon (:mod:`story.policy`) share, so
"hp", "HP", "Hit Points" and ``hit_points`` are one field, and a contradiction under another name is caught."""

from __future__ import annotations

import re
from functools import cache, lru_cache

from rulebook.tables import builtin_tables
from schemas.rulefacts import clean_text


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", clean_text(text).casefold()).strip("_")


@cache
def _field_maps() -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Per entry kind and over all kinds: a normalised field name or printed label → the field.

    Field names win over labels (the armor table's "Strength" label is not the creature's strength
    score), and a kind's own labels over another kind's.
    """
    per_kind: dict[str, dict[str, str]] = {}
    every: dict[str, str] = {}
    labels: list[tuple[str, str, str]] = []
    for table in builtin_tables().values():
        for kind_name, kind in table.kinds.items():
            names = per_kind.setdefault(kind_name, {})
            for spec in kind.fields:
                subs = [s.field for s in (spec.paren, spec.rest) if s is not None]
                for name in (spec.name, *subs):
                    names.setdefault(_norm(name), name)
                    every.setdefault(_norm(name), name)
                labels += [(kind_name, _norm(label), spec.name) for label in spec.labels]
    for kind_name, label, name in labels:
        per_kind[kind_name].setdefault(label, name)
        every.setdefault(label, name)
    return per_kind, every


@cache
def field_labels(field_name: str) -> tuple[str, ...]:
    """The words a field is printed or said under ("Hit Points", "HP", "hit points"), longest first."""
    labels = {field_name.replace("_", " ")}
    for table in builtin_tables().values():
        for kind in table.kinds.values():
            labels.update(label for spec in kind.fields if spec.name == field_name for label in spec.labels)
    return tuple(sorted(labels, key=len, reverse=True))


@lru_cache(maxsize=4096)  # the gate asks it for every current fact against every claim
def predicate_field(predicate: str, kind: str | None = None) -> str:
    """A proposal's predicate as a field of the family tables ("HP", "Hit Points" → ``hit_points``).

    Args:
        kind: the entry kind whose fields and labels come first (a source fact's ``subject.kind``).

    Returns:
        The field's name, or the predicate normalised when no table knows it.
    """
    norm = _norm(predicate)
    per_kind, every = _field_maps()
    if kind is not None:
        fields = per_kind.get(kind, {})
        # the words players use: "spell level" (or "spell's level") is a spell's level
        for said in (norm, norm.removeprefix(f"{kind}_"), norm.removeprefix(f"{kind}_s_")):
            if said in fields:
                return fields[said]
    return every.get(norm, norm)


def same_field(a: str, b: str) -> bool:
    """Whether two predicates name one field ("hp" and "Hit Points"; "title" and "title")."""
    return a == b or predicate_field(a) == predicate_field(b)
