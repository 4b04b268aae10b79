"""Structure rules that hold across typesetting conventions, each pinned on a small generated page.

The rules came from layouts the extractor had not been tuned on (pandoc → LaTeX, a three-column
book with no bold, a numbered book with no bold; see ``benchmarks/rulebook_books.py``); each test
builds the smallest page that shows one convention and fails without its rule.
"""

from __future__ import annotations

import io

import pymupdf
import pytest

from jobs.document import BlockKind, ExtractedDocument
from jobs.extract import extract_document

pytestmark = pytest.mark.unit

PROSE = "The marsh road winds through reeds where lanterns drift at night and travellers keep close."


def _headings(doc: ExtractedDocument) -> list[tuple[str, int]]:
    return [(b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING]


def test_a_bold_section_number_set_a_quad_from_its_title_is_one_heading_not_a_table_row() -> None:
    # LaTeX sets "1.1" and "Roads" a quad apart; MuPDF makes two lines side by side of them, and
    # a chapter heading straight over a section heading then looks like two table rows.
    pdf = pymupdf.open()
    page = pdf.new_page()
    y = 72.0
    for number, title, size in (("1", "Marsh Travel", 12), ("1.1", "Roads", 11), ("1.1.1", "Causeways", 10)):
        page.insert_text((72, y), number, fontname="hebo", fontsize=size)
        page.insert_text((72 + size * 2.6, y), title, fontname="hebo", fontsize=size)
        y += size * 1.6
    for _ in range(3):
        page.insert_text((72, y), PROSE, fontsize=10)
        y += 12
    # plain numbered rows (a table's first column) are never joined into headings
    y += 20
    for n, animal in enumerate(["Weasel", "Giant rat", "Badger"], 1):
        page.insert_text((72, y), str(n), fontsize=9)
        page.insert_text((110, y), animal, fontsize=9)
        y += 11
    doc = extract_document(pdf.tobytes(), "numbered.pdf")
    assert _headings(doc) == [("1 Marsh Travel", 1), ("1.1 Roads", 2), ("1.1.1 Causeways", 3)]
    assert not any("Marsh Travel" in b.text for b in doc.blocks if b.kind is BlockKind.TABLE)
    assert not [t for t, _ in _headings(doc) if "Weasel" in t or "Giant rat" in t]


def _outlined_book(extra_bold: bool) -> bytes:
    """Three pages with an outline of every heading, and bold lines the outline leaves out."""
    pdf = pymupdf.open()
    toc = []
    pdf.new_page().insert_text((72, 200), "The Marsh Almanac", fontname="hebo", fontsize=24)
    for n, chapter in enumerate(["Roads", "Keeps", "Fens"], 2):
        page = pdf.new_page()
        toc.append([1, chapter, n])
        page.insert_text((72, 72), chapter, fontname="hebo", fontsize=16)
        y = 110.0
        for k, entry in enumerate(["North", "South", "East"]):
            title = f"{chapter} {entry}"
            toc.append([2, title, n])
            page.insert_text((72, y), title, fontname="hebo", fontsize=10)
            y += 14
            if extra_bold and k == 1 and n == 2:
                # a bold line the outline does not name, then a caption in the heading's own bold
                page.insert_text((72, y), "Sage Advice", fontname="hebo", fontsize=10)
                y += 14
            for _ in range(3):
                page.insert_text((72, y), PROSE, fontsize=10)
                y += 12
            y += 10
    pdf.set_toc(toc)
    return pdf.tobytes()


def test_an_outline_that_names_every_heading_is_trusted_over_bold_lines_it_leaves_out() -> None:
    doc = extract_document(_outlined_book(extra_bold=True), "almanac.pdf")
    headings = _headings(doc)
    assert ("Sage Advice", 2) not in headings and ("Sage Advice", 3) not in headings
    assert "Sage Advice" in [b.text for b in doc.blocks if b.kind is BlockKind.PARAGRAPH]
    # the book's title, larger than anything the outline names, stays a heading
    assert headings[0][0] == "The Marsh Almanac"
    assert [t for t, _ in headings[1:]] == [
        "Roads",
        "Roads North",
        "Roads South",
        "Roads East",
        "Keeps",
        "Keeps North",
        "Keeps South",
        "Keeps East",
        "Fens",
        "Fens North",
        "Fens South",
        "Fens East",
    ]


def test_a_block_that_opens_with_an_outline_title_is_cut_after_it() -> None:
    # A heading and the caption under it set in one bold: MuPDF makes one block of the two.
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Objects", fontname="hebo", fontsize=16)
    page.insert_text((72, 110), "Object Statistics", fontname="hebo", fontsize=10)
    page.insert_text((72, 122), "Table: Object Sizes", fontname="hebo", fontsize=10)
    y = 140.0
    for _ in range(4):
        page.insert_text((72, y), PROSE, fontsize=10)
        y += 12
    pdf.set_toc([[1, "Objects", 1], [2, "Object Statistics", 1]])
    doc = extract_document(pdf.tobytes(), "objects.pdf")
    assert _headings(doc) == [("Objects", 1), ("Object Statistics", 2)]
    assert [b.text for b in doc.blocks if b.kind is BlockKind.CAPTION] == ["Table: Object Sizes"]


def test_a_running_head_that_never_repeats_its_text_is_furniture_by_its_place() -> None:
    # A dictionary-style head names the first and last entry of its page, so its text is new on
    # every page; its place (above all the text, set apart from it, in one style) repeats.
    pdf = pymupdf.open()
    names = [f"Creature {chr(65 + k)}{chr(97 + k)}" for k in range(16)]
    for p in range(8):
        page = pdf.new_page()
        first, last = names[2 * p], names[2 * p + 1]
        x = 72 if p % 2 else 400
        page.insert_text((x, 40), f"{first} \u2013 {last}", fontname="helv", fontsize=7.5)
        y = 90.0
        for name in (first, last):
            page.insert_text((72, y), name, fontname="hebo", fontsize=11)
            y += 16
            for _ in range(8):
                page.insert_text((72, y), PROSE, fontsize=10)
                y += 12
            y += 14
    doc = extract_document(pdf.tobytes(), "bestiary.pdf")
    texts = [b.text for b in doc.blocks]
    assert not [t for t in texts if "\u2013" in t]
    assert [t for t, _ in _headings(doc)] == names
    assert doc.furniture_dropped == 8


def _story_pdf(html: str, css: str, columns: int = 1) -> bytes:
    buffer = io.BytesIO()
    writer = pymupdf.DocumentWriter(buffer)
    story = pymupdf.Story(html=html, user_css=css)
    width = (468 - 12 * (columns - 1)) / columns
    rects = [pymupdf.Rect(72 + k * (width + 12), 72, 72 + k * (width + 12) + width, 720) for k in range(columns)]
    more = True
    while more:
        device = writer.begin_page(pymupdf.paper_rect("letter"))
        for rect in rects:
            more, _ = story.place(rect)
            story.draw(device)
            if not more:
                break
        writer.end_page()
    writer.close()
    return buffer.getvalue()


RED = (0.48, 0.12, 0.12)


def _small_caps(page: pymupdf.Page, x: float, y: float, text: str, size: float, garbled: bool = False) -> None:
    """Fake small capitals, as WeasyPrint or Word set them: each word's capital at full size,
    the rest at four fifths of it, all in one colour. The text layer keeps the source's case,
    or, ``garbled``, mixes it up as fonts subset for small caps do ("bAboon")."""
    font = pymupdf.Font("tiro")
    for word in text.split():
        rest = "".join(ch.upper() if k % 2 else ch for k, ch in enumerate(word[1:])) if garbled else word[1:]
        for part, scale in ((word[0].lower() if garbled else word[0], 1.0), (rest, 0.8)):
            page.insert_text((x, y), part, fontname="tiro", fontsize=size * scale, color=RED)
            x += font.text_length(part, size * scale)
        x += font.text_length(" ", size)


def _colour_only_bestiary() -> bytes:
    """Entries in small capitals at the body size, labels and emphasis in colour, no bold at all."""
    font = pymupdf.Font("tiro")
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Bestiary", fontname="tiro", fontsize=18)
    y = 110.0
    for n, name in enumerate(["Marsh Troll", "Reed Wisp", "Bog Hound", "Lantern Eel"]):
        _small_caps(page, 72, y, name, 10, garbled=n % 2 == 1)
        y += 13
        page.insert_text((72, y), "Large monstrosity, chaotic evil", fontname="tiit", fontsize=10)
        y += 13
        for label, value in (("Armor Class", "15 (natural armor)"), ("Hit Points", "59 (7d10 + 21)")):
            page.insert_text((72, y), label, fontname="tiro", fontsize=10, color=RED)
            page.insert_text((72 + font.text_length(label + " ", 10), y), value, fontname="tiro", fontsize=10)
            y += 12
        if n == 1:
            # a line of colour emphasis on its own, in the labels' colour: no heading
            page.insert_text((72, y + 4), "Sage Advice", fontname="tiro", fontsize=10, color=RED)
            y += 16
        for _ in range(2):
            page.insert_text((72, y), PROSE, fontname="tiro", fontsize=10)
            y += 12
        y += 14
    return pdf.tobytes()


def test_small_capitals_in_colour_at_the_body_size_head_entries_in_a_book_without_bold() -> None:
    doc = extract_document(_colour_only_bestiary(), "bestiary.pdf")
    # read back in their case: the larger capital starts each word
    assert _headings(doc) == [("Bestiary", 1)] + [
        (name, 2) for name in ["Marsh Troll", "Reed Wisp", "Bog Hound", "Lantern Eel"]
    ]
    # the subtitle in italics and the colour line are text
    assert [b.text for b in doc.blocks].count("Large monstrosity, chaotic evil") == 4
    assert "Sage Advice" in [b.text for b in doc.blocks if b.kind is not BlockKind.HEADING]


def test_a_word_in_capitals_with_a_larger_initial_keeps_its_capitals() -> None:
    # The Federal Register sets "SUPPLEMENTARY INFORMATION:" with larger initials; its text
    # layer is in capitals already, so nothing is recased.
    pdf = pymupdf.open()
    page = pdf.new_page()
    font = pymupdf.Font("helv")
    x = 72.0
    for part, size in (("S", 10), ("UPPLEMENTARY", 8), (" I", 10), ("NFORMATION:", 8)):
        page.insert_text((x, 100), part, fontname="helv", fontsize=size)
        x += font.text_length(part, size)
    y = 114.0
    for _ in range(4):
        page.insert_text((72, y), PROSE, fontname="helv", fontsize=9)
        y += 11
    doc = extract_document(pdf.tobytes(), "register.pdf")
    assert doc.blocks[0].text == "SUPPLEMENTARY INFORMATION:"


def test_a_label_in_colour_opens_a_line_of_its_own_like_a_bold_one() -> None:
    doc = extract_document(_colour_only_bestiary(), "bestiary.pdf")
    fields = [b.text for b in doc.blocks if b.text.startswith("Armor Class")]
    assert len(fields) == 4
    assert all(f.startswith("Armor Class 15 (natural armor)\nHit Points 59 (7d10 + 21)") for f in fields)


def test_a_dash_bullet_larger_than_its_item_is_no_small_capital() -> None:
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Jumping", fontname="helv", fontsize=16)
    y = 100.0
    for item in ("You try to jump an unusually long distance", "You pull off a stunt midjump"):
        page.insert_text((72, y), "\u2013", fontname="helv", fontsize=10)
        page.insert_text((80, y), item, fontname="helv", fontsize=8.5)
        y += 11
    for _ in range(3):
        page.insert_text((72, y), PROSE, fontname="helv", fontsize=8.5)
        y += 11
    doc = extract_document(pdf.tobytes(), "jump.pdf")
    assert _headings(doc) == [("Jumping", 1)]
    assert any("You try to jump" in b.text for b in doc.blocks)  # its case untouched


NUMBERED_CSS = """
body {font-family: sans-serif; font-size: 9pt;}
h1 {font-size: 15pt; font-weight: normal; margin: 12pt 0 6pt 0;}
h1.title {font-size: 22pt;}
h2 {font-size: 11pt; font-weight: normal; margin: 10pt 0 4pt 0;}
p {margin: 0 0 3pt 0;}
p.h {margin: 9pt 0 2pt 0;}
"""


def test_headings_set_in_the_body_style_are_found_by_their_numbers() -> None:
    # No bold anywhere and entries at the body size: only their numbers (and the space above)
    # tell them; MuPDF joins each to the paragraph under it.
    parts = ['<h1 class="title">The Digest</h1>']
    for c, chapter in enumerate(["Roads", "Keeps"], 1):
        parts.append(f"<h1>{c} {chapter}</h1>")
        for s, section in enumerate(["Travel", "Rest"], 1):
            parts.append(f"<h2>{c}.{s} {chapter} {section}</h2>")
            for e, entry in enumerate(["Pace", "Fatigue", "Weather"], 1):
                parts.append(f'<p class="h">{c}.{s}.{e} {entry} on the {chapter}</p><p>{PROSE} {PROSE}</p>')
    parts.append("<p>Each day 1.5 times the usual pace is possible on a paved road.</p>")
    doc = extract_document(_story_pdf("".join(parts), NUMBERED_CSS), "digest.pdf")
    headings = dict(_headings(doc))
    assert headings["1 Roads"] == headings["2 Keeps"] == headings["The Digest"] + 1
    assert headings["1.2 Roads Rest"] == headings["1 Roads"] + 1
    assert headings["1.2.3 Weather on the Roads"] == headings["2.1.1 Pace on the Keeps"] == headings["1 Roads"] + 2
    assert len(headings) == 1 + 2 + 4 + 12
    # the paragraphs are text under them, and a number in running text heads nothing
    assert sum(b.text.startswith("The marsh road") for b in doc.blocks if b.kind is BlockKind.PARAGRAPH) == 12
    assert not [t for t in headings if t.startswith("1.5")]


def test_entries_in_capitals_at_the_body_size_are_headings_and_a_drop_cap_joins_its_word() -> None:
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Spells", fontname="tiro", fontsize=20)
    # a drop cap three lines tall, the paragraph's first line going on beside it
    page.insert_text((72, 128), "S", fontname="tiro", fontsize=34)
    page.insert_text(
        (98, 104), "pells are listed by level, then alphabetically, each with", fontname="tiro", fontsize=10
    )
    page.insert_text(
        (98, 117), "its school, casting time, range, components and duration.", fontname="tiro", fontsize=10
    )
    y = 160.0
    for name in ["ACID SPLASH", "FIRE BOLT", "MAGE HAND"]:
        page.insert_text((72, y), name, fontname="tiro", fontsize=10)
        y += 13
        page.insert_text((72, y), "Conjuration cantrip", fontname="tiit", fontsize=10)
        y += 13
        for _ in range(3):
            page.insert_text((72, y), PROSE, fontname="tiro", fontsize=10)
            y += 12
        y += 12
    doc = extract_document(pdf.tobytes(), "caps.pdf")
    assert _headings(doc) == [("Spells", 1), ("ACID SPLASH", 2), ("FIRE BOLT", 2), ("MAGE HAND", 2)]
    assert doc.blocks[1].text.startswith("Spells are listed by level")


def test_the_head_of_a_one_page_chapter_is_known_by_the_place_the_other_heads_hold() -> None:
    # Book title left and chapter right on one baseline; most chapters run three pages (their
    # heads repeat), two run one page (their heads are seen once).
    pdf = pymupdf.open()
    for chapter, length in (("Roads", 3), ("Credits", 1), ("Keeps", 3), ("Fens", 3), ("Index", 1)):
        for n in range(length):
            page = pdf.new_page()
            page.insert_text((54, 36), "FATE OF THE MARSH", fontname="helv", fontsize=8)
            page.insert_text((500, 36), chapter, fontname="helv", fontsize=8)
            y = 66.0
            if n == 0:
                page.insert_text((60, y), chapter, fontname="hebo", fontsize=18)
                y += 30
            for _ in range(10):
                page.insert_text((60, y), PROSE, fontname="tiro", fontsize=10)
                y += 13
    doc = extract_document(pdf.tobytes(), "fate.pdf")
    assert not [b.text for b in doc.blocks if "MARSH" in b.text]
    assert [t for t, _ in _headings(doc)] == ["Roads", "Credits", "Keeps", "Fens", "Index"]


def test_labels_and_bold_terms_in_the_middle_of_a_long_block_are_read() -> None:
    # Only a long block's first and last lines are read span by span, and the lines between
    # that hold bold: a label on the fifth of nine lines still opens a line of its own.
    labels = ["Armor Class", "Hit Points", "Speed", "Senses", "Languages", "Challenge", "Skills", "Saves", "Reach"]
    fields = "<br/>".join(f"<b>{label}</b> {n} (some value)" for n, label in enumerate(labels, 10))
    prose = f"{PROSE} " * 4 + "A <b>Lantern</b> burns here. " + f"{PROSE} " * 4
    html = f"<h1>Marsh Troll</h1><p>{fields}</p><p>{prose}</p>"
    css = "body {font-family: serif; font-size: 10pt;} h1 {font-size: 16pt;} p {margin: 0 0 4pt 0;}"
    doc = extract_document(_story_pdf(html, css), "troll.pdf")
    block = next(b for b in doc.blocks if b.text.startswith("Armor Class"))
    assert block.text.split("\n") == [f"{label} {n} (some value)" for n, label in enumerate(labels, 10)]
    assert "Languages" in block.bold_terms
    paragraph = next(b for b in doc.blocks if "A Lantern burns" in b.text)
    assert len(paragraph.text) > 700 and paragraph.bold_terms == ["Lantern"]  # nine lines or so


def test_a_figure_label_in_colour_is_no_heading() -> None:
    # LaTeX figures label their axes and points in colour at the body size ("x", "γ", "U").
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Topology", fontname="tiro", fontsize=18)
    y = 100.0
    for label in ("x", "y", "U"):
        page.insert_text((200, y), label, fontname="tiit", fontsize=10, color=(0, 0, 1))
        y += 30
    for _ in range(6):
        page.insert_text((72, y), PROSE, fontname="tiro", fontsize=10)
        y += 12
    doc = extract_document(pdf.tobytes(), "figure.pdf")
    assert _headings(doc) == [("Topology", 1)]


def test_a_long_paragraph_with_emphasis_near_its_end_stays_one_paragraph() -> None:
    prose = f"{PROSE} " * 8 + "It ends at the <i>Old Ford</i> by the mill."
    css = "body {font-family: serif; font-size: 10pt;} h1 {font-size: 16pt;} p {margin: 0 0 4pt 0;}"
    doc = extract_document(_story_pdf(f"<h1>Roads</h1><p>{prose}</p>", css), "roads.pdf")
    assert [b.kind for b in doc.blocks] == [BlockKind.HEADING, BlockKind.PARAGRAPH]
    assert doc.blocks[1].text.endswith("by the mill.")


def test_a_run_in_heading_a_quad_from_its_text_is_a_heading_and_a_label_is_not() -> None:
    # LaTeX's \paragraph: the bold title, a quad, then the text on the same line. A run-in
    # label ("Range: 60 feet") has a word space there and stays in its paragraph.
    font, bold = pymupdf.Font("tiro"), pymupdf.Font("tibo")
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "Abilities", fontname="tibo", fontsize=16)
    y = 110.0
    for title in ("Strength Checks", "Other Checks"):
        page.insert_text((72, y), title, fontname="tibo", fontsize=10)
        page.insert_text((72 + bold.text_length(title, 10) + 10, y), "A check can model any attempt", fontsize=10)
        y += 12
        for _ in range(3):
            page.insert_text((72, y), PROSE, fontname="tiro", fontsize=10)
            y += 12
        y += 12
    page.insert_text((72, y), "Range:", fontname="tibo", fontsize=10)
    page.insert_text((72 + bold.text_length("Range:", 10) + font.text_length(" ", 10), y), "60 feet", fontsize=10)
    page.insert_text((72, y + 12), PROSE, fontname="tiro", fontsize=10)
    doc = extract_document(pdf.tobytes(), "abilities.pdf")
    assert _headings(doc) == [("Abilities", 1), ("Strength Checks", 2), ("Other Checks", 2)]
    texts = [b.text for b in doc.blocks]
    assert sum(t.startswith("A check can model any attempt") for t in texts) == 2
    assert any(t.startswith("Range: 60 feet") for t in texts)


