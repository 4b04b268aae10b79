"""The structure benchmark's book generator and scorer, on tiny books (a few pages each).

The typesetters are the ``bench`` extra (WeasyPrint, ReportLab, python-docx) and LibreOffice
(``apt-get install libreoffice-writer``); a layout whose engine is missing is skipped.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pymupdf
import pytest

from jobs.document import Block, BlockKind, TextChunk

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

books = pytest.importorskip("rulebook_books")
structure = pytest.importorskip("rulebook_structure")

pytestmark = pytest.mark.unit

_ENGINE_NEEDS = {
    "weasyprint-2col": lambda: importlib.util.find_spec("weasyprint") is not None,
    "libreoffice-docx": lambda: (
        importlib.util.find_spec("docx") is not None
        and (shutil.which("soffice") or shutil.which("libreoffice")) is not None
    ),
    "reportlab-times": lambda: importlib.util.find_spec("reportlab") is not None,
    "story-compact": lambda: True,
    "pandoc-latex": lambda: shutil.which("pandoc") is not None and shutil.which("pdflatex") is not None,
    "weasyprint-3col": lambda: importlib.util.find_spec("weasyprint") is not None,
    "weasyprint-caps": lambda: importlib.util.find_spec("weasyprint") is not None,
    "reportlab-numbered": lambda: importlib.util.find_spec("reportlab") is not None,
}


@pytest.fixture(scope="module")
def tiny_books(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("books")
    return {name: books.typeset(name, folder, tiny=True) for name, ok in _ENGINE_NEEDS.items() if ok()}


def _book(tiny_books: dict[str, object], name: str) -> object:
    if name not in tiny_books:
        pytest.skip(f"{name}: its typesetter is not installed")
    return tiny_books[name]


# -- the source tree ------------------------------------------------------------------------------------


def test_srd_tree_has_entries_with_run_in_fields_stat_blocks_and_captioned_tables() -> None:
    tree = books.srd_tree(("Spells", "Monsters", "Rules"), scale=0.02, max_sections=3)
    nodes = list(tree.walk())
    assert nodes[0][0].kind == "book" and nodes[0][1] == 0
    assert [n.title for n in tree.children] == ["Spells", "Monsters", "Rules"]
    entries = [n for n, level, _ in nodes if n.kind == "entry"]
    assert entries and all(level == 3 for n, level, _ in nodes if n.kind == "entry")
    labels = {el.label for n in entries for el in n.body if el.kind == "field"}
    assert {"Casting Time:", "Components:", "Armor Class", "Hit Points"} <= labels
    spell = tree.children[0].children[0].children[0]
    assert spell.body[0].kind == "subtitle"
    creature = tree.children[1].children[0].children[0]
    assert any(el.kind == "table" and el.header[0] == "STR" for el in creature.body)
    full_rules = books.srd_tree(("Rules",))
    captions = [el.caption for n, _, _ in full_rules.walk() for el in n.body if el.kind == "table"]
    assert captions and all(c.startswith("Table: ") for c in captions)
    assert any(n.kind == "sub" for n, _, _ in full_rules.walk())


def test_conditions_are_entries_straight_under_their_chapter() -> None:
    tree = books.srd_tree(("Conditions",))
    chapter = tree.children[0]
    assert len(chapter.children) == 15 and all(c.kind == "entry" for c in chapter.children)
    assert chapter.children[0].title == "Blinded"


def test_fate_tree_nests_markdown_headings_and_drops_its_title_heading() -> None:
    tree = books.fate_tree()
    assert tree.title == "Fate Condensed"
    assert all(c.kind == "chapter" for c in tree.children)
    assert "Fate Condensed" not in [c.title for c in tree.children]
    kinds = {n.kind for n, _, _ in tree.walk()}
    assert {"chapter", "section", "entry", "sub"} <= kinds
    small = books.fate_tree(scale=0.2, max_sections=2)
    assert 1 <= len(small.children) < len(tree.children)
    assert all(1 <= len(c.children) <= 2 for c in small.children)


def test_markdown_elements_keep_emphasis_and_number_captions() -> None:
    items = books.markdown_elements(
        "**_Armor Class._** Armor protects.\n\n## Sub\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n| 3 |\n",
        "Armor",
    )
    para = items[0]
    assert para.runs[0].bold and para.runs[0].italic and para.runs[0].text == "Armor Class."
    assert items[1] == (2, "Sub")
    assert [el.caption for el in items[2:]] == ["Table: Armor (1)", "Table: Armor (2)"]
    assert items[2].header == ["a", "b"] and items[2].rows == [["1", "2"]]


def test_fingerprints_are_unique_starts_of_entry_bodies() -> None:
    tree = books.srd_tree(("Spells", "Monsters"), scale=0.05)
    truth = books._truth(tree, [1] * len(list(tree.walk())))
    prints = [h.fingerprint for h in truth if h.kind == "entry"]
    assert prints and all(prints)
    assert len(set(prints)) == len(prints)


# -- typeset books ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(books.LAYOUTS))
def test_tiny_book_truth_matches_its_pdf(tiny_books: dict[str, object], name: str) -> None:
    book = _book(tiny_books, name)
    assert 1 <= book.pages <= 8
    with pymupdf.open(book.path) as pdf:
        assert pdf.page_count == book.pages
        texts = [books.normalise(page.get_text()) for page in pdf]
        toc = pdf.get_toc(simple=True)
    # every heading is printed on the page the engine reported
    for h in book.headings:
        assert books.normalise(h.text) in texts[h.page - 1], (h.text, h.page)
    levels = [h.level for h in book.headings]
    assert levels[0] == 0 and 1 in levels and 2 in levels
    # pages never go back, and every page after the first carries a running head
    assert [h.page for h in book.headings] == sorted(h.page for h in book.headings)
    furniture = [books.normalise(f) for f in book.furniture]
    for text in texts[1:]:
        assert any(f in text for f in furniture), text[:200]
    chapters = [h.text for h in book.headings if h.level == 1]
    if book.outline == "none":
        assert toc == []
    elif book.outline == "chapters":
        assert [title for _, title, _ in toc] == chapters and {lvl for lvl, _, _ in toc} == {1}
    elif book.outline == "chapters+sections":
        assert {lvl for lvl, _, _ in toc} == {1, 2}
    else:
        assert len(toc) == len(book.headings) - 1  # every heading but the title page's


def test_chapter_pages_cover_the_book(tiny_books: dict[str, object]) -> None:
    book = _book(tiny_books, "weasyprint-2col")
    spans = list(book.chapter_pages().values())
    assert spans[0][0] > 1 and spans[-1][1] == book.pages
    assert all(a <= b for a, b in spans)


# -- the scorer on hand-made extractions ------------------------------------------------------------------


def _truth() -> list[object]:
    th = books.TruthHeading
    return [
        th("Tiny Book", 0, "book", 1, ""),
        th("Spells", 1, "chapter", 2, "Spells"),
        th("Cantrips", 2, "section", 2, "Spells"),
        th("Acid Splash", 3, "entry", 2, "Spells", books.squash("You hurl a bubble of acid at a creature")),
        th("Fire Bolt", 3, "entry", 3, "Spells", books.squash("You hurl a mote of fire at a creature")),
    ]


def _tiny_book(truth: list[object]) -> object:
    return books.TypesetBook("t", "hand", Path("t.pdf"), 3, "none", truth, ["Tiny Book", "Spells"], ["{n}"], 0.0)


def test_a_perfect_extraction_scores_one_whatever_its_level_offset() -> None:
    truth = _truth()
    blocks = [Block(BlockKind.HEADING, h.text, h.page, h.level + 1) for h in truth]
    chunks = [
        TextChunk(
            0,
            "Acid Splash\n\nYou hurl a bubble of acid at a creature.",
            ["Spells", "Cantrips", "Acid Splash"],
            2,
            2,
            20,
        ),
        TextChunk(
            1, "Fire Bolt\n\nYou hurl a mote of fire at a creature.", ["Spells", "Cantrips", "Fire Bolt"], 3, 3, 20
        ),
    ]
    scores = structure.score_structure(_tiny_book(truth), _doc(blocks), chunks)
    assert scores["precision"] == scores["recall"] == scores["f1"] == 1.0
    assert scores["level_accuracy"] == 1.0
    assert scores["entries_split"] == 1.0
    assert scores["leakage"] == 0.0


def _doc(blocks: list[Block]) -> object:
    from jobs.document import ExtractedDocument

    return ExtractedDocument(blocks=blocks, page_count=3)


def test_missed_entries_running_heads_and_field_labels_are_counted() -> None:
    truth = _truth()
    blocks = [
        Block(BlockKind.HEADING, "Tiny Book", 1, 1),
        Block(BlockKind.HEADING, "Spells", 2, 1),
        Block(BlockKind.HEADING, "Cantrips", 2, 2),
        Block(BlockKind.HEADING, "Casting Time: 1 action", 2, 3),  # a run-in label promoted
        Block(BlockKind.HEADING, "Spells", 3, 3),  # the running head on page 3 as a heading
    ]
    chunks = [
        # both entries in one chunk under a running head, with a page number line
        TextChunk(
            0,
            "Acid Splash\nYou hurl a bubble of acid at a creature.\nFire Bolt\n"
            "You hurl a mote of fire at a creature.\n3",
            ["Spells", "Cantrips", "Spells"],
            2,
            3,
            40,
        ),
    ]
    book = _tiny_book(truth)
    scores = structure.score_structure(book, _doc(blocks), chunks)
    assert scores["matched"] == 3 and scores["recall"] == pytest.approx(3 / 5)
    assert scores["precision"] == pytest.approx(3 / 5)
    assert scores["recall_by_kind"]["entry"] == 0.0
    assert scores["false_headings_by_kind"] == {"run-in field label": 1, "page furniture": 1}
    assert scores["entries_split"] == 0.0
    # "Spells" is the chapter the chunk is in, so only the page number leaks
    assert scores["leakage"] == 1.0 and scores["text_leakage"] == 1.0 and scores["path_leakage"] == 0.0
    # level offset anchored on the chapter: the section is right, the title (set at the
    # chapters' level) is not
    assert scores["level_accuracy"] == pytest.approx(2 / 3)


def test_a_composite_running_head_in_the_heading_path_leaks() -> None:
    truth = _truth()
    book = books.TypesetBook("t", "hand", Path("t.pdf"), 3, "none", truth, ["Tiny Book · Spells"], ["Page {n}"], 0.0)
    chunks = [TextChunk(0, "You hurl a bubble of acid at a creature.", ["Spells", "Tiny Book · Spells"], 2, 2, 10)]
    leak = structure.score_leakage(book, chunks)
    assert leak["path_leakage"] == 1.0 and leak["text_leakage"] == 0.0


def test_level_accuracy_is_anchored_on_the_chapters() -> None:
    truth = _truth()
    flat = [Block(BlockKind.HEADING, h.text, h.page, 1) for h in truth]  # every heading at one level
    scores = structure.score_headings(truth, flat)
    assert scores["f1"] == 1.0
    assert scores["level_accuracy"] == pytest.approx(1 / 5)  # only the chapter


def test_heading_keys_ignore_numbering_case_and_dashes() -> None:
    assert structure.heading_key("3.2  Fire–Bolt ") == structure.heading_key("fire-bolt")
    assert structure.heading_key("Chapter 4: Spells") == "spells"
    assert structure.heading_key("1st-Level Spells") == "1st-level spells"


def test_the_scorer_runs_on_a_tiny_generated_book(tiny_books: dict[str, object]) -> None:
    book = _book(tiny_books, "story-compact")
    from jobs.tokens import TokenCounter

    doc, chunks = structure.extract_and_chunk(book.path.read_bytes(), book.path.name, TokenCounter())
    scores = structure.score_structure(book, doc, chunks)
    for key in ("precision", "recall", "f1", "entries_split", "leakage"):
        assert scores[key] is not None and 0.0 <= scores[key] <= 1.0
    assert scores["truth_headings"] == len(book.headings)
    assert scores["entries"] == sum(h.kind == "entry" for h in book.headings)


def test_running_heads_set_on_one_line_count_as_furniture() -> None:
    furniture = ["fate condensed", "getting started"]
    numbers = {"7", "8"}
    assert structure.furniture_line("fate condensed getting started", furniture, numbers)
    assert structure.furniture_line("getting started 8", furniture, numbers)
    assert structure.furniture_line("8", furniture, numbers)
    assert not structure.furniture_line("getting started with fate", furniture, numbers)
    assert not structure.furniture_line("fate condensed uses fate dice", furniture, numbers)


def test_a_missing_typesetter_is_reported_so_the_benchmark_can_skip_its_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(books.shutil, "which", lambda name: None)
    with pytest.raises(books.EngineMissing, match="pandoc"):
        books.typeset("pandoc-latex", tmp_path, tiny=True)
    with pytest.raises(books.EngineMissing, match="LibreOffice"):
        books.typeset("libreoffice-docx", tmp_path, tiny=True)
