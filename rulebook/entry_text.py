"""An entry's text as the rulebook parser reads it: cleaned, bold terms collected, lines indexed.

Part of the parser (:mod:`rulebook.facts`); a fact's ``offset`` points into :func:`section_text`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from schemas.rulefacts import EntrySection, clean_text


def section_text(section: EntrySection) -> str:
    """The section's text as the parser reads it; a fact's ``offset`` points into this text.

    NFKC and the cleaning of :func:`schemas.rulefacts.clean_text`, Markdown ``**bold**`` unwrapped,
    list bullets at line starts dropped, trailing spaces of lines removed.
    """
    return prepare_text(section)[0]


_MD_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_MD_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
# list bullets, including the private-use glyphs of Symbol and Wingdings (U+F0B7, U+F0A7) that PDFs
# made from word processors carry, alone on their line or before the item
_BULLET_GLYPHS = "*•▪◦‣·●■□◆➢\uf0b7\uf0a7\uf076\uf0d8"
_BULLET = re.compile(rf"(?m)^[ \t]*(?:[{_BULLET_GLYPHS}]|-(?=[ \t]))(?:[ \t]+|$)")


def prepare_text(section: EntrySection) -> tuple[str, set[str]]:
    """The section's text (as :func:`section_text`) and the label keys of its bold terms."""
    bold = {label_key(t) for t in section.bold_terms if t.strip()}
    text = clean_text(section.text.replace("\r\n", "\n").replace("\r", "\n"))

    def unwrap(m: re.Match[str]) -> str:
        inner = m.group(1) or m.group(2)
        bold.add(label_key(inner))
        return inner

    text = _MD_BOLD.sub(unwrap, text)
    text = _MD_ITALIC.sub(lambda m: m.group(1), text)
    text = _BULLET.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
    text = re.sub(r"\n{3,}", "\n\n", text)  # a block that was only a bullet leaves no empty paragraph
    return text, bold


# A section number before an entry's name ("2.3.1 Acid Arrow", "12. Goblin"): not part of the name.
_NUMBERING = re.compile(r"^\s*\d{1,3}(?:\.\d{1,3})*\.?[ \t]+(?=[^\W\d_])")


def entry_name(heading: str) -> str:
    """An entry's name from its heading: cleaned, one space, without a leading section number."""
    return " ".join(_NUMBERING.sub("", clean_text(heading)).split())


@lru_cache(maxsize=4096)
def label_key(label: str) -> str:
    return " ".join(clean_text(label).casefold().strip(" .:").split())


@lru_cache(maxsize=4096)
def slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", clean_text(text).casefold()).strip("_")
    if not slug:
        return ""
    return slug if slug[0].isalpha() else f"field_{slug}"


@dataclass(slots=True)
class Lines:
    """Line spans of a text, to answer "where does the line holding this offset start and end"."""

    starts: list[int]
    ends: list[int]

    @classmethod
    def of(cls, text: str) -> Lines:
        starts = [0]
        ends = []
        for m in re.finditer("\n", text):
            ends.append(m.start())
            starts.append(m.end())
        ends.append(len(text))
        return cls(starts, ends)

    def index(self, pos: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def end_of(self, pos: int) -> int:
        return self.ends[self.index(pos)]


def line_spans(text: str, lines: Lines, window: int) -> list[tuple[int, int]]:
    """The spans of the first ``window`` non-empty lines."""
    spans = []
    for a, b in zip(lines.starts, lines.ends, strict=True):
        if text[a:b].strip():
            spans.append((a, b))
        if len(spans) >= window:
            break
    return spans
