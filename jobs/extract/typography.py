"""Line-level typography of a PDF page, read cheaply from MuPDF's HTML output, and text hygiene.

MuPDF's ``extractHTML`` writes one ``<p>`` per text line (in text-page order, with its position)
and one ``<span>`` per run of one font (family, size) inside ``<b>``/``<i>`` marks. Parsing it with
one regular expression gives every line's styles for a fraction of the cost of ``extractDICT``, and
that is all the structure rules need: whether a line is set in one style (a heading line), whether
it opens with a bold label and runs on in another style (a run-in label, "Casting Time: 1 action"),
and which style the body text is in.

A :data:`Style` is ``(family, size, bold, italic)``, the size rounded to half a point.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass

__all__ = ["Line", "Style", "clean_text", "join_lines", "page_lines"]

Style = tuple[str, float, bool, bool]

_TOKEN = re.compile(
    r'<p style="top:(-?[\d.]+)pt;left:(-?[\d.]+)pt;line-height:([\d.]+)pt|<(/?)([bi])>'
    r'|<span style="font-family:([^;"]*);font-size:([\d.]+)pt[^>]*>([^<]*)</span>'
)
_GENERIC_FAMILY = re.compile(r",(?:serif|sans-serif|monospace)$")


@dataclass(slots=True)
class Line:
    """One text line of a page with its styles.

    Attributes:
        top, left, height: its position (text-page space) and line height.
        text: its text (spans joined as written).
        first, last: the style of its first and last visible span.
        uniform: every visible span has the same style.
        runin: it opens with a bold span and runs on in a non-bold one (a run-in label).
        bold: its bold text, span by span (bold terms).
        mono: its first span is monospaced.
    """

    top: float
    left: float
    height: float
    text: str = ""
    first: Style | None = None
    last: Style | None = None
    uniform: bool = True
    runin: bool = False
    bold: list[str] | None = None
    mono: bool = False


_LINE_START = re.compile(r'<p style="top:(-?[\d.]+)pt;left:(-?[\d.]+)pt;line-height:([\d.]+)pt')
_ONE_SPAN = re.compile(r'<span style="font-family:([^;"]*);font-size:([\d.]+)pt[^>]*>([^<]*)</span>')


def page_lines(page_html: str) -> list[Line]:
    """Every text line of ``TextPage.extractHTML()`` output, in text-page order.

    MuPDF writes one ``<p>`` per line, each on a line of its own; most lines hold one span and
    take a fast path (one match), the others are read token by token.
    """
    lines: list[Line] = []
    for raw in page_html.split("\n"):
        if not raw.startswith("<p ") or raw.count("<span ") != 1:
            if raw.startswith("<p "):
                lines.extend(_lines_slow(raw))
            continue
        head = _LINE_START.match(raw)
        span = _ONE_SPAN.search(raw)
        if head is None or span is None:
            lines.extend(_lines_slow(raw))
            continue
        line = Line(float(head.group(1)), float(head.group(2)), float(head.group(3)))
        text = span.group(3)
        if "&" in text:
            text = html.unescape(text)
        line.text = text
        lines.append(line)
        if not text or text.isspace():
            continue
        family = span.group(1)
        bold = "<b>" in raw
        line.first = line.last = (
            _GENERIC_FAMILY.sub("", family),
            round(float(span.group(2)) * 2) / 2,
            bold,
            "<i>" in raw,
        )
        line.mono = family.endswith(",monospace")
        if bold:
            line.bold = [text]
    return lines


def _lines_slow(page_html: str) -> list[Line]:
    lines: list[Line] = []
    line: Line | None = None
    bold = italic = False
    parts: list[str] = []
    for m in _TOKEN.finditer(page_html):
        top = m.group(1)
        if top is not None:
            if line is not None:
                line.text = "".join(parts)
            line = Line(float(top), float(m.group(2)), float(m.group(3)))
            lines.append(line)
            parts = []
            bold = italic = False
            continue
        tag = m.group(5)
        if tag is not None:
            on = not m.group(4)
            if tag == "b":
                bold = on
            else:
                italic = on
            continue
        if line is None:
            continue
        text = m.group(8)
        if "&" in text:
            text = html.unescape(text)
        parts.append(text)
        if text.isspace() or not text:
            continue
        family = m.group(6)
        mono = family.endswith(",monospace")
        style = (_GENERIC_FAMILY.sub("", family), round(float(m.group(7)) * 2) / 2, bold, italic)
        if line.first is None:
            line.first = style
            line.mono = mono
        elif style != line.last:
            line.uniform = False
            if line.first[2] and not bold and line.last is not None and line.last[2]:
                line.runin = True
        line.last = style
        if bold:
            if line.bold is None:
                line.bold = []
            line.bold.append(text)
    if line is not None:
        line.text = "".join(parts)
    return lines


# -- text hygiene ------------------------------------------------------------------------------------

_LIGATURES = {
    0xFB00: "ff",
    0xFB01: "fi",
    0xFB02: "fl",
    0xFB03: "ffi",
    0xFB04: "ffl",
    0xFB05: "st",
    0xFB06: "st",
    0x00A0: " ",  # no-break space
    0x2007: " ",
    0x202F: " ",
    0x00AD: None,  # soft hyphen: a possible break, never a character
}
# NFKC is safe on these blocks (presentation forms, full-width forms): it folds them to the plain
# letters a searcher types. Elsewhere it would change meaning ("x²" -> "x2", "½" -> "1⁄2").
_NFKC_SAFE = re.compile(r"[\ufb00-\ufb4f\uff01-\uff5e\u2000-\u200a]")


def clean_text(text: str) -> str:
    """Ligatures expanded, soft hyphens dropped, presentation and full-width forms folded (NFKC)."""
    if text.isascii():
        return text
    text = text.translate(_LIGATURES)
    if _NFKC_SAFE.search(text):
        text = _NFKC_SAFE.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    return text


_HYPHENS = ("-", "\u00ad", "\u2010")


def join_lines(lines: list[str]) -> str:
    """Join text lines with spaces, joining words hyphenated at a line end ("de-" + "fines")."""
    out = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if not out:
            out = line
        elif out.endswith(_HYPHENS) and len(out) > 1 and out[-2].isalpha() and line[0].islower():
            out = out[:-1] + line
        else:
            out += " " + line
    return out
