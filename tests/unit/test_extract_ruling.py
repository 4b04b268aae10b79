"""Ruled tables: grids from drawn rules, filled with the page's words (synthetic and corpus PDFs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.document import BlockKind
from jobs.extract import TableMode, extract_document
from jobs.extract.ruling import edges_in, ruled_grids, ruled_tables, widen_to_rules

pytestmark = pytest.mark.unit

GOV = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "pdfs" / "us-gov-public-domain"
SAMPLES = GOV.parent / "py-pdf-sample-files"
needs_corpus = pytest.mark.skipif(not GOV.is_dir(), reason=f"shared corpus not found at {GOV}")


def _grid(xs: list[float], ys: list[float]) -> list[tuple[float, float, float, float]]:
    """Hairline rules of a full grid."""
    edges = [(xs[0], y - 0.5, xs[-1], y + 0.5) for y in ys]
    edges += [(x - 0.5, ys[0], x + 0.5, ys[-1]) for x in xs]
    return edges


def _word(text: str, x: float, y: float, line: int = 0) -> tuple:
    return (x, y - 5, x + 6 * len(text), y + 5, text, 0, line, 0)


def test_a_full_grid_reads_cell_by_cell() -> None:
    edges = _grid([0, 100, 200], [0, 20, 40, 60])
    words = [
        _word("Roll", 5, 10),
        _word("Result", 105, 10),
        _word("1", 5, 30),
        _word("Miss", 105, 30),
        _word("2", 5, 50),
        _word("Hit", 105, 50),
        _word("hard", 135, 50),
        _word("outside", 300, 30),  # beyond the grid: not part of the table
    ]
    [(bbox, rows)] = ruled_tables(edges, words)
    assert bbox == (0, 0, 200, 60)
    assert rows == [["Roll", "Result"], ["1", "Miss"], ["2", "Hit hard"]]


def test_rows_between_sparse_rules_split_by_text_line() -> None:
    # A rule every three data rows (zebra bands): each text line becomes a row.
    edges = _grid([0, 100, 200], [0, 20, 80])
    words = [_word("State", 5, 10), _word("Total", 105, 10)]
    for n, (state, total) in enumerate([("Alabama", "71"), ("Alaska", "7"), ("Arizona", "27")]):
        words += [_word(state, 5, 30 + 18 * n), _word(total, 105, 30 + 18 * n)]
    [(_, rows)] = ruled_tables(edges, words)
    assert rows == [["State", "Total"], ["Alabama", "71"], ["Alaska", "7"], ["Arizona", "27"]]


def test_a_wrapped_cell_beside_single_lines_stays_one_row() -> None:
    edges = _grid([0, 100, 300], [0, 20, 60])
    words = [
        _word("Name", 5, 10),
        _word("Effect", 105, 10),
        _word("Fireball", 5, 30),
        _word("Deals", 105, 30),
        _word("fire", 145, 30),
        _word("damage", 105, 48),
    ]
    [(_, rows)] = ruled_tables(edges, words)
    assert rows == [["Name", "Effect"], ["Fireball", "Deals fire damage"]]


def test_stacked_tables_in_one_region_come_apart() -> None:
    top = _grid([0, 100, 200], [0, 20, 40])
    bottom = _grid([0, 50, 150], [100, 120, 140])
    words = [_word(t, x, y) for t, x, y in [("a", 5, 10), ("b", 105, 10), ("c", 5, 30), ("d", 105, 30)]]
    words += [_word(t, x, y) for t, x, y in [("e", 5, 110), ("f", 55, 110), ("g", 5, 130), ("h", 55, 130)]]
    tables = ruled_tables(top + bottom, words)
    assert [rows for _, rows in tables] == [[["a", "b"], ["c", "d"]], [["e", "f"], ["g", "h"]]]


def test_tables_side_by_side_with_rows_a_few_points_apart_come_apart() -> None:
    # One small table in each column of a page (a stat block's label row and values), the right
    # one starting 10 pt higher: their bottom rules and the left one's top rule with the right
    # one's middle rule snap together, which made one grid over both columns, a table of the
    # words between them.
    left = _grid([0, 30, 60], [100, 112])
    right = _grid([200, 230, 260], [90, 102, 115])
    words = [_word(t, x, y) for t, x, y in [("STR", 2, 106), ("DEX", 32, 106)]]
    words += [_word(t, x, y) for t, x, y in [("AC", 202, 96), ("HP", 232, 96), ("12", 202, 108), ("33", 232, 108)]]
    words += [_word("Speed", 100, 106)]  # text between the columns, in neither table
    assert ruled_grids(left + right) == [([200, 230, 260], [90, 101, 113.5]), ([0, 30, 60], [101, 113.5])]
    [(bbox, rows)] = ruled_tables(left + right, words)  # the left one holds one row of text
    assert bbox == (200, 90, 260, 113.5) and rows == [["AC", "HP"], ["12", "33"]]


def test_horizontal_rules_alone_are_no_ruled_table() -> None:
    edges = [(0, y - 0.5, 200, y + 0.5) for y in (0, 20, 40)]
    words = [_word("a", 5, 10), _word("b", 105, 10), _word("c", 5, 30), _word("d", 105, 30)]
    assert ruled_tables(edges, words) == []


def test_a_rule_under_a_heading_is_not_part_of_the_grid() -> None:
    edges = _grid([0, 100, 200], [50, 70, 90]) + [(0, 9.5, 400, 10.5)]  # a heading underline above
    words = [_word("Heading", 5, 5), _word("a", 5, 60), _word("b", 105, 60), _word("c", 5, 80), _word("d", 105, 80)]
    [(bbox, rows)] = ruled_tables(edges, words)
    assert bbox[1] == 50 and rows == [["a", "b"], ["c", "d"]]


def test_edges_come_from_lines_thin_boxes_and_cell_boxes_inside_the_clip() -> None:
    drawings = [
        {"rect": (0, 0, 100, 1), "items": [("re", (0, 0, 100, 1), -1)]},  # a filled hairline
        {"rect": (0, 0, 0, 50), "items": [("l", (0, 0), (0, 50))]},  # a stroked line
        {"rect": (10, 10, 60, 40), "items": [("re", (10, 10, 60, 40), 1)]},  # a cell box: 4 sides
        {"rect": (500, 500, 600, 501), "items": [("re", (500, 500, 600, 501), -1)]},  # outside the clip
        {"rect": (0, 0, 30, 30), "items": [("c", (0, 0), (10, 0), (20, 30), (30, 30))]},  # a curve
    ]
    edges = edges_in(drawings, (0, 0, 200, 200))
    assert len(edges) == 6
    assert (0, 0, 100, 1) in edges and (0, 0, 0, 50) in edges and (10, 10, 60, 10) in edges


@needs_corpus
def test_a_ruled_table_of_a_real_pdf_reads_with_its_spaces() -> None:
    doc = extract_document(SAMPLES / "google-doc-document.pdf", "google-doc-document.pdf")
    [table] = [b for b in doc.blocks if b.kind is BlockKind.TABLE]
    lines = table.text.splitlines()
    assert lines[0].startswith("|  | Indonesia")
    assert "| Capital | Jakarta | Berlin | Vienna | Paris | Vatican City |" in lines


@needs_corpus
@pytest.mark.parametrize("name", ["nics-background-checks-2015-11.pdf", "nics-background-checks-2015-11-rotated.pdf"])
def test_a_banded_statistics_table_reads_one_state_per_row(name: str) -> None:
    # Rules every five states: every text line of a band is its own row, upright or turned.
    doc = extract_document(GOV / name, name, tables=TableMode.ACCURATE)
    [table] = [b for b in doc.blocks if b.kind is BlockKind.TABLE]
    rows = [line for line in table.text.splitlines() if "18,870" in line]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[cells.index("18,870") :][:3] == ["18,870", "23,022", "22,650"]
    assert not any("209" in c for c in cells)  # Alaska's permits are on the next row
    # the state column's left rule stands outside the clip its text blocks give: cut there, the grid
    # lost the column and the state names with it
    assert cells[0] == "Alabama"


def _page_with(stream: bytes, *, rotate: int = 0, annot: bool = False):  # noqa: ANN202 - a pymupdf.Page
    """A one-page PDF whose content stream is ``stream``."""
    import pymupdf

    doc = pymupdf.open()
    doc.new_page()
    xref = doc.get_new_xref()
    doc.update_object(xref, "<<>>")
    doc.update_stream(xref, stream)
    page = doc[0]
    page.set_contents(xref)
    if rotate:
        page.set_rotation(rotate)
    if annot:
        page.add_rect_annot((100, 100, 200, 200))
    return doc[0]  # pages changed later leave earlier handles stale; the document stays open with it


def _vertical_edges(page) -> list:  # noqa: ANN001 - a pymupdf.Page
    edges = edges_in(page.get_cdrawings(), (-1e6, -1e6, 1e6, 1e6))
    return [e for e in edges if e[2] - e[0] < e[3] - e[1]]


@pytest.mark.parametrize(
    "stream",
    [
        b"BT /Helv 11 Tf 72 720 Td (Armor table) Tj ET",  # text only
        b"q 0.5 w 72 700 m 300 700 l S Q 72 650 m 300 650 l 320 650 l S",  # rules along x
        b"q 1 0 0 -1 0 792 cm 0.75 0 0 0.75 0 0 cm 10 67.5 m 107.48 67.5 l S Q",  # scaled, flipped
        b"BT /Helv 11 Tf 72 720 Td [(v)-28(re)] TJ ET 72 700 m 300 700 l S",  # "(v)", "(re)": strings
    ],
)
def test_the_drawings_pass_is_skipped_where_no_rule_can_run_along_y(stream: bytes) -> None:
    from jobs.extract.pdf import _may_draw_grid

    page = _page_with(stream)
    assert not _may_draw_grid(page)
    assert not _vertical_edges(page)


@pytest.mark.parametrize(
    "stream",
    [
        b"72 700 m 72 600 l S",  # a rule along y
        b"72 700 m 300 700 l 300 600 l S",  # a corner
        b"72 600 228 100 re S",  # a box
        b"72 600 228 0.5 re f",  # a hairline box: "re" is never read further
        b"q 0 1 -1 0 300 0 cm 72 700 m 300 700 l S Q",  # turned a quarter by cm
        b"BT 72 700 m 72 600 l S ET",  # path operators inside a text object are run too
        b"/Span <</ActualText ( x )>> BDC 72 700 m 300 700 l S EMC",  # a string outside text (may hide BT)
        b"% BT\n72 700 m 300 700 l S\n% ET",  # a comment outside text (may hide BT)
        b"72 700 m 72 600l S",  # an operator glued to its number
        b"72 700 m 100 700 c 72 600 l S",  # a curve
        b"/Fm0 Do",  # a form may draw anything
        b"72 700 m 72 600 l",  # unpainted: still refused, the scan does not follow painting
    ],
)
def test_the_drawings_pass_runs_where_a_rule_may_run_along_y(stream: bytes) -> None:
    from jobs.extract.pdf import _may_draw_grid

    assert _may_draw_grid(_page_with(stream))


def test_the_drawings_pass_runs_on_turned_and_annotated_pages() -> None:
    from jobs.extract.pdf import _may_draw_grid

    rules = b"72 700 m 300 700 l S"
    assert not _may_draw_grid(_page_with(rules))
    assert _may_draw_grid(_page_with(rules, rotate=90))  # the drawings are read in the page's turned space
    page = _page_with(rules, annot=True)  # the drawings pass draws annotations too
    assert _vertical_edges(page)
    assert _may_draw_grid(page)


def test_the_drawings_pass_runs_on_pages_with_type3_fonts() -> None:
    """MuPDF may run a Type 3 glyph's procedure through the drawings device: its paths are not in the page's stream."""
    import pymupdf

    from jobs.extract.pdf import _may_draw_grid

    doc = pymupdf.open()
    page = doc.new_page()
    proc = doc.get_new_xref()
    doc.update_object(proc, "<<>>")
    doc.update_stream(proc, b"0 0 0 rg 500 0 d0 0 0 m 0 700 l 50 700 l 50 0 l f")  # a coloured glyph: a bar
    font = doc.get_new_xref()
    doc.update_object(
        font,
        f"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 1000 1000] /FontMatrix [0.001 0 0 0.001 0 0] "
        f"/CharProcs << /a {proc} 0 R >> /Encoding << /Type /Encoding /Differences [97 /a] >> "
        f"/FirstChar 97 /LastChar 97 /Widths [500] >>",
    )
    content = doc.get_new_xref()
    doc.update_object(content, "<<>>")
    doc.update_stream(content, b"BT /T3 24 Tf 72 700 Td (a) Tj ET 72 650 m 300 650 l S")
    doc.xref_set_key(page.xref, "Resources", f"<< /Font << /T3 {font} 0 R >> >>")
    doc.xref_set_key(page.xref, "Contents", f"{content} 0 R")
    assert _may_draw_grid(doc[0])


def _ruled_table_pdf() -> bytes:
    """A page with a fully ruled table whose last column is far wider than its text."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    xs = [72, 192, 312, 492]
    rows = [
        ("Item", "Cost", "Weight"),
        ("Saddle", "10 gp", "25 lb."),
        ("Bridle", "2 gp", "1 lb."),
        ("Cart", "15 gp", "200 lb."),
    ]
    top, height = 110, 18
    for n in range(len(rows) + 1):
        page.draw_line((xs[0], top + n * height), (xs[-1], top + n * height), width=0.5)
    for x in xs:
        page.draw_line((x, top), (x, top + len(rows) * height), width=0.5)
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            page.insert_text((xs[c] + 4, top + r * height + 13), cell, fontsize=10)
    page.insert_text((72, top + len(rows) * height + 30), "A paragraph after the table, in running text.", fontsize=10)
    return doc.tobytes()


