"""A stat block's ability scores: a label row over a value row whose narrow cells wrap.

Laid out by PyMuPDF's Story as the story-compact rulebook sets them (Story sizes a table in the
second column narrower, so its score cells wrap there: "1" over "(−5)"): MuPDF cut the value row
into blocks, some merged with the paragraph below, and the scores came out of order, a row's
last cells after the next paragraph.
"""

from __future__ import annotations

import io

import pymupdf

from jobs.document import BlockKind
from jobs.extract.pdf import extract_pdf

CSS = """
body { font-family: sans-serif; font-size: 8.5pt; }
p { margin-top: 0; margin-bottom: 0; }
table { border-collapse: collapse; }
td, th { font-size: 7.5pt; border: 0.5px solid gray; padding: 1px; }
"""

LABELS = ["STR", "DEX", "CON", "INT", "WIS", "CHA"]


def _stat_block(name: str, scores: list[str]) -> str:
    head = "".join(f"<th>{label}</th>" for label in LABELS)
    cells = "".join(f"<td>{score}</td>" for score in scores)
    return (
        f"<h3>{name}</h3><p><i>Tiny beast, unaligned</i></p>"
        "<p><b>Armor Class</b> 11</p><p><b>Hit Points</b> 1 (1d4-1)</p><p><b>Speed</b> 0 ft., swim 20 ft.</p>"
        f"<table><tr>{head}</tr><tr>{cells}</tr></table>"
        "<p><b>Senses</b> passive Perception 10</p><p><b>Languages</b> —</p><p><b>Challenge</b> 0</p>"
    )


def _pdf(html: str) -> bytes:
    """``html`` in two A4 columns, as the story-compact layout sets its books."""
    buffer = io.BytesIO()
    writer = pymupdf.DocumentWriter(buffer)
    story = pymupdf.Story(html=html, user_css=CSS)
    mediabox = pymupdf.paper_rect("a4")
    columns = [pymupdf.Rect(40, 50, 290, 790), pymupdf.Rect(305, 50, 555, 790)]
    more = True
    while more:
        device = writer.begin_page(mediabox)
        for rect in columns:
            more, _ = story.place(rect)
            story.draw(device)
            if not more:
                break
        writer.end_page()
    writer.close()
    return buffer.getvalue()


SEA_HORSE = ["1 (−5)", "12 (+1)", "8 (−1)", "1 (−5)", "10 (+0)", "2 (−4)"]
OOZE = ["16 (+3)", "5 (−3)", "16 (+3)", "1 (−5)", "6 (−2)", "1 (−5)"]
APE = ["16 (+3)", "14 (+2)", "14 (+2)", "6 (−2)", "12 (+1)", "7 (−2)"]


def _texts(pdf: bytes) -> list[str]:
    return [b.text for b in extract_pdf(pdf, "beasts.pdf").blocks]


def _wraps(pdf: bytes) -> bool:
    """Whether some score cell really wraps on the page (else the test proves nothing)."""
    with pymupdf.open(stream=pdf, filetype="pdf") as doc:
        lines = [
            "".join(span["text"] for span in line["spans"]).strip()
            for page in doc
            for block in page.get_text("dict")["blocks"]
            for line in block.get("lines", [])
        ]
    return any(line.startswith("(") and line.endswith(")") and " " not in line for line in lines)


BLOCKS = [("Sea Horse", SEA_HORSE), ("Ooze", OOZE), ("Ape", APE)] * 4  # the second column fills too


def test_wrapped_score_cells_come_out_as_one_row_in_column_order() -> None:
    pdf = _pdf("".join(_stat_block(name, scores) for name, scores in BLOCKS))
    assert _wraps(pdf)
    texts = _texts(pdf)
    for scores in (SEA_HORSE, OOZE, APE):
        row = " ".join(scores)
        places = [n for n, text in enumerate(texts) if text == row]
        assert len(places) == 4, (row, texts)
        for at in places:
            assert texts[at - 1] == "STR DEX CON INT WIS CHA"
            assert texts[at + 1].startswith("Senses passive Perception 10")
    # nothing of a row is read twice or left behind as a stray cell
    rows = {" ".join(scores) for _, scores in BLOCKS}
    assert not [t for t in texts if t not in rows and (t.startswith("(") or t[:1].isdigit())]


