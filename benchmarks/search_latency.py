"""Search latency on the embedded stores: p50/p95 of each leg alone, hybrid, filtered hybrid and hybrid
with re-ranking, on 100,000 chunks, in one run.

The chunks are synthesised from the corpus in ``../shared/corpus`` (read in place, never copied into
the repository) and written straight through the store APIs that ingestion uses (``Catalog``,
``TextIndex.upsert``, ``VectorIndex.upsert``):

- text: windows of 3-8 consecutive sentences of the Fate SRDs, the D&D SRD 5.1 JSON and the CRD3
  transcripts, under real headings of the same books; 100 items in 5 libraries of different types
  and classifications;
- concepts: the corpus's headings and SRD names are the vocabulary; a chunk MENTIONS each vocabulary
  name its text contains (edges CREATEd in bulk: the graph is fresh); RELATED_TO weights are
  co-mention counts (what ``Catalog.refresh_related`` computes), written for pairs seen at least twice;
- vectors: ``--embedded`` distinct windows are embedded with the real model (all-MiniLM-L6-v2); every
  other chunk gets one of those vectors plus noise (embedding 100k chunks on 2 cores takes ~30 min;
  HNSW latency depends on the distribution, not on which text a vector came from).

Queries are the player questions of ``benchmarks/data/search_questions.jsonl`` plus "how does X work"
questions over vocabulary names, each timed end to end through ``HybridSearcher.search`` (query
embedding, every leg, item scope, fusion, citations, re-ranking), after warm-up. The re-ranker is a
cross-encoder of the CPU default's shape (ms-marco-MiniLM-L6-v2: 6 layers, 384 wide), built from the
local MiniLM weights with an untrained head, and one of ms-marco-MiniLM-L2-v2's (its first 2 layers):
their latency is the real one, their ranking is not; each on every core (the default) and on one torch
thread. ``hybrid`` runs the BM25 and graph legs on threads while the query is embedded (the default,
``HybridConfig.parallel``); ``hybrid sequential`` one leg after the other.

Each series is also reported per query kind (the player questions, the questions naming a concept), and
``hybrid no coverage`` is the default without the coverage leg. ``--before REV`` adds the search code of an
earlier commit (``search/coverage.py``, ``graph.py``, ``scope.py`` and ``hybrid.py`` as they were there, on
today's stores and models: ``benchmarks/before.py``) as ``hybrid (before)`` and ``hybrid no coverage
(before)``, interleaved with the rest, and gives each pair's share of queries with the same top 10.

Usage::

    python benchmarks/search_latency.py                    # 100k chunks, ~8 min on 2 cores
    python benchmarks/search_latency.py --chunks 20000     # smaller, ~2 min
    python benchmarks/search_latency.py --before REV --no-rerank --data-dir DIR   # before/after, kept data

Writes benchmarks/results/search_latency.json and benchmarks/results/search_latency.png
(``search_latency_<N>k.*`` for another ``--chunks``).
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import random
import re
import sys
import tempfile
import time
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from benchmarks.common import machine_info, untrained_cross_encoder  # noqa: E402
from schemas.common import content_id, sha256_hex  # noqa: E402
from schemas.knowledge import (  # noqa: E402
    Chunk,
    Classification,
    Concept,
    FileType,
    Item,
    ItemStatus,
    Library,
    LibraryType,
    normalize_name,
)
from schemas.search import LegWeights, SearchFilters  # noqa: E402
from schemas.settings import load_settings  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
QUESTIONS = REPO / "benchmarks" / "data" / "search_questions.jsonl"
RESULTS = REPO / "benchmarks" / "results"
GOAL_P95_MS = 30.0
GOAL_RERANK_P95_MS = 150.0
LIBRARIES = [
    ("Core rules", LibraryType.RULEBOOK, Classification.CANON),
    ("Setting", LibraryType.SETTING, Classification.CANON),
    ("Lore", LibraryType.LORE, Classification.INSPIRATION),
    ("Bestiary", LibraryType.BESTIARY, Classification.REFERENCE),
    ("Adventures", LibraryType.ADVENTURE, Classification.REFERENCE),
]
ITEMS = 100
BEFORE_MODULES = ["search/coverage.py", "search/graph.py", "search/scope.py", "search/hybrid.py"]
"""The search code ``--before REV`` loads as it was at REV (in import order); the stores are today's."""

_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_TAG_RE = re.compile(r"<[^>]+>")
_WORD_RE = re.compile(r"[\w][\w'’\-]*")


