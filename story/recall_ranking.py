"""What the legs of one recall found (:class:`Candidates`), the records read back from the indexes'
payloads, and :func:`rank`: the fusion and re-scoring :meth:`story.recall_index.RecallIndex.rank` runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.fusion import rrf
from schemas.recall import RecallHit, RecallKind, RecallRecord
from stores.text.base import TextHit
from stores.vector.base import VectorHit
from story.lineage import Lineage
from story.recall_config import UNMATCHED_DEPTH, RecallConfig
from story.recall_cues import (
    content_stems,
    inferential,
    listing,
    named_speakers,
    story_date,
    time_range,
    without_names,
)

VECTOR_LEGS = frozenset({"vector", "vector_without_names", "feedback_vector"})  # their raw scores are returned


@dataclass(slots=True)
class Candidates:
    """What the legs of one recall found, before ranking: each leg's ids in rank order with their raw
    scores, and the records by id. :meth:`RecallIndex.rank` ranks them under any configuration, so a
    benchmark searches once and compares rankings."""

    query: str
    lineage: Lineage
    legs: dict[str, list[tuple[str, float]]]
    records: dict[str, RecallRecord]
    kinds: frozenset[RecallKind] | None = None
    query_vector: np.ndarray | None = None  # the query's, where the vector leg ran (a second round may blend it)
    also_vectors: dict[str, np.ndarray] = field(default_factory=dict)  # of gather's ``also_embed`` texts
    # their vector hits, searched in the query's batch under the legs' filters and depth; not decoded
    # into ``records`` (rank reads every record's speakers), so a leg that uses them decodes them
    also_hits: dict[str, list[VectorHit]] = field(default_factory=dict)


def rank(found: Candidates, config: RecallConfig, *, limit: int = 10) -> list[RecallHit]:
    """Fuse and re-score what :meth:`RecallIndex.gather` found under ``config``, best first.

    Steps, each off at 0: RRF of the legs (each cut to ``candidates``; for a query asking for the
    members of a kind, the text leg weighed at most ``listing_text_weight`` and the names-free vector
    leg at least ``listing_vector_without_names_weight``; for a query asking for an
    inference, the text leg weighed ``inference_text_weight`` and searched without the speakers'
    names when :meth:`collect` did so; the legs :meth:`collect` adds, ``feedback_text``,
    ``feedback_vector`` and ``vector_without_names``, weighed by their levers); the time and speaker
    boosts; a share of each neighbouring turn's score; a share of each memory's, summary's or
    fact's score to its scene's turns; recency and salience. Records off the lineage (the few
    a keyword cannot judge) and kinds not asked for are dropped.
    """
    cfg = config
    vectors, texts, feedback = cfg.vector_weight > 0, cfg.text_weight > 0, cfg.feedback_depth > 0
    weights = {
        "vector": cfg.vector_weight,
        "text": cfg.text_weight,
        # the legs a leg's lever adds are off with that leg
        "feedback_vector": cfg.feedback_vector_weight if feedback and vectors else 0.0,
        "feedback_text": cfg.feedback_text_weight if feedback and texts else 0.0,
        "vector_without_names": cfg.vector_without_names_weight if vectors else 0.0,
    }
    given = dict(found.legs)
    if listing(found.query):
        if cfg.listing_text_weight is not None:
            weights["text"] = min(weights["text"], cfg.listing_text_weight)
        if cfg.listing_vector_without_names_weight is not None and vectors:
            weights["vector_without_names"] = max(
                weights["vector_without_names"], cfg.listing_vector_without_names_weight
            )
    if inferential(found.query):
        if cfg.inference_text_weight is not None:
            weights["text"] = cfg.inference_text_weight
        if cfg.inference_text_without_names and "text_without_names" in given:
            given["text"] = given["text_without_names"]
    if cfg.unmatched_text_weight is not None and given.get("text"):
        speakers = {s for r in found.records.values() for s in r.speakers}
        asked = content_stems(without_names(found.query, named_speakers(found.query, speakers)))
        best = given["text"][:UNMATCHED_DEPTH]
        if asked and not any(asked & content_stems(found.records[i].text) for i, _ in best):
            weights["text"] = min(weights["text"], cfg.unmatched_text_weight)
            weights["feedback_text"] = min(weights["feedback_text"], cfg.unmatched_text_weight)
    legs = {leg: hits[: cfg.candidates] for leg, hits in given.items() if weights.get(leg, 0) > 0}
    fused = rrf(legs, weights, k=cfg.rrf_k)
    lineage = found.lineage
    records = {}
    for doc in fused:
        record = found.records[doc.id]
        if lineage.contains(record.branch_id, record.depth, record.seq):
            records[doc.id] = record
    scores = {doc.id: doc.score for doc in fused if doc.id in records}
    if cfg.time_boost > 0 and (when := time_range(found.query)) is not None:
        for rid, record in records.items():
            day = story_date(record.story_time)
            if day is not None and when.holds(day, after_days=cfg.time_after_days):
                scores[rid] *= 1 + cfg.time_boost
    if cfg.speaker_boost > 0:
        speakers = {s for r in records.values() for s in r.speakers}
        named = named_speakers(found.query, speakers)
        if named and named != speakers:
            for rid, record in records.items():
                if named.intersection(record.speakers):
                    scores[rid] *= 1 + cfg.speaker_boost
    if cfg.neighbour_share > 0 or cfg.expand_share > 0:
        scores = _spread(records, scores, cfg.neighbour_share, cfg.expand_share)
    head_depth = max(lineage.depth, 1)
    final: list[tuple[float, str]] = []
    for rid, record in records.items():
        if found.kinds is not None and record.kind not in found.kinds:
            continue
        score = scores[rid]
        score += cfg.recency_weight * record.depth / head_depth
        score += cfg.salience_weight * record.salience
        final.append((-score, rid))
    final.sort()
    by_id = {doc.id: doc for doc in fused}
    return [_hit(records[rid], -neg, by_id[rid].scores, by_id[rid].ranks) for neg, rid in final[:limit]]


def decode_hits(records: dict[str, RecallRecord], hits: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Add the records of ``hits`` (id, payload holding ``record``) to ``records``: each decoded once,
    whichever leg found it first."""
    for rid, payload in hits:
        if rid not in records:
            records[rid] = stored_record(payload["record"])


