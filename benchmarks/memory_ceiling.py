"""How far ranking alone could take campaign recall: what the legs gather against what the default ranks.

``benchmarks/memory_recall.py`` scores the recall index's top 10. This asks where the evidence it misses
is. Each question is gathered as the service gathers it (every leg's best 100 on the lineage:
vector, BM25, the BM25 feedback round, the names-free vector search), then:

1. **Pool coverage.** The share of each question's evidence turns among the records any leg ranks in
   its top 10, 30 or 100 (and per leg at 100). Evidence in the pool at 100 but not in the default's
   top 10 is what a better ranking of the same candidates could still win; evidence outside it needs
   better candidates (another model, another index).
2. **A learned ranking.** A logistic regression over each candidate's features: the default's fused
   score and rank, each leg's reciprocal rank and relative score, the vector cosine, the neighbouring
   turns' scores, how many of the default's top 10 share its scene, how many legs found it, its length.
   Fitted leave-one-conversation-out on LoCoMo (each conversation ranked by a model fitted on the
   others), and fitted on all of LoCoMo then applied to the generated conversations. This is the
   issue's "fusion weights fitted on part of the dev half" taken past fusion weights: how much the
   legs' own signals hold beyond the hand-set ranking.

LoCoMo (``../shared/corpus/memory/locomo-dev``) is for internal evaluation only; the generated
conversations (``benchmarks/memory_synthetic.py``) are the check on conversations not in the corpus.
Each corpus is imported into stores of its own, as ``memory_recall.py`` does (BM25's statistics are
the index's).

Usage::

    python benchmarks/memory_ceiling.py                 # ~5 min on 2 cores (embedding is most of it)
    python benchmarks/memory_ceiling.py --work /tmp/mc  # keep the vectors for the next run

Writes benchmarks/results/memory_ceiling.json and benchmarks/results/memory_ceiling.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from benchmarks.memory_recall import (  # noqa: E402
    CATEGORIES,
    CONVERSATIONS,
    CORPUS,
    DEFAULT,
    GOAL,
    INDEX_VARIANTS,
    RESULTS,
    CachedEmbedder,
    Conversation,
    Question,
    Stack,
    import_and_gather,
    load_locomo,
    load_synthetic,
    score,
)

LEGS = ("vector", "text", "feedback_text", "vector_without_names")
POOL_DEPTHS = (10, 30, 100)
RANKED = 100  # candidates a learned ranking reorders: the default's best 100
FEATURES = (
    "log default score / best",
    "log default rank",
    *(f"{leg} {what}" for leg in LEGS for what in ("reciprocal rank", "score / leg's best")),
    "vector cosine",
    "best neighbour's score / best",
    "neighbours' scores / best",
    "share of the default's top 10 in its scene",
    "legs that found it",
    "log words",
)


@dataclass
class Ranked:
    """One question's candidates, in the default's order, with their features and evidence labels."""

    conversation: str
    question: Question
    refs: list[str | None]
    features: np.ndarray
    labels: np.ndarray
    pools: dict[str, set[str | None]]  # "any@10", "any@30", "any@100", and each leg at 100


def candidates(index: Any, found: Any, question: Question, conversation: str) -> Ranked | None:
    """The default ranking of ``found`` (turns only) cut to :data:`RANKED`, with each candidate's features."""
    hits = index.rank(found, limit=RANKED)
    if not hits:
        return None
    best = hits[0].score or 1.0
    rank_of = {leg: {rid: r for r, (rid, _) in enumerate(found.legs.get(leg, ()))} for leg in LEGS}
    score_of = {leg: dict(found.legs.get(leg, ())) for leg in LEGS}
    leg_best = {leg: (found.legs[leg][0][1] if found.legs.get(leg) else 1.0) or 1.0 for leg in LEGS}
    at = {(found.records[h.id].scene_id, found.records[h.id].depth): h.score for h in hits}
    top_scenes = [found.records[h.id].scene_id for h in hits[:10]]
    rows: list[list[float]] = []
    for n, hit in enumerate(hits):
        record = found.records[hit.id]
        row = [math.log(max(hit.score, 1e-12) / best), math.log(n + 1)]
        for leg in LEGS:
            r = rank_of[leg].get(hit.id)
            row += [0.0, 0.0] if r is None else [1.0 / (r + 1), score_of[leg][hit.id] / leg_best[leg]]
        row.append(score_of["vector"].get(hit.id, 0.0))
        around = [at.get((record.scene_id, record.depth + d), 0.0) / best for d in (-2, -1, 1, 2)]
        row += [max(around), sum(around)]
        row.append(top_scenes.count(record.scene_id) / 10)
        row.append(float(sum(hit.id in rank_of[leg] for leg in LEGS)))
        row.append(math.log(len(record.text.split()) + 1))
        rows.append(row)
    refs = [found.records[h.id].ref for h in hits]
    pools: dict[str, set[str | None]] = {}
    for depth in POOL_DEPTHS:
        pools[f"any@{depth}"] = {found.records[i].ref for hits_ in found.legs.values() for i, _ in hits_[:depth]}
    for leg in LEGS:
        pools[f"{leg}@100"] = {found.records[i].ref for i, _ in found.legs.get(leg, ())[:100]}
    evidence = set(question.evidence)
    labels = np.array([int(ref in evidence) for ref in refs])
    return Ranked(conversation, question, refs, np.asarray(rows, dtype=np.float64), labels, pools)