# -- corpus ---------------------------------------------------------------------------------------


def corpus_text() -> tuple[list[str], list[str]]:
    """Sentences and headings of the corpus books and transcripts."""
    sentences: list[str] = []
    headings: list[str] = []
    for path in sorted((CORPUS / "rulebooks" / "fate-srd").iterdir()):
        raw = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".html":
            headings += [html.unescape(_TAG_RE.sub("", h)).strip() for h in re.findall(r"<h[1-4][^>]*>(.*?)</h", raw)]
            raw = html.unescape(_TAG_RE.sub(" ", raw))
        else:
            headings += [_TAG_RE.sub("", h).strip("# ").strip() for h in re.findall(r"^#{1,4} .*$", raw, flags=re.M)]
        for line in raw.splitlines():
            if not line.startswith("#"):
                sentences += [s.strip() for s in _SENTENCE_RE.split(line) if len(s.split()) >= 5]
    srd = CORPUS / "rulebooks" / "dnd-srd-5.1" / "json-srd-2014"
    for path in sorted(srd.glob("*.json")):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not isinstance(rows, list):
            continue
        for row in rows:
            fields = row.get("fields", {}) if isinstance(row, dict) else {}
            name = fields.get("name") or fields.get("describes")
            if isinstance(name, str):
                headings.append(name.title() if name.islower() else name)
            desc = fields.get("desc")
            if isinstance(desc, str):
                for line in desc.splitlines():
                    sentences += [s.strip() for s in _SENTENCE_RE.split(line) if len(s.split()) >= 5]
    for path in sorted((CORPUS / "memory").rglob("*")):
        if path.is_file() and path.suffix in {".json", ".txt", ".md"} and len(sentences) < 400_000:
            text = path.read_text(encoding="utf-8", errors="replace")
            for utterance in re.findall(r'"utterance"\s*:\s*"((?:[^"\\]|\\.)*)"', text) or text.splitlines():
                sentences += [s.strip() for s in _SENTENCE_RE.split(utterance) if len(s.split()) >= 5]
    headings = [h for h in dict.fromkeys(headings) if 2 <= len(h) <= 60 and not h.isdigit()]
    return sentences, headings


def vocabulary(headings: list[str]) -> dict[str, str]:
    """Normalized concept name → display name, from headings of one to three words."""
    vocab: dict[str, str] = {}
    for heading in headings:
        name = normalize_name(heading)
        if 1 <= len(name.split()) <= 3 and len(name) >= 4 and name not in vocab:
            vocab[name] = heading
    return vocab


def mentions(text: str, vocab: dict[str, str]) -> set[str]:
    words = _WORD_RE.findall(text.casefold())
    found = set()
    for n in (1, 2, 3):
        for i in range(len(words) - n + 1):
            gram = " ".join(words[i : i + n])
            if gram in vocab:
                found.add(gram)
            elif gram.endswith("s") and gram[:-1] in vocab:
                found.add(gram[:-1])
    return found


# -- loading --------------------------------------------------------------------------------------