def _numbered_column_page(pdf: pymupdf.Document, left: list[tuple[str, str]], right: list[str]) -> None:
    """A two-column A4 page: ``left`` (kind, text) runs down the left column, ``right`` lines sit at
    the top of the right one; a running head and a folio are centred across the gutter."""
    page = pdf.new_page(width=595, height=842)
    page.insert_text((260, 30), "Marsh Almanac", fontsize=8)
    page.insert_text((288, 814), "- 7 -", fontsize=8)
    y = 60.0
    for kind, text in left:
        if kind == "h":
            y += 8
            page.insert_text((48, y), text, fontname="hebo", fontsize=12)
            y += 18
        else:
            page.insert_text((48, y), text, fontsize=9)
            y += 12
    y = 60.0
    for text in right:
        page.insert_text((310, y), text, fontsize=9)
        y += 12


def test_a_column_running_on_alone_below_a_two_column_band_is_read_before_the_next_column() -> None:
    # The left column runs to the foot of the page while the right one ends near the top (an
    # entry's last lines). Read the whole left column, then the right one — not the top band's
    # two columns first and then the rest of the left column under them.
    pdf = pymupdf.open()
    left = [("p", "depending on how the road was kept by the wardens of the fen."), ("h", "2 Keeps")]
    left += [("p", f"Keep line {n}: stone towers guard the causeway over the marsh.") for n in range(1, 30)]
    left += [("h", "2.4 Drowned Keep")]
    right = ["A drowned keep stands in black water and only its", "towers show above the reeds at dusk."]
    _numbered_column_page(pdf, left, right)
    doc = extract_document(pdf.tobytes(), "columns.pdf")
    texts = [b.text for b in doc.blocks]
    keep = next(i for i, t in enumerate(texts) if t == "2 Keeps")
    drowned = next(i for i, t in enumerate(texts) if t == "2.4 Drowned Keep")
    body = next(i for i, t in enumerate(texts) if t.startswith("A drowned keep stands"))
    assert keep < drowned < body


