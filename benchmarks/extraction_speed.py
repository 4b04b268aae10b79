"""Extraction's speed beside embedding's, on the same book: is extraction ever the pipeline's bottleneck?

The old guard (extract + chunk ≥ 0.6× raw ``page.get_text()``) is retired: the PDF reader needs MuPDF
outputs (the text page, its HTML and blocks) that cost 1.1–1.3× raw by themselves
(``benchmarks/rulebook_structure.py``). What matters to a pipeline is whether extraction keeps the
embedding stage fed, so this harness measures, in one run, on the same books:

* **extract + chunk** (:func:`jobs.extract.extract_document` + :func:`jobs.chunk.chunk_document`, rulebook
  settings, accurate tables, tokens counted by the embedding model's tokenizer): the CPU time of this
  process (the two stages run on one core: MuPDF and Python, no threads), best of ``--reps``, as
  **pages/s per core** and **chunks/s per core**;
* **embedding the chunks it made** as the ingest's embed stage does (the texts of
  :func:`jobs.index_records.embedding_text`, ``SentenceTransformerEmbedder`` on torch, every core of the
  machine, the stage's batch size; ``--embed-sample`` chunks spread over the book, a rate per chunk):
  **chunks/s** (wall) and **chunks/s per core** (the CPU time of every
  torch thread, which other processes on a shared machine do not inflate as they do wall time); the
  embedding cores one extraction core keeps fed is the ratio of the two per-core rates;
* the **GPU figure** extraction must beat: an embedding actor on one GPU consumes ``--gpu-chunks-per-s``
  chunks a second. The project's benchmarks hold no GPU run (no GPU on the development machines), so
  the figure is a stated assumption (see ``GPU_ASSUMPTION``); the table gives the extraction cores that
  keep one such GPU fed, and a measured figure replaces it with ``--gpu-chunks-per-s``.

Books: the generated two-column Fate book of ``benchmarks/long_pdf.py`` (``--pages``, the text-dense
case), and every PDF of ``../shared/corpus/pdfs`` with a text layer, taken together (read in place).

Usage::

    python benchmarks/extraction_speed.py                 # ~2 min on 2 cores
    python benchmarks/extraction_speed.py --pages 100 --reps 1

Writes benchmarks/results/extraction_speed.json and benchmarks/results/extraction_speed.png.
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
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from long_pdf import build_long_pdf  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
RESULTS = REPO / "benchmarks" / "results"
GPU_CHUNKS_PER_S = 5000.0
GPU_ASSUMPTION = (
    "assumed, not measured here: all-MiniLM-L6-v2 on one data-centre GPU (fp32, batches of 256 chunks of up to "
    "256 word pieces, the model's limit) embeds ~5,000 chunks/s; sentence-transformers' model table gives 14,200 "
    "sentences/s on a V100 for short sentences, and chunks are 5-10x longer. Pass --gpu-chunks-per-s with a "
    "measured figure"
)


def cpu_time(fn: Callable[[], Any], reps: int) -> tuple[float, float, Any]:
    """Best CPU and wall seconds of ``reps`` calls of ``fn`` (this process), and its last result."""
    best_cpu = best_wall = float("inf")
    result: Any = None
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return best_cpu, best_wall, result


def measure_book(
    name: str, paths: list[Path], reps: int, embedder: Any, batch_size: int, sample: int
) -> dict[str, Any]:
    """Extract + chunk of ``paths`` (one core, CPU time) beside embedding their chunks (every core): every
    chunk, or ``sample`` of them spread evenly over the book (a rate per chunk; 0 = every chunk)."""
    from jobs.chunk import chunk_document
    from jobs.extract import TableMode, extract_document
    from jobs.index_records import embedding_text
    from jobs.tokens import TokenCounter
    from schemas.knowledge import LibraryType, chunking_defaults

    counter = TokenCounter()
    rules = chunking_defaults(LibraryType.RULEBOOK)

    def extract_all() -> tuple[int, list[Any]]:
        pages, chunks = 0, []
        for path in paths:
            doc = extract_document(path, path.name, tables=TableMode.ACCURATE, ocr=False)
            pages += doc.page_count
            chunks += chunk_document(doc, rules, counter)
        return pages, chunks

    extract_all()  # warm: imports, the tokenizer's word cache, MuPDF's fonts
    cpu_s, wall_s, (pages, chunks) = cpu_time(extract_all, reps)
    texts = [embedding_text(list(c.heading_path), c.text) for c in chunks]
    if 0 < sample < len(texts):
        texts = [texts[round(i * len(texts) / sample)] for i in range(sample)]
    embedder.embed_documents(texts[:batch_size])  # warm

    def embed_all() -> None:
        for start in range(0, len(texts), batch_size):
            embedder.embed_documents(texts[start : start + batch_size])

    embed_cpu, embed_wall, _ = cpu_time(embed_all, max(1, reps // 2))
    cores = os.cpu_count() or 1
    extract_chunks_per_core = len(chunks) / cpu_s
    embed_chunks_per_s = len(texts) / embed_wall
    # CPU time of every torch thread: chunks per core-second, what the machine's load does not change
    embed_chunks_per_core = len(texts) / embed_cpu
    row = {
        "book": name,
        "files": len(paths),
        "pages": pages,
        "chunks": len(chunks),
        "chunks_per_page": round(len(chunks) / max(pages, 1), 3),
        "extract_cpu_s": round(cpu_s, 3),
        "extract_wall_s": round(wall_s, 3),
        "extract_pages_per_s_per_core": round(pages / cpu_s, 1),
        "extract_chunks_per_s_per_core": round(extract_chunks_per_core, 1),
        "embedded_chunks": len(texts),
        "embed_wall_s": round(embed_wall, 3),
        "embed_cpu_s": round(embed_cpu, 3),
        "embed_cores": cores,
        "embed_chunks_per_s": round(embed_chunks_per_s, 1),
        "embed_chunks_per_s_per_core": round(embed_chunks_per_core, 1),
        # how many cores of CPU embedding one core of extraction keeps fed (both from CPU time)
        "embedding_cores_fed_per_extract_core": round(extract_chunks_per_core / embed_chunks_per_core, 1),
        # > 1: one extraction core makes chunks faster than every core of this machine embeds them
        "extract_core_over_cpu_embedding": round(extract_chunks_per_core / (embed_chunks_per_core * cores), 2),
    }
    print(
        f"{name:34s} {pages:5d} p {len(chunks):5d} chunks  extract {row['extract_pages_per_s_per_core']:7.1f} p/s/core "
        f"({row['extract_chunks_per_s_per_core']:7.1f} chunks/s/core)  embed {row['embed_chunks_per_s']:6.1f} chunks/s "
        f"({row['embed_chunks_per_s_per_core']:.1f}/core)  one extraction core feeds "
        f"{row['embedding_cores_fed_per_extract_core']:.0f} embedding cores",
        flush=True,
    )
    return row


def gpu_rows(rows: list[dict[str, Any]], gpu_chunks_per_s: float) -> list[dict[str, Any]]:
    """Per book: the extraction cores that keep one GPU embedding actor fed, and the pages/s that takes."""
    out = []
    for row in rows:
        per_core = row["extract_chunks_per_s_per_core"]
        out.append(
            {
                "book": row["book"],
                "gpu_chunks_per_s": gpu_chunks_per_s,
                "pages_per_s_needed": round(gpu_chunks_per_s / max(row["chunks_per_page"], 1e-9), 1),
                "extract_cores_per_gpu": round(gpu_chunks_per_s / per_core, 1),
            }
        )
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = report["books"]
    names = [r["book"] for r in rows]
    xs = np.arange(len(names))
    width = 0.27
    fig, ax = plt.subplots(figsize=(9, 4.8))
    series = [
        ("extract + chunk, 1 core", [r["extract_chunks_per_s_per_core"] for r in rows]),
        (f"embedding, every core ({rows[0]['embed_cores']})", [r["embed_chunks_per_s"] for r in rows]),
        ("embedding, per core", [r["embed_chunks_per_s_per_core"] for r in rows]),
    ]
    for n, (label, values) in enumerate(series):
        ax.bar(xs + (n - 1) * width, values, width, label=label)
        for x, v in zip(xs, values, strict=True):
            ax.text(x + (n - 1) * width, v * 1.05, f"{v:.0f}", ha="center", fontsize=8)
    gpu = report["gpu"]["chunks_per_s"]
    ax.axhline(gpu, color="red", linestyle="--", linewidth=1, label=f"one GPU embedding ({gpu:,.0f}/s, assumed)")
    ax.set_yscale("log")
    ax.set_xticks(xs, names, fontsize=8)
    ax.set_ylabel("chunks per second (log scale)")
    ax.set_title(f"Extraction beside embedding, same books, {report['machine']['cpus']} CPUs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=400, help="minimum pages of the generated book")
    parser.add_argument("--reps", type=int, default=3, help="extraction repetitions (best CPU time kept)")
    parser.add_argument("--gpu-chunks-per-s", type=float, default=None, help="a measured GPU embedding figure")
    parser.add_argument(
        "--embed-sample", type=int, default=256, help="chunks embedded per book, spread over it (0: every chunk)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from jobs.errors import ExtractionError
    from jobs.extract import extract_document
    from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder

    started = time.perf_counter()
    load_before = os.getloadavg()
    # the embed stage's bulk configuration: torch on every core (jobs.stages.EmbedStage)
    config = EmbeddingConfig(small_batch_runtime="torch")
    embedder = SentenceTransformerEmbedder(config)
    embedder.load()
    rows = []
    with tempfile.TemporaryDirectory(prefix="extraction-speed-") as tmp:
        book = build_long_pdf(args.pages, Path(tmp))
        rows.append(
            measure_book("generated two-column book", [book], args.reps, embedder, config.batch_size, args.embed_sample)
        )
        corpus = []
        for path in sorted(CORPUS.glob("pdfs/*/*.pdf")):
            try:
                doc = extract_document(path, path.name, ocr=False)
            except ExtractionError:
                continue
            if not doc.ocr_pages_skipped and doc.page_count:
                corpus.append(path)
        rows.append(
            measure_book("corpus PDFs with text", corpus, args.reps, embedder, config.batch_size, args.embed_sample)
        )
    gpu = args.gpu_chunks_per_s or GPU_CHUNKS_PER_S
    report = {
        "benchmark": "extraction_speed",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "embedding": {"model": embedder.name, "runtime": "torch", "batch_size": config.batch_size},
        "gpu": {
            "chunks_per_s": gpu,
            "source": "--gpu-chunks-per-s (measured)" if args.gpu_chunks_per_s else GPU_ASSUMPTION,
        },
        "books": rows,
        "gpu_needs": gpu_rows(rows, gpu),
        "goal": "extraction never the bottleneck: on CPU, one extraction core makes chunks at least as fast as the "
        "machine's every core embeds them (extract_core_over_cpu_embedding >= 1); on GPU, the extraction cores per "
        "GPU that keep it fed (extract_cores_per_gpu) are what the plan gives it",
        "goal_met_cpu": all(r["extract_core_over_cpu_embedding"] >= 1 for r in rows),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    for need in report["gpu_needs"]:
        print(
            f"{need['book']:34s} one GPU at {gpu:,.0f} chunks/s needs {need['pages_per_s_needed']:,.0f} pages/s: "
            f"{need['extract_cores_per_gpu']:.1f} extraction cores"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "extraction_speed.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, args.out / "extraction_speed.png")
    print(json.dumps({k: report[k] for k in ("goal_met_cpu", "wall_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