def gather(stack: Stack, conversations: Sequence[Conversation], progress: Any) -> list[Ranked]:
    """Import ``conversations`` under the default index variant and gather every question's candidates."""
    variant = next(v for v in INDEX_VARIANTS if v.name == DEFAULT)
    imported = import_and_gather(stack, variant, conversations, progress)
    asked = [(c.name, q) for c in conversations for q in c.questions]
    out = []
    for (name, question), found in zip(asked, imported.found, strict=True):
        if question.evidence and (row := candidates(imported.index, found, question, name)) is not None:
            out.append(row)
    return out


def recall_by_category(rows: Sequence[Ranked], scores: Callable[[Ranked], np.ndarray]) -> dict[str, Any]:
    """Recall@10 of the evidence when each question's candidates are ordered by ``scores``, overall ("all")
    and per category, scored by ``memory_recall.score``."""
    ranked = [[row.refs[i] for i in np.argsort(-scores(row), kind="stable")[:10]] for row in rows]
    scored = score([row.question for row in rows], ranked)
    parts = {"all": scored, **{c: v for c, v in scored["by_category"].items() if v["questions"]}}
    return {c: {"questions": v["questions"], "recall_at_10": v["recall_at_10"]} for c, v in parts.items()}


def pool_coverage(rows: Sequence[Ranked]) -> dict[str, Any]:
    """Per category, the share of evidence turns in each pool (see the module docstring)."""
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        evidence = set(row.question.evidence)
        category = CATEGORIES.get(row.question.category, str(row.question.category))
        for name, pool in row.pools.items():
            share = len(evidence & pool) / len(evidence)
            by["all"][name].append(share)
            by[category][name].append(share)
    return {c: {k: round(float(np.mean(v)), 3) for k, v in pools.items()} for c, pools in sorted(by.items())}


def default_order(row: Ranked) -> np.ndarray:
    return -np.arange(len(row.refs), dtype=np.float64)


