"""Headings of a PDF and their levels: the outline, numbering and typographic style (body style,
heading looks, style ranking and nesting), and the table captions that are never headings.

The general rules, each held across typesetting conventions (WeasyPrint, LibreOffice, ReportLab,
PyMuPDF Story, pandoc → LaTeX in the structure benchmark):

* A heading is short, stands alone, does not end like a clause and is set apart from the body:
  larger; bold where the body is not; or, at the body size, in small capitals, a colour or all
  capitals — a style set apart so only when that style is used mostly as short lines of its own
  (a colour that opens run-in labels or sets paragraphs is emphasis). Italics alone never are.
* Numbering is a look of its own: body-style lines numbered like sections ("2.3.1 Bless") are
  headings when the numbering hangs together (a parent, neighbour or child number exists), and
  are cut off the paragraph MuPDF merged them into. Numbers give depth relative to the numbered
  headings the looks place.
* The outline gives levels where its titles match; an outline that names nearly every
  heading-like block is the full list of headings, so what it leaves out is not one (a title
  larger than everything it names excepted); a block that opens with an outline title is cut
  after the title.
* Styles are ranked by looks (larger, bold, upright, capitals, rarer) and nested by where they
  appear; table captions (labelled, or in a style seen mostly above tables) are never headings.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from jobs.document import BlockKind
from jobs.extract.pdf_items import _GLYPH_START, _MAX_HEADING_CHARS, _MAX_HEADING_LINES, _Item, _Page
from jobs.extract.typography import SMALL_CAPS, Style

# "2.3.1 Bless": a section number with at least one inner dot, then the title.
_SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)+)\.?\s+[^\W\d_]")
_FULL_OUTLINE = 0.85  # the share of heading-like blocks an outline names when it lists every heading
_HEADING_SIZE_RATIO = 1.15  # a line this much larger than the body size can be a heading
_MAX_BOLD_HEADING_WORDS = 14
_MAX_LEVELS = 6
_HEADING_NUMBER = re.compile(r"^(?:(?:chapter|part|section|appendix)\s+)?[\dIVXLC]+(?:\.\d+)*[.:)]?\s+", re.I)


def _body_style(pages: list[_Page]) -> Style | None:
    """The style most of the text is set in."""
    weights: Counter[Style] = Counter()
    for page in pages[:: max(1, len(pages) // 200)]:  # a sample of pages is plenty
        for it in page.items:
            if it.kind is not None:
                continue
            if it.style is not None:
                weights[it.style] += len(it.text)
            elif it.info:
                for line in it.info:
                    # a run-in label's line runs on in the body style
                    style = line.last if line.runin else line.first
                    if style is not None:
                        weights[style] += len(line.text)
    return weights.most_common(1)[0][0] if weights else None


def _body_size(pages: list[_Page]) -> float:
    weights: Counter[float] = Counter()
    for page in pages:
        for it in page.items:
            if it.size and not it.ocr and it.kind is None:
                weights[round(it.size * 2) / 2] += len(it.text)
    return weights.most_common(1)[0][0] if weights else 0.0


_NOT_ALNUM = re.compile(r"[\W_]+")


def _norm_title(text: str) -> str:
    text = _HEADING_NUMBER.sub("", " ".join(text.split()))
    return _NOT_ALNUM.sub("", text.lower())


_SIZE_STEP = 1.04  # a line this much larger than the body size is set apart by size
_CAPTION_LABEL = re.compile(
    r"^(?:table|figure|fig\.|tab\.|illustration|plate|map)\s*(?:[\dIVX]+(?:[.\-–]\d+)*)?\s*[:.—–]\s", re.I
)
_NUMBERED = re.compile(r"^(?:(?:chapter|part|section|appendix|book)\s+)?([\dIVXLC]+(?:\.\d+)*)[.:)]?\s+\S", re.I)


def _looks(it: _Item, body: Style | None, body_size: float) -> str | None:
    """'size', 'bold' or 'style' when a block may be a heading by its looks, else None.

    A heading is short, stands alone (a block of its own, set wholly in one style), does not end
    like a sentence or a clause, is no list item, and is set apart from the body: larger, or bold
    where the body is not. A bold label that opens a paragraph and runs on is not set wholly in
    one style, so it is no heading.
    """
    if it.kind is not None or it.ocr or it.mono or it.lines > _MAX_HEADING_LINES:
        return None
    text = it.text
    if len(text) > _MAX_HEADING_CHARS or not any(ch.isalpha() for ch in text):
        return None
    stripped = " ".join(text.split())
    if stripped[-1] in ".,;:" or _GLYPH_START.match(stripped):
        return None
    style = it.style
    if style is None or body is None:
        if it.styled:
            return None  # several styles: a run-in label, or a paragraph with emphasis
        # no line styles (the HTML did not match): the coarse rule from size and weight
        if body_size and it.size >= body_size * _HEADING_SIZE_RATIO:
            return "size"
        at_body_size = not body_size or not it.size or it.size >= body_size * 0.95
        if it.bold and it.lines <= 2 and at_body_size and len(stripped.split()) <= _MAX_BOLD_HEADING_WORDS:
            return "bold"
        return None
    if style[1] >= body[1] * _SIZE_STEP:
        return "size"
    if style[1] < body[1] * 0.93:
        return None
    short = len(stripped.split()) <= _MAX_BOLD_HEADING_WORDS
    if style[2] and not body[2]:
        return "bold" if short else None
    if not short or it.lines > 2 or sum(ch.isalpha() for ch in stripped) < 3:
        return None  # a letter or two in colour are a figure's labels ("x", "γ"), not a heading
    if (style != body and _set_apart(style, body)) or _capitals(stripped):
        return "style"
    if _SECTION_NUMBER.match(stripped):
        return "number"
    return None


def _capitals(text: str, at_least: int = 3) -> bool:
    """Set in capitals: every letter upper case, and at least ``at_least`` of them ("ACID SPLASH");
    stops at the first letter that is not a capital."""
    letters = 0
    for ch in text:
        if ch.isalpha():
            if not ch.isupper():
                return False
            letters += 1
    return letters >= at_least


def _set_apart(style: Style, body: Style) -> bool:
    """A body-size style that marks headings without bold: small capitals or a colour.

    Italics alone mark emphasis, subtitles and asides, so they do not count; nor does the
    family name, which MuPDF spells differently for a font's italic and upright cuts.
    """
    family, base = style[0], body[0]
    if family.endswith(SMALL_CAPS):
        return True
    colour = family.rpartition(" #")[2] if " #" in family else ""
    body_colour = base.rpartition(" #")[2] if " #" in base else ""
    return colour != body_colour


def _heading_styles(candidates: dict[int, _Item], pages: list[_Page]) -> set[tuple[Any, ...]]:
    """The body-size styles that head text: set mostly as short lines of their own.

    A style set apart only by colour or small capitals that also sets paragraphs (a boxed text
    in blue) or opens run-in labels ("Armor Class" in red, then the value in black) marks
    emphasis, not headings: kept are the styles whose uses are short lines of their own at
    least four times in five. (Bold cannot be judged so: books set entry headings and run-in
    labels in the same bold.)
    """
    keys = {_level_key(it) for it in candidates.values()}
    styles = {key[:4]: key for key in keys}
    total: Counter[tuple[Any, ...]] = Counter()
    for page in pages:
        for it in page.items:
            if it.kind is not None:
                continue
            if it.style is not None:
                if it.style not in styles:
                    continue  # a key is its style and its case: no candidate's style, no candidate's key
                key = _level_key(it)
                if key in keys:
                    total[key] += 1
            elif it.info:
                # a style that opens run-in labels marks emphasis in the text
                for line in it.info:
                    if line.runin and line.first in styles:
                        total[styles[line.first]] += 1
    short: Counter[tuple[Any, ...]] = Counter(_level_key(it) for it in candidates.values())
    return {key for key in keys if short[key] * 5 >= total[key] * 4}


def _numbered(candidates: dict[int, _Item], others: list[_Item] | None = None) -> set[int]:
    """Body-size lines numbered like sections ("2.3.1 Bless") whose numbering hangs together.

    A numbered line is kept when the document also numbers (here or among ``others``, the
    headings found by their looks) its parent ("2.3"), a neighbouring sibling ("2.3.0",
    "2.3.2") or a first child ("2.3.1.1"): a lone "1.5 Times the cost" in running text has
    none of them.
    """
    numbers: dict[int, tuple[int, ...]] = {}
    for key, it in candidates.items():
        m = _SECTION_NUMBER.match(" ".join(it.text.split()))
        if m:
            numbers[key] = tuple(int(x) for x in m.group(1).split("."))
    seen = set(numbers.values())
    for it in others or ():
        m = _SECTION_NUMBER.match(" ".join(it.text.split()))
        if m:
            seen.add(tuple(int(x) for x in m.group(1).split(".")))
    return {
        key
        for key, n in numbers.items()
        if n[:-1] in seen or (*n[:-1], n[-1] - 1) in seen or (*n, 1) in seen or (*n[:-1], n[-1] + 1) in seen
    }


def _level_key(it: _Item) -> tuple[Any, ...]:
    """What ranks a heading: its style and whether it is set in capitals."""
    caps = _capitals(it.text, at_least=2)
    if it.style is not None:
        return (*it.style, caps)
    return ("", round(it.size * 2) / 2, it.bold, False, caps)


def _captions(pages: list[_Page], looks: dict[int, str]) -> set[int]:
    """Items that caption a table: a label ("Table 3:", "Figure 2.") or a line just above a table.

    A heading that happens to stand above a table keeps its role when its style also heads
    text elsewhere: a style mostly seen right above tables is a caption style.
    """
    above: set[int] = set()
    by_key: dict[tuple[Any, ...], list[int]] = {}
    captions: set[int] = set()
    for page in pages:
        items = page.items
        for n, it in enumerate(items):
            if it.kind is not None or it.lines > _MAX_HEADING_LINES or len(it.text) > _MAX_HEADING_CHARS:
                continue
            text = it.text.lstrip()
            if text[:1] in "TtFfIiPpMm" and _CAPTION_LABEL.match(text):
                captions.add(id(it))
                continue
            nxt = items[n + 1] if n + 1 < len(items) else None
            if nxt is not None and nxt.kind is BlockKind.TABLE and 0 <= nxt.y0 - it.y1 < 3 * max(it.size, 8.0):
                above.add(id(it))
            if id(it) in looks:
                by_key.setdefault(_level_key(it), []).append(id(it))
    for ids in by_key.values():
        near = [i for i in ids if i in above]
        if near and len(near) * 2 >= len(ids):
            captions.update(near)
    for page in pages:
        for it in page.items:
            if id(it) in above and id(it) not in looks:
                captions.add(id(it))
    return captions


def _nested(ranked: list[tuple[Any, ...]], sequence: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Reorder styles of one size so that a style comes before the styles nested under it.

    Looks tell styles of different sizes apart, not those of one size (bold and bold italic,
    two families): there the document's own order decides. A style is the child of another
    when, at most of its occurrences, the nearest heading before it in another style of that
    size is that other style (it appears between that style's occurrences, always after one),
    and not the other way round. Styles without such a relation keep their rank.
    """
    by_size: dict[Any, list[tuple[Any, ...]]] = {}
    for key in ranked:
        by_size.setdefault(key[1], []).append(key)
    if all(len(group) == 1 for group in by_size.values()):
        return ranked
    parents: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for group in by_size.values():
        if len(group) < 2:
            continue
        members = set(group)
        before: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {key: Counter() for key in group}
        last: tuple[Any, ...] | None = None
        for key in sequence:
            if key not in members:
                if key[1] > group[0][1]:
                    last = None  # a larger heading opens a new section: nothing before it counts
                continue
            if last is not None and last != key:
                before[key][last] += 1
            last = key
        totals = Counter(key for key in sequence if key in members)
        for key in group:
            if not before[key]:
                continue
            parent, n = before[key].most_common(1)[0]
            if 2 * n > totals[key] and not 2 * before[parent][key] > totals[parent]:
                parents[key] = parent
    out: list[tuple[Any, ...]] = []
    placed: set[tuple[Any, ...]] = set()

    def place(key: tuple[Any, ...], seen: frozenset[tuple[Any, ...]]) -> None:
        if key in placed or key in seen:
            return
        parent = parents.get(key)
        if parent is not None:
            place(parent, seen | {key})
        placed.add(key)
        out.append(key)

    for key in ranked:
        place(key, frozenset())
    return out