def stored_record(stored: str | Mapping[str, Any]) -> RecallRecord:
    """The record a payload or a text document holds: a JSON string (vector payloads), or an object (text
    documents, and vector payloads written before records were stored as strings)."""
    if isinstance(stored, str):
        return RecallRecord.model_validate_json(stored)
    return RecallRecord.model_validate(stored)


def _spread(
    records: dict[str, RecallRecord], scores: dict[str, float], neighbour_share: float, expand_share: float
) -> dict[str, float]:
    """Scores after each candidate turn takes ``neighbour_share`` of the scores of the candidate turns
    next to it (same branch and scene, depth +-1) and ``expand_share`` of the scores of the candidate
    memories, summaries and facts of its scene. Shares are taken from the scores before spreading."""
    turns: dict[tuple[str, str | None, int], str] = {}
    by_scene: dict[str, list[str]] = {}  # every candidate is on the lineage: a scene's turns there, any branch
    for rid, record in records.items():
        if record.kind is RecallKind.TURN:
            turns[(record.branch_id, record.scene_id, record.depth)] = rid
            if record.scene_id is not None:
                by_scene.setdefault(record.scene_id, []).append(rid)
    out = dict(scores)
    if neighbour_share > 0:
        for (branch, scene, depth), rid in turns.items():
            if scene is None:
                continue
            for other in (turns.get((branch, scene, depth - 1)), turns.get((branch, scene, depth + 1))):
                if other is not None:
                    out[rid] += neighbour_share * scores[other]
    if expand_share > 0:
        for rid, record in records.items():
            if record.kind is RecallKind.TURN or record.scene_id is None:
                continue
            for turn_id in by_scene.get(record.scene_id, ()):
                out[turn_id] += expand_share * scores[rid]
    return out


def bm25_order(hits: Sequence[TextHit]) -> list[tuple[str, float]]:
    """A BM25 leg's ids and scores in rank order, ties by id: the engine breaks ties by where a document
    sits in its segments, which other campaigns' writes move."""
    return sorted(((h.id, h.score) for h in hits), key=lambda pair: (-pair[1], pair[0]))


def _hit(record: RecallRecord, score: float, scores: dict[str, float], ranks: dict[str, int]) -> RecallHit:
    """A ranked record as a hit. Of the legs' raw scores only the vector legs' are given (the cosine of
    the query and the record, which nothing else in the index moves): a BM25 score is computed with the
    statistics of the whole memory index, which every campaign shares, so it would tell one campaign how
    often the others use a word. Its rank is given instead; the fused ``score`` comes from ranks."""
    return RecallHit(
        id=record.id,
        kind=record.kind,
        turn_id=record.anchor_turn_id,
        ref=record.ref,
        text=record.text,
        scene_id=record.scene_id,
        speakers=record.speakers,
        story_time=record.story_time,
        branch_id=record.branch_id,
        depth=record.depth,
        score=score,
        scores={leg: value for leg, value in scores.items() if leg in VECTOR_LEGS},
        ranks=ranks,
    )


def text_led(config: RecallConfig, text_hits: int, depth: int) -> bool:
    """Whether the BM25 leg leads the text feedback itself: ``feedback_from="text"`` and a leg that came back
    full (its candidates are then a background that tells a distinctive word; a short leg, a small
    campaign's or a rare word's, is little more than its own best records, so the fused round leads)."""
    return config.feedback_from == "text" and config.feedback_depth > 0 and text_hits >= min(depth, config.candidates)


def names_among(
    named: frozenset[str],
    candidates: int,
    legs: Mapping[str, list[tuple[str, float]]],
    records: Mapping[str, RecallRecord],
) -> bool:
    """Whether the speakers of the legs' candidates (each leg's first ``candidates``) include all of
    ``named``: then :meth:`RecallIndex.collect`'s names-free leg strips those names (unless the vector
    leg brings another speaker the query names), and its search is worth running early."""
    speakers = {s for hits in legs.values() for i, _ in hits[:candidates] for s in records[i].speakers}
    return named <= speakers
