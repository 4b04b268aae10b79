"""The long two-column PDF the ingestion benchmarks lay out from the corpus's Fate Markdown.

Imported by ``extract_chunk.py`` and ``ingest_pipeline.py`` (run as scripts, their folder is on
``sys.path``). Headings are set in larger bold fonts and Markdown tables become ruled tables, so
the book exercises headings, reading order across two columns, and table reconstruction.
"""

from __future__ import annotations

import re
from pathlib import Path

import pymupdf

REPO = Path(__file__).resolve().parents[1]
FATE = REPO.parent / "shared" / "corpus" / "rulebooks" / "fate-srd"
MARKDOWN = ["Fate-Condensed-SRD-CC-BY.md", "fate-accelerated-SRD.md", "fate-system-toolkit-SRD.md"]

CSS = """
body {font-family: serif; font-size: 10pt;}
h1 {font-size: 22pt; font-weight: bold;}
h2 {font-size: 16pt; font-weight: bold;}
h3 {font-size: 13pt; font-weight: bold;}
h4, h5, h6 {font-size: 11pt; font-weight: bold;}
table {border-collapse: collapse;}
td, th {border: 1px solid black; padding: 2px; font-size: 9pt;}
"""


def build_long_pdf(target_pages: int, folder: Path, name: str = "fate-two-column.pdf") -> Path:
    """Lay the Fate Markdown out as a two-column book (US letter) of ``target_pages`` pages.

    Each Markdown file is its own ``Story`` (one file's unbalanced raw HTML must not swallow the
    next); the files are laid out again and again until the book is long enough.
    """
    from markdown_it import MarkdownIt

    from jobs.extract.formats import repair_markdown

    md = MarkdownIt("commonmark", {"html": True}).enable("table").disable("code")
    parts = []
    for markdown in MARKDOWN:
        # The exports open raw <ul> lists they never close: laid out, each would indent the rest
        # of the book further until its columns are too narrow for a word (blank pages follow).
        source = re.sub(r"</?ul[^>]*>", "", repair_markdown((FATE / markdown).read_text()))
        html = md.render(source)
        # Raw HTML of the exports (images, XML prologs, document tags) is not for layout.
        html = re.sub(r"<img[^>]*>|<\?xml[^>]*>|<!DOCTYPE[^>]*>|</?(?:body|html|head)[^>]*>", "", html)
        parts.append(html)
    path = folder / name
    mediabox = pymupdf.paper_rect("letter")
    columns = [pymupdf.Rect(36, 36, 298, 756), pymupdf.Rect(314, 36, 576, 756)]
    writer = pymupdf.DocumentWriter(str(path))
    pages = 0
    while pages < target_pages:
        for html in parts:
            story = pymupdf.Story(html=html, user_css=CSS)
            more = True
            while more and pages < target_pages:
                device = writer.begin_page(mediabox)
                pages += 1
                for rect in columns:
                    more, _ = story.place(rect)
                    story.draw(device)
                    if not more:
                        break
                writer.end_page()
            if pages >= target_pages:
                break
    writer.close()
    return path