def test_a_last_column_wider_than_its_text_stays_in_the_table() -> None:
    # The region's clip comes from the text blocks: the last column's right rule stood beyond
    # it, the grid lost that column, and the column's text was lost with the blocks replaced.
    doc = extract_document(_ruled_table_pdf(), "table.pdf", ocr=False)
    [table] = [b for b in doc.blocks if b.kind is BlockKind.TABLE]
    assert table.text.splitlines()[0] == "| Item | Cost | Weight |"
    assert "| Cart | 15 gp | 200 lb. |" in table.text
    assert any(b.text.startswith("A paragraph after the table") for b in doc.blocks)


def test_the_clip_grows_to_the_ends_of_the_rules_that_cross_it() -> None:
    drawings = [
        {"rect": (72, 110, 492, 110), "items": [("l", (72, 110), (492, 110))]},  # a row rule
        {"rect": (492, 110, 492, 200), "items": [("l", (492, 110), (492, 200))]},  # the right rule
        {"rect": (300, 40, 300, 300), "items": [("l", (300, 40), (300, 300))]},  # a column rule
        {"rect": (0, 500, 595, 500), "items": [("l", (0, 500), (595, 500))]},  # a rule elsewhere
    ]
    assert widen_to_rules(drawings, (64, 100, 400, 210)) == (63, 39, 493, 301)
    assert widen_to_rules(drawings[3:], (64, 100, 400, 210)) == (64, 100, 400, 210)  # nothing crosses it


