"""How the memory index is built and how a recall ranks (:class:`RecallConfig`): the levers
``benchmarks/memory_recall.py`` measures, with the numbers that chose each default."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

UNMATCHED_DEPTH = 10  # the text leg's best records RecallConfig.unmatched_text_weight reads


class RecallConfig(BaseModel):
    """How records are indexed and how a recall ranks them (the levers ``benchmarks/memory_recall.py``
    measures; the defaults are the ones that held up there, on conversations not fitted to).

    Indexing (changing these needs a rebuild of the index):

    Attributes:
        time_in_text: index the record's ``story_time`` with its text.
        speakers_in_text: index who spoke with the text.
        text_layout: ``joined``: the full-text document is one text, ``(time) speakers: text``, with
            its window around it; ``fields``: speakers as the title (boosted x2 by the text index),
            the time as the heading (x0.5), the text in the body.
        window_before: a turn record's full-text document also holds the text of this many turns before
            it in its scene on its branch (those written with it, or indexed already): a reply is found
            by the words of the question it answers. Only turns before it: they are its ancestors
            (a branch is a straight line), while a later turn may be undone or left on another line of
            the story, and its words must not lead recall to a turn it never reached. A record with no
            such neighbour keeps the ``context`` its builder gave it.
        context_in_vector: embed the window (or ``context``) too; off, the vector is the record's own.

    Ranking:

    Attributes:
        vector_weight, text_weight: RRF weights of the two legs.
        rrf_k: the RRF constant.
        candidates: how many hits each leg brings to fusion.
        neighbour_share: a candidate turn gains this share of the fused score of each candidate turn
            next to it in the same scene (what is recalled together was told together).
        time_boost: when the query names a calendar time (:func:`story.recall_cues.time_range`), the
            score of a record whose ``story_time`` falls in it (or up to ``time_after_days`` after)
            is multiplied by ``1 + time_boost``.
        speaker_boost: when the query names some (not all) of the candidates' speakers, the score of
            a record they spoke is multiplied by ``1 + speaker_boost``.
        expand_share: a candidate memory, summary or fact lends this share of its fused score to the
            candidate turns of its scene (recall through what was remembered of a scene).
        recency_weight: adds ``weight * depth / head depth`` to the fused score (0 = off).
        salience_weight: adds ``weight * salience`` to the fused score (0 = off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    time_in_text: bool = True
    speakers_in_text: bool = True
    text_layout: Literal["joined", "fields"] = "joined"
    window_before: int = Field(default=2, ge=0, le=8)
    context_in_vector: bool = False

    vector_weight: float = Field(default=1.0, ge=0)
    text_weight: float = Field(default=3.0, ge=0)
    rrf_k: int = Field(default=60, ge=1)
    candidates: int = Field(default=100, ge=1, le=1000)
    neighbour_share: float = Field(default=0.1, ge=0, le=1)
    time_boost: float = Field(default=0.5, ge=0)
    time_after_days: int = Field(default=14, ge=0)
    speaker_boost: float = Field(default=0.0, ge=0)
    expand_share: float = Field(default=0.05, ge=0)
    recency_weight: float = Field(default=0.0, ge=0)
    salience_weight: float = Field(default=0.0, ge=0)
    inference_text_weight: float | None = Field(
        default=0.5,
        ge=0,
        description="the text leg's RRF weight for a query that asks for an inference ('would', 'might', "
        "'likely', 'could': story.recall_cues.inferential), whose answer is told in other words than the "
        "question's; None: text_weight. LoCoMo dev open-domain recall@10 0.331 -> 0.354 at 0.5, synthetic "
        "0.188 -> 0.250 (with inference_text_without_names: 0.377 and 0.469)",
    )
    inference_text_without_names: bool = Field(
        default=True,
        description="for such a query, the text leg searches it without the speakers' names (a second BM25 "
        "search, RecallIndex.collect), which otherwise match every turn of theirs and windows that hold them",
    )
    feedback_depth: int = Field(
        default=5,
        ge=0,
        le=50,
        description="pseudo-relevance feedback: the first round's best this many records (the BM25 leg's, or the "
        "round ranked under this config without feedback: feedback_from) lead a second round of search; 0 = off",
    )
    feedback_vector_weight: float = Field(
        default=0.0,
        ge=0,
        description="RRF weight of the second round's vector list, searched with the query vector blended with "
        "the mean of the feedback records' vectors (Rocchio); 0 = no second vector search. Measured worse on "
        "both sets (depth 3-10, share 0.3-0.7, weight 0.5-1: LoCoMo dev recall@10 0.796 -> 0.760-0.786, "
        "synthetic 0.687 -> 0.583-0.641), so off",
    )
    feedback_vector_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="the feedback records' share of the blended query vector (1 - share is the query's)",
    )
    feedback_text_weight: float = Field(
        default=1.0,
        ge=0,
        description="RRF weight of the second round's BM25 list, searched with the query plus the feedback "
        "records' distinctive words (RM3-like, story.recall_cues.feedback_terms); not for a query asking for "
        "an inference (whose text leg is weighed down already); 0 = no second BM25 search. Alone, same run: "
        "LoCoMo dev recall@10 0.796 -> 0.806, synthetic 0.687 -> 0.693",
    )
    feedback_terms: int = Field(
        default=10, ge=1, le=50, description="how many distinctive words the feedback adds to the BM25 query"
    )
    feedback_from: Literal["fused", "text"] = Field(
        default="text",
        description="which first round leads the BM25 feedback: ``text``, the BM25 leg's own best records against its "
        "own candidates, so the second BM25 search runs on the leg's thread while the query is embedded and searched "
        "(where the leg came back short, a small campaign's or a rare word's, the fused round leads instead); "
        "``fused``, the first round ranked under this config without feedback, after the vector search. Same run, "
        "LoCoMo dev / synthetic recall@10: fused, depth 10 0.808 / 0.776; fused, 5: 0.810 / 0.770; text, 10: "
        "0.812 / 0.764; text, 5: 0.813 / 0.776; text, 3: 0.806 / 0.770; text, 20: 0.806 / 0.770",
    )
    unmatched_text_weight: float | None = Field(
        default=0.25,
        ge=0,
        description="the RRF weight of the BM25 legs (text and its feedback) when none of the text leg's "
        f"{UNMATCHED_DEPTH} best records holds a content word of the query beyond the speakers' names (stemmed, "
        "function words and small talk left out): the leg matched only names and small words ('What pets does "
        "Ava have?' against 'I adopted a beagle'), so its order says nothing; None = text_weight always. Same "
        "run: LoCoMo dev recall@10 0.813 -> 0.812, synthetic (seed 13) 0.776 -> 0.836 (0.5: 0.805; 0.1: 0.833); "
        "synthetic seeds not looked at while choosing it, 99: 0.756 -> 0.803, 7: 0.747 -> 0.803",
    )
    listing_text_weight: float | None = Field(
        default=1.0,
        ge=0,
        description="the text leg's RRF weight (at most text_weight) for a query asking for the members of a kind "
        "('What pets does Ava have?', 'Which instruments does Rosa play?': story.recall_cues.listing), whose "
        "words match lines that name the kind rather than those that name its members; None: text_weight",
    )
    listing_vector_without_names_weight: float | None = Field(
        default=1.0,
        ge=0,
        description="for such a query, the names-free vector search's RRF weight (at least "
        "vector_without_names_weight): the embedding relates a kind to its members. With listing_text_weight "
        "1, same run: LoCoMo dev recall@10 of these questions (54 of 997) 0.540 -> 0.564, generated (16 "
        "of 174, seed 13) 0.344 -> 0.438; None: vector_without_names_weight",
    )
    vector_without_names_weight: float = Field(
        default=0.5,
        ge=0,
        description="for a query naming some (not all) of the candidates' speakers, RRF weight of a second vector "
        "search of it without their names (one more query embedding, RecallIndex.collect): a short question's "
        "vector is pulled to every line of a speaker it names, whose name heads the embedded text. With the "
        "text feedback, same run (candidates gathered once): LoCoMo dev recall@10 0.796 -> 0.809, synthetic "
        "0.687 -> 0.776; 0 = off",
    )