def load(settings: Any, n_chunks: int, n_embedded: int, seed: int = 7) -> dict[str, Any]:
    from jobs.stages import index_records
    from models.embedding import SentenceTransformerEmbedder
    from stores.catalog import Catalog
    from stores.factory import open_graph_store, open_text_index, open_vector_index
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
    from stores.vector.base import VectorSpace

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    sentences, headings = corpus_text()
    vocab = vocabulary(headings)
    timings: dict[str, float] = {}

    started = time.perf_counter()
    texts = []
    for _ in range(n_chunks):
        start = rng.randrange(len(sentences) - 8)
        texts.append(" ".join(sentences[start : start + rng.randint(3, 8)]))
    embedder = SentenceTransformerEmbedder()
    base = embedder.embed_documents(texts[:n_embedded])
    timings["embed_s"] = time.perf_counter() - started
    vectors = np.empty((n_chunks, base.shape[1]), dtype=np.float32)
    vectors[:n_embedded] = base
    picks = nrng.integers(0, n_embedded, size=n_chunks - n_embedded)
    noisy = base[picks] + nrng.normal(0, 0.03, size=(n_chunks - n_embedded, base.shape[1])).astype(np.float32)
    vectors[n_embedded:] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)

    graph, text, vindex = open_graph_store(settings), open_text_index(settings), open_vector_index(settings)
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)  # uid constraints and indexes, as ingestion creates them
    catalog = Catalog(graph)
    text.ensure()
    vindex.ensure_collection("chunks", VectorSpace(dim=base.shape[1]))
    libraries = [catalog.save_library(Library(name=name, type=kind)) for name, kind, _ in LIBRARIES]
    per_item = n_chunks // ITEMS
    pair_counts: Counter[tuple[str, str]] = Counter()
    concepts: dict[str, Concept] = {}
    graph_s = text_s = vector_s = 0.0
    for i in range(ITEMS):
        lib_index = i % len(LIBRARIES)
        library = libraries[lib_index]
        body = f"synthetic item {i}"
        item = Item(
            uid=content_id("item", body),
            library_uid=library.uid,
            title=f"{LIBRARIES[lib_index][0]} {i // len(LIBRARIES) + 1}",
            file_type=FileType.MARKDOWN,
            size_bytes=per_item * 400,
            content_hash=sha256_hex(body),
            classification=LIBRARIES[lib_index][2],
            source_ref=f"synthetic/{i}.md",
            status=ItemStatus.READY,
        )
        catalog.save_item(item)
        rows = range(i * per_item, (i + 1) * per_item)
        chunks, docs, points, edges = [], [], [], []
        heading = rng.choice(headings)
        for seq, row in enumerate(rows):
            if seq % 6 == 0:
                heading = rng.choice(headings)
            chunk = Chunk(
                uid=f"{item.uid}-{seq}",
                item_uid=item.uid,
                sequence=seq,
                text_key=f"items/{item.uid}/chunks/chunk_{seq:03d}.txt",
                heading_path=[rng.choice(headings), heading],
                token_count=max(1, len(texts[row].split())),
            )
            chunks.append(chunk)
            doc, point = index_records(library, item, chunk, texts[row], vectors[row], embedder.name)
            docs.append(doc)
            points.append(point)
            named = mentions(texts[row] + " " + heading, vocab)
            for name in named:
                if name not in concepts:
                    concepts[name] = Concept(uid=content_id("concept", name), name=vocab[name])
                edges.append((chunk.uid, concepts[name].uid))
            pair_counts.update(combinations(sorted(concepts[n].uid for n in named), 2))
        t0 = time.perf_counter()
        for start in range(0, len(chunks), 2000):
            catalog.save_chunks(chunks[start : start + 2000])
        catalog.save_mentions(list(concepts.values()), [])
        # CREATE, not Catalog.save_mentions' MERGE: the graph is fresh, and MERGE checks the edges of a
        # concept already mentioned by thousands of chunks, which grows quadratically on a bulk load.
        for start in range(0, len(edges), 5000):
            graph.run(
                "UNWIND $rows AS row MATCH (c:Chunk {uid: row.c}), (k:Concept {uid: row.k}) "
                "CREATE (c)-[:MENTIONS]->(k)",
                {"rows": [{"c": c, "k": k} for c, k in edges[start : start + 5000]]},
            )
        t1 = time.perf_counter()
        text.upsert(docs)
        t2 = time.perf_counter()
        for start in range(0, len(points), 512):
            vindex.upsert("chunks", points[start : start + 512])
        t3 = time.perf_counter()
        graph_s, text_s, vector_s = graph_s + t1 - t0, text_s + t2 - t1, vector_s + t3 - t2
        if (i + 1) % 10 == 0:
            print(f"  {(i + 1) * per_item} chunks written", flush=True)
    t0 = time.perf_counter()
    related = [{"a": a, "b": b, "w": w} for (a, b), w in pair_counts.items() if w >= 2]
    for start in range(0, len(related), 5000):
        graph.run(
            "UNWIND $rows AS row MATCH (a:Concept {uid: row.a}), (b:Concept {uid: row.b}) "
            "MERGE (a)-[r:RELATED_TO]->(b) SET r.weight = row.w",
            {"rows": related[start : start + 5000]},
        )
    graph_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    text.refresh()
    vindex.optimize("chunks")
    timings.update(
        graph_write_s=graph_s, text_write_s=text_s, vector_write_s=vector_s, optimize_s=time.perf_counter() - t0
    )
    mention_count = graph.run("MATCH (:Chunk)-[m:MENTIONS]->(:Concept) RETURN count(m) AS n")[0]["n"]
    for store in (graph, text, vindex):
        store.close()
    return {
        "chunks": n_chunks,
        "items": ITEMS,
        "libraries": len(LIBRARIES),
        "embedded_chunks": n_embedded,
        "concepts": len(concepts),
        "mentions": int(mention_count),
        "related_pairs": len(related),
        "load_s": {k: round(v, 1) for k, v in timings.items()},
        "vocabulary": sorted(vocab),
    }


