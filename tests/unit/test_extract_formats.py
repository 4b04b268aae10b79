"""Markdown, HTML, text, DOCX and EPUB extraction, including unstructured's offline behaviour."""

from __future__ import annotations

import io
import pickle
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs.document import BlockKind
from jobs.errors import CorruptDocument, EmptyDocument, MissingDependency
from jobs.extract import extract_document
from jobs.extract.formats import extract_markdown

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
FATE = CORPUS / "rulebooks" / "fate-srd"

needs_corpus = pytest.mark.skipif(not FATE.is_dir(), reason=f"Fate SRD corpus not found at {FATE}")
try:
    import unstructured  # noqa: F401

    HAVE_UNSTRUCTURED = True
except ImportError:
    HAVE_UNSTRUCTURED = False
needs_unstructured = pytest.mark.skipif(
    not HAVE_UNSTRUCTURED, reason='unstructured is not installed (pip install "lorekeeper[formats]")'
)


def _headings(doc) -> list[tuple[str, int]]:
    return [(b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING]


@needs_corpus
def test_markdown_headings_keep_their_levels() -> None:
    path = FATE / "Fate-Condensed-SRD-CC-BY.md"
    raw = path.read_text()
    doc = extract_document(path, path.name)
    headings = _headings(doc)
    expected = [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#{1,6}) (.+)$", raw, re.M)]
    assert [level for _, level in headings] == [level for level, _ in expected]
    assert headings[:6] == [
        ("Fate Condensed", 1),
        ("Credits", 1),
        ("Introduction", 1),
        ("What Do I Need to Play?", 2),
        ("For Veterans: Changes From Fate Core", 3),
        ("Getting Started", 1),
    ]
    # an inline anchor inside a heading is markup, not text
    assert ("The Adjective Ladder", 4) in headings
    assert doc.title == "Fate Condensed" and doc.page_count == 1
    assert all(b.page is None for b in doc.blocks)


@needs_corpus
def test_markdown_html_tables_become_pipe_tables_and_bold_terms_are_kept() -> None:
    path = FATE / "Fate-Condensed-SRD-CC-BY.md"
    doc = extract_document(path, path.name)
    tables = [b.text for b in doc.blocks if b.kind is BlockKind.TABLE]
    ladder = next(t for t in tables if "Legendary" in t)
    assert ladder.splitlines()[:3] == ["| Rating | Adjective |", "|---|---|", "| +8 | Legendary |"]
    terms = {t for b in doc.blocks for t in b.bold_terms}
    assert {"Academics", "Athletics"} <= terms
    assert any(b.kind is BlockKind.LIST_ITEM for b in doc.blocks)


@needs_corpus
@pytest.mark.parametrize("name", ["fate-system-toolkit-SRD.md", "fate-accelerated-SRD.md"])
def test_half_converted_markdown_headings_are_repaired(name: str) -> None:
    raw = (FATE / name).read_text()
    # "#>Title</h1>" lines (some indented four spaces, some inside list items) are headings.
    broken = [
        (len(m.group(1)), " ".join(re.sub(r"<[^>]+>", " ", m.group(2)).split()))
        for m in re.finditer(r"^[ \t]*(#{1,6})>(.*)$", raw, re.M)
    ]
    broken = [(level, text) for level, text in broken if text]
    doc = extract_document(FATE / name, name)
    headings = [(level, text) for text, level in _headings(doc)]
    found = [h for h in broken if h in headings]
    assert len(found) == len(broken)
    assert not any("#>" in b.text or "</h" in b.text for b in doc.blocks)


@needs_corpus
@pytest.mark.parametrize(
    "name", ["Fate-Condensed-SRD-CC-BY.md", "fate-accelerated-SRD.md", "fate-system-toolkit-SRD.md"]
)
def test_rust_and_python_markdown_parsers_agree(name: str) -> None:
    pytest.importorskip("markdown_it_pyrs")
    text = (FATE / name).read_text()
    rust = extract_markdown(text, name, parser="rust").blocks
    python = extract_markdown(text, name, parser="python").blocks
    if name.startswith("Fate-Condensed"):
        assert rust == python  # well-formed Markdown: the very same blocks
    # half-converted exports: paragraphs may break at stray indented HTML differently, but the
    # headings, tables and every word are the same
    assert [b for b in rust if b.kind is not BlockKind.PARAGRAPH] == [
        b for b in python if b.kind is not BlockKind.PARAGRAPH
    ]
    assert " ".join(b.text for b in rust).split() == " ".join(b.text for b in python).split()


@needs_corpus
@needs_unstructured
def test_markdown_through_unstructured_gives_the_same_headings() -> None:
    path = FATE / "Fate-Condensed-SRD-CC-BY.md"
    native = _headings(extract_document(path, path.name))
    via_unstructured = _headings(extract_document(path, path.name, markdown_engine="unstructured"))
    assert via_unstructured == native


@needs_corpus
@needs_unstructured
def test_html_heading_levels_follow_h_tags() -> None:
    path = FATE / "fate-core-SRD.html"
    raw = path.read_text()
    doc = extract_document(path, path.name)
    expected = Counter(int(level) for level in re.findall(r"<h([1-6])[\s>]", raw))
    got = Counter(level for _, level in _headings(doc))
    assert got == expected
    assert ("Welcome to Fate!", 2) in _headings(doc)
    assert sum(1 for b in doc.blocks if b.kind is BlockKind.PARAGRAPH) > 1000
    assert any(b.kind is BlockKind.TABLE and b.text.startswith("|") for b in doc.blocks)


@needs_unstructured
def test_unstructured_runs_offline_in_a_fresh_process() -> None:
    """No telemetry ping, no spaCy model download: every socket connection fails here."""
    code = r"""
import socket
def refuse(*args, **kwargs):
    raise OSError("network disabled by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from jobs.extract import extract_document
from jobs.extract.formats import extract_markdown
html = (b"<html><body><h1>Spells</h1><p>Magic is dangerous. It costs a fate point.</p>"
        b"<h2>Fire</h2><ul><li>Burns things</li></ul><p>Short.</p></body></html>")
doc = extract_document(html, "spells.html")
print([(b.kind.value, b.level, b.text) for b in doc.blocks])
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "('heading', 1, 'Spells')" in result.stdout
    assert "('heading', 2, 'Fire')" in result.stdout
    assert "('list_item', 0, 'Burns things')" in result.stdout
    assert "('paragraph', 0, 'Short.')" in result.stdout


@needs_unstructured
def test_plain_text_titles_and_paragraphs() -> None:
    text = (
        b"THE GREY MARSH\n\n"
        b"The marsh lies east of the river. Travellers avoid it after dark.\n\n"
        b"Roll the dice.\n\n"
        b"- Bring a lantern\n- Bring rope\n"
    )
    doc = extract_document(text, "marsh.txt")
    kinds = [(b.kind, b.text) for b in doc.blocks]
    assert kinds[0] == (BlockKind.HEADING, "THE GREY MARSH")
    # a guessed title that ends like a sentence stays a paragraph
    assert (BlockKind.PARAGRAPH, "Roll the dice.") in kinds
    assert (BlockKind.LIST_ITEM, "Bring a lantern") in kinds


@needs_unstructured
def test_docx_headings_bold_terms_and_tables() -> None:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("Bestiary", level=1)
    document.add_heading("Marsh Hag", level=2)
    paragraph = document.add_paragraph()
    paragraph.add_run("Hex:").bold = True
    paragraph.add_run(" the hag curses one target within sight.")
    table = document.add_table(rows=3, cols=2)
    for row, cells in enumerate([("Level", "Damage"), ("1", "d6"), ("2", "2d6")]):
        for col, value in enumerate(cells):
            table.cell(row, col).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    doc = extract_document(buffer.getvalue(), "bestiary.docx")
    assert _headings(doc) == [("Bestiary", 1), ("Marsh Hag", 2)]
    curse = next(b for b in doc.blocks if b.text.startswith("Hex:"))
    assert curse.bold_terms == ["Hex"]
    table_block = next(b for b in doc.blocks if b.kind is BlockKind.TABLE)
    assert table_block.text.splitlines() == ["| Level | Damage |", "|---|---|", "| 1 | d6 |", "| 2 | 2d6 |"]


@needs_unstructured
def test_epub_is_read(tmp_path: Path) -> None:
    pypandoc = pytest.importorskip("pypandoc")
    target = tmp_path / "adventure.epub"
    pypandoc.convert_text(
        "# The Sunken Keep\n\nThe keep lies under the lake. **Gillmen** guard it.\n\n## Level 1\n\nDamp halls.",
        "epub",
        format="md",
        outputfile=str(target),
    )
    doc = extract_document(target, target.name)
    assert ("The Sunken Keep", 1) in _headings(doc) and ("Level 1", 2) in _headings(doc)
    assert any("Gillmen" in b.bold_terms for b in doc.blocks)


def test_missing_unstructured_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes ``import unstructured`` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "unstructured", None)
    with pytest.raises(MissingDependency) as err:
        extract_document(b"<h1>Hi</h1>", "page.html")
    assert 'pip install "lorekeeper[formats]"' in str(err.value) and "page.html" in str(err.value)
    copy = pickle.loads(pickle.dumps(err.value))
    assert copy.package == "unstructured" and str(copy) == str(err.value)
    # Markdown needs no extra.
    doc = extract_document(b"# Title\n\nText.", "notes.md")
    assert _headings(doc) == [("Title", 1)]


def test_empty_and_markup_only_files() -> None:
    with pytest.raises(EmptyDocument):
        extract_document(b"", "empty.md")
    with pytest.raises(EmptyDocument):
        extract_document(b"<!-- nothing -->\n\n<hr />\n", "blank.md")
    if HAVE_UNSTRUCTURED:
        with pytest.raises(EmptyDocument):
            extract_document(b"   \n\n  ", "blank.txt")


@pytest.mark.parametrize("parser", ["rust", "python"])
def test_markdown_blocks(parser: str) -> None:
    if parser == "rust":
        pytest.importorskip("markdown_it_pyrs")
    text = (
        "# Combat\n\nWhen you **attack**, roll *Fight*.\n\n"
        "```\nroll 4dF + 2\n```\n\n"
        "1. First\n2. Second\n\n"
        "| Shifts | Effect |\n|---|---|\n| 1 | Graze |\n\n"
        "Figure 3: The combat ladder.\n"
    )
    doc = extract_markdown(text, "combat.md", parser=parser)
    kinds = [(b.kind, b.text) for b in doc.blocks]
    assert kinds == [
        (BlockKind.HEADING, "Combat"),
        (BlockKind.PARAGRAPH, "When you attack, roll Fight."),
        (BlockKind.CODE, "roll 4dF + 2"),
        (BlockKind.LIST_ITEM, "First"),
        (BlockKind.LIST_ITEM, "Second"),
        (BlockKind.TABLE, "| Shifts | Effect |\n|---|---|\n| 1 | Graze |"),
        (BlockKind.CAPTION, "Figure 3: The combat ladder."),
    ]
    assert doc.blocks[1].bold_terms == ["attack"]


# -- text encodings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "heading", "paragraph"),
    [
        ("latin-1", "Règles", "Élan du café, à la française."),
        ("cp1252", "Règles", "L’Élan du café — « noir »…"),
        ("cp1251", "Правила игры", "Бросьте кубики и добавьте навык."),
        ("utf-16", "Règles", "Élan du café."),
    ],
)
def test_markdown_that_is_not_utf8_keeps_its_letters(encoding: str, heading: str, paragraph: str) -> None:
    data = f"# {heading}\n\n{paragraph}\n".encode(encoding)
    doc = extract_document(data, "regles.md")
    assert [(b.kind, b.text) for b in doc.blocks] == [(BlockKind.HEADING, heading), (BlockKind.PARAGRAPH, paragraph)]
    assert not any("\ufffd" in b.text for b in doc.blocks)
    # A legacy encoding is worth a word on the item; a BOM says what the file is.
    if encoding != "utf-16":
        assert any("not UTF-8" in w for w in doc.warnings), doc.warnings


def test_utf8_with_a_stray_windows_1252_byte_keeps_both() -> None:
    """No single encoding fits such a file: the stray byte alone is read as Windows-1252."""
    data = "# Règles\n\nÉlan du café, près de l’église, l".encode() + "’".encode("cp1252") + "été.\n".encode()
    doc = extract_document(data, "mixed.md")
    assert [b.text for b in doc.blocks] == ["Règles", "Élan du café, près de l’église, l’été."]
    assert doc.warnings == ["the file is UTF-8 but for 1 stray byte(s), read as Windows-1252"]


@needs_unstructured
def test_latin1_html_and_text_keep_their_letters() -> None:
    html_doc = extract_document("<h1>Règles</h1><p>Élan du café.</p>".encode("latin-1"), "regles.html")
    text_doc = extract_document("Élan du café. Où est le dé ?\n".encode("latin-1"), "regles.txt")
    assert [b.text for b in html_doc.blocks] == ["Règles", "Élan du café."]
    assert [b.text for b in text_doc.blocks] == ["Élan du café. Où est le dé ?"]


@pytest.mark.parametrize("name", ["noise.md", pytest.param("noise.txt", marks=needs_unstructured)])
def test_bytes_that_are_no_text_fail_with_a_clear_reason(name: str) -> None:
    garbage = random.Random(7).randbytes(4000)
    with pytest.raises(CorruptDocument, match=rf"{name}: .*not text in UTF-8 or any other encoding"):
        extract_document(garbage, name)


# -- HTML nested deeper than libxml2 parses ---------------------------------------------------


@needs_unstructured
def test_html_nested_deeper_than_the_parser_limit_is_read_flat_and_says_so() -> None:
    depth = 50_000
    page = (
        "<html><body><h1>Deep</h1><p>Before.</p>"
        + "<div>" * depth
        + "<p>Roll the dice.</p><ul><li>Bring rope</li></ul>"
        + "</div>" * depth
        + "<h2>After</h2><p>Still read.</p></body></html>"
    )
    started = time.perf_counter()
    doc = extract_document(page.encode(), "deep.html")
    seconds = time.perf_counter() - started
    assert [(b.kind, b.text, b.level) for b in doc.blocks] == [
        (BlockKind.HEADING, "Deep", 1),
        (BlockKind.PARAGRAPH, "Before.", 0),
        (BlockKind.PARAGRAPH, "Roll the dice.", 0),
        (BlockKind.LIST_ITEM, "Bring rope", 0),
        (BlockKind.HEADING, "After", 2),
        (BlockKind.PARAGRAPH, "Still read.", 0),
    ]
    assert any("nested 50,004 elements deep" in w and "256" in w for w in doc.warnings), doc.warnings
    assert seconds < 5


@needs_unstructured
def test_html_just_under_the_parser_limit_goes_through_unstructured() -> None:
    page = "<html><body>" + "<div>" * 200 + "<h2>Inside</h2><p>Text.</p>" + "</div>" * 200 + "</body></html>"
    doc = extract_document(page.encode(), "nested.html")
    assert [(b.kind, b.text) for b in doc.blocks] == [(BlockKind.HEADING, "Inside"), (BlockKind.PARAGRAPH, "Text.")]
    assert doc.warnings == []
