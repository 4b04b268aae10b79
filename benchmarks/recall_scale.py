"""Campaign recall at scale, in one run: branch correctness, recall latency on 100,000 records, and
transcript import throughput against embedding alone.

1. **Branch correctness** (the story engine's leak check, for recall): a campaign played through the
   story service with recall on (embedded stores), with undo, redo, forks and scenes at random; at
   random positions, queries ``as_of`` that turn. A hit is a *leak* when its anchor turn is not an
   ancestor of (or equal to) the position, judged by walking parent links in the graph, independently
   of the lineage code the index uses. Also a *miss* check: a query with a lineage turn's own words must
   find that turn in the top 10. Goal: 0 leaks.
2. **Latency** of ``RecallIndex.search`` (query embedding, vector and BM25 legs with the lineage
   filter, fusion) on a memory index of ``--records`` records on the embedded engines (tantivy folder,
   qdrant-edge), spread over a tree: a main line and four branches forked at different depths. Texts
   are lines of the CRD3 transcripts in ``../shared/corpus/memory/crd3`` (read in place); ``--embedded``
   distinct lines are embedded with the real model and the other records get one of those vectors
   plus noise (embedding 100k lines on 2 cores takes ~25 min; HNSW latency depends on the distribution,
   not on which text a vector came from). Measured p50/p95 as of the main head, as of a branch head, at an
   early position, 15,000 turns deep, with an observer filter. Queries are embedded as a recall process
   embeds them (the model's ONNX copy on ``search_threads``, 1 by default), and, interleaved, by torch;
   and, interleaved, recalled as before ``story.recall_vectors`` (the vector searches sending the campaign
   condition beside the lineage keys: two conditions, so not ``exact_below_alone`` either), with how many
   of the queries found the same top 10 both ways. Goal: p95 ≤ 30 ms without re-ranking.
3. **Import throughput**: ``lorekeeper campaign import-transcript``'s code path on LoCoMo conversations
   (``../shared/corpus/memory/locomo-dev``, internal evaluation only) against embedding the same turns
   with the same model alone, same run; each file also imported without its session summaries (whose
   long texts are embedded too), in ``--import-rounds`` passes whose order rotates, the median round
   reported. Goal: ≥ 0.8× (turns per second).

Usage::

    python benchmarks/recall_scale.py                      # full run (~10 min on 2 cores)
    python benchmarks/recall_scale.py --records 20000 --quick

Writes benchmarks/results/recall_scale.json and benchmarks/results/recall_scale.png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from schemas.recall import RecallKind, RecallRecord  # noqa: E402
from schemas.search import SearchFilters  # noqa: E402
from schemas.settings import Settings  # noqa: E402
from stores.vector.edge import QdrantEdgeVectorIndex  # noqa: E402
from story.recall_vectors import nearest  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
CRD3 = CORPUS / "memory" / "crd3"
LOCOMO = CORPUS / "memory" / "locomo-dev"
RESULTS = REPO / "benchmarks" / "results"
GOAL_P95_MS = 30.0
LONG_QUERY_WORDS = 40  # the queries the latency part reports apart (8 of the 141 sampled)
GOAL_IMPORT_RATIO = 0.8


def crd3_lines() -> list[tuple[str, str]]:
    """``(speaker, text)`` of every CRD3 turn with at least five words, in order."""
    lines: list[tuple[str, str]] = []
    for path in sorted(CRD3.glob("C*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for turn in data["TURNS"]:
            text = " ".join(turn["UTTERANCES"]).strip()
            if len(text.split()) >= 5:
                lines.append((", ".join(turn["NAMES"]), text))
    return lines


def percentile_ms(samples: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(samples) * 1000.0, q)), 2)


def _subset_ms(samples: list[float]) -> dict[str, Any]:
    """How many recalls, and their p50/p95 in ms (``None`` for none)."""
    if not samples:
        return {"queries": 0, "p50_ms": None, "p95_ms": None}
    return {"queries": len(samples), "p50_ms": percentile_ms(samples, 50), "p95_ms": percentile_ms(samples, 95)}


# -- 1. branch correctness ------------------------------------------------------------------------------


def ancestors(story: Any, turn_id: str) -> set[str]:
    """The turn and its ancestors, by parent links (independent of lineage segments and keys)."""
    found: set[str] = set()
    current: str | None = turn_id
    while current is not None:
        found.add(current)
        current = story.get_turn(current).parent_turn_id
    return found


def branch_correctness(
    data: Path, lines: list[tuple[str, str]], *, turns: int, positions: int, seed: int
) -> dict[str, Any]:
    from models.embedding import SentenceTransformerEmbedder
    from schemas.story import Speaker, SpeakerKind, StoryProfile
    from stores.factory import open_blob_store, open_graph_store
    from story.errors import StoryInvalid
    from story.recall_index import open_recall_index
    from story.service import StoryService

    rng = random.Random(seed)
    settings = Settings(data_dir=data / "branches")
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    index = open_recall_index(settings, embedder=SentenceTransformerEmbedder())
    story = StoryService(graph, blobs, recall=index)
    story.prepare()
    try:
        world = story.create_world("Exandria")
        campaign = story.create_campaign(world.id, "Branches", StoryProfile(genre="fantasy"))
        written: list[str] = []
        forks = undos = 0
        start = rng.randrange(0, max(1, len(lines) - turns * 2))
        for n in range(turns):
            roll = rng.random()
            if written and roll < 0.12:
                for _ in range(rng.randint(1, 4)):
                    try:
                        story.undo(campaign.id)
                        undos += 1
                    except StoryInvalid:  # nothing to undo at the root
                        break
            elif roll < 0.16:
                with contextlib.suppress(StoryInvalid):  # nothing to redo
                    story.redo(campaign.id)
            # a scene is active per branch: an undo or redo can move the head to a line where another one is
            scene = story.active_scene(campaign.id)
            if scene is None and rng.random() < 0.1:
                story.start_scene(campaign.id, title=f"scene {n}")
            elif scene is not None and rng.random() < 0.1:
                story.end_scene(scene.id)
            speaker, text = lines[start + n]
            before = len(story.branches(campaign.id))
            turn = story.add_turn(
                campaign.id, text[:1800], speaker=Speaker(kind=SpeakerKind.PLAYER, name=speaker), narration="(told)"
            )
            forks += len(story.branches(campaign.id)) - before
            written.append(turn.id)
        scene = story.active_scene(campaign.id)
        if scene is not None:
            story.end_scene(scene.id)
        leaks = hits_checked = misses = probes = 0
        queries = [text for _, text in rng.sample(lines[:start] + lines[start + turns :], 10)]
        for position in rng.sample(written, min(positions, len(written))):
            line = ancestors(story, position)
            for query in queries:
                for hit in story.recall(campaign.id, query, as_of_turn_id=position, limit=10):
                    hits_checked += 1
                    leaks += hit.turn_id not in line
            probe = rng.choice(sorted(line))
            probes += 1
            own = story.get_turn(probe).text
            found = story.recall(campaign.id, own, as_of_turn_id=position, limit=10)
            misses += probe not in {h.turn_id for h in found}
        return {
            "turns": turns,
            "branches": len(story.branches(campaign.id)),
            "forks": forks,
            "undos": undos,
            "positions": min(positions, len(written)),
            "hits_checked": hits_checked,
            "leaks": leaks,
            "own_words_probes": probes,
            "own_words_misses": misses,
        }
    finally:
        index.close()
        graph.close()
        blobs.close()


# -- 2. latency -----------------------------------------------------------------------------------------


def latency(
    data: Path,
    lines: list[tuple[str, str]],
    *,
    records: int,
    embedded: int,
    queries: int,
    seed: int,
    kept: bool = False,
) -> dict[str, Any]:
    """Recall latency on a built index under ``data/latency``; ``kept``: reuse the one a previous run
    with the same ``records``, ``embedded`` and ``seed`` left there (its ``build.json``), else build it."""
    from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
    from story.lineage import BranchLine, lineage_of
    from story.recall_cues import named_speakers
    from story.recall_index import RecallIndex, lineage_cover, open_recall_index

    rng = np.random.default_rng(seed)
    settings = Settings(data_dir=data / "latency")
    manifest = data / "latency" / "build.json"
    build = {"records": records, "embedded": embedded, "seed": seed}
    reuse = kept and manifest.is_file() and json.loads(manifest.read_text())["build"] == build
    if kept and not reuse and (data / "latency").exists():
        import shutil

        shutil.rmtree(data / "latency")
    # Queries as a recall process embeds them (open_recall_index's default): the ONNX copy (torch where it is
    # unavailable) on search_threads (1); loaded at the first query, after the bulk embedding (torch's thread
    # count is per process).
    queries_by = SentenceTransformerEmbedder(EmbeddingConfig(threads=settings.search_threads))
    index = open_recall_index(settings, embedder=queries_by)
    try:
        distinct = lines[:embedded]
        # a main line of 80% of the records, four branches forked at 20/40/60/80% of it
        main_len = int(records * 0.8)
        per_branch = (records - main_len) // 4
        lines_of = {"main": BranchLine("main", None, None, -1)}
        layout: list[tuple[str, int]] = [("main", d) for d in range(main_len)]
        for i, frac in enumerate((0.2, 0.4, 0.6, 0.8)):
            fork = int(main_len * frac)
            name = f"b{i}"
            lines_of[name] = BranchLine(name, "main", f"t-main-{fork}", fork)
            layout += [(name, fork + 1 + k) for k in range(per_branch)]
        observers = [f"ent_{k}" for k in range(8)]
        if reuse:
            built = json.loads(manifest.read_text())
            embed_s, load_s = built["embed_s"], built["load_s"]
        else:
            embed_s, load_s = _build(index, distinct, lines, layout, observers, rng)
            manifest.write_text(json.dumps({"build": build, "embed_s": embed_s, "load_s": load_s}))
        sample = [text for _, text in lines[embedded : embedded + queries]] or [t for _, t in distinct[:queries]]
        # where the tail comes from: long queries (their embedding) and questions naming a speaker (a
        # second vector search, batched with the first: RecallIndex.gather)
        speakers = {speaker for speaker, _ in lines}
        naming = [bool(named_speakers(q, speakers)) for q in sample]
        long = [len(q.split()) >= LONG_QUERY_WORDS for q in sample]
        cases = {
            "main head": lineage_of(lines_of, "main", main_len - 1),
            "branch head": lineage_of(lines_of, "b1", int(main_len * 0.4) + per_branch),
            "early position": lineage_of(lines_of, "main", main_len // 10),
            # 15,001 records on the lineage (15 %): one condition, searched exactly since story.recall_vectors
            # and QdrantEdgeVectorIndex.exact_below_alone; HNSW at 8x ef before
            "position 15,000 deep": lineage_of(lines_of, "main", 15_000),
        }
        out: dict[str, Any] = {
            "records": len(layout),
            "embedded_distinct": len(distinct),
            "embed_s": embed_s,
            "load_s": load_s,
            "cases": {},
        }
        # the vector searches as they were before story.recall_vectors (the campaign condition sent beside the
        # lineage keys), same index, same run, queries rotating between the variants: on a shared machine only
        # the same run compares
        assert isinstance(index.vectors, QdrantEdgeVectorIndex)  # the embedded engines of Settings' defaults
        previous = RecallIndex(index.text, _CampaignSent(index.vectors.path), queries_by, collection=index.collection)
        # and the queries embedded by torch, as before the ONNX copy (EmbeddingConfig.small_batch_runtime)
        torch_queries = SentenceTransformerEmbedder(
            EmbeddingConfig(threads=settings.search_threads, small_batch_runtime="torch")
        )
        by_torch = RecallIndex(index.text, index.vectors, torch_queries, collection=index.collection)
        query_vectors = {q: queries_by.embed_query(q) for q in sample}
        for name, lineage in [*cases.items(), ("main head + observer", cases["main head"])]:
            observer = observers[0] if "observer" in name else None
            for q in sample[:5]:  # warm-up
                index.search("camp_bench", q, lineage=lineage, observer=observer)
                previous.search("camp_bench", q, lineage=lineage, observer=observer)
                by_torch.search("camp_bench", q, lineage=lineage, observer=observer)
            times: list[float] = []
            before: list[float] = []
            with_torch: list[float] = []
            same_as_torch = same_as_before = wrong = 0
            rotation = [index, previous, by_torch]
            for n, q in enumerate(sample):
                top: dict[int, list[str]] = {}
                for which in rotation[n % 3 :] + rotation[: n % 3]:
                    t0 = time.perf_counter()
                    hits = which.search("camp_bench", q, lineage=lineage, observer=observer, limit=10)
                    elapsed = time.perf_counter() - t0
                    (times if which is index else before if which is previous else with_torch).append(elapsed)
                    wrong += sum(not lineage.contains(h.branch_id, h.depth) for h in hits)
                    top[id(which)] = [h.id for h in hits]
                same_as_torch += top[id(index)] == top[id(by_torch)]
                same_as_before += top[id(index)] == top[id(previous)]
            filters = SearchFilters(
                campaign=["camp_bench"], lineage=lineage_cover(lineage), observer=[observer] if observer else None
            )
            legs: dict[str, list[float]] = {"now": [], "previous": []}
            agree: list[float] = []
            for n, q in enumerate(sample):
                found = {}
                for key, which in (
                    (("now", index), ("previous", previous)) if n % 2 else (("previous", previous), ("now", index))
                ):
                    t0 = time.perf_counter()
                    vhits = nearest(which.vectors, index.collection, [query_vectors[q]], filters, 100)[0]
                    legs[key].append(time.perf_counter() - t0)
                    found[key] = [h.id for h in vhits[:10]]
                agree.append(len(set(found["now"]) & set(found["previous"])) / max(1, len(found["previous"])))
            out["cases"][name] = {
                "p50_ms": percentile_ms(times, 50),
                "p95_ms": percentile_ms(times, 95),
                "queries": len(times),
                "off_lineage_hits": wrong,
                "before": {
                    "what": "the vector searches sending the campaign condition beside the lineage keys",
                    "p50_ms": percentile_ms(before, 50),
                    "p95_ms": percentile_ms(before, 95),
                    "same_top10": round(same_as_before / max(1, len(sample)), 3),
                },
                "by_query": {
                    key: _subset_ms([t for t, w in zip(times, which, strict=True) if w])
                    for key, which in (
                        ("naming_a_speaker", naming),
                        (f"{LONG_QUERY_WORDS}_words_or_more", long),
                        ("other", [not (a or b) for a, b in zip(naming, long, strict=True)]),
                    )
                },
                "queries_embedded_by_torch": {
                    "p50_ms": percentile_ms(with_torch, 50),
                    "p95_ms": percentile_ms(with_torch, 95),
                    "same_top10": round(same_as_torch / max(1, len(sample)), 3),
                },
                "vector_leg": {
                    "p50_ms": percentile_ms(legs["now"], 50),
                    "p95_ms": percentile_ms(legs["now"], 95),
                    "before_p50_ms": percentile_ms(legs["previous"], 50),
                    "before_p95_ms": percentile_ms(legs["previous"], 95),
                    "top10_overlap_with_before": round(float(np.mean(agree)), 3),
                },
            }
            print(name, json.dumps(out["cases"][name]), flush=True)
        previous.vectors.close()
        embed_times: dict[str, list[float]] = {"onnx": [], "torch": []}
        for n, q in enumerate(sample):
            pair = (("onnx", queries_by), ("torch", torch_queries))
            for key, embedder in pair if n % 2 else pair[::-1]:
                t0 = time.perf_counter()
                embedder.embed_query(q)
                embed_times[key].append(time.perf_counter() - t0)
        out["query_embedding"] = {
            "p50_ms": percentile_ms(embed_times["onnx"], 50),
            "p95_ms": percentile_ms(embed_times["onnx"], 95),
            "runtime": "onnx" if queries_by.small_batch_encoder() is not None else "torch",
            "torch_p50_ms": percentile_ms(embed_times["torch"], 50),
            "torch_p95_ms": percentile_ms(embed_times["torch"], 95),
        }
        return out
    finally:
        index.close()


def _build(
    index: Any,
    distinct: list[tuple[str, str]],
    lines: list[tuple[str, str]],
    layout: list[tuple[str, int]],
    observers: list[str],
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Write the latency index's records (``layout``: branch and depth of each); ``(embed_s, load_s)``."""
    from models.embedding import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()  # the bulk lines: every core
    t0 = time.perf_counter()
    base = embedder.embed_documents([text for _, text in distinct])
    del embedder
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    batch: list[RecallRecord] = []
    vectors: list[np.ndarray] = []
    for n, (branch, depth) in enumerate(layout):
        speaker, text = lines[n % len(lines)]
        pick = n % len(distinct)
        noise = np.asarray(rng.normal(scale=0.02, size=base.shape[1]), dtype=np.float32)
        vec = base[pick] + noise if n >= len(distinct) else base[pick]
        batch.append(
            RecallRecord(
                id=f"turn_{n}",
                kind=RecallKind.TURN,
                campaign_id="camp_bench",
                anchor_turn_id=f"turn_{n}",
                branch_id=branch,
                depth=depth,
                speakers=[speaker],
                observers=[observers[n % len(observers)], observers[(n + 3) % len(observers)]],
                text=text[:2000],
            )
        )
        vectors.append(vec / np.linalg.norm(vec))
        if len(batch) == 2000:
            index.write(batch, np.array(vectors))
            batch, vectors = [], []
    if batch:
        index.write(batch, np.array(vectors))
    index.vectors.optimize(index.collection)
    return round(embed_s, 1), round(time.perf_counter() - t0, 1)


