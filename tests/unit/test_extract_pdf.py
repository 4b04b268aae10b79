"""PDF extraction on real files (the shared corpus) and on small PDFs built here with PyMuPDF."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from jobs.document import BlockKind, ExtractedDocument
from jobs.errors import (
    CorruptDocument,
    EmptyDocument,
    EncryptedDocument,
    FileTooLarge,
    MissingDependency,
    UnsupportedFormat,
)
from jobs.extract import TableMode, detect_ocr, extract_document, pdf_info
from jobs.extract import ocr as ocr_module

pytestmark = pytest.mark.unit

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
SAMPLES = CORPUS / "pdfs" / "py-pdf-sample-files"
GOV = CORPUS / "pdfs" / "us-gov-public-domain"
SCANS = CORPUS / "pdfs" / "ocrmypdf-scans"

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")
needs_tesseract = pytest.mark.skipif(
    detect_ocr() is None, reason="tesseract language data (tesseract-ocr-eng) is not installed"
)


def _expected_samples() -> list[dict]:
    manifest = SAMPLES / "files.json"
    if not manifest.is_file():
        return []
    entries = json.loads(manifest.read_text())["data"]
    # files.json lists the whole upstream collection; the corpus holds a selection of it.
    return [e for e in entries if (SAMPLES / Path(e["path"]).name).is_file()]


# The corpus copy of this file lost its page tree (object 172, /Pages, is missing): MuPDF and pypdf
# both find no page, so it must fail loudly rather than match the upstream count.
DAMAGED = {"unreadablemetadata.pdf"}
PASSWORD = "openpassword"  # libreoffice-writer-password.README.md


@needs_corpus
@pytest.mark.parametrize("entry", _expected_samples(), ids=lambda e: Path(e["path"]).name)
def test_sample_files_pages_encryption_and_forms(entry: dict) -> None:
    path = SAMPLES / Path(entry["path"]).name
    if path.name in DAMAGED:
        with pytest.raises(CorruptDocument, match="page tree"):
            pdf_info(path, path.name)
        return
    info = pdf_info(path, path.name)
    assert info.page_count == entry["pages"]
    assert info.encrypted == entry["encrypted"]
    assert (info.form_fields > 0) == bool(entry["forms"])
    if not entry["encrypted"]:
        # extraction reports the same page count (or says why there is no text)
        try:
            doc = extract_document(path, path.name, ocr=False)
        except EmptyDocument as err:
            assert err.ocr_pages_skipped >= 1
        else:
            assert doc.page_count == entry["pages"]


@needs_corpus
def test_encrypted_pdf_needs_the_right_password() -> None:
    path = SAMPLES / "libreoffice-writer-password.pdf"
    with pytest.raises(EncryptedDocument) as missing:
        extract_document(path, path.name)
    assert missing.value.status_code == 422 and not missing.value.password_given
    assert "libreoffice-writer-password.pdf" in str(missing.value)
    with pytest.raises(EncryptedDocument) as wrong:
        extract_document(path, path.name, password="not-it")
    assert wrong.value.password_given
    copy = pickle.loads(pickle.dumps(wrong.value))
    assert type(copy) is EncryptedDocument and copy.password_given and str(copy) == str(wrong.value)

    doc = extract_document(path.read_bytes(), path.name, password=PASSWORD)
    assert "Lorem ipsum" in " ".join(b.text for b in doc.blocks)


@needs_corpus
def test_federal_register_reads_column_by_column() -> None:
    path = GOV / "federal-register-2020-17221.pdf"
    doc = extract_document(path, path.name)
    page2 = " ⏎ ".join(b.text for b in doc.blocks if b.page == 2)
    # Three columns, each with its footnotes at the bottom: column 1 body, its footnotes,
    # column 2 body, its footnotes, column 3.
    phrases = [
        "Hatta International Airport in Jakarta",
        "Following the Lion Air Flight 610",
        "1 Preliminary KNKT.18.10.35.04",
        "altitude disagree alert,5 and may affect",
        "On March 10, 2019, a Boeing Model",
        "5 Stall warning indication",
        "and the Ethiopian Civil Aviation Authority",
        "To address the unsafe condition",
        "9 An AOA disagree alert",
    ]
    positions = [page2.find(p) for p in phrases]
    assert -1 not in positions, dict(zip(phrases, positions, strict=True))
    assert positions == sorted(positions)
    # Running heads and the print-shop footer repeat on every page: they are not content.
    text = " ".join(b.text for b in doc.blocks)
    assert "Federal Register / Vol. 85" not in text
    assert "VerDate" not in text
    assert all(b.page is not None and 1 <= b.page <= doc.page_count for b in doc.blocks)


@needs_corpus
def test_outline_gives_heading_levels() -> None:
    path = SAMPLES / "GeoTopo-komprimiert.pdf"
    doc = extract_document(path, path.name)
    with pymupdf.open(path) as pdf:
        toc = pdf.get_toc()
    headings = {(b.page, b.text): b.level for b in doc.blocks if b.kind is BlockKind.HEADING}
    matched = sum(1 for level, title, page in toc if headings.get((page, title)) == level)
    assert matched >= 0.9 * len(toc)
    assert headings[(6, "1 Topologische Grundbegriffe")] == 1
    assert headings[(6, "1.1 Topologische Räume")] == 2


@needs_corpus
def test_outline_that_does_not_match_falls_back_to_font_sizes() -> None:
    path = SAMPLES / "mistitled_outlines_example.pdf"
    doc = extract_document(path, path.name)
    headings = [(b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING]
    # "Contents" and "1 Foo" are set in the same style (CMBX12 14.3 pt): the same level.
    assert ("1 Foo", 1) in headings and headings[0] == ("Contents", 1)
    assert "1" not in [b.text for b in doc.blocks]  # the page number at the foot is furniture


# -- PDFs built for the test ----------------------------------------------------------------

CSS = """
body {font-family: serif; font-size: 10pt;}
h1 {font-size: 20pt; font-weight: bold;}
h2 {font-size: 14pt; font-weight: bold;}
td, th {border: 1px solid black; padding: 2px;}
table {border-collapse: collapse;}
"""


def _story_pdf(html: str, columns: int = 2) -> bytes:
    """Lay ``html`` out in ``columns`` columns on Letter pages."""
    import io

    buffer = io.BytesIO()
    writer = pymupdf.DocumentWriter(buffer)
    story = pymupdf.Story(html=html, user_css=CSS)
    mediabox = pymupdf.paper_rect("letter")
    width = (mediabox.width - 72 - 18 * (columns - 1)) / columns
    rects = [pymupdf.Rect(36 + i * (width + 18), 36, 36 + i * (width + 18) + width, 756) for i in range(columns)]
    more = True
    while more:
        device = writer.begin_page(mediabox)
        for rect in rects:
            more, _ = story.place(rect)
            story.draw(device)
            if not more:
                break
        writer.end_page()
    writer.close()
    return buffer.getvalue()


LOREM = (
    "The party crosses the marsh at dusk while the rain keeps falling on the reeds. "
    "Every step sinks a little deeper and the lanterns flicker in the wind. "
)


@pytest.fixture(scope="module")
def rulebook_pdf() -> bytes:
    body = []
    for chapter in ("Combat", "Magic"):
        body.append(f"<h1>{chapter}</h1>")
        for section in ("Cover", "Range"):
            body.append(f"<h2>{chapter} {section}</h2>")
            for n in range(6):
                body.append(f"<p><b>{section} rule {n}:</b> {LOREM * 3}</p>")
    body.insert(
        3,
        "<table><tr><th>Roll</th><th>Result</th></tr>"
        + "".join(f"<tr><td>{n}</td><td>Outcome {n}</td></tr>" for n in range(1, 7))
        + "</table>",
    )
    return _story_pdf("".join(body))


def test_headings_levels_bold_terms_and_pages(rulebook_pdf: bytes) -> None:
    doc = extract_document(rulebook_pdf, "rules.pdf")
    headings = [(b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert headings == [
        ("Combat", 1),
        ("Combat Cover", 2),
        ("Combat Range", 2),
        ("Magic", 1),
        ("Magic Cover", 2),
        ("Magic Range", 2),
    ]
    paragraphs = [b for b in doc.blocks if b.kind is BlockKind.PARAGRAPH]
    assert paragraphs[0].bold_terms == ["Cover rule 0"]
    assert all(b.page is not None and 1 <= b.page <= doc.page_count for b in doc.blocks)
    assert doc.page_count > 1 and doc.blocks[-1].page == doc.page_count


@pytest.mark.parametrize("mode", [TableMode.ACCURATE, TableMode.FAST])
def test_tables_become_markdown(rulebook_pdf: bytes, mode: TableMode) -> None:
    doc = extract_document(rulebook_pdf, "rules.pdf", tables=mode)
    tables = [b for b in doc.blocks if b.kind is BlockKind.TABLE]
    assert len(tables) == 1
    lines = tables[0].text.splitlines()
    assert lines[0].replace(" ", "") == "|Roll|Result|"
    assert lines[1].startswith("|---")
    assert [line.replace(" ", "") for line in lines[2:]] == [f"|{n}|Outcome{n}|" for n in range(1, 7)]
    assert "Outcome 3" not in " ".join(b.text for b in doc.blocks if b.kind is not BlockKind.TABLE)


def test_tables_off_keeps_the_cells_as_text(rulebook_pdf: bytes) -> None:
    doc = extract_document(rulebook_pdf, "rules.pdf", tables=TableMode.OFF)
    assert not [b for b in doc.blocks if b.kind is BlockKind.TABLE]
    assert "Outcome 3" in " ".join(b.text for b in doc.blocks)


def test_two_columns_read_left_then_right() -> None:
    left = "".join(f"<p>Left paragraph {n}. {LOREM}</p>" for n in range(12))
    right = "".join(f"<p>Right paragraph {n}. {LOREM}</p>" for n in range(12))
    doc = extract_document(_story_pdf(left + right), "columns.pdf")
    text = " ".join(b.text for b in doc.blocks)
    order = [text.find(f"Left paragraph {n}.") for n in range(12)] + [
        text.find(f"Right paragraph {n}.") for n in range(12)
    ]
    assert -1 not in order and order == sorted(order)


def test_images_go_to_the_sink_once_and_small_ones_are_skipped() -> None:
    pdf = pymupdf.open()
    big = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 200, 120), False)
    big.set_rect(big.irect, (200, 30, 30))
    tiny = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 8, 8), False)
    tiny.set_rect(tiny.irect, (0, 0, 0))
    for n in range(2):
        page = pdf.new_page()
        page.insert_text((72, 72), f"Page {n + 1} has a map of the dungeon on it.", fontsize=11)
        page.insert_image(pymupdf.Rect(72, 100, 272, 220), pixmap=big)  # the same image twice
        page.insert_image(pymupdf.Rect(72, 300, 80, 308), pixmap=tiny)
    data = pdf.tobytes()
    saved: list[tuple[str, bytes, str]] = []

    def sink(name: str, blob: bytes, mime: str) -> str:
        saved.append((name, blob, mime))
        return f"images/{name}"

    doc = extract_document(data, "maps.pdf", image_sink=sink)
    assert len(saved) == 1 and len(doc.images) == 1
    image = doc.images[0]
    assert (image.page, image.width, image.height) == (1, 200, 120)
    assert image.blob_key == f"images/{saved[0][0]}" and image.mime.startswith("image/")
    assert extract_document(data, "maps.pdf").images == []


# -- OCR ------------------------------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize("name", ["linn.pdf", "c02-22.pdf", "skew.pdf", "cardinal.pdf"])
def test_scanned_pages_are_counted_when_ocr_is_off(name: str) -> None:
    path = SCANS / name
    pages = pdf_info(path, name).page_count
    with pytest.raises(EmptyDocument) as err:
        extract_document(path, name, ocr=False)
    assert err.value.ocr_pages_skipped == pages
    assert "OCR is turned off" in str(err.value)


@needs_corpus
def test_partly_scanned_document_warns_about_skipped_pages() -> None:
    path = SCANS / "multipage.pdf"
    doc = extract_document(path, path.name, ocr=False)
    assert doc.ocr_pages_skipped >= 1 and doc.ocr_pages == 0
    assert any("no text layer" in w for w in doc.warnings)


@needs_corpus
def test_without_tesseract_scans_are_skipped_with_a_clear_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ocr_module, "detect_ocr", lambda *a, **k: None)
    path = SCANS / "linn.pdf"
    with pytest.raises(EmptyDocument, match="tesseract is not installed") as err:
        extract_document(path, path.name)
    assert err.value.ocr_pages_skipped == 1
    with pytest.raises(MissingDependency, match="tesseract-ocr-eng") as missing:
        extract_document(path, path.name, ocr=True)
    assert missing.value.status_code == 500
    png = pymupdf.open(path)[0].get_pixmap(dpi=50).tobytes("png")
    with pytest.raises(EmptyDocument, match="read by OCR"):
        extract_document(png, "scan.png")


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{4,}", text.lower()))


@needs_corpus
@needs_tesseract
@pytest.mark.slow
def test_scanned_pdf_is_read_by_ocr_when_tesseract_is_installed() -> None:
    path = SCANS / "linn.pdf"
    doc = extract_document(path, path.name)
    assert doc.ocr_pages == 1 and doc.ocr_pages_skipped == 0
    truth = _words((SCANS / "linn.txt").read_text())
    got = _words(" ".join(b.text for b in doc.blocks))
    assert len(truth & got) >= 0.85 * len(truth)
    assert doc.blocks[0].text.startswith("The LinnSequencer")


@needs_tesseract
@pytest.mark.slow
def test_image_file_is_read_by_ocr() -> None:
    page = pymupdf.open().new_page(width=400, height=120)
    page.insert_text((20, 60), "Roll four Fate dice and add your skill.", fontsize=16)
    png = page.get_pixmap(dpi=200).tobytes("png")
    doc: ExtractedDocument = extract_document(png, "card.png")
    assert doc.ocr_pages == 1
    assert "Fate dice" in " ".join(b.text for b in doc.blocks)


# -- broken input -----------------------------------------------------------------------------


def _zero_page_pdf() -> bytes:
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_broken_inputs_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(EmptyDocument, match=r"empty\.pdf: .*empty \(0 bytes\)"):
        extract_document(b"", "empty.pdf")
    empty_file = tmp_path / "empty-on-disk.pdf"
    empty_file.write_bytes(b"")
    with pytest.raises(EmptyDocument):
        extract_document(empty_file, empty_file.name)
    with pytest.raises(CorruptDocument, match="junk.pdf") as corrupt:
        extract_document(b"this is not a PDF at all, just words", "junk.pdf")
    assert corrupt.value.status_code == 422
    with pytest.raises(CorruptDocument):
        extract_document(bytes(range(256)) * 20, "noise.pdf")
    with pytest.raises(EmptyDocument, match="no pages"):
        extract_document(_zero_page_pdf(), "zero.pdf")
    blank = pymupdf.open()
    blank.new_page()
    with pytest.raises(EmptyDocument, match="none of its 1 page"):
        extract_document(blank.tobytes(), "blank.pdf")
    with pytest.raises(FileTooLarge) as big:
        extract_document(b"%PDF-1.4" + b" " * 100, "big.pdf", max_bytes=10)
    assert big.value.status_code == 413 and big.value.limit_bytes == 10
    with pytest.raises(UnsupportedFormat, match="notes.xyz"):
        extract_document(b"data", "notes.xyz")
    for err in (corrupt.value, big.value):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err) and str(copy) == str(err)


# -- names that lie about the type ------------------------------------------------------------


def _card(text: str = "Roll four Fate dice and add your skill.") -> pymupdf.Document:
    doc = pymupdf.open()
    doc.new_page(width=400, height=120).insert_text((20, 60), text, fontsize=16)
    return doc


@pytest.mark.parametrize(("fmt", "what"), [("png", "a PNG image"), ("jpeg", "a JPEG image")])
def test_an_image_named_pdf_is_read_as_an_image(fmt: str, what: str) -> None:
    picture = _card()[0].get_pixmap(dpi=100).tobytes(fmt)
    # Without OCR the reason names what the file is, not "holds no text".
    with pytest.raises(EmptyDocument, match=rf"scan\.pdf: .*the file is {what}, not a PDF.*read by OCR") as err:
        extract_document(picture, "scan.pdf", ocr=False)
    assert err.value.ocr_pages_skipped == 1


@needs_tesseract
@pytest.mark.slow
def test_a_png_named_pdf_is_ocred_with_a_warning() -> None:
    png = _card()[0].get_pixmap(dpi=200).tobytes("png")
    doc = extract_document(png, "scan.pdf")
    assert "Fate dice" in " ".join(b.text for b in doc.blocks)
    assert any("a PNG image, not a PDF" in w for w in doc.warnings)


def test_a_pdf_named_png_or_markdown_is_read_as_a_pdf() -> None:
    pdf = _card().tobytes()
    for name in ("card.png", "card.md"):
        doc = extract_document(pdf, name)
        assert doc.blocks[0].text == "Roll four Fate dice and add your skill."
        assert any("a PDF document, not" in w for w in doc.warnings), doc.warnings


def test_other_files_named_pdf_fail_saying_what_they_are(tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "rules.pdf"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("rules.txt", "Roll the dice.")
    with pytest.raises(UnsupportedFormat, match=r"rules\.pdf: the file is a ZIP archive, not a PDF"):
        extract_document(archive, archive.name)
    # A download that saved the login page under the book's name: MuPDF would read it as HTML.
    page = b"<!DOCTYPE html>\n<html><body><p>Please log in.</p></body></html>"
    with pytest.raises(CorruptDocument, match=r"login\.pdf: .*an HTML page, not a PDF"):
        extract_document(page, "login.pdf")
    # Types the signatures miss are still no PDF, though MuPDF opens them.
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="90" height="20"><text x="1" y="15">Hi</text></svg>'
    with pytest.raises(CorruptDocument, match=r"icon\.pdf: .*not a PDF; MuPDF reads it as SVG"):
        extract_document(svg, "icon.pdf")
    with pytest.raises(UnsupportedFormat, match=r"notes\.md: the file is a gzip archive, not Markdown"):
        extract_document(b"\x1f\x8b\x08\x00" + bytes(64), "notes.md")


# -- structure rules on small generated pages -------------------------------------------------


def _book_with_running_heads() -> bytes:
    """Three chapters of six pages: book title on even pages, chapter name on odd pages, numbers."""
    pdf = pymupdf.open()
    number = 0
    for chapter in ("Marsh Roads", "Keeps and Towers", "Night Travel"):
        for n in range(6):
            number += 1
            page = pdf.new_page()
            head = "The Book of Marshes" if number % 2 == 0 else chapter
            page.insert_text((72, 40), head, fontname="helv", fontsize=8)
            page.insert_text((300, 770), str(number), fontname="helv", fontsize=8)
            y = 90
            if n == 0:
                page.insert_text((72, y), chapter, fontname="hebo", fontsize=18)
                y += 40
            for k in range(12):
                page.insert_text(
                    (72, y), f"Line {k} of page {number} tells of the road through the reeds.", fontsize=10
                )
                y += 14
    return pdf.tobytes()


def test_chapter_running_heads_on_odd_and_even_pages_are_furniture() -> None:
    from jobs.chunk import chunk_document
    from jobs.tokens import TokenCounter
    from schemas.knowledge import LibraryType, chunking_defaults

    doc = extract_document(_book_with_running_heads(), "marsh.pdf")
    headings = [(b.text, b.page) for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert headings == [("Marsh Roads", 1), ("Keeps and Towers", 7), ("Night Travel", 13)]
    texts = [b.text for b in doc.blocks]
    assert "The Book of Marshes" not in texts and not any(t.isdigit() for t in texts)
    assert texts.count("Keeps and Towers") == 1  # the heading, not its running-head copies
    chunks = chunk_document(doc, chunking_defaults(LibraryType.RULEBOOK), TokenCounter())
    for chunk in chunks:
        assert "Book of Marshes" not in chunk.text
        assert all(part in {"Marsh Roads", "Keeps and Towers", "Night Travel"} for part in chunk.heading_path)


ENTRY_CSS = """
body {font-family: serif; font-size: 10pt; margin: 0;}
h1 {font-family: sans-serif; font-size: 18pt; font-weight: bold; margin: 0 0 4pt 0;}
h3 {font-family: sans-serif; font-size: 11pt; font-weight: bold; margin: 6pt 0 0 0;}
p {margin: 0;}
td, th {border: 1px solid black; padding: 2px;}
table {border-collapse: collapse;}
"""


def _entries_pdf(html: str, css: str = "") -> bytes:
    """``html`` laid out by PyMuPDF's Story on letter pages, styled by ENTRY_CSS and ``css``."""
    import io

    buffer = io.BytesIO()
    writer = pymupdf.DocumentWriter(buffer)
    story = pymupdf.Story(html=html, user_css=ENTRY_CSS + css)
    more = True
    while more:
        device = writer.begin_page(pymupdf.paper_rect("letter"))
        more, _ = story.place(pymupdf.Rect(72, 72, 540, 720))
        story.draw(device)
        writer.end_page()
    writer.close()
    return buffer.getvalue()


