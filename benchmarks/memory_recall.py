"""Evidence recall of campaign memory (issue 13): LoCoMo's development half imported as campaigns,
every question with evidence recalled, recall@k of the evidence turns, plain baselines in the same run.

Data: the five LoCoMo conversations of ``../shared/corpus/memory/locomo-dev`` (internal evaluation
only; read in place, never copied). Each turn is one document; every question whose ``evidence``
names turns is a query (``"D8:6; D9:17"`` is two turns, ``"D:11:26"`` is ``D11:26``, an id that
names no turn stays in the question's evidence and cannot be found). recall@k: the share of a
question's evidence turns in the top k, averaged over questions; any@10: the share of questions with
at least one evidence turn in the top 10. Overall and per category (1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial).

Systems, all in one run, over the same turns:

- **plain baselines** (the corpus README's): a document per turn, ``(time) speaker: text`` (a shared
  image as its caption, as the import keeps it); BM25 (``bm25s``, English stop words, PyStemmer's
  English stemmer), all-MiniLM-L6-v2 (``models.embedding.SentenceTransformerEmbedder``, cosine) and
  their RRF (k = 60, each list's top 100).
- **lorekeeper**: each conversation imported as a campaign (``story.transcripts.read_transcript`` +
  ``StoryService.import_transcript``, the code behind ``lorekeeper campaign import-transcript``) on the
  embedded stores of a temporary data folder, and recalled through the memory index
  (``story.recall_index.RecallIndex``): ``gather`` runs the two legs once per question and index
  variant, ``rank`` ranks them under each configuration; the default configuration is also run
  end to end through ``StoryService.recall`` and must give the same top 10 (``product_check``).

Levers (:class:`story.recall_index.RecallConfig`): what the indexed text holds (session time,
speakers, their layout in the text index), windows of neighbouring turns in the full-text document
(and in the vector), RRF weights, the share of a neighbouring turn's score, the time boost of queries
that name a calendar date, the speaker boost, a second round of BM25 with the first round's distinctive
words (pseudo-relevance feedback), a vector search of a question without the speakers' names it holds,
and recall through scene summaries (extractive, as
``story.formation`` writes them without a model; and LoCoMo's generated session summaries and
observations standing in for an LLM's, labelled as such). Fitted weights are fitted on four
conversations and reported on the fifth (leave one conversation out); no fitted number is reported on
its own training data. The same systems also run on synthetic conversations (``memory_synthetic.py``)
that no lever was chosen on.

Goal (issue 13): recall@10 >= 0.85 overall and >= 0.70 on multi-hop and open-domain.

Usage::

    python -m benchmarks.memory_recall --out benchmarks/results   # the whole run (~10 min on 2 cores)
    python -m benchmarks.memory_recall --conversations 26 --synthetic 1 --quick --out /tmp/mr
    # summaries and memories a model forms, beside the extractive ones on the same scenes (issue 26):
    python -m benchmarks.memory_recall --model-summaries --engine local --formed-scenes 6 \
        --variants "window 2,summaries" --no-fit --synthetic 0 --out /tmp/mr
    python -m benchmarks.memory_recall --model-summaries --engine openai --base-url http://host:8000/v1 --model NAME

Writes ``memory_recall.json`` and ``memory_recall.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from benchmarks.memory_synthetic import generate_many  # noqa: E402
from benchmarks.model_engines import add_engine_arguments, engine_from  # noqa: E402
from schemas.recall import RecallKind  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus" / "memory" / "locomo-dev"
CONVERSATIONS = ("26", "30", "41", "42", "43")
RESULTS = REPO / "benchmarks" / "results"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
GOAL = {"recall_at_10": 0.85, "multi-hop": 0.70, "open-domain": 0.70}
README_BASELINES = {  # the corpus README's numbers, reproduced as a check
    "BM25": {"recall_at_5": 0.528, "recall_at_10": 0.601, "any_at_10": 0.655},
    "MiniLM": {"recall_at_5": 0.395, "recall_at_10": 0.487, "any_at_10": 0.539},
    "RRF": {"recall_at_5": 0.498, "recall_at_10": 0.605, "any_at_10": 0.655},
}
# each leg's candidates are gathered once, to the depth the service searches (RecallConfig.candidates,
# 100), and a configuration cuts them to its own ``candidates``: gathering deeper changes the vector
# leg's approximate tail, so the in-process ranking would no longer be the product's
DEPTH = 100
TURNS = frozenset({RecallKind.TURN})


# -- questions and scoring ------------------------------------------------------------------------


@dataclass
class Question:
    id: str
    conversation: str
    query: str
    category: int
    evidence: list[str]
    family: str | None = None  # a synthetic question's fact family


@dataclass
class Turn:
    ref: str
    session: str
    time: str | None
    speaker: str
    text: str


@dataclass
class Conversation:
    name: str
    path: Path  # the transcript file the import reads
    turns: list[Turn]
    questions: list[Question]
    extras: dict[str, Any] = field(default_factory=dict)  # LoCoMo's generated summaries and observations


_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def parse_evidence(raw: Iterable[Any]) -> list[str]:
    """A question's evidence turn ids: ``"D8:6; D9:17"`` is two, ``"D:11:26"`` is ``D11:26``, ``"D"`` none.

    Order is kept and duplicates dropped.
    """
    out: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            continue
        for part in re.split(r"[;,\s]+", entry.strip()):
            if m := _EVIDENCE.fullmatch(part):
                ref = f"D{int(m[1])}:{int(m[2])}"
                if ref not in out:
                    out.append(ref)
    return out


def parse_questions(name: str, qa: Sequence[dict[str, Any]]) -> list[Question]:
    """The questions that carry evidence (a non-empty ``evidence`` list), in file order."""
    out = []
    for i, q in enumerate(qa):
        if not q.get("evidence"):
            continue
        category = int(q["category"])
        if category not in CATEGORIES:
            raise ValueError(f"{name}: question {i} has category {category}, not one of {sorted(CATEGORIES)}")
        out.append(Question(f"{name}:{i}", name, str(q["question"]), category, parse_evidence(q["evidence"])))
    return out


def recall_at(ranked: Sequence[str | None], evidence: Sequence[str], k: int) -> float:
    """Share of ``evidence`` in the first ``k`` of ``ranked`` (0 when there is no evidence)."""
    if not evidence:
        return 0.0
    top = {r for r in ranked[:k] if r is not None}
    return len(top.intersection(evidence)) / len(set(evidence))


def score(questions: Sequence[Question], ranked: Sequence[Sequence[str | None]]) -> dict[str, Any]:
    """recall@5, recall@10 and any@10, overall and per category, of ranked refs per question."""
    if len(questions) != len(ranked):
        raise ValueError(f"{len(questions)} questions but {len(ranked)} rankings")

    def summary(rows: list[tuple[float, float, float]]) -> dict[str, Any]:
        if not rows:
            return {"questions": 0, "recall_at_5": None, "recall_at_10": None, "any_at_10": None}
        a = np.array(rows, dtype=float)
        r5, r10, any10 = (round(float(x), 3) for x in a.mean(axis=0))
        return {"questions": len(rows), "recall_at_5": r5, "recall_at_10": r10, "any_at_10": any10}

    rows = [
        (recall_at(r, q.evidence, 5), recall_at(r, q.evidence, 10), float(recall_at(r, q.evidence, 10) > 0))
        for q, r in zip(questions, ranked, strict=True)
    ]
    result = summary(rows)
    result["by_category"] = {
        label: summary([row for q, row in zip(questions, rows, strict=True) if q.category == c])
        for c, label in CATEGORIES.items()
    }
    return result


# -- corpora --------------------------------------------------------------------------------------


def load_locomo(path: Path) -> Conversation:
    """A LoCoMo conversation: its turns as the import reads them, its questions with evidence, and its
    generated session summaries and observations (used only by the rows labelled as LLM stand-ins)."""
    from story.transcripts import read_transcript

    document = json.loads(path.read_text(encoding="utf-8"))
    transcript = read_transcript(path)
    turns = [Turn(line.ref or "", line.session, line.time, line.speaker, line.text) for line in transcript.lines]
    summaries = {m[1]: str(v) for k, v in document.items() if (m := re.fullmatch(r"session_(\d+)_summary", k)) and v}
    observations: list[tuple[str, str, str]] = []  # (speaker, text, ref)
    for key, value in document.items():
        if re.fullmatch(r"session_\d+_observation", key) and isinstance(value, dict):
            for speaker, items in value.items():
                for item in items:
                    refs = item[1] if isinstance(item[1], list) else [item[1]]
                    for ref in parse_evidence(refs)[:1]:
                        observations.append((speaker, str(item[0]), ref))
    return Conversation(
        name=path.stem,
        path=path,
        turns=turns,
        questions=parse_questions(path.stem, document.get("qa", [])),
        extras={"summaries": summaries, "observations": observations},
    )


def load_synthetic(seed: int, count: int, folder: Path) -> list[Conversation]:
    """Synthetic conversations written as JSON-lines transcripts into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for conv in generate_many(seed, count):
        path = folder / f"{conv.name}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in conv.lines), encoding="utf-8")
        turns = [Turn(x["ref"], x["session"], x["time"], x["speaker"], x["text"]) for x in conv.lines]
        questions = [Question(q.id, conv.name, q.query, q.category, list(q.evidence), q.family) for q in conv.questions]
        out.append(Conversation(conv.name, path, turns, questions))
    return out