class _CampaignSent(QdrantEdgeVectorIndex):
    """qdrant-edge searched as a recall searched it before ``story.recall_vectors``: the benchmark's campaign
    condition sent beside the lineage keys (which the recall's vector searches now leave out)."""

    @staticmethod
    def _with_campaign(filters: SearchFilters | None) -> SearchFilters | None:
        if filters is None or filters.lineage is None or filters.campaign is not None:
            return filters
        return filters.model_copy(update={"campaign": ["camp_bench"]})

    def search(self, collection: str, vector: Any, *, filters: SearchFilters | None = None, limit: int = 10) -> Any:
        return super().search(collection, vector, filters=self._with_campaign(filters), limit=limit)

    def search_batch(
        self, collection: str, vectors: Any, *, filters: SearchFilters | None = None, limit: int = 10
    ) -> Any:
        return super().search_batch(collection, vectors, filters=self._with_campaign(filters), limit=limit)


# -- 3. import throughput --------------------------------------------------------------------------------


def import_throughput(data: Path, *, files: int, rounds: int = 3) -> dict[str, Any]:
    """Import LoCoMo conversations through the story service, and embed the same texts alone, same run.

    ``rounds`` passes over the files; in each, every file is imported without and with its session
    summaries and its turns are embedded alone, in an order that rotates from file to file and round to
    round, so the machine's drift falls on all three alike. The ratios are each round's; the reported one
    is the median round's (a single pass swung 0.78-0.85 in three runs back to back on 2 shared cores).
    """
    from models.embedding import SentenceTransformerEmbedder
    from stores.factory import open_blob_store, open_graph_store
    from story.recall import summary_record, turn_record
    from story.recall_index import open_recall_index
    from story.service import StoryService
    from story.transcripts import read_transcript

    embedder = SentenceTransformerEmbedder()
    embedder.load()
    settings = Settings(data_dir=data / "import")
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    index = open_recall_index(settings, embedder=embedder)
    story = StoryService(graph, blobs, recall=index)
    story.prepare()
    paths = sorted(LOCOMO.glob("*.json"))[:files]
    per_round: list[list[dict[str, Any]]] = []
    try:
        transcripts = {path: read_transcript(path) for path in paths}
        # an untimed import of each file first: it warms the model and the stores up, and gives the texts the
        # index embeds for the turns' records (they hold no graph id, so they are the same for every import)
        turn_texts: dict[Path, list[str]] = {}
        for path, transcript in transcripts.items():
            warm, _ = story.import_transcript(transcript, f"{path.stem} warm-up")
            records = [turn_record(t) for t in story.history(warm.id)]
            turn_texts[path] = [index.indexed_text(r) for r in records if r is not None]
        step = 0
        for n in range(rounds):
            rows: list[dict[str, Any]] = []
            for path in paths:
                transcript = transcripts[path]
                times: dict[str, float] = {}
                report: Any = None
                campaign: Any = None
                order = ("bare", "full", "embed")
                for what in order[step % 3 :] + order[: step % 3]:
                    t0 = time.perf_counter()
                    if what == "bare":
                        story.import_transcript(transcript, f"{path.stem} #{n} without summaries", summaries=False)
                    elif what == "full":
                        campaign, report = story.import_transcript(transcript, f"{path.stem} #{n}")
                    else:
                        embedder.embed_documents(turn_texts[path])
                    times[what] = time.perf_counter() - t0
                step += 1
                # the summaries' own records, as the import embeds them: what "every text" adds to the turns
                turns = story.history(campaign.id)
                by_id = {t.id: t for t in turns}
                summary_texts = [
                    index.indexed_text(summary_record(s, by_id[s.anchor_turn_id]))
                    for s in story.summaries(campaign.id)
                    if s.anchor_turn_id in by_id
                ]
                t0 = time.perf_counter()
                if summary_texts:
                    embedder.embed_documents(summary_texts)
                summaries_embed_s = time.perf_counter() - t0
                rows.append(
                    {
                        "file": path.name,
                        "turns": report.turns,
                        "import_s": round(times["full"], 2),
                        "summaries": report.summaries,
                        "import_without_summaries_s": round(times["bare"], 2),
                        "graph_s": report.graph_seconds,
                        "recall_s": report.recall_seconds,
                        "embed_alone_s": round(times["embed"], 2),
                        "embed_summaries_alone_s": round(summaries_embed_s, 2),
                        "load": round(os.getloadavg()[0], 2),
                    }
                )
                print(json.dumps({"round": n, **rows[-1]}), flush=True)
            per_round.append(rows)
    finally:
        index.close()
        graph.close()
        blobs.close()
    summaries = [_import_ratios(rows) for rows in per_round]
    median = sorted(summaries, key=lambda r: r["ratio"])[len(summaries) // 2]
    return {
        **median,
        "rounds": summaries,
        "ratio_range": [min(r["ratio"] for r in summaries), max(r["ratio"] for r in summaries)],
        "files": per_round[summaries.index(median)],
    }


def _import_ratios(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Turns per second of one round: importing, importing without summaries, embedding alone; ratios."""
    turns_total = sum(int(r["turns"]) for r in rows)
    import_tps = turns_total / sum(float(r["import_s"]) for r in rows)
    embed_tps = turns_total / sum(float(r["embed_alone_s"]) for r in rows)
    bare_tps = turns_total / sum(float(r["import_without_summaries_s"]) for r in rows)
    every_text_tps = turns_total / sum(float(r["embed_alone_s"]) + float(r["embed_summaries_alone_s"]) for r in rows)
    return {
        "turns": turns_total,
        "import_turns_per_s": round(import_tps, 1),
        "embed_turns_per_s": round(embed_tps, 1),
        "ratio": round(import_tps / embed_tps, 2),
        # the session summaries add records of their own (long texts) to embed beside the turns
        "import_without_summaries_turns_per_s": round(bare_tps, 1),
        "ratio_without_summaries": round(bare_tps / embed_tps, 2),
        # against embedding every text the import embeds (turns and summaries), alone
        "ratio_to_every_text": round(import_tps / every_text_tps, 2),
    }


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    cases = results["latency"]["cases"]
    names = list(cases)
    x = np.arange(len(names))
    ax1.bar(x - 0.27, [cases[n]["p50_ms"] for n in names], 0.27, label="p50")
    ax1.bar(x, [cases[n]["p95_ms"] for n in names], 0.27, label="p95")
    if all("before" in cases[n] for n in names):
        ax1.bar(x + 0.27, [cases[n]["before"]["p95_ms"] for n in names], 0.27, label="p95, campaign sent (before)")
    ax1.axhline(GOAL_P95_MS, color="grey", linestyle="--", linewidth=0.8, label="goal p95")
    ax1.set_xticks(x, names, rotation=15, fontsize=8)
    ax1.set(ylabel="ms", title=f"Recall latency, {results['latency']['records']:,} records")
    ax1.legend(fontsize=8)
    if "import" in results:
        imp = results["import"]
        ax2.bar(
            ["embedding alone", "import", "import, no summaries"],
            [imp["embed_turns_per_s"], imp["import_turns_per_s"], imp["import_without_summaries_turns_per_s"]],
        )
        ax2.set(ylabel="turns / s", title=f"Transcript import ({imp['ratio']}× embedding)")
    else:
        ax2.axis("off")
    fig.suptitle(f"Campaign recall at scale, {results['machine']['cpus']} CPUs, embedded stores")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="Records in the latency index.")
    parser.add_argument("--embedded", type=int, default=3000, help="Distinct lines embedded for the latency index.")
    parser.add_argument("--queries", type=int, default=200, help="Timed queries per case.")
    parser.add_argument("--turns", type=int, default=300, help="Turns of the branch-correctness campaign.")
    parser.add_argument("--positions", type=int, default=30, help="Positions queried in the branch check.")
    parser.add_argument("--quick", action="store_true", help="Smaller everything.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--parts",
        default="branches,latency,import",
        help="Comma-separated parts to run (branches, latency, import); a partial run writes nothing "
        "unless --out is given.",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="Keep the latency index in this folder and reuse it on the next run with the same --records, "
        "--embedded and --seed (the load takes minutes), as it was built: after a change to how the stores build "
        "an index (e.g. QdrantEdgeVectorIndex.payload_in_ram) use a new folder. A temporary folder by default.",
    )
    parser.add_argument(
        "--import-files",
        type=int,
        default=None,
        help="LoCoMo files the import part imports (5; 2 with --quick); run it alone with --parts import.",
    )
    parser.add_argument(
        "--import-rounds", type=int, default=3, help="Passes over the import files; the median round is reported."
    )
    parser.add_argument("--out", type=Path, default=None, help=f"Results folder ({RESULTS} for a full run).")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.positions, args.queries, args.embedded = 80, 10, 50, 800
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if unknown := parts - {"branches", "latency", "import"}:
        parser.error(f"unknown parts: {sorted(unknown)}")
    if args.out is None and parts == {"branches", "latency", "import"}:
        args.out = RESULTS
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    lines = crd3_lines()
    results: dict[str, Any] = {
        "benchmark": "recall_scale",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_before": os.getloadavg()},
        "goals": {"leaks": 0, "p95_ms": GOAL_P95_MS, "import_ratio": GOAL_IMPORT_RATIO},
    }
    with tempfile.TemporaryDirectory(prefix="lk-recall-scale-") as tmp:
        data = Path(tmp)
        if "branches" in parts:
            print("branch correctness ...", flush=True)
            results["branches"] = branch_correctness(
                data, lines, turns=args.turns, positions=args.positions, seed=args.seed
            )
            print(json.dumps(results["branches"]), flush=True)
        if "latency" in parts:
            print("latency ...", flush=True)
            results["latency"] = latency(
                args.store or data,
                lines,
                records=args.records,
                embedded=args.embedded,
                queries=args.queries,
                seed=args.seed,
                kept=args.store is not None,
            )
            print(json.dumps(results["latency"]), flush=True)
        if "import" in parts and LOCOMO.is_dir():
            print("import throughput ...", flush=True)
            files = args.import_files or (2 if args.quick else 5)
            results["import"] = import_throughput(data, files=files, rounds=args.import_rounds)
            print(json.dumps({k: v for k, v in results["import"].items() if k != "files"}), flush=True)
    if args.out is None:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall_scale.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if "latency" in results:
        plot(results, args.out / "recall_scale.png")
    print(f"wrote {args.out / 'recall_scale.json'}")


if __name__ == "__main__":
    main()