def _parents(ranked: list[tuple[Any, ...]], sequence: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The style each heading style is nested under: the one most often nearest before it.

    For each occurrence of a style, the nearest heading before it in a style ranked above it is
    where it sits; the style found there most often is its parent. Two styles under the same
    parent are siblings and share a level, however their looks rank them.
    """
    rank = {key: n for n, key in enumerate(ranked)}
    last: dict[tuple[Any, ...], int] = {}
    seen: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {}
    for position, key in enumerate(sequence):
        r = rank.get(key)
        if r is None:
            continue
        best: tuple[Any, ...] | None = None
        best_position = -1
        for above in ranked[:r]:
            at = last.get(above, -1)
            if at > best_position:
                best, best_position = above, at
        if best is not None:
            seen.setdefault(key, Counter())[best] += 1
        last[key] = position
    return {key: c.most_common(1)[0][0] for key, c in seen.items()}


def _cut(it: _Item, k: int) -> tuple[_Item, _Item]:
    """A block cut after its first ``k`` lines: the two parts keep their styles."""
    lines = it.text.split("\n")
    cut = it.y0 + k * (it.y1 - it.y0) / max(it.lines, 1)
    head, rest = ("\n".join(lines[:k]) + "\n"), ("\n".join(lines[k:]).rstrip("\n") + "\n")
    parts = []
    for text, count, y0, y1, info in (
        (head, k, it.y0, cut, it.info[:k] if it.info else None),
        (rest, it.lines - k, cut, it.y1, it.info[k:] if it.info else None),
    ):
        part = _Item(it.x0, y0, it.x1, y1, text, count, it.index, it.page, it.size, it.bold, it.mono)
        part.styled, part.ocr = it.styled, it.ocr
        if info:
            first = info[0].first
            uniform = all(line.uniform and line.first == first for line in info)
            part.style = first if uniform else None
            part.info = None if uniform else info
            part.size = first[1] if first else it.size
            part.bold = bool(part.style and part.style[2])
        else:
            part.style = it.style
        part.bold_terms = [t for t in it.bold_terms if t in text] if it.bold_terms else None
        parts.append(part)
    return parts[0], parts[1]


def _split_numbered(pages: list[_Page]) -> None:
    """Cut a numbered heading line off the paragraph it was merged into ("1.1.2 Proficiency Bonus"
    over "Characters have a proficiency bonus…", all in one style).

    A book that sets headings in the body's own style tells them by their number alone, and
    MuPDF then joins the heading and its paragraph into one block. The first line of a block is
    a heading when it is a section number and a title (no more than a heading's words, not
    ending like a sentence) and its number hangs together with the book's other numbered lines
    (:func:`_numbered`), so "1.5 times your speed…" opening a paragraph stays text.
    """
    firsts: dict[int, tuple[_Page, _Item, int]] = {}
    lines: dict[int, _Item] = {}
    for page in pages:
        for n, it in enumerate(page.items):
            if it.kind is not None or it.ocr or not it.text[:1].isdigit():
                continue
            first = it.text.split("\n", 1)[0].strip()
            if not first or first[-1] in ".,;:" or len(first.split()) > _MAX_BOLD_HEADING_WORDS:
                continue
            if not _SECTION_NUMBER.match(first):
                continue
            head = _Item(it.x0, it.y0, it.x1, it.y1, first, 1, it.index, it.page)
            lines[id(head)] = head
            if it.lines >= 2:
                firsts[id(head)] = (page, it, n)
    if not firsts:
        return
    keep = _numbered(lines)
    cuts: dict[int, list[tuple[int, _Item]]] = {}
    for key, (page, it, n) in firsts.items():
        if key in keep:
            cuts.setdefault(id(page), []).append((n, it))
    for page in pages:
        for n, it in sorted(cuts.get(id(page), []), key=lambda c: -c[0]):
            page.items[n : n + 1] = list(_cut(it, 1))


def _split_at_titles(pages: list[_Page], toc_by_page: dict[int, dict[str, int]]) -> None:
    """Cut a block that opens with an outline title and goes on ("Animated Object Statistics"
    over a caption set in the same bold): the outline names the heading exactly, so the lines
    after the title are what follows it, not part of it."""
    for page in pages:
        wanted = toc_by_page.get(page.number)
        if not wanted:
            continue
        out: list[_Item] = []
        for it in page.items:
            if it.kind is None and 2 <= it.lines <= 2 * _MAX_HEADING_LINES:
                lines = it.text.split("\n")
                start = _norm_title(lines[0])
                # the first line is tried first: it rules out nearly every block, cheaply
                if not start or not any(title.startswith(start) for title in wanted) or _norm_title(it.text) in wanted:
                    out.append(it)
                    continue
                for k in range(1, min(it.lines, _MAX_HEADING_LINES + 1)):
                    if _norm_title(" ".join(lines[:k])) in wanted:
                        out.extend(_cut(it, k))
                        break
                else:
                    out.append(it)
                continue
            out.append(it)
        page.items = out


def _assign_levels(pages: list[_Page], toc: list[list[Any]]) -> dict[int, int]:
    """Heading level per item id: the outline, then numbering, then typographic style.

    Candidates are the blocks :func:`_looks` accepts. Their styles (family, size, weight,
    italics, capitals) are ranked: larger first, bold before regular, capitals before mixed
    case, and of two otherwise equal styles the rarer first; styles of one size are then put in
    their nesting order (:func:`_nested`). Styles the outline's entries are set in take the
    outline's level; the others sit one level below the style they are nested under
    (:func:`_parents`), else below the style ranked just above them.
    Headings numbered "2.3.1" take their depth from the numbering when nothing else places
    them. Table captions are never headings (they become CAPTION blocks, kept with the table).
    """
    body = _body_style(pages)
    body_size = body[1] if body else _body_size(pages)
    toc_by_page: dict[int, dict[str, int]] = {}
    for level, title, page_no, *_ in toc:
        key = _norm_title(str(title))
        if key and page_no >= 1:
            toc_by_page.setdefault(page_no, {}).setdefault(key, level)
    if toc_by_page:
        _split_at_titles(pages, toc_by_page)
    _split_numbered(pages)
    looks, items = _heading_candidates(pages, body, body_size)
    levels, anchors = _outline_levels(pages, toc_by_page)
    matched = sum(1 for i in looks if i in levels)
    if matched >= 10 and matched >= _FULL_OUTLINE * len(looks):
        # The outline names nearly every block that looks like a heading: it is the book's full
        # list of headings, and a bold or large line it leaves out ("Sage Advice", "Spell
        # Scroll (table)") is emphasis, not a heading.
        # A title set larger than every heading it names stays (the book's own title).
        largest = max(items[i].size for i in looks if i in levels)
        looks = {i: kind for i, kind in looks.items() if i in levels or items[i].size > largest}
    captions = _captions(pages, looks)
    for page in pages:
        for it in page.items:
            if id(it) in captions and id(it) not in levels:
                it.kind = BlockKind.CAPTION
                looks.pop(id(it), None)

    _style_levels(pages, looks, items, levels, anchors)
    return levels


def _heading_candidates(
    pages: list[_Page], body: Style | None, body_size: float
) -> tuple[dict[int, str], dict[int, _Item]]:
    """The blocks that look like headings (by id: how they look, and the block), their styles and
    numbering checked against the rest of the book."""
    looks: dict[int, str] = {}
    items: dict[int, _Item] = {}
    for page in pages:
        for it in page.items:
            kind = _looks(it, body, body_size)
            if kind:
                looks[id(it)] = kind
                items[id(it)] = it
    styled = {i: items[i] for i, kind in looks.items() if kind == "style"}
    if styled:
        keep = _heading_styles(styled, pages)
        for i, it in styled.items():
            if _level_key(it) not in keep:
                looks.pop(i)
    numbered = {i: items[i] for i, kind in looks.items() if kind == "number"}
    if numbered:
        keep_numbers = _numbered(numbered, [items[i] for i, kind in looks.items() if kind != "number"])
        for i in numbered:
            if i not in keep_numbers:
                looks.pop(i)
    return looks, items


def _outline_levels(
    pages: list[_Page], toc_by_page: dict[int, dict[str, int]]
) -> tuple[dict[int, int], dict[tuple[Any, ...], Counter[int]]]:
    """Levels from the outline, where an entry's title matches a short block of the page it points to,
    and per style the outline levels its blocks took."""
    levels: dict[int, int] = {}
    anchors: dict[tuple[Any, ...], Counter[int]] = {}
    if toc_by_page:
        for page in pages:
            wanted = toc_by_page.get(page.number)
            if not wanted:
                continue
            for it in page.items:
                if it.kind is not None or it.lines > _MAX_HEADING_LINES or len(it.text) > _MAX_HEADING_CHARS:
                    continue
                level = wanted.get(_norm_title(it.text))
                if level is not None:
                    levels[id(it)] = min(level, _MAX_LEVELS)
                    if it.style is not None or it.size:
                        anchors.setdefault(_level_key(it), Counter())[level] += 1
    return levels, anchors


def _style_levels(
    pages: list[_Page],
    looks: dict[int, str],
    items: dict[int, _Item],
    levels: dict[int, int],
    anchors: dict[tuple[Any, ...], Counter[int]],
) -> None:
    """Level the candidates the outline did not place (into ``levels``): typographic style, ranked and
    anchored to the outline's levels, then numbering."""
    # 2. Typographic style, ranked, anchored to the outline's levels.
    counts: Counter[tuple[Any, ...]] = Counter(_level_key(items[i]) for i in looks)
    ranked = sorted(counts, key=lambda k: (-k[1], not k[2], k[3], not k[4], counts[k], str(k[0])))
    sequence = [_level_key(it) for page in pages for it in page.items if id(it) in looks or id(it) in levels]
    ranked = _nested(ranked, sequence)
    anchored = {key: c.most_common(1)[0][0] for key, c in anchors.items()}
    parents = _parents(ranked, sequence)
    style_level: dict[tuple[Any, ...], int] = {}
    current = 0
    for style_key in ranked:
        if style_key in anchored:
            current = anchored[style_key]
        elif style_key in parents:
            current = min(style_level[parents[style_key]] + 1, _MAX_LEVELS)
        else:
            current = min(current + 1, _MAX_LEVELS)
        style_level[style_key] = current
    depths: dict[int, int] = {}
    offsets: Counter[int] = Counter()
    for item_id in looks:
        if item_id in levels:
            continue
        number = _NUMBERED.match(" ".join(items[item_id].text.split()))
        if number:
            depths[item_id] = number.group(1).count(".") + 1
            if looks[item_id] != "number":
                offsets[style_level[_level_key(items[item_id])] - depths[item_id]] += 1
    # Numbering gives depth relative to the numbered headings the looks place: "1 Rules" under
    # an unnumbered book title is level 2, so "1.1.1 Abilities" is level 4.
    offset = offsets.most_common(1)[0][0] if offsets else 0
    for item_id in looks:
        if item_id in levels:
            continue
        it = items[item_id]
        level = style_level[_level_key(it)]
        depth = depths.get(item_id, 1)
        if depth > 1 and not anchored:
            # "2.3.1 Cover" sits at depth 3 whatever its size says
            level = max(1, min(depth + offset, _MAX_LEVELS))
        levels[item_id] = level