def test_a_full_width_heading_between_two_column_sets_keeps_its_place() -> None:
    # The rule above must not swallow a heading that separates two column sets.
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    for x in (48, 310):
        for n in range(4):
            page.insert_text((x, 60 + 12 * n), f"Upper column at {x}, line {n} of the reed beds.", fontsize=9)
    page.insert_text((48, 130), "The Fens Beyond the Old Causeway", fontname="hebo", fontsize=16)  # over the gutter
    for x in (48, 310):
        for n in range(4):
            page.insert_text((x, 160 + 12 * n), f"Lower column at {x}, line {n} of the fens.", fontsize=9)
    doc = extract_document(pdf.tobytes(), "sets.pdf")
    texts = " | ".join(b.text for b in doc.blocks)
    assert texts.index("Upper column at 310") < texts.index("The Fens Beyond") < texts.index("Lower column at 48")


def test_a_wrapped_list_item_split_by_mupdf_stays_one_item() -> None:
    # ReportLab sets a bullet's wrapped line flush with the text; MuPDF then closes the block after
    # the bullet's first line and opens the next with the continuation plus the next bullet.
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    page.insert_text((48, 60), "3.1 Blinded", fontname="hebo", fontsize=12)
    y = 84.0
    for first, rest in (
        ("A blinded creature can't see and automatically fails any", "ability check that requires sight."),
        ("Attack rolls against the creature have advantage, and the", "creature's attack rolls have disadvantage."),
    ):
        # the bullet a size larger than the text: its taller line makes MuPDF close the block
        page.insert_text((48, y), "-", fontsize=10)
        page.insert_text((53.6, y), " " + first, fontsize=8.5)
        page.insert_text((56, y + 10.5), rest, fontsize=8.5)
        y += 24
    doc = extract_document(pdf.tobytes(), "list.pdf")
    items = [b.text for b in doc.blocks if b.kind is BlockKind.LIST_ITEM]
    assert items == [
        "A blinded creature can't see and automatically fails any ability check that requires sight.",
        "Attack rolls against the creature have advantage, and the creature's attack rolls have disadvantage.",
    ]
    assert not [b for b in doc.blocks if b.kind is BlockKind.PARAGRAPH]
