"""Rulebook entries as typed source facts: the family tables and the deterministic parser.

A pure layer (it imports only :mod:`schemas`) so that ingestion (``jobs``) and the canon gate
(``story``) read entries the same way:

* :mod:`rulebook.tables`: the declarative family tables (TOML, in ``rulebook/families``), loading
  and checking them;
* :mod:`rulebook.facts`: :func:`extract_facts` (an entry section → typed facts) and :func:`detect_kind`;
* :mod:`rulebook.sections`: :func:`entry_sections` (an extracted document's blocks → entry sections).

The typed values, their comparison and the SourceFact contract are :mod:`schemas.rulefacts`.
"""

from rulebook.facts import GENERIC_KIND, KindMatch, detect_kind, extract_facts, section_text
from rulebook.sections import BlockLike, entry_sections
from rulebook.tables import (
    FamilyTable,
    TableError,
    builtin_table,
    builtin_tables,
    load_table,
    load_tables,
    table_from_mapping,
)

__all__ = [
    "GENERIC_KIND",
    "BlockLike",
    "FamilyTable",
    "KindMatch",
    "TableError",
    "builtin_table",
    "builtin_tables",
    "detect_kind",
    "entry_sections",
    "extract_facts",
    "load_table",
    "load_tables",
    "section_text",
    "table_from_mapping",
]
