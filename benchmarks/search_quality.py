"""Search quality: recall@5 and MRR of each retrieval leg alone, hybrid, and hybrid + re-ranking, in one run.

The corpus is ingested with the project's own pipeline (``jobs.pipeline.run_ingest``, local Ray) into a
temporary data folder:

- the Fate Condensed SRD (Markdown, read in place from ``../shared/corpus``);
- the D&D SRD 5.1 JSON (spells, rules and rule sets, conditions), turned into Markdown files in the
  temporary folder at run time (one ``##`` section per spell / rule / condition; the corpus is never
  copied into the repository).

The questions (``benchmarks/data/search_questions.jsonl``) were written for this benchmark, phrased as
players ask them, most without the words of the section that answers them; each names the headings
of its answer. A hit is relevant when one of the headings of its chunk's heading path is one of them,
or the chunk holds one of them as a line of its own (the chunker merges short sections, so a chunk's
heading path names only its first section); compared case-folded, without HTML tags and punctuation.
recall@5: share of questions with a relevant hit in the top 5. MRR: mean of 1/rank of the first
relevant hit in the top 10 (0 if none).

The re-ranker: no trained cross-encoder ships offline on PyPI. ``--reranker-model PATH`` uses one;
``--train-reranker`` first fine-tunes the local all-MiniLM-L6-v2 body as a cross-encoder on books the
questions do not ask about (``benchmarks/search_reranker.py``); otherwise the run builds one of the same
shape with an untrained scoring head, whose ranking is noise (the result records ``trained: false``).

Usage::

    python benchmarks/search_quality.py                      # ingest (~2-4 min on 2 cores) and evaluate
    python benchmarks/search_quality.py --data-dir /tmp/sq   # keep / reuse the ingested stores
    python benchmarks/search_quality.py --train-reranker --tune   # what results/ holds (~10 min)

Writes benchmarks/results/search_quality.json and benchmarks/results/search_quality.png.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from benchmarks.common import machine_info, srd_records, untrained_cross_encoder  # noqa: E402
from schemas.search import LegWeights  # noqa: E402
from schemas.settings import Settings, load_settings  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus" / "rulebooks"
FATE = CORPUS / "fate-srd" / "Fate-Condensed-SRD-CC-BY.md"
SRD_JSON = CORPUS / "dnd-srd-5.1" / "json-srd-2014"
QUESTIONS = REPO / "benchmarks" / "data" / "search_questions.jsonl"
RESULTS = REPO / "benchmarks" / "results"

RUNS: dict[str, LegWeights | None] = {
    "vector": LegWeights(vector=1, text=0, graph=0),
    "text": LegWeights(vector=0, text=1, graph=0),
    "graph": LegWeights(vector=0, text=0, graph=1),
    "hybrid without coverage": LegWeights(vector=1, text=1, graph=0.5),  # the default before the coverage leg
    "hybrid": None,  # the service's weights (with the coverage leg)
}


# -- corpus ---------------------------------------------------------------------------------------


def _load(name: str) -> list[dict[str, Any]]:
    return srd_records(name, pk_key=None, folder=SRD_JSON)


def srd_markdown(folder: Path) -> list[Path]:
    """The SRD 5.1 JSON records the questions ask about, as Markdown sections (written to ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    spells = ["# Spells\n"]
    for s in sorted(_load("Spell.json"), key=lambda s: s["name"]):
        level = "cantrip" if s.get("level") == 0 else f"level {s.get('level')}"
        lines = [f"## {s['name']}\n", f"*{level} {s.get('school', '')} spell*\n"]
        for label, key in (("Casting time", "casting_time"), ("Range", "range_text"), ("Duration", "duration")):
            if s.get(key):
                lines.append(f"**{label}:** {s[key]}\n")
        lines.append(str(s.get("desc", "")).strip() + "\n")
        if s.get("higher_level"):
            lines.append(f"**At higher levels.** {s['higher_level'].strip()}\n")
        spells.append("\n".join(lines))
    rulesets = {r.get("name"): r for r in _load("RuleSet.json")}
    by_set: dict[str, list[dict[str, Any]]] = {}
    for rule in _load("Rule.json"):
        by_set.setdefault(str(rule.get("ruleset", "")), []).append(rule)
    rules = []
    for ruleset_name, ruleset in sorted(rulesets.items()):
        rules.append(f"# {ruleset_name}\n\n{str(ruleset.get('desc', '')).strip()}\n")
        key = "srd_" + re.sub(r"[^a-z0-9]+", "-", str(ruleset_name).lower()).strip("-")
        for rule in sorted(by_set.get(key, []), key=lambda r: r.get("index", 0)):
            # Headings inside a rule's text are pushed below the rule's own.
            body = re.sub(r"^(#+)", r"##\1", str(rule.get("desc", "")).strip(), flags=re.M)
            rules.append(f"## {rule['name']}\n\n{body}\n")
    conditions = ["# Conditions\n"]
    for c in _load("ConditionDescription.json"):
        conditions.append(f"## {str(c['describes']).title()}\n\n{str(c.get('desc', '')).strip()}\n")
    files = {"srd-spells.md": spells, "srd-rules.md": rules, "srd-conditions.md": conditions}
    paths = []
    for name, parts in files.items():
        path = folder / name
        path.write_text("\n".join(parts), encoding="utf-8")
        paths.append(path)
    return paths


def ingest(settings: Settings, work: Path) -> dict[str, Any]:
    import ray

    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions

    started = time.perf_counter()
    reports = {}
    try:
        fate = run_ingest([str(FATE)], IngestOptions(library="Fate SRD", library_type="rulebook"), settings=settings)
        srd = run_ingest(
            [str(p) for p in srd_markdown(work / "srd")],
            IngestOptions(library="SRD 5.1", library_type="rulebook"),
            settings=settings,
        )
        reports = {"fate": fate.chunks, "srd": srd.chunks}
    finally:
        ray.shutdown()
    return {"chunks": reports, "ingest_s": round(time.perf_counter() - started, 1)}


# -- evaluation -----------------------------------------------------------------------------------

_TAG_RE = re.compile(r"<[^>]+>")
_PUNCT_RE = re.compile(r"[^\w\s]")


def norm_heading(heading: str) -> str:
    text = _TAG_RE.sub("", heading).replace("’", "'").casefold()
    return " ".join(_PUNCT_RE.sub(" ", text).split())


def is_relevant(heading_path: list[str], text: str, relevant: set[str]) -> bool:
    """Whether a chunk answers: one of its headings is an answer's, or it holds an answer's heading
    line (the chunker merges short sections, so a chunk's heading path names only the first)."""
    if any(norm_heading(h) in relevant for h in heading_path):
        return True
    return any(norm_heading(line) in relevant for line in text.splitlines() if 0 < len(line) <= 80)


def first_relevant(hits: list[Any], relevant: set[str]) -> int | None:
    for rank, hit in enumerate(hits, start=1):
        if is_relevant(hit.heading_path, hit.text, relevant):
            return rank
    return None


def evaluate(searcher: Any, questions: list[dict[str, Any]], *, weights: LegWeights | None, rerank: bool) -> dict:
    ranks: list[int | None] = []
    per_book: dict[str, list[int | None]] = {}
    misses = []
    started = time.perf_counter()
    for q in questions:
        hits = searcher.search(q["query"], limit=10, weights=weights, rerank=rerank)
        rank = first_relevant(hits, {norm_heading(h) for h in q["relevant_headings"]})
        ranks.append(rank)
        per_book.setdefault(q["book"], []).append(rank)
        if rank is None or rank > 5:
            misses.append(q["id"])
    elapsed = time.perf_counter() - started

    def summary(rs: list[int | None]) -> dict[str, float]:
        return {
            "recall_at_5": round(sum(1 for r in rs if r is not None and r <= 5) / len(rs), 4),
            "mrr": round(sum(1 / r for r in rs if r is not None) / len(rs), 4),
        }

    return {
        **summary(ranks),
        "by_book": {book: summary(rs) for book, rs in per_book.items()},
        "questions": len(questions),
        "mean_ms": round(elapsed * 1000 / len(questions), 2),
        "missed_at_5": misses,
    }


def leg_lists(searcher: Any, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each question's ranked hits from each leg alone (the lists the hybrid search fuses), with relevance."""
    out = []
    for q in questions:
        relevant = {norm_heading(h) for h in q["relevant_headings"]}
        legs: dict[str, list[tuple[str, float]]] = {}
        rel: dict[str, bool] = {}
        for leg in ("vector", "text", "graph"):
            hits = searcher.search(q["query"], limit=searcher.config.candidates, weights=RUNS[leg], rerank=False)
            legs[leg] = [(h.chunk_id, h.scores[leg]) for h in hits]
            rel.update({h.chunk_id: is_relevant(h.heading_path, h.text, relevant) for h in hits})
        out.append({"legs": legs, "rel": rel})
    return out


def fused_quality(lists: list[dict[str, Any]], weights: dict[str, float], k: int, rows: range | None = None) -> dict:
    """recall@5 and MRR@10 of RRF over precomputed leg lists (models.fusion.rrf, as the searcher fuses)."""
    from models.fusion import rrf

    picked = [lists[i] for i in rows] if rows is not None else lists
    r5 = mrr = 0.0
    for entry in picked:
        for rank, doc in enumerate(rrf(entry["legs"], weights, k=k)[:10], start=1):
            if entry["rel"].get(doc.id):
                mrr += 1 / rank
                r5 += rank <= 5
                break
    return {"recall_at_5": round(r5 / len(picked), 4), "mrr": round(mrr / len(picked), 4)}


TUNING_GRID = {
    "text": (0.25, 0.5, 0.75, 1.0),
    "graph": (0.1, 0.25, 0.5, 1.0),
    "rrf_k": (10, 20, 30, 60),
}


def tune(lists: list[dict[str, Any]]) -> dict[str, Any]:
    """Grid search of the text and graph weights (vector = 1) and k: the best on all questions (in-sample),
    and two-fold cross-validation (tune on the even questions, measure on the odd ones, and back)."""
    import itertools

    def objective(q: dict[str, float]) -> float:
        return q["recall_at_5"] + q["mrr"]

    grid = [
        ({"vector": 1.0, "text": t, "graph": g}, k)
        for t, g, k in itertools.product(TUNING_GRID["text"], TUNING_GRID["graph"], TUNING_GRID["rrf_k"])
    ]
    n = len(lists)
    folds = [range(0, n, 2), range(1, n, 2)]
    cross = []
    for train, test in ((folds[0], folds[1]), (folds[1], folds[0])):
        weights, k = max(grid, key=lambda g: objective(fused_quality(lists, g[0], g[1], train)))
        cross.append(
            {
                "weights": weights,
                "rrf_k": k,
                "held_out": fused_quality(lists, weights, k, test),
                "vector_held_out": fused_quality(lists, {"vector": 1.0}, 60, test),
            }
        )
    best_weights, best_k = max(grid, key=lambda g: objective(fused_quality(lists, g[0], g[1])))
    return {
        "grid": TUNING_GRID,
        "in_sample_best": {"weights": best_weights, "rrf_k": best_k, **fused_quality(lists, best_weights, best_k)},
        "two_fold": cross,
        "two_fold_mean": {m: round(sum(c["held_out"][m] for c in cross) / 2, 4) for m in ("recall_at_5", "mrr")},
        "vector_two_fold_mean": {
            m: round(sum(c["vector_held_out"][m] for c in cross) / 2, 4) for m in ("recall_at_5", "mrr")
        },
    }


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    names = list(runs)
    fig, ax = plt.subplots(figsize=(9, 4.6))
    width = 0.38
    xs = range(len(names))
    r5 = [runs[n]["recall_at_5"] for n in names]
    mrr = [runs[n]["mrr"] for n in names]
    ax.bar([x - width / 2 for x in xs], r5, width, label="recall@5")
    ax.bar([x + width / 2 for x in xs], mrr, width, label="MRR@10")
    for x, a, b in zip(xs, r5, mrr, strict=True):
        ax.text(x - width / 2, a + 0.01, f"{a:.2f}", ha="center", fontsize=8)
        ax.text(x + width / 2, b + 0.01, f"{b:.2f}", ha="center", fontsize=8)
    reranker = report["reranker"]
    tag = "\n(trained here)" if reranker.get("training") else "" if reranker["trained"] else "\n(untrained)"
    labels = [n + (tag if "rerank" in n else "") for n in names]
    ax.set_xticks(list(xs), labels, rotation=20, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(
        f"Search quality: {report['questions']} player questions, {sum(report['corpus']['chunks'].values())} chunks"
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, help="ingest here, or reuse it when it already holds the corpus")
    parser.add_argument("--reranker-model", type=Path, help="a trained cross-encoder folder")
    parser.add_argument(
        "--train-reranker", action="store_true", help="train one first (benchmarks/search_reranker.py, ~5 min)"
    )
    parser.add_argument("--limit-questions", type=int, help="evaluate only the first N questions")
    parser.add_argument("--tune", action="store_true", help="also grid-search the weights, with 2-fold CV")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    logging.getLogger().setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="search-quality-"))
    data_dir = args.data_dir or work / "data"
    settings = load_settings(data_dir=data_dir)
    marker = data_dir / "search_quality_corpus.json"
    if marker.exists():
        corpus = json.loads(marker.read_text())
    else:
        corpus = ingest(settings, work)
        marker.write_text(json.dumps(corpus))
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.limit_questions:
        questions = questions[: args.limit_questions]

    from search.service import open_searcher

    reranker_trained = args.reranker_model is not None or args.train_reranker
    training = None
    if args.reranker_model is not None:
        reranker_path = args.reranker_model
    elif args.train_reranker:
        from benchmarks.search_reranker import train

        reranker_path = work / "minilm-cross-encoder-trained"
        training = train(reranker_path)
        print(f"re-ranker trained: {training}", flush=True)
    else:
        reranker_path = untrained_cross_encoder(work / "minilm-cross-encoder-untrained")
    rerank_settings = load_settings(data_dir=data_dir, reranker_model=str(reranker_path))
    runs: dict[str, Any] = {}
    with open_searcher(rerank_settings) as searcher:
        searcher.load()
        for name, weights in RUNS.items():
            runs[name] = evaluate(searcher, questions, weights=weights, rerank=False)
            print(f"{name:14s} recall@5 {runs[name]['recall_at_5']:.3f}  MRR {runs[name]['mrr']:.3f}", flush=True)
        runs["hybrid equal weights"] = evaluate(
            searcher, questions, weights=LegWeights(vector=1, text=1, graph=1), rerank=False
        )
        runs["hybrid+rerank"] = reranked = evaluate(searcher, questions, weights=None, rerank=True)
        print(f"hybrid+rerank  recall@5 {reranked['recall_at_5']:.3f}  MRR {reranked['mrr']:.3f}")
        tuning = tune(leg_lists(searcher, questions)) if args.tune else None
        config = searcher.config.model_dump(mode="json")
        reranker_name = searcher.reranker.name if searcher.reranker else None

    singles = {n: runs[n] for n in ("vector", "text", "graph")}
    best_single = max(singles, key=lambda n: (singles[n]["recall_at_5"], singles[n]["mrr"]))
    report = {
        "benchmark": "search_quality",
        "questions": len(questions),
        "question_set": str(QUESTIONS.relative_to(REPO)),
        "corpus": corpus,
        "hybrid_config": config,
        "reranker": {"model": reranker_name, "trained": reranker_trained, "training": training},
        "best_single_leg": best_single,
        "hybrid_beats_best_single_leg": {
            "recall_at_5": runs["hybrid"]["recall_at_5"] > singles[best_single]["recall_at_5"],
            "mrr": runs["hybrid"]["mrr"] > singles[best_single]["mrr"],
        },
        "tuning": tuning,
        "machine": machine_info(load_average=True),
        "wall_s": round(time.perf_counter() - started, 1),
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search_quality.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, args.out / "search_quality.png")
    print(json.dumps({k: report[k] for k in ("best_single_leg", "hybrid_beats_best_single_leg", "wall_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