def fit(rows: Sequence[Ranked]) -> Any:
    """A standardised logistic regression of "is evidence" on the candidates' features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    return model.fit(np.vstack([r.features for r in rows]), np.concatenate([r.labels for r in rows]))


def learned(locomo: Sequence[Ranked], synthetic: Sequence[Ranked]) -> dict[str, Any]:
    """Leave-one-conversation-out on LoCoMo; fitted on LoCoMo, applied to the generated conversations."""
    held_out: dict[int, np.ndarray] = {}
    for name in sorted({r.conversation for r in locomo}):
        model = fit([r for r in locomo if r.conversation != name])
        for row in locomo:
            if row.conversation == name:
                held_out[id(row)] = model.predict_proba(row.features)[:, 1]
    out: dict[str, Any] = {"locomo_leave_one_out": recall_by_category(locomo, lambda r: held_out[id(r)])}
    whole = fit(locomo)
    coefficients = whole[-1].coef_[0]
    out["coefficients_fitted_on_locomo"] = {f: round(float(c), 3) for f, c in zip(FEATURES, coefficients, strict=True)}
    if synthetic:
        applied = recall_by_category(synthetic, lambda r: whole.predict_proba(r.features)[:, 1])
        out["synthetic_fitted_on_locomo"] = applied
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, key in zip(axes, ("locomo", "synthetic"), strict=True):
        part = report.get(key)
        if not part:
            ax.set_visible(False)
            continue
        cats = [c for c in ("all", *CATEGORIES.values()) if c in part["default"]]
        series = {
            "default top 10": [part["default"][c] for c in cats],
            "learned top 10": [part["learned"][c] for c in cats] if part.get("learned") else None,
            "any leg's top 10": [part["pools"][c]["any@10"] for c in cats],
            "any leg's top 30": [part["pools"][c]["any@30"] for c in cats],
            "any leg's top 100": [part["pools"][c]["any@100"] for c in cats],
        }
        shown = {k: v for k, v in series.items() if v is not None}
        width = 0.8 / len(shown)
        for n, (label, values) in enumerate(shown.items()):
            ax.bar(np.arange(len(cats)) + n * width, values, width, label=label)
        ax.axhline(GOAL["recall_at_10"], color="black", linestyle="--", linewidth=0.8)
        ax.axhline(GOAL["multi-hop"], color="grey", linestyle=":", linewidth=0.8)
        ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, cats, rotation=20)
        ax.set(ylim=(0, 1.05), ylabel="share of evidence turns", title=part["label"])
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Recall@10 against what the legs gather (goals dashed: 0.85 overall, 0.70 multi-hop / open-domain)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", default=",".join(CONVERSATIONS), help="LoCoMo files to use, e.g. 26,30")
    parser.add_argument("--synthetic", type=int, default=8, help="generated conversations (0: none)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--work", type=Path, help="keep the data folder and vectors here for the next run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import structlog
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    started = time.perf_counter()
    names = [n.strip() for n in args.conversations.split(",") if n.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="memory-ceiling-"))
    locomo = [load_locomo(CORPUS / f"{n}.json") for n in names]
    synthetic = load_synthetic(args.seed, args.synthetic, work / "synthetic") if args.synthetic else []
    embedder = CachedEmbedder(SentenceTransformerEmbedder(EmbeddingConfig()), work / "embeddings.npz")
    gathered: dict[str, list[Ranked]] = {}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    try:
        with Progress(*columns) as progress:
            for key, conversations in (("locomo", locomo), ("synthetic", synthetic)):
                if not conversations:
                    continue
                shutil.rmtree(work / f"data-{key}", ignore_errors=True)
                stack = Stack(work / f"data-{key}", embedder)
                try:
                    gathered[key] = gather(stack, conversations, progress)
                finally:
                    stack.close()
    finally:
        embedder.save()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    fitted = learned(gathered["locomo"], gathered.get("synthetic", [])) if len(locomo) > 1 else {}
    report: dict[str, Any] = {"benchmark": "memory_ceiling", "goal": GOAL, "features": list(FEATURES)}
    for key, rows in gathered.items():
        report[key] = {
            "label": "LoCoMo dev" if key == "locomo" else f"generated (seed {args.seed}, {len(rows)} questions)",
            "questions": len(rows),
            "default": {c: v["recall_at_10"] for c, v in recall_by_category(rows, default_order).items()},
            "pools": pool_coverage(rows),
        }
    if fitted:
        report["locomo"]["learned"] = {c: v["recall_at_10"] for c, v in fitted["locomo_leave_one_out"].items()}
        if "synthetic_fitted_on_locomo" in fitted:
            report["synthetic"]["learned"] = {
                c: v["recall_at_10"] for c, v in fitted["synthetic_fitted_on_locomo"].items()
            }
        report["learned_coefficients"] = fitted["coefficients_fitted_on_locomo"]
    report["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    report["options"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_ceiling.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, args.out / "memory_ceiling.png")
    for key in gathered:
        part = report[key]
        print(part["label"])
        for c, v in part["default"].items():
            line = f"  {c:12s} default {v:.3f}"
            if part.get("learned"):
                line += f"  learned {part['learned'][c]:.3f}"
            pools = part["pools"][c]
            line += f"  pool@10 {pools['any@10']:.3f}  @30 {pools['any@30']:.3f}  @100 {pools['any@100']:.3f}"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
