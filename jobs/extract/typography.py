"""Line-level typography of a PDF page, read cheaply from MuPDF's HTML output, and text hygiene.

MuPDF's ``extractHTML`` writes one ``<p>`` per text line (in text-page order, with its position),
each on a line of its own, and one ``<span>`` per run of one font (family, size) inside
``<b>``/``<i>`` marks. One regular expression over the page (:func:`page_lines`) cuts it into lines
without building anything per line; a line's styles are read only where they are needed
(:func:`line_style`, :func:`read_line`), and most lines hold one span whose opening tag has been
seen before, so its style is a dictionary look-up. That is all the structure rules need: whether a
line is set in one style (a heading line), whether it opens with a bold label and runs on in
another style (a run-in label, "Casting Time: 1 action"), and which style the body text is in.

A :data:`Style` is ``(family, size, bold, italic)``, the size rounded to half a point; the family
carries the colour when it is not black (books without bold set headings and labels apart by
colour) and ends in :data:`SMALL_CAPS` for a line in fake small capitals (one style at two sizes,
word capitals at the larger), whose text is read back in its case. A line opens with a run-in
label when it starts bold (or in a colour) and goes on in regular (or another colour).
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "SMALL_CAPS",
    "HtmlLine",
    "Line",
    "Style",
    "clean_text",
    "join_lines",
    "line_style",
    "page_lines",
    "read_line",
]

Style = tuple[str, float, bool, bool]

HtmlLine = tuple[str, str, str, str]
"""One ``<p>`` of the HTML: top, left and line height (as written) and its inner HTML."""

_HTML_LINE = re.compile(r'^<p style="top:(-?[\d.]+)pt;left:(-?[\d.]+)pt;line-height:([\d.]+)pt">(.*)</p>$', re.M)
_FONT = r'<span style="font-family:([^;"]*);font-size:([\d.]+)pt(?:;color:#([0-9a-fA-F]{6}))?'
_SPAN_TOKEN = re.compile(r"<(/?)([bi])>|" + _FONT + r"[^>]*>([^<]*)</span>")
_SPAN_HEAD = re.compile(r"^((?:<[bi]>)*)" + _FONT)
_GENERIC_FAMILY = re.compile(r",(?:serif|sans-serif|monospace)$")


@dataclass(slots=True)
class Line:
    """One text line of a page with its styles.

    Attributes:
        top, left, height: its position (text-page space) and line height.
        text: its text.
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


def page_lines(page_html: str) -> list[HtmlLine]:
    """The text lines of ``TextPage.extractHTML()`` output, in text-page order (one ``findall``)."""
    return _HTML_LINE.findall(page_html)


# The opening of a one-span line ("<b><span style=…") -> (style, monospaced); a book has a few
# dozen of them, so after the first page nearly every line's style is a look-up.
_HEADS: dict[str, tuple[Style, bool] | None] = {}


SMALL_CAPS = " small-caps"  # ends the family of a line set in small capitals


@functools.lru_cache(maxsize=4096)
def _style(family: str, size: str, bold: bool, italic: bool, color: str | None = None) -> Style:
    """A span's style: its family without the generic fallback (and with its colour, unless black),
    its size to the half point, weight, slant. Colour is part of the family because books that
    never set a heading bold set it apart by colour."""
    name = _GENERIC_FAMILY.sub("", family)
    if color and color != "000000":
        name = f"{name} #{color.lower()}"
    return (name, round(float(size) * 2) / 2, bold, italic)


def line_style(inner: str) -> tuple[Style, bool] | None:
    """The style of a line of one span and whether it is monospaced; None for several spans."""
    if inner.count("<span") != 1:
        return None
    head = inner[: inner.find('">')]
    found = _HEADS.get(head, False)
    if found is False:
        m = _SPAN_HEAD.match(head)
        if m is None:
            found = None
        else:
            tags, family = m.group(1), m.group(2)
            style = _style(family, m.group(3), "<b>" in tags, "<i>" in tags, m.group(4))
            found = (style, family.endswith(",monospace"))
        if len(_HEADS) < 4096:
            _HEADS[head] = found
    return found  # type: ignore[return-value]