def baseline_text(turn: Turn) -> str:
    return f"({turn.time}) {turn.speaker}: {turn.text}" if turn.time else f"{turn.speaker}: {turn.text}"


# -- an embedder that remembers -------------------------------------------------------------------


class CachedEmbedder:
    """The project's embedder, remembering every text it embedded in this run: index variants that
    embed the same texts (and the baselines, whose documents are the product's vector texts) pay once."""

    def __init__(self, inner: Any, path: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self._cache: dict[str, np.ndarray] = {}
        self.embedded = 0
        self.seconds = 0.0
        self.path = path
        if path is not None and path.is_file():  # an earlier run with the same --work
            with np.load(path, allow_pickle=False) as saved:
                self._cache = dict(zip(saved["texts"].tolist(), saved["vectors"], strict=True))
        self.loaded = len(self._cache)

    def save(self) -> None:
        if self.path is not None and self._cache:
            texts = list(self._cache)
            np.savez(self.path, texts=np.array(texts), vectors=np.stack([self._cache[t] for t in texts]))

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            started = time.perf_counter()
            vectors = self.inner.embed_documents(missing)
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
            self._cache.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


# -- plain baselines ------------------------------------------------------------------------------


def bm25_rankings(docs: Sequence[str], queries: Sequence[str], k: int = 100) -> list[list[int]]:
    """bm25s over ``docs`` (English stop words, PyStemmer English): each query's best ``k`` with a score > 0."""
    try:
        import bm25s
        import Stemmer
    except ImportError as exc:  # pragma: no cover - the bench extra
        raise SystemExit("the BM25 baseline needs the bench extra: pip install -e '.[bench]'") from exc
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(list(docs), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    out: list[list[int]] = []
    for query in queries:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            out.append([])
            continue
        ids, scores = retriever.retrieve(tokens, k=min(k, len(docs)), show_progress=False)
        out.append([int(i) for i, s in zip(ids[0], scores[0], strict=True) if s > 0])
    return out


def dense_rankings(
    embedder: CachedEmbedder, docs: Sequence[str], queries: Sequence[str], k: int = 100
) -> list[list[int]]:
    matrix = embedder.embed_documents(docs)
    sims = embedder.embed_documents(queries) @ matrix.T
    return [[int(i) for i in row] for row in np.argsort(-sims, axis=1)[:, :k]]


def rrf_ids(rankings: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    """Reciprocal rank fusion of ranked lists, ties by first appearance."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: -scores[d])


def run_baselines(conversations: Sequence[Conversation], embedder: CachedEmbedder) -> dict[str, list[list[str]]]:
    """Each baseline's ranked refs per question, conversations in order."""
    out: dict[str, list[list[str]]] = {"plain BM25": [], "plain MiniLM": [], "plain RRF": []}
    for conv in conversations:
        docs = [baseline_text(t) for t in conv.turns]
        refs = [t.ref for t in conv.turns]
        queries = [q.query for q in conv.questions]
        bm25 = bm25_rankings(docs, queries)
        dense = dense_rankings(embedder, docs, queries)
        for b, d in zip(bm25, dense, strict=True):
            out["plain BM25"].append([refs[i] for i in b])
            out["plain MiniLM"].append([refs[i] for i in d])
            out["plain RRF"].append([refs[i] for i in rrf_ids([b, d])])
    return out


# -- lorekeeper -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexVariant:
    """How records are indexed (a fresh memory index and an import per variant), and what else is
    written beside the turns (``memories``: none, extractive scene summaries, or LoCoMo's generated
    summaries / observations as an LLM's stand-ins)."""

    name: str
    index: dict[str, Any]
    memories: str = "none"


INDEX_VARIANTS = [
    IndexVariant("text only", {"time_in_text": False, "speakers_in_text": False, "window_before": 0}),
    IndexVariant("+ time", {"speakers_in_text": False, "window_before": 0}),
    IndexVariant("+ time + speakers", {"window_before": 0}),
    IndexVariant("+ time + speakers as fields", {"window_before": 0, "window_after": 0, "text_layout": "fields"}),
    IndexVariant("+ window 1", {"window_before": 1}),
    IndexVariant("+ window 2", {}),
    IndexVariant("+ window 2 in the vector too", {"context_in_vector": True}),
    IndexVariant("default + extractive summaries", {}, memories="extractive"),
    IndexVariant("default + LoCoMo summaries (LLM stand-in)", {}, memories="locomo-summaries"),
    IndexVariant("default + LoCoMo observations (LLM stand-in)", {}, memories="locomo-observations"),
]
MODEL_VARIANT = IndexVariant("default + model summaries (--engine)", {}, memories="model")
"""Run with --model-summaries: the summaries and memories the model's former writes (LLMFormer: its prompt,
schema and parse, the extractive fallback when the model fails, counted in the report's ``formations``)."""
QUICK_VARIANTS = ("text only", "+ time + speakers", "+ window 2")
BASE_RANKING = {  # the ranking the index variants are compared under: plain RRF
    "vector_weight": 1.0,
    "text_weight": 1.0,
    "neighbour_share": 0.0,
    "time_boost": 0.0,
    "speaker_boost": 0.0,
    "expand_share": 0.0,
    "inference_text_weight": None,
    "inference_text_without_names": False,
    "feedback_text_weight": 0.0,
    "vector_without_names_weight": 0.0,
    "listing_text_weight": None,
    "listing_vector_without_names_weight": None,
}
DEFAULT = "+ window 2"


@dataclass(frozen=True)
class Row:
    """One line of the table: an index variant ranked under a configuration."""

    name: str
    variant: str
    ranking: dict[str, Any]


def lever_rows(variants: Sequence[str], fitted: dict[str, Any] | None = None) -> list[Row]:
    """The table's rows: each index variant under plain RRF; on the default index, the ranking levers
    added one at a time up to the default configuration, then one change at a time from it; the
    variants with memories under three expansion shares; a ranking fitted elsewhere (``fitted``)."""
    rows = [Row(f"index: {v}", v, BASE_RANKING) for v in variants if v in {x.name for x in INDEX_VARIANTS[:7]}]
    if DEFAULT in variants:
        steps = {"text_weight": 3.0}
        rows.append(Row("default index, RRF 1:3 (text weight 3)", DEFAULT, {**BASE_RANKING, **steps}))
        steps["neighbour_share"] = 0.1
        rows.append(Row("  + neighbour share 0.1", DEFAULT, {**BASE_RANKING, **steps}))
        steps["time_boost"] = 0.5
        rows.append(Row("  + time boost 0.5", DEFAULT, {**BASE_RANKING, **steps}))
        steps["expand_share"] = 0.05
        rows.append(Row("  + expand share 0.05 (before the inference levers)", DEFAULT, {**BASE_RANKING, **steps}))
        steps["inference_text_weight"] = 0.5
        rows.append(Row("  + inference text weight 0.5", DEFAULT, {**BASE_RANKING, **steps}))
        steps["inference_text_without_names"] = True
        rows.append(Row("  + inference text leg without names", DEFAULT, {**BASE_RANKING, **steps}))
        steps["feedback_text_weight"] = 1.0
        rows.append(Row("  + text feedback (RM3-like, 10 records, 10 words)", DEFAULT, {**BASE_RANKING, **steps}))
        rows += [
            Row("DEFAULT CONFIGURATION (RecallConfig())", DEFAULT, {}),
            Row("  default, inference text weight 1", DEFAULT, {"inference_text_weight": 1.0}),
            Row("  default, names kept in an inference's text leg", DEFAULT, {"inference_text_without_names": False}),
            Row("  default, no text feedback", DEFAULT, {"feedback_text_weight": 0.0}),
            Row("  default, no vector search without names", DEFAULT, {"vector_without_names_weight": 0.0}),
            Row("  default, vector without names 1", DEFAULT, {"vector_without_names_weight": 1.0}),
            Row(
                "  default, no listing lever",
                DEFAULT,
                {"listing_text_weight": None, "listing_vector_without_names_weight": None},
            ),
            Row("  default, speaker boost 0.3", DEFAULT, {"speaker_boost": 0.3}),
            Row("  default, neighbour share 0.2", DEFAULT, {"neighbour_share": 0.2}),
            Row("  default, text weight 2", DEFAULT, {"text_weight": 2.0}),
            Row("  default, rrf k 30", DEFAULT, {"rrf_k": 30}),
            Row("  default, candidates 50", DEFAULT, {"candidates": 50}),
        ]
        if fitted:
            rows.append(Row("  ranking fitted on LoCoMo (all five), applied here", DEFAULT, fitted))
    for variant in variants:
        if variant.startswith("default + "):
            for share in (0.0, 0.05, 0.2):
                rows.append(Row(f"{variant}, expand share {share}", variant, {"expand_share": share}))
    return rows


class Stack:
    """The embedded stores of one temporary data folder: one graph and blob store, a memory index per
    variant (its own text index and vector collection), one embedding model for all."""

    def __init__(self, data_dir: Path, embedder: CachedEmbedder) -> None:
        from schemas.settings import Settings
        from stores.factory import open_blob_store, open_graph_store, open_vector_index

        self.settings = Settings(data_dir=data_dir)
        self.graph = open_graph_store(self.settings)
        self.blobs = open_blob_store(self.settings)
        self.vectors = open_vector_index(self.settings)
        self.embedder = embedder
        self.texts: list[Any] = []
        self.former: Any = None  # the model's former (--model-summaries), for the "model" variant
        self.formed_scenes: int | None = None  # form only each conversation's first N scenes (both formers)
        self.formations: dict[str, dict[str, int]] = {}  # variant -> former name -> scenes it formed

    def index(self, variant: IndexVariant, config: dict[str, Any] | None = None) -> Any:
        from stores.factory import open_memory_text_index
        from story.recall_index import RecallConfig, RecallIndex

        slug = re.sub(r"[^a-z0-9]+", "-", variant.name.lower()).strip("-")
        # a text index folder per variant: BM25's statistics are the index's, not the campaign's
        folder = self.settings.data_dir / f"text-{slug}"
        text = open_memory_text_index(self.settings.model_copy(update={"text_url": str(folder)}))
        self.texts.append(text)
        return RecallIndex(
            text,
            self.vectors,
            self.embedder,
            collection=f"memory_{slug.replace('-', '_')}",
            config=RecallConfig(**{**variant.index, **(config or {})}),
        )

    def service(self, index: Any) -> Any:
        from story.service import StoryService

        service = StoryService(self.graph, self.blobs, recall=index)
        service.prepare()
        return service

    def close(self) -> None:
        for text in self.texts:
            text.close()
        self.vectors.close()
        self.graph.close()
        self.blobs.close()


def head_lineage(service: Any, campaign_id: str) -> Any:
    """The lineage of an imported campaign's head: one branch, every turn up to the last."""
    from story.lineage import Lineage, Segment

    campaign = service.get_campaign(campaign_id)
    head = service.get_turn(campaign.head_turn_id)
    return Lineage(segments=(Segment(branch_id=head.branch_id, max_depth=head.depth),))


def write_memories(service: Any, campaign_id: str, conv: Conversation, kind: str, stack: Stack | None = None) -> int:
    """What a variant writes beside the turns, through the story service (indexed as it is written)."""
    from schemas.story import Summary, SummaryScope
    from story.formation import ExtractiveFormer
    from story.scene_end import form_scene

    scenes = service.scenes(campaign_id)
    written = 0
    if kind in ("extractive", "model"):
        former = ExtractiveFormer() if kind == "extractive" else stack.former if stack else None
        if former is None:
            raise ValueError("the 'model' variant needs a former (--model-summaries)")
        formed = stack.formations.setdefault(kind, {}) if stack else {}
        for scene in scenes[: stack.formed_scenes if stack else None]:
            result = form_scene(service, scene, former)
            written += int(result.summary_added) + result.memories_added
            formed[result.former] = formed.get(result.former, 0) + 1  # "llm", or "extractive (fallback)"
        return written
    if kind == "locomo-summaries":
        for scene in scenes:
            session = re.match(r"Session (\d+)", scene.title or "")
            text = conv.extras["summaries"].get(session[1]) if session else None
            if text and scene.end_turn_id:
                service.add_summary(
                    Summary(
                        campaign_id=campaign_id,
                        scope=SummaryScope.SCENE,
                        scene_id=scene.id,
                        anchor_turn_id=scene.end_turn_id,
                        text=text,
                    )
                )
                written += 1
        return written
    if kind == "locomo-observations":
        # The speakers are not entities of the campaign (an observer must be), so the observations go to
        # the memory index as memory records anchored at the turn they cite, without an observer.
        from schemas.recall import RecallRecord

        turns = {t.ref: t for t in service.history(campaign_id, last=100_000) if t.ref}
        records = [
            RecallRecord(
                id=f"obs-{campaign_id}-{n}",
                kind=RecallKind.MEMORY,
                campaign_id=campaign_id,
                anchor_turn_id=turns[ref].id,
                branch_id=turns[ref].branch_id,
                depth=turns[ref].depth,
                scene_id=turns[ref].scene_id,
                speakers=[speaker],
                story_time=turns[ref].story_time,
                ref=ref,
                text=text,
            )
            for n, (speaker, text, ref) in enumerate(conv.extras["observations"])
            if ref in turns
        ]
        return int(service.recall_index.write(records))
    return 0


@dataclass
class Imported:
    variant: IndexVariant
    index: Any
    service: Any
    campaigns: dict[str, str]  # conversation -> campaign id
    found: list[Any]  # Candidates per question, conversations in order
    seconds: dict[str, float]


def import_and_gather(
    stack: Stack,
    variant: IndexVariant,
    conversations: Sequence[Conversation],
    progress: Any,
) -> Imported:
    from story.transcripts import read_transcript

    index = stack.index(variant)
    service = stack.service(index)
    campaigns: dict[str, str] = {}
    seconds = {"import_s": 0.0, "memories_s": 0.0, "gather_s": 0.0}
    found: list[Any] = []
    task = progress.add_task(f"{variant.name}", total=sum(len(c.questions) for c in conversations))
    for conv in conversations:
        started = time.perf_counter()
        # no summaries from the import itself: each variant says what is written beside the turns
        campaign, _report = service.import_transcript(
            read_transcript(conv.path), f"{conv.name} / {variant.name}", summaries=False
        )
        campaigns[conv.name] = campaign.id
        seconds["import_s"] += time.perf_counter() - started
        if variant.memories != "none":
            started = time.perf_counter()
            write_memories(service, campaign.id, conv, variant.memories, stack)
            seconds["memories_s"] += time.perf_counter() - started
    # every question asked of the index holding every campaign, as a deployment's memory index does
    # (BM25's statistics are the index's, so a question asked before the last import would differ)
    if (wanted := index.config.candidates) > DEPTH:
        raise ValueError(f"variant {variant.name!r} ranks {wanted} candidates a leg; gathered only {DEPTH}")
    for conv in conversations:
        lineage = head_lineage(service, campaigns[conv.name])
        started = time.perf_counter()
        for q in conv.questions:
            got = index.collect(campaigns[conv.name], q.query, lineage=lineage, depth=DEPTH)
            found.append(replace(got, kinds=TURNS))
            progress.advance(task)
        seconds["gather_s"] += time.perf_counter() - started
    return Imported(variant, index, service, campaigns, found, {k: round(v, 1) for k, v in seconds.items()})


def ranked_refs(
    imported: Imported, ranking: dict[str, Any], *, rows: Sequence[int] | None = None
) -> list[list[str | None]]:
    """Each question's top 10 refs under ``ranking`` (over the variant's index configuration)."""
    from story.recall_index import RecallConfig

    config = RecallConfig(**{**imported.variant.index, **ranking})
    picked = range(len(imported.found)) if rows is None else rows
    return [[h.ref for h in imported.index.rank(imported.found[i], limit=10, config=config)] for i in picked]


def product_check(imported: Imported, conversations: Sequence[Conversation], limit: int) -> dict[str, Any]:
    """The default configuration end to end (``StoryService.recall``) against ``rank(gather)`` on the
    first ``limit`` questions of each conversation: the same top 10 refs, and the latency."""
    same = total = 0
    latencies = []
    offset = 0
    for conv in conversations:
        cid = imported.campaigns[conv.name]
        for i, q in enumerate(conv.questions[:limit]):
            started = time.perf_counter()
            hits = imported.service.recall(cid, q.query, kinds=[RecallKind.TURN], limit=10)
            latencies.append(time.perf_counter() - started)
            ranked = imported.index.rank(imported.found[offset + i], limit=10)
            same += [h.ref for h in hits] == [h.ref for h in ranked]
            total += 1
        offset += len(conv.questions)
    ms = np.array(latencies) * 1000
    return {
        "questions": total,
        "same_top10": same,
        "recall_latency_ms": {
            "p50": round(float(np.percentile(ms, 50)), 1),
            "p95": round(float(np.percentile(ms, 95)), 1),
        }
        if total
        else None,
    }


def lorekeeper_exe() -> list[str]:
    exe = shutil.which("lorekeeper", path=str(Path(sys.executable).parent)) or shutil.which("lorekeeper")
    return [exe] if exe else [sys.executable, "-c", "from lorekeeper.cli import app; app()"]


def cli_check(
    conv: Conversation, default: list[list[str | None]], work: Path, *, timeout_s: int = 1800
) -> dict[str, Any]:
    """The commands a user runs, in a data folder of their own: ``lorekeeper campaign import-transcript
    FILE --name N --json --no-summaries``, then ``lorekeeper recall CID --queries FILE --json``; scored like the rest,
    and compared with the in-process default ranking of the same questions (``default``: an index of this
    conversation alone, as the commands build, recalling every kind, as the command does)."""
    import subprocess

    shutil.rmtree(work / f"cli-{conv.name}", ignore_errors=True)  # one campaign in it, also under a reused --work
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(work / f"cli-{conv.name}")}
    started = time.perf_counter()
    done = subprocess.run(
        [*lorekeeper_exe(), "campaign", "import-transcript", str(conv.path), "--name", conv.name, "--json"]
        + ["--no-summaries"],  # turns only, as the in-process import of the default variant holds
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )
    import_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"import-transcript {conv.path} exit {done.returncode}: {done.stderr[-2000:]}")
    imported = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    queries = work / f"cli-{conv.name}-queries.jsonl"
    queries.write_text("".join(json.dumps({"id": q.id, "query": q.query}) + "\n" for q in conv.questions), "utf-8")
    started = time.perf_counter()
    done = subprocess.run(
        [*lorekeeper_exe(), "recall", imported["campaign_id"], "--queries", str(queries), "--json", "--limit", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )
    recall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"recall exit {done.returncode}: {done.stderr[-2000:]}")
    by_id = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            by_id[row["id"]] = [h.get("ref") for h in row["hits"]]
    ranked = [by_id.get(q.id, []) for q in conv.questions]
    return {
        "conversation": conv.name,
        **score(conv.questions, ranked),
        "in_process_default": {
            k: v for k, v in score(conv.questions, default).items() if k in ("recall_at_5", "recall_at_10", "any_at_10")
        },
        "same_top10_as_in_process": sum(a == b for a, b in zip(ranked, default, strict=True)),
        "import": {k: imported.get(k) for k in ("turns", "sessions", "records", "seconds")},
        "import_command_s": round(import_s, 1),
        "recall_command_s": round(recall_s, 1),
    }


# -- fitting on some conversations, reporting on the others ----------------------------------------

FIT_GRID: dict[str, list[float]] = {
    "text_weight": [1.0, 2.0, 3.0, 4.0],
    "neighbour_share": [0.0, 0.1, 0.2],
    "rrf_k": [30, 60],
    "time_boost": [0.0, 0.5],
    "speaker_boost": [0.0, 0.3],
}


def fit_leave_one_out(imported: Imported, conversations: Sequence[Conversation], progress: Any) -> dict[str, Any]:
    """For each conversation: the grid point best on recall@10 of the others, scored on it.

    Returns the held-out rankings' scores (all folds together) and each fold's choice.
    """
    spans: dict[str, range] = {}
    start = 0
    for conv in conversations:
        spans[conv.name] = range(start, start + len(conv.questions))
        start += len(conv.questions)
    questions = [q for c in conversations for q in c.questions]
    keys = list(FIT_GRID)
    grid = [dict(zip(keys, values, strict=True)) for values in product(*FIT_GRID.values())]
    task = progress.add_task("fit (leave one conversation out)", total=len(grid))
    per_point: list[list[list[str | None]]] = []
    for point in grid:
        per_point.append(ranked_refs(imported, {**BASE_RANKING, **point}))
        progress.advance(task)
    r10 = np.array([[recall_at(r, q.evidence, 10) for r, q in zip(rows, questions, strict=True)] for rows in per_point])
    held_out: list[list[str | None]] = [[] for _ in questions]
    folds = {}
    for conv in conversations:
        train = [i for i in range(len(questions)) if i not in spans[conv.name]]
        if not train:
            continue
        best = int(np.argmax(r10[:, train].mean(axis=1)))
        folds[conv.name] = {"chosen": grid[best], "train_recall_at_10": round(float(r10[best, train].mean()), 3)}
        for i in spans[conv.name]:
            held_out[i] = per_point[best][i]
    overall_best = int(np.argmax(r10.mean(axis=1)))
    return {
        "grid": FIT_GRID,
        "folds": folds,
        "held_out": score(questions, held_out),
        # for information only: the best point on all five (its own training data)
        "in_sample_best": {"point": grid[overall_best], "recall_at_10": round(float(r10[overall_best].mean()), 3)},
    }


# -- the run --------------------------------------------------------------------------------------


def evaluate(
    label: str,
    conversations: Sequence[Conversation],
    variants: Sequence[IndexVariant],
    stack: Stack,
    embedder: CachedEmbedder,
    progress: Any,
    *,
    fit: bool,
    check_questions: int,
    cli: Sequence[str] = (),
    work: Path | None = None,
    fitted: dict[str, Any] | None = None,
) -> dict[str, Any]:
    questions = [q for c in conversations for q in c.questions]
    started = time.perf_counter()
    systems: dict[str, Any] = {}
    for name, ranked in run_baselines(conversations, embedder).items():
        systems[name] = score(questions, ranked)
    timings: dict[str, Any] = {"baselines_s": round(time.perf_counter() - started, 1)}
    imported: dict[str, Imported] = {}
    for variant in variants:
        imported[variant.name] = import_and_gather(stack, variant, conversations, progress)
        timings[variant.name] = imported[variant.name].seconds
    for row in lever_rows([v.name for v in variants], fitted):
        systems[f"lorekeeper {row.name}"] = {
            **score(questions, ranked_refs(imported[row.variant], row.ranking)),
            "variant": row.variant,
            "ranking": row.ranking,
        }
    result: dict[str, Any] = {
        "label": label,
        "conversations": [c.name for c in conversations],
        "turns": sum(len(c.turns) for c in conversations),
        "questions": len(questions),
        "questions_by_category": {lab: sum(q.category == c for q in questions) for c, lab in CATEGORIES.items()},
        "systems": systems,
        "timings": timings,
    }
    families = sorted({q.family for q in questions if q.family})
    if families and DEFAULT in imported:
        by_family: dict[str, Any] = {}
        default = ranked_refs(imported[DEFAULT], {})
        for family in families:
            rows = [i for i, q in enumerate(questions) if q.family == family]
            by_family[family] = score([questions[i] for i in rows], [default[i] for i in rows])
            del by_family[family]["by_category"]
        result["default_by_family"] = by_family
    if DEFAULT in imported:
        result["product_check"] = product_check(imported[DEFAULT], conversations, check_questions)
        for conv in conversations:
            if conv.name in cli and work is not None:
                # like with like: the commands index this conversation alone in a data folder of their own,
                # so it is compared with an in-process index of it alone (BM25 statistics are the index's)
                shutil.rmtree(work / f"alone-{conv.name}", ignore_errors=True)  # a fresh folder under a reused --work
                alone = Stack(work / f"alone-{conv.name}", embedder)
                try:
                    own = import_and_gather(alone, imported[DEFAULT].variant, [conv], progress)
                    # every kind, as the command recalls (a session summary's hit has no ref)
                    span = [[h.ref for h in own.index.rank(replace(f, kinds=None), limit=10)] for f in own.found]
                finally:
                    alone.close()
                result.setdefault("cli_check", []).append(cli_check(conv, span, work))
        if fit and len(conversations) > 1:
            result["fit"] = fit_leave_one_out(imported[DEFAULT], conversations, progress)
            systems["lorekeeper default index, ranking fitted on the other four (held out)"] = result["fit"]["held_out"]
    return result


def table(systems: dict[str, dict[str, Any]]) -> str:
    """Overall recall@5, recall@10 and any@10, then recall@10 per category."""
    width = max(len(n) for n in systems) + 2
    head = f"{'system':<{width}}{'R@5':>6}{'R@10':>6}{'any10':>6}" + "".join(
        f"{c[:9]:>10}" for c in CATEGORIES.values()
    )
    lines = [head]
    for name, r in systems.items():
        cells = [f"{r[k]:>6.3f}" for k in ("recall_at_5", "recall_at_10", "any_at_10")]
        for label in CATEGORIES.values():
            value = r["by_category"][label]["recall_at_10"]
            cells.append(f"{'-':>10}" if value is None else f"{value:>10.3f}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in (report.get("locomo"), report.get("synthetic")) if r]
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 4.2 * len(runs) + 1.5), squeeze=False)
    groups = ["overall", *CATEGORIES.values()]
    for ax, run in zip(axes[:, 0], runs, strict=True):
        names = [n for n in run["systems"] if not n.startswith("lorekeeper   ")]
        shown = [n for n in names if n.startswith("plain") or n in _plotted(run["systems"])]
        width = 0.85 / max(1, len(shown))
        for i, name in enumerate(shown):
            r = run["systems"][name]
            values = [r["recall_at_10"] if g == "overall" else r["by_category"][g]["recall_at_10"] for g in groups]
            xs = [j + (i - (len(shown) - 1) / 2) * width for j in range(len(groups))]
            pts = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
            ax.bar(
                [x for x, _ in pts],
                [v for _, v in pts],
                width,
                label=name.replace("lorekeeper ", "LK "),
                color=f"C{i % 10}",
            )
        ax.axhline(GOAL["recall_at_10"], color="black", linestyle="--", linewidth=0.8)
        ax.axhline(GOAL["multi-hop"], color="grey", linestyle=":", linewidth=0.8)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("recall@10")
        ax.set_title(
            f"{run['label']}: {run['questions']} questions over {run['turns']} turns "
            f"(dashed: goal overall 0.85; dotted: 0.70 multi-hop / open-domain)",
            fontsize=9,
        )
        ax.legend(fontsize=6.5, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _fitted(report: dict[str, Any]) -> dict[str, Any] | None:
    """The ranking fitted on all of LoCoMo, to apply to the synthetic conversations (None before)."""
    fit = report.get("locomo", {}).get("fit")
    return {**BASE_RANKING, **fit["in_sample_best"]["point"]} if fit else None


def _plotted(systems: dict[str, Any]) -> list[str]:
    keep = [
        "lorekeeper index: text only",
        "lorekeeper index: + time + speakers",
        "lorekeeper index: + window 2",
        "lorekeeper DEFAULT CONFIGURATION (RecallConfig())",
        "lorekeeper default index, ranking fitted on the other four (held out)",
        "lorekeeper default + LoCoMo observations (LLM stand-in), expand share 0.05",
    ]
    return [k for k in keep if k in systems]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", default=",".join(CONVERSATIONS), help="LoCoMo files to use, e.g. 26,30")
    parser.add_argument("--limit-questions", type=int, help="only the first N questions of each conversation")
    parser.add_argument("--synthetic", type=int, default=8, help="synthetic conversations (0: none)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--quick", action="store_true", help=f"only the index variants {', '.join(QUICK_VARIANTS)}")
    parser.add_argument("--variants", help="only the index variants whose names hold one of these (comma-separated)")
    parser.add_argument("--no-fit", action="store_true", help="skip the leave-one-conversation-out fit")
    parser.add_argument("--check-questions", type=int, default=40, help="per conversation, run end to end too")
    parser.add_argument(
        "--cli", default="30", help="LoCoMo files also run through the lorekeeper commands ('' for none)"
    )
    parser.add_argument("--work", type=Path, help="keep the data folder here (a new folder per run by default)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--model-summaries",
        action="store_true",
        help="also score summaries and memories a model forms (narrator.formation.LLMFormer on --engine), LoCoMo only",
    )
    parser.add_argument("--formed-scenes", type=int, help="form only each conversation's first N scenes (both formers)")
    add_engine_arguments(parser)
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import structlog
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    started = time.perf_counter()
    names = [n.strip() for n in args.conversations.split(",") if n.strip()]
    missing = [n for n in names if not (CORPUS / f"{n}.json").is_file()]
    if missing:
        raise SystemExit(f"no LoCoMo conversation {', '.join(missing)} in {CORPUS}")
    work = args.work or Path(tempfile.mkdtemp(prefix="memory-recall-"))
    locomo = [load_locomo(CORPUS / f"{n}.json") for n in names]
    synthetic = load_synthetic(args.seed, args.synthetic, work / "synthetic") if args.synthetic else []
    if args.limit_questions:
        for conv in [*locomo, *synthetic]:
            conv.questions = conv.questions[: args.limit_questions]
    variants = [v for v in INDEX_VARIANTS if not args.quick or v.name in QUICK_VARIANTS]
    if args.model_summaries:
        variants.append(MODEL_VARIANT)
    if args.variants:
        wanted = [w.strip() for w in args.variants.split(",") if w.strip()]
        variants = [v for v in variants if any(w in v.name for w in wanted)]
        if not variants:
            raise SystemExit(f"no index variant matches {args.variants!r}: {[v.name for v in INDEX_VARIANTS]}")
    # with --work, the vectors of an earlier run are reused (same model, same texts)
    embedder = CachedEmbedder(SentenceTransformerEmbedder(EmbeddingConfig()), work / "embeddings.npz")
    report: dict[str, Any] = {"benchmark": "memory_recall", "goal": GOAL, "readme_baselines": README_BASELINES}
    former = None
    if args.model_summaries:
        from narrator.formation import LLMFormer

        engine = engine_from(args, parser)
        budget = int(getattr(engine, "structured_max_tokens", 1024))
        former = LLMFormer(engine, max_tokens=budget, timeout_s=1800, owns_engine=True)
        report["former"] = {"engine": args.engine, "model": engine.model, "max_tokens": budget}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    # each corpus in stores of its own: BM25's statistics are those of the index the campaigns share
    runs = [("locomo", "LoCoMo dev (5 conversations)" if len(locomo) == 5 else f"LoCoMo {', '.join(names)}", locomo)]
    if synthetic:
        runs.append(("synthetic", f"synthetic (seed {args.seed}, {len(synthetic)} conversations)", synthetic))
    try:
        with Progress(*columns) as progress:
            for key, label, conversations in runs:
                shutil.rmtree(work / f"data-{key}", ignore_errors=True)  # under a reused --work: imported afresh
                stack = Stack(work / f"data-{key}", embedder)
                stack.former, stack.formed_scenes = former, args.formed_scenes
                try:
                    report[key] = evaluate(
                        label,
                        conversations,
                        [v for v in variants if key == "locomo" or v.memories in ("none", "extractive")],
                        stack,
                        embedder,
                        progress,
                        fit=key == "locomo" and not args.no_fit,
                        check_questions=args.check_questions,
                        cli=[n.strip() for n in args.cli.split(",") if n.strip()] if key == "locomo" else [],
                        work=work,
                        fitted=_fitted(report),
                    )
                finally:
                    report.setdefault("formations", {})[key] = stack.formations
                    stack.close()
                progress.console.print(table(report[key]["systems"]))
    finally:
        embedder.save()
        if former is not None:
            former.close()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    report["embedding"] = {
        "texts_embedded": embedder.embedded,
        "seconds": round(embedder.seconds, 1),
        "vectors_reused_from_an_earlier_run": embedder.loaded,  # --work of an earlier run: timings exclude them
    }
    report["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    report["options"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["index_variants"] = [asdict(v) for v in variants]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_recall.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, args.out / "memory_recall.png")
    print(json.dumps({"wall_s": report["wall_s"], "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