SPELLS = ["Acid Splash", "Bless", "Cure Wounds", "Detect Magic", "Fire Bolt", "Light"]


def _spell_html() -> str:
    parts = ["<h1>Spells</h1>"]
    for name in SPELLS:
        parts.append(
            f"<h3>{name}</h3><p><i>1st-level evocation</i></p>"
            "<p><b>Casting Time:</b> 1 action<br/><b>Range:</b> 60 feet<br/><b>Duration:</b> Instantaneous</p>"
            f"<p>{LOREM} {name} ends when the caster sleeps.</p>"
        )
    return "".join(parts)


def test_a_bold_sans_heading_a_tenth_larger_than_the_serif_body_is_a_heading() -> None:
    doc = extract_document(_entries_pdf(_spell_html()), "spells.pdf")
    headings = [(b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert headings == [("Spells", 1)] + [(name, 2) for name in SPELLS]
    # the heading is not merged into the line under it
    assert not any(b.text.startswith(tuple(SPELLS)) for b in doc.blocks if b.kind is not BlockKind.HEADING)


def test_a_run_in_label_is_no_heading_and_keeps_its_line() -> None:
    from jobs.chunk import chunk_document
    from jobs.tokens import TokenCounter
    from schemas.knowledge import LibraryType, chunking_defaults

    doc = extract_document(_entries_pdf(_spell_html()), "spells.pdf")
    headings = [b.text for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert not any(h.startswith(("Casting Time", "Range", "Duration")) for h in headings)
    fields = [b.text for b in doc.blocks if b.text.startswith("Casting Time")]
    assert len(fields) == len(SPELLS)
    assert all(f.startswith("Casting Time: 1 action\nRange: 60 feet\nDuration: Instantaneous") for f in fields)
    assert "Casting Time" in doc.blocks[3].bold_terms
    # every spell is a section of its own, with a chunk of its own
    chunks = chunk_document(doc, chunking_defaults(LibraryType.RULEBOOK), TokenCounter())
    for name in SPELLS:
        holding = [c for c in chunks if f"{name} ends when" in c.text]
        assert len(holding) == 1 and holding[0].heading_path == ["Spells", name]
        assert sum(other in holding[0].text for other in SPELLS) == 1


def test_a_caption_above_a_table_is_no_heading_and_stays_with_its_table() -> None:
    from jobs.chunk import chunk_document
    from jobs.tokens import TokenCounter
    from schemas.knowledge import LibraryType, chunking_defaults

    rows = "".join(f"<tr><td>{n}</td><td>The marsh swallows {n} lanterns</td></tr>" for n in range(1, 7))
    html = (
        f"<h1>Hazards</h1><p>{LOREM * 3}</p>"
        "<p><b>Table: Marsh Mishaps</b></p>"
        f"<table><tr><th>d6</th><th>Mishap</th></tr>{rows}</table><p>{LOREM * 2}</p>"
    )
    doc = extract_document(_entries_pdf(html), "hazards.pdf")
    assert [b.text for b in doc.blocks if b.kind is BlockKind.HEADING] == ["Hazards"]
    kinds = [b.kind for b in doc.blocks]
    n = next(i for i, b in enumerate(doc.blocks) if b.text == "Table: Marsh Mishaps")
    assert kinds[n] is BlockKind.CAPTION and kinds[n + 1] is BlockKind.TABLE
    chunks = chunk_document(doc, chunking_defaults(LibraryType.RULEBOOK), TokenCounter())
    holder = next(c for c in chunks if "Table: Marsh Mishaps" in c.text)
    assert "| d6 | Mishap |" in holder.text


def test_ligatures_soft_hyphens_and_line_end_hyphenation() -> None:
    from jobs.extract.typography import clean_text

    assert clean_text("de\ufb01nes the \ufb00ect of \ufb03ne magic\u00adal \uff21rmor") == (
        "defines the ffect of ffine magical Armor"
    )
    assert clean_text("x² ½") == "x² ½"  # NFKC only where it keeps the meaning
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "The wizard de-\nfines a ward that", fontsize=11)
    page.insert_text((72, 200), "A lone line.", fontsize=11)
    doc = extract_document(pdf.tobytes(), "hyphen.pdf")
    assert doc.blocks[0].text == "The wizard defines a ward that"


def test_without_an_outline_styles_of_one_size_nest_by_where_they_appear() -> None:
    # Entries in bold italic, each with a bold sub-heading. Both are set at body size, so their
    # looks cannot rank them (bold upright would come first); where they appear does: the bold
    # heading always comes after a bold-italic one, between two of them.
    css = (
        "h2 {font-size: 14pt; font-weight: bold; margin: 6pt 0 0 0;}"
        "h3 {font-family: serif; font-size: 10pt; font-style: italic;}"
        "h5 {font-family: serif; font-size: 10pt; font-weight: bold; margin: 4pt 0 0 0;}"
    )
    parts = []
    for chapter in ("Combat", "Magic"):
        parts.append(f"<h1>{chapter}</h1>")
        for section in ("Cover", "Range"):
            parts.append(f"<h2>{chapter} {section}</h2><p>{LOREM}</p>")
            for entry in ("Half", "Full"):
                parts.append(f"<h3>{chapter} {section} {entry}</h3><p>{LOREM}</p>")
                parts.append(f"<h5>{chapter} {entry} {section} Variant</h5><p>{LOREM}</p>")
    doc = extract_document(_entries_pdf("".join(parts), css), "nested.pdf")
    levels = {b.text: b.level for b in doc.blocks if b.kind is BlockKind.HEADING}
    assert levels["Combat"] == 1 and levels["Combat Cover"] == 2
    assert levels["Combat Cover Half"] == 3 and levels["Magic Range Full"] == 3
    assert levels["Combat Half Cover Variant"] == 4 and levels["Magic Full Range Variant"] == 4


# -- structure on real books of the corpus --------------------------------------------------------------


def _rulebook_chunks(doc: ExtractedDocument) -> list[Any]:
    from jobs.chunk import chunk_document
    from jobs.plan import fit_chunking
    from jobs.tokens import TokenCounter
    from schemas.knowledge import LibraryType, chunking_defaults

    return chunk_document(doc, fit_chunking(chunking_defaults(LibraryType.RULEBOOK), 256), TokenCounter())


@needs_corpus
def test_a_latex_book_keeps_its_outline_levels_and_drops_its_running_heads() -> None:
    # A 117-page German LaTeX book: chapters and sections in its outline, the section's name in
    # capitals as the running head ("1.6. WEGE UND KNOTEN") beside the page number on every page.
    path = SAMPLES / "GeoTopo-komprimiert.pdf"
    doc = extract_document(path.read_bytes(), path.name, ocr=False)
    headings = {(b.page, " ".join(b.text.split())): b.level for b in doc.blocks if b.kind is BlockKind.HEADING}
    toc = pymupdf.open(path).get_toc()
    kept = [level for level, title, page in toc if headings.get((page, " ".join(title.split()))) == level]
    assert len(kept) >= 0.95 * len(toc), f"{len(kept)} of {len(toc)} outline entries found at their level"
    running_head = re.compile(r"^\d+\.\d+\. [A-ZÄÖÜ][A-ZÄÖÜß\- ]+$", re.MULTILINE)
    chunks = _rulebook_chunks(doc)
    assert len(chunks) > 100
    assert not [c.text[:80] for c in chunks if running_head.search(c.text)]
    assert not [c.heading_path for c in chunks if any(running_head.match(h) for h in c.heading_path)]


@needs_corpus
def test_a_three_column_register_drops_its_page_furniture() -> None:
    path = GOV / "federal-register-2020-17221.pdf"
    pages = pymupdf.open(path)
    heads = {line.strip() for page in pages for line in page.get_text().splitlines()[:1] if line.strip()}
    doc = extract_document(path.read_bytes(), path.name, ocr=False)
    chunks = _rulebook_chunks(doc)
    assert chunks
    leaked = [h for h in heads if re.fullmatch(r"\d{5}", h) and any(h in c.text.split() for c in chunks)]
    assert not leaked, f"page numbers in chunk text: {leaked}"
    assert not [c for c in chunks if "Federal Register / Vol." in c.text]


def test_the_outline_is_read_as_get_toc_reads_it() -> None:
    """The extractor walks the outline MuPDF loaded at opening; it must read what get_toc reads."""
    from jobs.extract.pdf import _read_outline

    doc = pymupdf.open()
    for _ in range(4):
        doc.new_page()
    doc.set_toc(
        [
            [1, "Spells", 1],
            [2, "Acid Splash", 2],
            [3, "At Higher Levels", 2],
            [2, "Bless", 3],
            [1, "Monsters", 4],
            [1, "", 2],  # an entry without a title reads " "
            [1, "Elsewhere", -1],  # points nowhere
            [1, "Online", -1, {"kind": pymupdf.LINK_URI, "uri": "https://example.com/srd"}],  # out of the file
        ]
    )
    doc = pymupdf.open(stream=doc.tobytes(), filetype="pdf")
    assert _read_outline(doc) == doc.get_toc(simple=True)
    assert [entry[2] for entry in _read_outline(doc)] == [1, 2, 2, 3, 4, 2, -1, -1]
    assert _read_outline(pymupdf.open()) == []


@needs_corpus
@pytest.mark.parametrize("name", ["GeoTopo-komprimiert.pdf", "mistitled_outlines_example.pdf"])
def test_a_real_outline_is_read_as_get_toc_reads_it(name: str) -> None:
    from jobs.extract.pdf import _read_outline

    with pymupdf.open(SAMPLES / name) as pdf:
        assert _read_outline(pdf) == pdf.get_toc(simple=True)
