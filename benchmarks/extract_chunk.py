"""Throughput of the extract + chunk stages against raw PyMuPDF and against ``unstructured``.

Usage::

    .venv/bin/python benchmarks/extract_chunk.py [--pages 400] [--reps 5] [--out benchmarks/results]

Corpus: the PDFs and the Fate SRD Markdown/HTML of ``../shared/corpus`` (read in place), plus a long
two-column PDF this script lays out itself from the Fate Markdown with PyMuPDF's Story (headings in
larger bold fonts, Markdown tables as ruled tables) into a temporary folder that is deleted after.

Measured, on the same files in the same run, each the best of ``--reps`` interleaved repetitions:

* ``raw``: ``pymupdf.open`` + ``page.get_text()`` for every page (PDFs only);
* ``ours``: :func:`jobs.extract.extract_document` + :func:`jobs.chunk.chunk_document` (rulebook
  settings, tokens counted by the embedding model's tokenizer), with ``TableMode.ACCURATE``
  (cells from the rules drawn in table-like regions, the default) and ``TableMode.FAST`` (block geometry);
* ``unstructured``: ``partition_pdf(strategy="fast")`` / ``partition_md`` / ``partition_html`` +
  ``chunk_by_title`` (one repetition: it is slow). Its PDF path needs ``pdfminer.six``, ``pi_heif``,
  ``pikepdf``, ``pdf2image``, ``unstructured.pytesseract``, ``onnx``, ``opencv-python-headless`` and
  ``unstructured_inference`` (installed ``--no-deps``: its model dependencies are not used by
  ``strategy="fast"``); without them the PDF baseline is skipped and says so.

Scanned PDFs (no text layer) are left out of the ratios: raw ``get_text`` returns nothing for them
and OCR is a different cost. Writes ``extract_chunk.json`` and ``extract_chunk.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pymupdf  # noqa: E402
from long_pdf import FATE, MARKDOWN, build_long_pdf  # noqa: E402

from jobs.chunk import chunk_document  # noqa: E402
from jobs.errors import ExtractionError  # noqa: E402
from jobs.extract import TableMode, extract_document  # noqa: E402
from jobs.extract.formats import prepare_unstructured  # noqa: E402
from jobs.tokens import TokenCounter  # noqa: E402
from schemas.knowledge import LibraryType, chunking_defaults  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"


def best_of(fn: Callable[[], Any], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _unstructured_child(path: str, conn: Any) -> None:
    from unstructured.chunking.title import chunk_by_title

    start = time.perf_counter()
    if path.endswith(".pdf"):
        from unstructured.partition.pdf import partition_pdf

        elements = partition_pdf(filename=path, strategy="fast", languages=["eng"])
    elif path.endswith(".html"):
        from unstructured.partition.html import partition_html

        elements = partition_html(text=Path(path).read_text(), languages=["eng"])
    else:
        from unstructured.partition.md import partition_md

        elements = partition_md(text=Path(path).read_text(), languages=["eng"])
    chunks = chunk_by_title(elements)
    conn.send((time.perf_counter() - start, len(elements), len(chunks)))


def unstructured_baseline(path: Path, timeout: float) -> dict[str, Any]:
    """Partition + chunk_by_title in a child process, given up after ``timeout`` seconds."""
    import multiprocessing

    context = multiprocessing.get_context("fork")  # the child inherits the imported unstructured
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_unstructured_child, args=(str(path), sender))
    child.start()
    try:
        if receiver.poll(timeout):
            seconds, elements, chunks = receiver.recv()
            return {
                "unstructured_s": round(seconds, 5),
                "unstructured_elements": elements,
                "unstructured_chunks": chunks,
            }
        return {"unstructured_timeout_s": timeout}
    finally:
        child.terminate()
        child.join()


def raw_get_text(path: Path) -> None:
    with pymupdf.open(path) as doc:
        for page in doc:
            page.get_text()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=400, help="minimum pages of the generated PDF")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (best time is kept)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--unstructured-timeout",
        type=float,
        default=240.0,
        help="seconds before the unstructured baseline of one file is given up",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress lines show up when piped to a file
    if not CORPUS.is_dir():
        print(f"corpus not found at {CORPUS}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    counter = TokenCounter()
    rules = chunking_defaults(LibraryType.RULEBOOK)

    def ours(path: Path, mode: TableMode) -> Callable[[], Any]:
        return lambda: chunk_document(extract_document(path, path.name, tables=mode, ocr=False), rules, counter)

    try:
        prepare_unstructured("benchmark")
        from unstructured.chunking.title import chunk_by_title  # noqa: F401  (imported for the children)
        from unstructured.partition.html import partition_html  # noqa: F401
        from unstructured.partition.md import partition_md  # noqa: F401

        have_unstructured = True
    except ExtractionError as err:
        print(f"unstructured baseline skipped: {err}")
        have_unstructured = False
    unstructured_pdf_error = None
    if have_unstructured:
        try:
            from unstructured.partition.pdf import partition_pdf  # noqa: F401
        except ImportError as err:
            unstructured_pdf_error = f"partition_pdf unavailable: {err}"
            print(unstructured_pdf_error)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        long_pdf = build_long_pdf(args.pages, Path(tmp))
        build_s = time.perf_counter() - t0
        pdfs = sorted(CORPUS.glob("pdfs/*/*.pdf")) + [long_pdf]
        rows: list[dict[str, Any]] = []
        # warm caches (tokenizer word cache, imports) so the first file pays nothing extra
        ours(long_pdf, TableMode.FAST)()
        for path in pdfs:
            try:
                doc = extract_document(path, path.name, ocr=False)
            except ExtractionError as err:
                print(f"skip {path.name}: {err.code}")
                continue
            if doc.ocr_pages_skipped:
                print(f"skip {path.name}: {doc.ocr_pages_skipped} scanned page(s)")
                continue
            pages = doc.page_count
            times = {"raw": float("inf"), "ours_accurate": float("inf"), "ours_fast": float("inf")}
            # interleaved repetitions: machine noise hits every method alike
            for _ in range(args.reps):
                times["raw"] = min(times["raw"], best_of(lambda p=path: raw_get_text(p), 1))
                times["ours_accurate"] = min(times["ours_accurate"], best_of(ours(path, TableMode.ACCURATE), 1))
                times["ours_fast"] = min(times["ours_fast"], best_of(ours(path, TableMode.FAST), 1))
            chunks = len(ours(path, TableMode.ACCURATE)())
            row = {
                "file": path.name if path != long_pdf else f"generated: {path.name}",
                "pages": pages,
                "chunks": chunks,
                **{f"{k}_s": round(v, 5) for k, v in times.items()},
                **{f"{k}_pages_per_s": round(pages / v, 1) for k, v in times.items()},
            }
            if have_unstructured and unstructured_pdf_error is None:
                row |= unstructured_baseline(path, args.unstructured_timeout)
                if row.get("unstructured_elements"):
                    row["unstructured_pages_per_s"] = round(pages / row["unstructured_s"], 1)
            rows.append(row)
            if "unstructured_pages_per_s" in row:
                baseline = f"  unstructured {row['unstructured_pages_per_s']:5.1f} p/s"
            elif "unstructured_timeout_s" in row:
                baseline = f"  unstructured > {row['unstructured_timeout_s']:.0f} s"
            elif "unstructured_elements" in row:
                baseline = "  unstructured: 0 elements"
            else:
                baseline = ""
            print(
                f"{row['file'][:42]:42s} {pages:4d} p  raw {row['raw_pages_per_s']:7.0f} p/s  "
                f"ours {row['ours_accurate_pages_per_s']:6.0f} (fast {row['ours_fast_pages_per_s']:6.0f}) p/s"
                + baseline
            )

        text_rows: list[dict[str, Any]] = []
        for name in [*MARKDOWN, "fate-core-SRD.html"]:
            path = FATE / name
            size = path.stat().st_size
            ours_s = best_of(ours(path, TableMode.ACCURATE), args.reps)
            row = {
                "file": name,
                "bytes": size,
                "ours_s": round(ours_s, 5),
                "ours_mb_per_s": round(size / ours_s / 1e6, 2),
            }
            if have_unstructured:
                row |= unstructured_baseline(path, args.unstructured_timeout)
                if "unstructured_s" in row:
                    row["unstructured_mb_per_s"] = round(size / row["unstructured_s"] / 1e6, 2)
            text_rows.append(row)
            print(
                f"{name:42s} {size / 1e3:6.0f} kB ours {row['ours_mb_per_s']:5.2f} MB/s"
                + (f"  unstructured {row['unstructured_mb_per_s']:5.2f} MB/s" if "unstructured_s" in row else "")
            )

    def total(key: str, group: list[dict[str, Any]]) -> float:
        return sum(r[key] for r in group if key in r)

    pages = sum(r["pages"] for r in rows)
    ratios = {
        "ours_accurate_vs_raw_get_text": total("raw_s", rows) / total("ours_accurate_s", rows),
        "ours_fast_vs_raw_get_text": total("raw_s", rows) / total("ours_fast_s", rows),
    }
    long_rows = [r for r in rows if r["file"].startswith("generated")]
    ratios["long_pdf_ours_accurate_vs_raw"] = long_rows[0]["raw_s"] / long_rows[0]["ours_accurate_s"]
    ratios["long_pdf_ours_fast_vs_raw"] = long_rows[0]["raw_s"] / long_rows[0]["ours_fast_s"]
    # Files unstructured read (some it returns no elements for: nothing to compare); files it
    # did not finish count at the timeout, which makes that ratio a lower bound.
    measured = [r for r in rows if r.get("unstructured_elements") or "unstructured_timeout_s" in r]
    if measured:
        spent = sum(r.get("unstructured_s", r.get("unstructured_timeout_s", 0.0)) for r in measured)
        ratios["pdf_unstructured_over_ours_accurate"] = spent / total("ours_accurate_s", measured)
        ratios["pdf_unstructured_over_ours_fast"] = spent / total("ours_fast_s", measured)
        ratios["pdf_unstructured_is_lower_bound"] = float(any("unstructured_timeout_s" in r for r in measured))
    if any("unstructured_s" in r for r in text_rows):
        ratios["text_unstructured_over_ours"] = total("unstructured_s", text_rows) / total("ours_s", text_rows)
    result = {
        "benchmark": "extract_chunk",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": {"pymupdf": pymupdf.VersionBind, "token_counter": counter.source},
        "generated_pdf": {"pages": long_rows[0]["pages"], "build_s": round(build_s, 2)},
        "settings": {"library_type": "rulebook", **rules.model_dump(mode="json"), "reps": args.reps},
        "pdf": rows,
        "text": text_rows,
        "totals": {
            "pdf_pages": pages,
            "raw_pages_per_s": round(pages / total("raw_s", rows), 1),
            "ours_accurate_pages_per_s": round(pages / total("ours_accurate_s", rows), 1),
            "ours_fast_pages_per_s": round(pages / total("ours_fast_s", rows), 1),
        },
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "targets": {"vs_raw_get_text": 0.8, "vs_unstructured": 10.0},
        "notes": unstructured_pdf_error,
    }
    (args.out / "extract_chunk.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    plot(result, args.out / "extract_chunk.png")
    print(json.dumps(result["totals"], indent=2), json.dumps(result["ratios"], indent=2))
    return 0


def plot(result: dict[str, Any], target: Path) -> None:
    """Pages per second per PDF and method (log scale), with the overall ratios in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["pdf"]
    methods = [
        ("raw", "raw get_text()"),
        ("ours_accurate", "extract+chunk (accurate tables)"),
        ("ours_fast", "extract+chunk (fast tables)"),
        ("unstructured", "unstructured fast + chunk_by_title"),
    ]
    methods = [(k, label) for k, label in methods if any(f"{k}_pages_per_s" in r for r in rows)]
    fig, ax = plt.subplots(figsize=(12, 6))
    width = 0.8 / len(methods)
    for n, (key, label) in enumerate(methods):
        values = [r.get(f"{key}_pages_per_s", 0) for r in rows]
        ax.bar([i + n * width for i in range(len(rows))], values, width, label=label)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    ax.set_xticklabels([f"{r['file'][:28]}\n({r['pages']} p)" for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("pages / s (log)")
    ratios = result["ratios"]
    title = (
        f"extract+chunk vs raw get_text: {ratios['ours_accurate_vs_raw_get_text']:.2f}x (accurate), "
        f"{ratios['ours_fast_vs_raw_get_text']:.2f}x (fast)"
    )
    if "pdf_unstructured_over_ours_accurate" in ratios:
        bound = "≥ " if ratios.get("pdf_unstructured_is_lower_bound") else ""
        title += f"; {bound}{ratios['pdf_unstructured_over_ours_accurate']:.0f}x faster than unstructured (PDF)"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