# -- measuring ------------------------------------------------------------------------------------


PLAYER_QUESTION = "player question"
NAMES_A_CONCEPT = "names a concept"


def queries(vocab: list[str], n: int, seed: int = 11) -> list[tuple[str, str]]:
    """``n`` queries and their kind: the player questions of ``QUESTIONS`` and "how does X work" questions
    over vocabulary names, shuffled."""
    rng = random.Random(seed)
    asked = [
        (json.loads(line)["query"], PLAYER_QUESTION)
        for line in QUESTIONS.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    forms = ["how does {} work", "what is {}", "rules for {}", "{} in combat", "can I use {} on my turn"]
    while len(asked) < n:
        asked.append((rng.choice(forms).format(rng.choice(vocab)), NAMES_A_CONCEPT))
    rng.shuffle(asked)
    return asked[:n]


def summarise(times: list[float], found: int, kinds: list[str] | None = None) -> dict[str, Any]:
    arr = np.asarray(times)
    row: dict[str, Any] = {
        "queries": len(times),
        "p50_ms": round(float(np.percentile(arr, 50)), 2),
        "p95_ms": round(float(np.percentile(arr, 95)), 2),
        "mean_ms": round(float(arr.mean()), 2),
        "with_hits": found,
    }
    if kinds is not None:
        row["by_kind"] = {
            kind: {
                "queries": len(sub),
                "p50_ms": round(float(np.percentile(sub, 50)), 2),
                "p95_ms": round(float(np.percentile(sub, 95)), 2),
            }
            for kind in sorted(set(kinds))
            if len(sub := [t for t, k in zip(times, kinds, strict=True) if k == kind])
        }
    return row


def measure(
    series: dict[str, tuple[Any, dict[str, Any]]],
    qs: list[tuple[str, str]],
    *,
    every: dict[str, int],
    pairs: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """p50/p95 of each series (and per query kind), interleaved: every query runs through every series in
    turn (the series that run on every ``every[name]``-th query only skip the others), so the load of a
    shared machine weighs on all of them alike and the ratios hold within one run. ``pairs``: series →
    the series it replaces (its "before"); each gets the share of queries whose top 10 is the same list
    as its before's, and the mean overlap of the two top-10 sets. Each series also gets the CPU time of
    this process per search (every thread: ``cpu_p50_ms``, ``cpu_mean_ms``), which a busy machine
    inflates far less than the wall time."""
    for searcher, kwargs in series.values():  # warm-up: caches, lazy model loads, first HNSW pages
        for q, _ in qs[:3]:
            searcher.search(q, limit=10, **kwargs)
    times: dict[str, list[float]] = {name: [] for name in series}
    cpu: dict[str, list[float]] = {name: [] for name in series}
    kinds: dict[str, list[str]] = {name: [] for name in series}
    found: dict[str, int] = dict.fromkeys(series, 0)
    tops: dict[str, list[list[str]]] = {name: [] for name in series}
    names = list(series)
    for i, (q, kind) in enumerate(qs):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who goes first
            if i % every.get(name, 1):
                continue
            searcher, kwargs = series[name]
            t0, c0 = time.perf_counter(), time.process_time()
            hits = searcher.search(q, limit=10, **kwargs)
            times[name].append((time.perf_counter() - t0) * 1000)
            cpu[name].append((time.process_time() - c0) * 1000)
            kinds[name].append(kind)
            found[name] += bool(hits)
            tops[name].append([h.chunk_id for h in hits])
    out = {name: summarise(times[name], found[name], kinds[name]) for name in names}
    for name in names:
        out[name]["cpu_p50_ms"] = round(float(np.percentile(cpu[name], 50)), 2)
        out[name]["cpu_mean_ms"] = round(float(np.mean(cpu[name])), 2)
    for name, before in (pairs or {}).items():
        same = [a == b for a, b in zip(tops[name], tops[before], strict=True)]
        overlap = [len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(tops[name], tops[before], strict=True)]
        out[name]["same_top10_as_before"] = round(sum(same) / max(1, len(same)), 3)
        out[name]["top10_overlap_with_before"] = round(float(np.mean(overlap)), 3)
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = report["series"]
    names = list(series)
    fig, ax = plt.subplots(figsize=(10, 5))
    xs = np.arange(len(names))
    width = 0.38
    p50 = [series[n]["p50_ms"] for n in names]
    p95 = [series[n]["p95_ms"] for n in names]
    ax.bar(xs - width / 2, p50, width, label="p50")
    ax.bar(xs + width / 2, p95, width, label="p95")
    for x, v in zip(xs, p95, strict=True):
        ax.text(x + width / 2, v * 1.03, f"{v:.1f}", ha="center", fontsize=8)
    ax.axhline(GOAL_P95_MS, color="green", linestyle="--", linewidth=1, label=f"goal p95 {GOAL_P95_MS:.0f} ms")
    if any("rerank" in n for n in names):
        ax.axhline(GOAL_RERANK_P95_MS, color="red", linestyle=":", linewidth=1, label="goal p95 with rerank 150 ms")
    ax.set_xticks(xs, names, rotation=25, fontsize=8, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms per search (log scale)")
    data, cpus = report["data"], report["machine"]["cpus"]
    ax.set_title(f"Search latency, embedded stores, {data['chunks']:,} chunks, {cpus} CPUs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--embedded", type=int, default=3000, help="chunks embedded for real")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rerank-every", type=int, default=4, help="re-ranked series run every Nth query")
    parser.add_argument("--data-dir", type=Path, help="load here, or reuse it when it already holds the chunks")
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also time the search code of commit REV (search/coverage.py, graph.py, scope.py and hybrid.py as "
        "they were there: benchmarks/before.py), interleaved, with and without the coverage leg, and compare top 10s",
    )
    parser.add_argument("--no-rerank", action="store_true", help="leave the re-ranked series out (a quicker run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    logging.getLogger().setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="search-latency-"))
    data_dir = args.data_dir or work / "data"
    settings = load_settings(data_dir=data_dir)
    marker = data_dir / "search_latency_data.json"
    if marker.exists() and json.loads(marker.read_text())["chunks"] == args.chunks:
        data = json.loads(marker.read_text())
    else:
        data = load(settings, args.chunks, min(args.embedded, args.chunks))
        marker.write_text(json.dumps(data))
    qs = queries(data["vocabulary"], args.queries)

    from models.rerank import CrossEncoderReranker, RerankConfig
    from search.hybrid import HybridSearcher
    from search.service import open_searcher

    rerank = not args.no_rerank
    reranker = untrained_cross_encoder(work / "minilm-l6-cross-encoder", layers=6) if rerank else None
    small_model = untrained_cross_encoder(work / "minilm-l2-cross-encoder", layers=2) if rerank else None
    rerank_settings = load_settings(data_dir=data_dir, reranker_model=str(reranker) if reranker else None)
    lore = SearchFilters(library_type="lore")
    with open_searcher(rerank_settings) as searcher:
        searcher.load()

        def sibling(**changes: Any) -> HybridSearcher:
            return HybridSearcher(
                text=searcher.text,
                vectors=searcher.vectors,
                graph=searcher.graph,
                embedder=searcher.embedder,
                config=searcher.config.model_copy(update=changes.pop("config", {})),
                **changes,
            )

        no_coverage = sibling(config={"coverage_weight": 0.0})
        runs: dict[str, tuple[Any, dict[str, Any]]] = {
            "vector": (searcher, {"weights": LegWeights(vector=1, text=0, graph=0), "rerank": False}),
            "text": (searcher, {"weights": LegWeights(vector=0, text=1, graph=0), "rerank": False}),
            "graph": (searcher, {"weights": LegWeights(vector=0, text=0, graph=1), "rerank": False}),
            "hybrid": (searcher, {"rerank": False}),
            "hybrid no coverage": (no_coverage, {"rerank": False}),
            "hybrid filtered": (searcher, {"rerank": False, "filters": lore}),
            "hybrid sequential": (sibling(config={"parallel": False}), {"rerank": False}),
        }
        pairs: dict[str, str] = {}
        if args.before:
            from benchmarks.before import modules_at

            old = modules_at(args.before, BEFORE_MODULES)["search.hybrid"]
            for name, changes in (("hybrid", {}), ("hybrid no coverage", {"coverage_weight": 0.0})):
                before = old.HybridSearcher(
                    text=searcher.text,
                    vectors=searcher.vectors,
                    graph=searcher.graph,
                    embedder=searcher.embedder,
                    config=old.HybridConfig(**searcher.config.model_copy(update=changes).model_dump()),
                )
                runs[f"{name} (before)"] = (before, {"rerank": False})
                pairs[name] = f"{name} (before)"
        if rerank:
            # The searcher's own re-ranker comes from the settings (every core by default).
            large_one_thread = CrossEncoderReranker(RerankConfig(model=str(reranker), threads=1))
            small_all_cores = CrossEncoderReranker(RerankConfig(model=str(small_model), threads=None))
            small_one_thread = CrossEncoderReranker(RerankConfig(model=str(small_model), threads=1))
            for r in (large_one_thread, small_all_cores, small_one_thread):
                r.load()
            runs |= {
                "hybrid+rerank": (searcher, {"rerank": True}),
                "hybrid+rerank 1 thread": (sibling(reranker=large_one_thread), {}),
                "hybrid+rerank L2": (sibling(reranker=small_all_cores), {}),
                "hybrid+rerank L2 1 thread": (sibling(reranker=small_one_thread), {}),
            }
        # One concept vocabulary for every searcher, as one serving process has: each refresh (every
        # vocabulary_ttl_s, in a background thread) reads every chunk's heading, ~1.2 s of CPU at 100k, and
        # one per searcher (7 here) put several seconds a minute onto random queries of every series.
        for other, _ in runs.values():
            other.graph_leg.vocabulary = searcher.graph_leg.vocabulary
        rerank_every = {name: args.rerank_every for name in runs if "rerank" in name}
        series = measure(runs, qs, every=rerank_every, pairs=pairs)
        for name, row in series.items():
            same = f"  same top 10 as before {row['same_top10_as_before']:.3f}" if name in pairs else ""
            print(
                f"{name:26s} p50 {row['p50_ms']:8.2f} ms  p95 {row['p95_ms']:8.2f} ms  "
                f"CPU p50 {row['cpu_p50_ms']:7.2f} ms  n={row['queries']}{same}"
            )
        config = searcher.config.model_dump(mode="json")
    data = {k: v for k, v in data.items() if k != "vocabulary"}
    report = {
        "benchmark": "search_latency",
        "data": data,
        "hybrid_config": config,
        "reranker": {
            "hybrid+rerank": "shape of ms-marco-MiniLM-L6-v2 (6 layers, 384 wide), untrained head, every core",
            "hybrid+rerank L2": "shape of ms-marco-MiniLM-L2-v2 (2 layers, 384 wide), untrained head, every core",
            "1 thread": "the same on one torch thread",
            "candidates": config["rerank_candidates"],
            "queries": f"every {args.rerank_every}th query",
        },
        "goals_ms": {"p95_without_rerank": GOAL_P95_MS, "p95_with_rerank": GOAL_RERANK_P95_MS},
        "goals_met": {
            "p95_without_rerank": series["hybrid"]["p95_ms"] <= GOAL_P95_MS,
            "p95_without_rerank_no_coverage": series["hybrid no coverage"]["p95_ms"] <= GOAL_P95_MS,
            **(
                {
                    "p95_with_rerank": series["hybrid+rerank"]["p95_ms"] <= GOAL_RERANK_P95_MS,
                    "p95_with_rerank_L2": series["hybrid+rerank L2"]["p95_ms"] <= GOAL_RERANK_P95_MS,
                }
                if rerank
                else {}
            ),
        },
        "ratios": {
            "hybrid_over_fastest_leg_p95": round(
                series["hybrid"]["p95_ms"] / min(series[n]["p95_ms"] for n in ("vector", "text", "graph")), 2
            ),
            "threads_over_sequential_p95": round(series["hybrid"]["p95_ms"] / series["hybrid sequential"]["p95_ms"], 2),
            **(
                {"rerank_over_hybrid_p95": round(series["hybrid+rerank"]["p95_ms"] / series["hybrid"]["p95_ms"], 2)}
                if rerank
                else {}
            ),
            **{
                f"{name}_over_before_p95": round(series[name]["p95_ms"] / series[before]["p95_ms"], 2)
                for name, before in pairs.items()
            },
        },
        "before": {"rev": args.before, "modules": BEFORE_MODULES} if args.before else None,
        "machine": machine_info(load_average=True),
        "wall_s": round(time.perf_counter() - started, 1),
        "series": series,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "search_latency" if args.chunks == 100_000 else f"search_latency_{args.chunks // 1000}k"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, args.out / f"{stem}.png")
    print(json.dumps({k: report[k] for k in ("goals_met", "ratios", "wall_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