def test_a_block_reaching_past_a_ruled_table_keeps_its_lines_outside() -> None:
    from jobs.extract.pdf_items import _Item
    from jobs.extract.pdf_tables import _outside

    # MuPDF put a table's last row and the paragraph under it in one block
    it = _Item(72, 150, 480, 190, "Cart\nThe cube loses charges\nwhen targeted.\n", 3, 7, 1)
    words = [
        (75, 150, 100, 160, "Cart", 7, 0, 0),
        (72, 165, 110, 175, "The", 7, 1, 0),
        (112, 165, 480, 175, "cube", 7, 1, 1),
        (72, 180, 150, 190, "when", 7, 2, 0),
        (20, 20, 30, 30, "other", 3, 0, 0),
    ]
    [rest] = _outside(it, (70, 140, 300, 162), words)
    assert rest.text == "The cube loses charges\nwhen targeted.\n" and rest.lines == 2
    assert (rest.x0, rest.y0, rest.x1, rest.y1) == (72, 165, 480, 190)
    assert _outside(it, (70, 140, 300, 200), words) == []  # all of it inside
    assert _outside(it, (70, 140, 111, 177), words) is None  # a line partly inside: unknown
    # a line of white space alone between two rows inside: nothing to keep (and no box to give it)
    blank = _Item(72, 150, 300, 190, "Cart\n \nSled\n", 3, 7, 1)
    rows = [words[0], (75, 180, 100, 190, "Sled", 7, 2, 0)]
    assert _outside(blank, (70, 140, 300, 195), rows) == []