def read_line(raw: HtmlLine, text: str) -> Line | None:
    """A line with its styles; ``text`` is its text as the block gives it. None when it is blank."""
    line = Line(float(raw[0]), float(raw[1]), float(raw[2]), text)
    inner = raw[3]
    one = line_style(inner)
    if one is not None:
        if not text or text.isspace():
            return None
        line.first = line.last = one[0]
        line.mono = one[1]
        if one[0][2]:
            line.bold = [text]
        return line
    bold = italic = False
    sized = False  # spans of more than one size (small capitals need two)
    spans: list[tuple[Style, str]] = []
    for closing, tag, family, size, color, span in _SPAN_TOKEN.findall(inner):
        if tag:
            if tag == "b":
                bold = not closing
            else:
                italic = not closing
            continue
        if not span or span.isspace():
            continue
        style = _style(family, size, bold, italic, color)
        spans.append((style, span))
        if line.first is None:
            line.first = style
            line.mono = family.endswith(",monospace")
        elif style != line.last:
            line.uniform = False
            if style[1] != line.first[1]:
                sized = True
            if line.last is not None and _opens_label(line.first, line.last, style):
                line.runin = True
        line.last = style
        if bold:
            if "&" in span:
                span = html.unescape(span)
            if line.bold is None:
                line.bold = []
            line.bold.append(span)
    if sized and _small_caps(spans):
        big = max(spans, key=lambda sp: sp[0][1])[0]
        line.first = line.last = (big[0] + SMALL_CAPS, *big[1:])  # type: ignore[assignment]
        line.uniform, line.runin = True, False
        # The sizes tell the case where the text does not: fonts subset for fake small caps
        # often map a capital and its small capital to one character, so the text reads
        # "bAboon" for "Baboon". Small letters that are all capitals already are a word in
        # capitals with a larger initial ("SUPPLEMENTARY INFORMATION:") and stay as they are.
        small = "".join(span for style, span in spans if style[1] != big[1])
        if (
            any(ch.islower() for ch in small)
            and any(ch.isupper() for ch in small)
            or any(ch.islower() for style, span in spans if style[1] == big[1] for ch in span)
        ):
            recased = "".join(
                html.unescape(span).upper() if style[1] == big[1] else html.unescape(span).lower()
                for style, span in spans
            )
            if "".join(recased.split()).lower() == "".join(text.split()).lower():
                line.text = recased
    return line if line.first is not None else None


def _colour(style: Style) -> str:
    at = style[0].rfind(" #")
    return style[0][at:] if at >= 0 else ""


def _opens_label(first: Style, last: Style, style: Style) -> bool:
    """Whether a line that opened in ``first`` (still in ``last``) and goes on in ``style`` opens
    with a run-in label: bold going on in regular, or a colour going on in another colour
    (books that never use bold mark their labels by colour)."""
    if first[2]:
        return last[2] and not style[2]
    colour = _colour(first)
    return bool(colour) and _colour(last) == colour and _colour(style) != colour


def _small_caps(spans: list[tuple[Style, str]]) -> bool:
    """Whether a line's spans are one style at two sizes, capitals at the larger: small capitals.

    Typesetters that fake small caps (WeasyPrint, Word, many DTP exports) set each word's first
    capital at full size and the rest as capitals about 0.7-0.8 of it; read span by span that is
    a line of alternating sizes, not a run-in label, and the line is set in one style.
    """
    sizes = {style[1] for style, _ in spans}
    if len(sizes) != 2 or len({(style[0], *style[2:]) for style, _ in spans}) != 1:
        return False
    small, big = min(sizes), max(sizes)
    if not 0.6 <= small / big <= 0.9:
        return False
    # it opens with a word (a larger bullet or dash before smaller text is no small caps)
    if not spans[0][1].lstrip().lstrip("([{\"'\u201c\u2018")[:1].isalpha():
        return False
    # the larger spans hold word-initial capitals (one letter a word) or whole words in capitals
    return all(
        sum(ch.isalpha() for ch in word) <= 1 or not any(ch.islower() for ch in word)
        for style, text in spans
        if style[1] == big
        for word in text.split()
    )


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


# Finds whether a text holds any character of the map: str.translate walks a non-ASCII text
# character by character (~40 µs for a paragraph), a character class search is ~20 times faster.
_TRANSLATED = re.compile("[" + "".join(map(chr, _LIGATURES)) + "]")


def clean_text(text: str) -> str:
    """Ligatures expanded, soft hyphens dropped, presentation and full-width forms folded (NFKC)."""
    if text.isascii():
        return text
    if _TRANSLATED.search(text):
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
