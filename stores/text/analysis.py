"""What both full-text backends must agree on: searched fields and boosts, limits, highlight markup.

The embedded index (tantivy) and the server index (OpenSearch) answer the same queries, and the
congruence tests compare their rankings. Keeping the knobs that shape a ranking or a snippet here, in
one place, makes that agreement a matter of construction rather than of two files kept in step.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from schemas.search import FILTER_FIELDS
from stores.text.base import TextDocument

# BM25 runs over these analysed fields, and a document's score is the sum of its fields' scores, each
# times its boost (OpenSearch multi_match "best_fields" with tie_breaker 1 == a dis_max with tie-breaker
# 1 over per-field matches in tantivy). A chunk's text already opens with its heading path, so the heading
# field adds a half-weight bonus for words that name the section rather than dominating the body: taking
# only the best field (with heading 1.5) let a short heading that holds two query words outrank the entry
# whose body holds them all. Measured on benchmarks/rules_questions.py (docs/search.md).
SEARCH_FIELDS: dict[str, float] = {"title": 2.0, "heading": 0.5, "text": 1.0}
FIELD_TIE_BREAKER = 1.0

# Highlights are returned in this field order: the body snippet first, the short fields after.
HIGHLIGHT_FIELDS: tuple[str, ...] = ("text", "heading", "title")
HIGHLIGHT_PRE = "<em>"
HIGHLIGHT_POST = "</em>"
# Longest snippet per field, in characters.
HIGHLIGHT_FRAGMENT_CHARS = 150

# OpenSearch refuses from + size beyond index.max_result_window (10,000 by default); tantivy would
# accept more, but one limit for both keeps callers from depending on the embedded backend.
MAX_LIMIT = 10_000


def keyword_fields(source: dict[str, Any]) -> dict[str, str | list[str]]:
    """The filter fields present in a stored record, in their stored shape (a string or a list)."""
    return {name: source[name] for name in FILTER_FIELDS if source.get(name) is not None}


def document_source(doc: TextDocument) -> dict[str, Any]:
    """The JSON form a backend stores for ``doc``: analysed fields, keyword fields, ``data``.

    ``model_dump(mode="json")`` turns dates, UUIDs and the like into strings the same way for both
    backends, so ``get`` returns the same document whichever backend stored it.
    """
    dumped = doc.model_dump(mode="json")
    return {
        "id": dumped["id"],
        "title": dumped["title"],
        "heading": dumped["heading"],
        "text": dumped["text"],
        **dumped["fields"],
        "data": dumped["data"],
    }


def mark_byte_ranges(fragment: str, ranges: Iterable[tuple[int, int]]) -> str:
    """Wrap byte ranges of ``fragment`` in ``<em>`` tags and HTML-escape everything else.

    tantivy reports highlighted ranges as byte offsets into the UTF-8 fragment, so they are applied to
    the encoded text; slicing the ``str`` would shift every range after a non-ASCII character.

    Args:
        fragment: the snippet text.
        ranges: ``(start, end)`` byte offsets of the matched terms, in any order, possibly overlapping.

    Returns:
        The snippet as HTML, safe to insert into a page, matches in ``<em>…</em>``.
    """
    raw = fragment.encode("utf-8")
    out: list[str] = []
    cursor = 0
    for start, end in sorted(ranges):
        start = max(start, cursor)
        if end <= start:
            continue
        out.append(html.escape(raw[cursor:start].decode("utf-8", errors="replace"), quote=False))
        matched = raw[start:end].decode("utf-8", errors="replace")
        out.append(f"{HIGHLIGHT_PRE}{html.escape(matched, quote=False)}{HIGHLIGHT_POST}")
        cursor = end
    out.append(html.escape(raw[cursor:].decode("utf-8", errors="replace"), quote=False))
    return "".join(out)