def test_each_stat_block_reads_whole_and_in_order() -> None:
    blocks = extract_pdf(_pdf("".join(_stat_block(name, scores) for name, scores in BLOCKS)), "beasts.pdf").blocks
    expected = [
        [name, "Tiny beast, unaligned", "Armor Class 11", "Hit Points 1 (1d4-1)", "Speed 0 ft., swim 20 ft."]
        + ["STR DEX CON INT WIS CHA", " ".join(scores), "Senses passive Perception 10", "Languages —", "Challenge 0"]
        for name, scores in BLOCKS
    ]
    assert "\n".join(b.text for b in blocks).split("\n") == [line for block in expected for line in block]
    assert [b.text for b in blocks if b.kind is BlockKind.HEADING] == [name for name, _ in BLOCKS]


def test_a_label_row_over_a_row_read_whole_is_left_as_it_was() -> None:
    texts = _texts(_pdf(_stat_block("Ape", APE)))
    at = texts.index("STR DEX CON INT WIS CHA")
    assert texts[at + 1] == " ".join(APE)


def _column_head_pdf(pages: int) -> bytes:
    """Pages whose text opens on a stat block's label row, just under a running head."""
    head = "".join(f"<th>{label}</th>" for label in LABELS)
    cells = "".join(f"<td>{score}</td>" for score in APE)
    html = (
        f"<table><tr>{head}</tr><tr>{cells}</tr></table>"
        "<p><b>Senses</b> passive Perception 13</p><p><b>Challenge</b> 1/2</p>"
        "<p>Tigers hunt alone and at night, and the ape keeps away from them.</p>"
    )
    buffer = io.BytesIO()
    writer = pymupdf.DocumentWriter(buffer)
    mediabox = pymupdf.paper_rect("a4")
    for _ in range(pages):
        story = pymupdf.Story(html=html, user_css=CSS)
        device = writer.begin_page(mediabox)
        story.place(pymupdf.Rect(40, 50, 290, 790))
        story.draw(device)
        writer.end_page()
    writer.close()
    with pymupdf.open(stream=buffer.getvalue(), filetype="pdf") as doc:
        for page in doc:
            page.insert_text((40, 34), "Bestiary", fontsize=8)
            page.insert_text((300, 810), str(page.number + 1), fontsize=8)
        return doc.tobytes()


def test_a_label_row_at_the_head_of_each_page_is_text_not_a_running_head() -> None:
    texts = _texts(_column_head_pdf(4))
    joined = "\n".join(texts)
    assert joined.count("STR DEX CON INT WIS CHA") == 4, texts
    assert joined.count(" ".join(APE)) == 4
    assert "Bestiary" not in joined  # the running head above it still goes


def _split_row_pdf() -> bytes:
    """A stat block whose label row ends the first column and whose scores open the second.

    Filler lines push the block down until Story breaks the column between the two rows.
    """
    for lines in range(40, 90):
        filler = "".join(f"<p>Filler line {n} of the bestiary's opening pages.</p>" for n in range(lines))
        pdf = _pdf(filler + _stat_block("Sea Horse", SEA_HORSE))
        with pymupdf.open(stream=pdf, filetype="pdf") as doc:
            blocks = doc[0].get_text("blocks")
        labels = [b for b in blocks if b[4].startswith("STR\nDEX")]
        values = [b for b in blocks if b[4].startswith("1\n") or b[4].startswith("1 (")]
        if labels and values and labels[0][0] < 290 < values[0][0]:
            return pdf
    raise AssertionError("no filler length broke the column between the two rows")


def test_a_label_row_ending_a_column_takes_its_values_from_the_head_of_the_next() -> None:
    texts = _texts(_split_row_pdf())
    at = texts.index("STR DEX CON INT WIS CHA")
    assert texts[at + 1] == " ".join(SEA_HORSE), texts[at - 2 : at + 4]
    assert texts[at + 2].startswith("Senses passive Perception 10")
