"""The recall levers of story.recall_index (windows, layout, neighbour share, time and speaker boosts,
expansion through summaries) and the query cues they read (story.recall_cues); no model is loaded:
vectors are given, and ranking runs on candidates built here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from models.embedding import SentenceTransformerEmbedder
from schemas.recall import RecallKind, RecallRecord
from schemas.settings import Settings
from stores.factory import open_memory_text_index, open_vector_index
from story.lineage import Lineage, Segment
from story.recall_cues import (
    feedback_terms,
    inferential,
    listing,
    named_speakers,
    story_date,
    time_range,
    without_names,
)
from story.recall_documents import vector_payload
from story.recall_index import Candidates, RecallConfig, RecallIndex

pytestmark = pytest.mark.unit

# -- cues -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did Gina find on 1 February, 2023?", date(2023, 2, 1), date(2023, 2, 2)),
        ("What painting did Melanie show on October 13, 2023?", date(2023, 10, 13), date(2023, 10, 14)),
        ("what happened on the 3rd of May 2022", date(2022, 5, 3), date(2022, 5, 4)),
        ("logs from 2023-05-08", date(2023, 5, 8), date(2023, 5, 9)),
        ("What did Maria donate in December 2023?", date(2023, 12, 1), date(2024, 1, 1)),
        ("How many times did she go to the beach in 2023?", date(2023, 1, 1), date(2024, 1, 1)),
        ("31 February 2023", date(2023, 2, 1), date(2023, 3, 1)),  # no such day: the month
    ],
)
def test_a_query_names_a_calendar_time(query: str, start: date, end: date) -> None:
    found = time_range(query)
    assert found is not None and (found.start, found.end) == (start, end)
    assert found.text in query


@pytest.mark.parametrize(
    "query", ["When did Caroline go to the support group?", "the third day of Frostfall", "May I?", "in 20 minutes"]
)
def test_no_calendar_time_where_none_is_named(query: str) -> None:
    assert time_range(query) is None


def test_a_story_time_is_a_day_or_nothing() -> None:
    assert story_date("1:56 pm on 8 May, 2023") == date(2023, 5, 8)
    assert story_date("May 8, 2023, evening") == date(2023, 5, 8)
    assert story_date("May 2023") is None  # a month is not a day
    assert story_date("the third day of Frostfall") is None
    assert story_date(None) is None
    found = time_range("in May 2023")
    assert found is not None and found.holds(date(2023, 6, 10), after_days=14)
    assert not found.holds(date(2023, 6, 20), after_days=14)


def test_speakers_named_in_a_query() -> None:
    speakers = {"Caroline", "Melanie", "Old Tom Bombadil", "GM"}
    assert named_speakers("What did Caroline research?", speakers) == {"Caroline"}
    assert named_speakers("what did melanie and caroline paint?", speakers) == {"Caroline", "Melanie"}
    assert named_speakers("Where did Old go?", speakers) == {"Old Tom Bombadil"}  # a first name of 3 letters
    assert named_speakers("What did Carolines say?", speakers) == set()  # whole words only


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("All right, what did Matt find in the crypt?", {"MATT"}),  # "All" opens the sentence
        ('Okay. "All right," said Matt.', {"MATT"}),
        ("did we all agree on the plan?", set()),  # lower case
        ("What did ALL shout at the dragon?", {"ALL"}),  # capitalised inside a sentence
        ("Will the bridge hold?", set()),
        ("What did Will say about the bridge?", {"Will Turner"}),
    ],
)
def test_a_name_that_is_a_function_word_names_a_speaker_only_inside_a_sentence(query: str, named: set[str]) -> None:
    speakers = {"ALL", "MATT", "Will Turner"}
    assert named_speakers(query, speakers) == named


# -- indexing -------------------------------------------------------------------------------------


def _turn(
    depth: int, text: str, *, speaker: str = "Ava", scene: str = "s1", branch: str = "b", **kw: object
) -> RecallRecord:
    return RecallRecord(
        id=f"t{branch}{depth}",
        kind=RecallKind.TURN,
        campaign_id="c",
        anchor_turn_id=f"t{branch}{depth}",
        branch_id=branch,
        depth=depth,
        scene_id=scene,
        speakers=[speaker],
        text=text,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def index(tmp_path: Path) -> Iterator[RecallIndex]:
    settings = Settings(data_dir=tmp_path)
    built = RecallIndex(open_memory_text_index(settings), open_vector_index(settings), SentenceTransformerEmbedder())
    yield built
    built.close()


def test_windows_join_the_neighbours_of_a_scene_in_story_order(index: RecallIndex) -> None:
    records = [
        _turn(1, "What are you reading?", speaker="Ben"),
        _turn(2, "'Low Tide', couldn't put it down."),
        _turn(3, "Nice!", speaker="Ben"),
        _turn(4, "Bye!"),
        _turn(5, "A new scene begins.", scene="s2"),
        _turn(3, "Elsewhere on another branch.", branch="x"),
    ]
    windows = index.windows(records)  # default: the two turns before (never a later one)
    assert windows["tb2"] == "Ben: What are you reading?"
    assert windows["tb4"] == "Ava: 'Low Tide', couldn't put it down.\nBen: Nice!"
    assert "tb1" not in windows  # nothing before it
    assert "tb5" not in windows and "tx3" not in windows  # nothing of its scene and branch in the batch
    index.config = RecallConfig(window_before=0)
    assert index.windows(records) == {}


def _write(index: RecallIndex, records: list[RecallRecord]) -> None:
    rng = np.random.default_rng(0)
    index.write(records, vectors=rng.normal(size=(len(records), index.embedder.dim)).astype(np.float32))


def test_a_vector_payload_holds_the_record_as_json_and_an_older_object_still_reads(index: RecallIndex) -> None:
    """Records go to the vector payload as one JSON string (cheaper for qdrant-edge to convert both ways);
    a payload written before, with the record as an object, is still read."""
    from stores.vector.base import VectorPoint

    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    new, old = _turn(1, "The lantern went out in the crypt."), _turn(2, "We lit the lantern again.")
    _write(index, [new])
    stored = index.vectors.get(index.collection, [new.id])[0].payload["record"]
    assert isinstance(stored, str)
    assert RecallRecord.model_validate_json(stored).model_dump(exclude={"context"}) == new.model_dump(
        exclude={"context"}
    )
    payload = {**vector_payload(old), "record": old.model_dump(mode="json", exclude={"context"})}  # the older form
    vector = np.ones(index.embedder.dim, dtype=np.float32) / np.sqrt(index.embedder.dim)
    index.vectors.upsert(index.collection, [VectorPoint(id=old.id, vector=vector.tolist(), payload=payload)])
    found = index.gather("c", "lantern", lineage=lineage, kinds=[RecallKind.TURN], query_vector=vector)
    assert found.records[old.id].text == old.text and found.records[new.id].text == new.text
    assert [i for i, _ in found.legs["vector"]][0] == old.id


def test_a_payload_written_before_records_had_a_commit_sequence_still_reads(index: RecallIndex) -> None:
    """Records indexed before a scene end's records carried their commit sequence number (no ``seq`` in
    the payload) are read as records without one: visible wherever their place is on the lineage."""
    from stores.vector.base import VectorPoint

    old = _turn(3, "The harbour bell rang at noon.")
    index.ensure()
    stored = old.model_dump(mode="json", exclude={"context", "seq"})
    assert "seq" not in stored
    payload = {**vector_payload(old), "record": json.dumps(stored)}
    vector = np.ones(index.embedder.dim, dtype=np.float32) / np.sqrt(index.embedder.dim)
    index.vectors.upsert(index.collection, [VectorPoint(id=old.id, vector=vector.tolist(), payload=payload)])
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=3, seq_cutoff=0),))
    found = index.gather("c", "harbour bell", lineage=lineage, kinds=[RecallKind.TURN], query_vector=vector)
    assert found.records[old.id].seq is None
    assert [h.id for h in index.rank(found)] == [old.id]


def test_a_reply_is_found_by_the_words_of_the_question_before_it(index: RecallIndex) -> None:
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    records = [_turn(1, "What are you reading these days?", speaker="Ben"), _turn(2, "'Low Tide', by Mira Calder.")]
    filler = [_turn(d, f"small talk number {d}", scene="s9") for d in range(3, 8)]
    _write(index, [*records, *filler])
    found = index.gather("c", "reading", lineage=lineage, kinds=[RecallKind.TURN])
    assert "tb2" in [h.id for h in index.rank(found, config=RecallConfig(vector_weight=0))]
    # the hit shows the record, not its window
    assert next(h for h in index.rank(found) if h.id == "tb2").text == "'Low Tide', by Mira Calder."

    index.config = RecallConfig(window_before=0)
    _write(index, [*records, *filler])  # re-indexed without windows
    found = index.gather("c", "reading", lineage=lineage, kinds=[RecallKind.TURN])
    assert "tb2" not in [h.id for h in index.rank(found, config=RecallConfig(vector_weight=0))]


def test_turns_written_one_at_a_time_get_the_windows_of_a_bulk_write(index: RecallIndex) -> None:
    """During play each turn is indexed alone: its window comes from the turns already indexed, and a
    turn written again (a new take) is rewritten into the windows of the turns after it."""
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    turns = [
        _turn(1, "What are you reading these days?", speaker="Ben"),
        _turn(2, "'Low Tide', by Mira Calder."),
        _turn(3, "Sounds like a marvellous novel!", speaker="Ben"),
        _turn(4, "Not about that, in another scene.", scene="s2"),
    ]
    filler = [_turn(d, f"small talk number {d}", scene="s9") for d in range(5, 9)]
    _write(index, filler)
    for turn in turns:
        _write(index, [turn])

    def text_hits(query: str) -> list[str]:
        found = index.gather("c", query, lineage=lineage, kinds=[RecallKind.TURN])
        return [h.id for h in index.rank(found, config=RecallConfig(vector_weight=0))]

    assert set(text_hits("reading")) == {"tb1", "tb2", "tb3"}  # tb2 by its window, tb3 two turns on
    assert set(text_hits("marvellous novel")) == {"tb3"}  # a later turn is in no earlier turn's window
    assert "tb4" not in text_hits("Low Tide")  # a scene's end is a window's end
    _write(index, [_turn(1, "What are you studying these days?", speaker="Ben")])  # a new take of tb1
    assert set(text_hits("studying")) == {"tb1", "tb2", "tb3"}  # the windows after it rewritten
    assert text_hits("reading") == []


def test_a_turn_is_not_found_by_the_words_of_a_turn_after_it(index: RecallIndex) -> None:
    """A turn's full-text window holds only turns before it (its ancestors): from a head where the next
    turn is undone (or on another branch), that turn's words find nothing."""
    question, answer = _turn(1, "What are you reading these days?", speaker="Ben"), _turn(2, "'Low Tide', by Calder.")
    filler = [_turn(d, f"small talk number {d}", scene="s9") for d in range(3, 8)]
    _write(index, [question, answer, *filler])
    before_the_answer = Lineage(segments=(Segment(branch_id="b", max_depth=1),))
    found = index.gather("c", "Low Tide Calder", lineage=before_the_answer, kinds=[RecallKind.TURN])
    assert found.legs["text"] == [] and index.rank(found, config=RecallConfig(vector_weight=0)) == []


def test_the_vector_holds_the_record_and_the_context_only_when_asked(index: RecallIndex) -> None:
    record = _turn(2, "Low Tide.", story_time="8 May 2023", context="What are you reading?")
    assert index.indexed_text(record) == "(8 May 2023) Ava: Low Tide."
    assert index.indexed_text(record, "Ben: hi") == "(8 May 2023) Ava: Low Tide."
    index.config = RecallConfig(context_in_vector=True, time_in_text=False)
    assert index.indexed_text(record) == "What are you reading?\nAva: Low Tide."
    assert index.indexed_text(record, "Ben: hi") == "Ben: hi\nAva: Low Tide."


# -- ranking --------------------------------------------------------------------------------------


def _found(
    query: str, text_leg: list[RecallRecord], *, kinds: set[RecallKind] | None = None, max_depth: int = 100
) -> Candidates:
    return Candidates(
        query=query,
        lineage=Lineage(segments=(Segment(branch_id="b", max_depth=max_depth),)),
        legs={"text": [(r.id, 1.0) for r in text_leg]},
        records={r.id: r for r in text_leg},
        kinds=frozenset(kinds) if kinds else None,
    )


PLAIN = RecallConfig(neighbour_share=0, time_boost=0, speaker_boost=0, expand_share=0)


def _ids(index: RecallIndex, found: Candidates, **levers: object) -> list[str]:
    return [h.id for h in index.rank(found, config=PLAIN.model_copy(update=levers))]


def test_a_turn_gains_a_share_of_its_neighbours_scores(index: RecallIndex) -> None:
    far, a, b = _turn(20, "far"), _turn(5, "a"), _turn(6, "b")
    found = _found("q", [far, a, b])
    assert _ids(index, found) == ["tb20", "tb5", "tb6"]
    assert _ids(index, found, neighbour_share=0.5)[:2] == ["tb5", "tb6"]  # told together, recalled together
    other_scene = _found("q", [far, a, _turn(6, "b", scene="s2")])
    assert _ids(index, other_scene, neighbour_share=0.5)[0] == "tb20"  # a scene boundary is not a neighbour


def test_a_named_date_favours_what_was_told_then(index: RecallIndex) -> None:
    june = _turn(1, "june", story_time="20 June 2023")
    may = _turn(2, "may", story_time="1:56 pm on 8 May, 2023")
    found = _found("What did Ava do on May 7, 2023?", [june, may])
    assert _ids(index, found) == ["tb1", "tb2"]
    assert _ids(index, found, time_boost=0.5) == ["tb2", "tb1"]  # the day after is within time_after_days
    assert _ids(index, found, time_boost=0.5, time_after_days=0) == ["tb1", "tb2"]


def test_a_named_speaker_favours_what_they_said(index: RecallIndex) -> None:
    found = _found("What did Ben paint?", [_turn(1, "x", speaker="Ava"), _turn(2, "y", speaker="Ben")])
    assert _ids(index, found) == ["tb1", "tb2"]
    assert _ids(index, found, speaker_boost=0.3) == ["tb2", "tb1"]
    both = _found("What did Ben and Ava paint?", [_turn(1, "x", speaker="Ava"), _turn(2, "y", speaker="Ben")])
    assert _ids(index, both, speaker_boost=0.3) == ["tb1", "tb2"]  # naming everyone favours no one


def test_a_summary_leads_to_the_turns_of_its_scene_and_only_asked_kinds_come_back(index: RecallIndex) -> None:
    summary = RecallRecord(
        id="sum1",
        kind=RecallKind.SUMMARY,
        campaign_id="c",
        anchor_turn_id="tb9",
        branch_id="b",
        depth=9,
        scene_id="s2",
        text="They spoke of the caravan.",
    )
    found = _found("caravan", [summary, _turn(1, "x"), _turn(8, "y", scene="s2")], kinds={RecallKind.TURN})
    assert _ids(index, found) == ["tb1", "tb8"]  # the summary itself is not a turn
    assert _ids(index, found, expand_share=0.5) == ["tb8", "tb1"]
    assert _ids(index, _found("caravan", [summary, _turn(1, "x")]))[0] == "sum1"  # all kinds asked


def test_records_off_the_lineage_are_dropped(index: RecallIndex) -> None:
    found = _found("q", [_turn(50, "later"), _turn(1, "early")], max_depth=10)
    assert _ids(index, found) == ["tb1"]


# -- questions that ask for an inference ------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Would Ava enjoy a walking holiday in the mountains?", True),
        ("What might John's financial status be?", True),
        ("Is Maya likely to visit an art museum?", True),
        ("What did Ava say about the mountains?", False),
        ("Where did Ben go hiking?", False),
    ],
)
def test_a_query_asks_for_an_inference(query: str, expected: bool) -> None:
    assert inferential(query) is expected


def test_a_query_without_the_speakers_names() -> None:
    query = "Would Ava Stone like Ben's idea? ava knows"
    assert without_names(query, {"Ava Stone", "Ben"}) == "Would like idea? knows"
    assert without_names("Would Avalon do it?", {"Ava"}) == "Would Avalon do it?"  # whole words only
    assert without_names("All right, did ALL cheer?", {"ALL"}) == "All right, did cheer?"


def test_an_inference_leans_on_the_vector_leg(index: RecallIndex) -> None:
    said, matched = _turn(1, "Nothing beats the trails with my boots on."), _turn(2, "I walked to the shop.")
    records = {r.id: r for r in (said, matched)}
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    legs = {"vector": [("tb1", 0.6), ("tb2", 0.2)], "text": [("tb2", 3.0), ("tb1", 1.0)]}

    def top(query: str, **levers: object) -> str:
        found = Candidates(query=query, lineage=lineage, legs=legs, records=records)
        return index.rank(found, config=PLAIN.model_copy(update=levers))[0].id

    assert top("Did Ava walk somewhere?") == "tb2"  # text weight 3: the text leg leads
    assert top("Would Ava enjoy a walking holiday?") == "tb1"  # an inference: text weight 0.5
    assert top("Would Ava enjoy a walking holiday?", inference_text_weight=None) == "tb2"


# -- questions that ask for the members of a kind ---------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What pets does Ava have?", True),
        ("Which languages has Tess been learning?", True),
        ("What kinds of books does Mel like?", True),
        ("  what games do they play", True),
        ("What class does Ava take?", False),  # one thing
        ("What status does she have?", False),  # a word in -s that names one thing
        ("What news did Caroline share?", False),
        ("What analysis did he run?", False),
        ("What does Ava like?", False),
        ("Did Ava buy new pets?", False),  # not a question about which
    ],
)
def test_a_query_asks_for_the_members_of_a_kind(query: str, expected: bool) -> None:
    assert listing(query) is expected


def test_a_listing_leans_on_the_vector_legs(index: RecallIndex) -> None:
    """The kind's word ("pets") matches a line that names the kind; the answer names a member (a beagle)."""
    beagle, kind = _turn(1, "I adopted a beagle named Biscuit!"), _turn(2, "Pets are so much work, right?")
    records = {r.id: r for r in (beagle, kind)}
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    legs = {
        "vector": [("tb1", 0.5), ("tb2", 0.45)],
        "vector_without_names": [("tb1", 0.6), ("tb2", 0.3)],
        "text": [("tb2", 4.0), ("tb1", 1.0)],
    }

    def top(query: str, **levers: object) -> str:
        found = Candidates(query=query, lineage=lineage, legs=legs, records=records)
        return index.rank(found, config=PLAIN.model_copy(update=levers))[0].id

    assert top("What pets does Ava have?") == "tb1"  # text 1, names-free vector 1
    assert top("Did Ava talk about pets?") == "tb2"  # not a listing: text weight 3
    off = {"listing_text_weight": None, "listing_vector_without_names_weight": None}
    assert top("What pets does Ava have?", **off) == "tb2"


def test_an_inference_searches_its_text_leg_without_the_speakers_names(index: RecallIndex) -> None:
    """A speaker's name matches every turn of theirs; an inference's text leg is searched without it."""
    index.config = RecallConfig(window_before=0)
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=20),))
    chatter = [_turn(d, text) for d, text in enumerate(["Haha, classic.", "Talk soon!", "So true."], start=1)]
    trails = _turn(4, "Nothing beats a walk in the mountains with my boots on.")
    _write(index, [*chatter, trails, _turn(5, "How was the holiday?", speaker="Ben")])
    vector = np.zeros(index.embedder.dim, dtype=np.float32)
    vector[0] = 1.0

    def legs(query: str, **levers: object) -> dict[str, list[str]]:
        levers = {"vector_without_names_weight": 0.0, **levers}  # no second embedding (no model here)
        index.config = RecallConfig(window_before=0, **levers)  # type: ignore[arg-type]
        found = index.collect("c", query, lineage=lineage, kinds=[RecallKind.TURN], query_vector=vector)
        return {leg: [i for i, _ in hits] for leg, hits in found.legs.items() if leg != "vector"}

    inference = "Would Ava enjoy a walking holiday in the mountains?"
    got = legs(inference)
    assert {"tb1", "tb2", "tb3"} <= set(got["text"])  # matched by the name alone
    assert set(got["text_without_names"]) == {"tb4", "tb5"}  # by the question's own words
    assert "text_without_names" not in legs("What did Ava say about the mountains?")  # not an inference
    assert "text_without_names" not in legs(inference, inference_text_without_names=False)
    index.config = RecallConfig(window_before=0, vector_without_names_weight=0)
    found = index.collect("c", inference, lineage=lineage, kinds=[RecallKind.TURN], query_vector=vector)
    assert [h.id for h in index.rank(found, config=PLAIN.model_copy(update={"vector_weight": 0}))] == ["tb4", "tb5"]


# -- a second round: pseudo-relevance feedback, and the vector without the names --------------------


def test_the_feedback_words_are_those_the_best_records_share() -> None:
    feedback = [
        "We paddled the kayak across the lake at dawn.",
        "The kayak flipped over near the lake shore!",
        "Lunch by the lake was really nice.",
    ]
    others = ["The lake is cold.", "I bought bread.", "A kayak shop opened.", "Rain again.", "Work was long."]
    pool = [*feedback, *others, "Movie night!"]
    # "kayak" is in two of the three; "lake" is the query's own; "paddled", "lunch" are in one only
    assert feedback_terms("What did Ben do at the lake?", feedback, pool, 5) == ["kayak"]
    assert feedback_terms("What did Ben do at the lake?", feedback[2:], pool, 5) == []
    # the feedback is the whole pool (a small campaign): no word is more common in it than in the pool
    assert feedback_terms("What did Ben do at the lake?", pool, pool, 5) == []


def test_text_feedback_finds_what_the_question_does_not_say(index: RecallIndex) -> None:
    """The best records of the first round share a word the question lacks; the second round's BM25
    search with it finds a record the question's own words do not reach."""
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=30),))
    said = [
        _turn(1, "We took the kayak out on the lake.", speaker="Ben"),
        _turn(2, "The kayak flipped over in the middle of the lake!", speaker="Ben"),
        _turn(3, "Bought a carbon kayak paddle today.", speaker="Ben", scene="s2"),
    ]
    filler = [_turn(d, f"small talk number {d}", speaker="Ben", scene="s9") for d in range(4, 12)]
    _write(index, [*said, *filler])
    config = RecallConfig(window_before=0, feedback_depth=2, vector_without_names_weight=0)
    vector = np.zeros(index.embedder.dim, dtype=np.float32)
    vector[0] = 1.0  # the vector leg brings every record (the pool the feedback's words are told apart from)

    def ranked(query: str, **levers: object) -> tuple[dict[str, list[str]], list[str]]:
        index.config = config.model_copy(update=levers)
        found = index.collect("c", query, lineage=lineage, kinds=[RecallKind.TURN], query_vector=vector)
        return {leg: [i for i, _ in hits] for leg, hits in found.legs.items()}, [
            h.id for h in index.rank(found, limit=3)
        ]

    legs, top = ranked("What happened at the lake?")
    assert sorted(legs["text"]) == ["tb1", "tb2"]
    assert "tb3" in legs["feedback_text"] and "tb3" in top  # by "kayak", which the question does not say
    legs, _ = ranked("What happened at the lake?", feedback_text_weight=0)
    assert "feedback_text" not in legs
    legs, _ = ranked("Would Ben like the lake?")  # an inference: its text leg is not fed back
    assert "feedback_text" not in legs


def test_a_full_text_leg_leads_its_own_feedback_beside_the_vector_leg(index: RecallIndex) -> None:
    """With ``feedback_from="text"`` and a BM25 leg that came back full, the feedback words come from the
    leg's own best records against its own candidates, and the second BM25 search runs on the leg's
    thread (beside the query's embedding and the vector search); a short leg leaves it to the fused round."""
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=40),))
    said = [
        _turn(1, "We took the kayak out on the lake.", speaker="Ben"),
        _turn(2, "The kayak flipped over in the middle of the lake!", speaker="Ben"),
        _turn(3, "Bought a carbon kayak paddle today.", speaker="Ben", scene="s2"),
    ]
    filler = [
        _turn(d, f"small talk about the weather and the lake, number {d}, nothing more to say about it", scene="s9")
        for d in range(4, 12)
    ]
    index.config = RecallConfig(
        window_before=0,
        neighbour_share=0,
        candidates=6,
        feedback_depth=2,
        vector_without_names_weight=0,
    )
    _write(index, [*said, *filler])  # without windows: the filler's own mention of the lake only
    searched: list[tuple[str, str]] = []
    search = index.text.search

    def noted(query: str, **kw: object) -> object:
        searched.append((query, threading.current_thread().name))
        return search(query, **kw)

    index.text.search = noted  # type: ignore[method-assign]
    assert index.config.feedback_from == "text"  # the default
    found = index.collect("c", "What happened at the lake?", lineage=lineage, kinds=[RecallKind.TURN])
    assert [i for i, _ in found.legs["text"][:2]] == ["tb1", "tb2"]
    assert "tb3" in [i for i, _ in found.legs["feedback_text"]]  # by "kayak", which the question does not say
    assert [(q.split("? ")[-1], thread.startswith("recall-leg")) for q, thread in searched] == [
        ("What happened at the lake?", True),
        ("kayak", True),
    ]
    searched.clear()
    index.config = index.config.model_copy(update={"feedback_from": "fused"})
    found = index.collect("c", "What happened at the lake?", lineage=lineage, kinds=[RecallKind.TURN])
    assert "feedback_text" in found.legs and not searched[-1][1].startswith("recall-leg")  # after the vector leg
    searched.clear()
    index.config = index.config.model_copy(update={"feedback_from": "text", "candidates": 20})
    found = index.collect("c", "What happened at the lake?", lineage=lineage, kinds=[RecallKind.TURN])
    assert len(found.legs["text"]) < 20 and not searched[-1][1].startswith("recall-leg")  # a short leg: fused


def test_a_vector_search_without_the_names_joins_the_fusion(index: RecallIndex) -> None:
    """A query naming a speaker gets a vector leg searched without the name; it counts with its weight,
    and only while the vector leg does."""
    records = {r.id: r for r in (_turn(1, "Hi!"), _turn(2, "The lake at dawn.", speaker="Ben"))}
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    legs = {"vector": [("tb1", 0.6), ("tb2", 0.5)], "vector_without_names": [("tb2", 0.7), ("tb1", 0.1)]}
    found = Candidates(query="What did Ava see at dawn?", lineage=lineage, legs=legs, records=records)

    def ids(**levers: object) -> list[str]:
        return [h.id for h in index.rank(found, config=PLAIN.model_copy(update=levers))]

    assert ids(vector_without_names_weight=0) == ["tb1", "tb2"]
    assert ids(vector_without_names_weight=2) == ["tb2", "tb1"]
    assert ids(vector_without_names_weight=2, vector_weight=0) == []  # no text leg here, and no vector leg


def test_a_text_leg_that_matched_only_names_and_small_words_weighs_less(index: RecallIndex) -> None:
    """'What pets does Ava have?' finds, by BM25, the lines that say 'Ava' and 'have'; none holds a word
    of the question beyond the name, so the leg weighs ``unmatched_text_weight`` and the vector's order wins.
    A question whose word the leg's records hold keeps the leg's full weight."""
    records = {
        r.id: r
        for r in (
            _turn(1, "Hi Ava, how have you been this morning?", speaker="Ben"),
            _turn(2, "I adopted a beagle named Pixel!"),
        )
    }
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=10),))
    legs = {"text": [("tb1", 9.0), ("tb2", 1.0)], "vector": [("tb2", 0.6), ("tb1", 0.5)]}

    def ids(query: str, **levers: object) -> list[str]:
        found = Candidates(query=query, lineage=lineage, legs=legs, records=records)
        config = PLAIN.model_copy(update={"text_weight": 3.0, **levers})
        return [h.id for h in index.rank(found, config=config)]

    assert RecallConfig().unmatched_text_weight == 0.25  # on by default
    assert ids("What pets does Ava have?", unmatched_text_weight=0.25) == ["tb2", "tb1"]
    assert ids("What pets does Ava have?", unmatched_text_weight=None) == ["tb1", "tb2"]
    assert ids("What did Ava do this morning?", unmatched_text_weight=0.25) == ["tb1", "tb2"]  # "morning" matched
    assert ids("What did Ava do?", unmatched_text_weight=0.25) == ["tb1", "tb2"]  # no word to miss


class _CountingEmbedder:
    """The real model, with each call's texts noted."""

    def __init__(self, model: SentenceTransformerEmbedder) -> None:
        self.model = model
        self.calls: list[list[str]] = []
        self.dim = model.dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append([text])
        return self.model.embed_query(text)


def _two_speakers(index: RecallIndex) -> Lineage:
    """Three turns, two of Ava's and one of Ben's, on branch ``b``; the lineage that sees them."""
    index.config = RecallConfig(window_before=0)
    _write(
        index,
        [
            _turn(1, "Nothing beats a walk in the mountains with my boots on."),
            _turn(2, "I adopted a scruffy terrier from the shelter.", speaker="Ben"),
            _turn(3, "My grandmother's plum dumplings came out right at last."),
        ],
    )
    return Lineage(segments=(Segment(branch_id="b", max_depth=20),))


def test_a_question_naming_known_speakers_is_embedded_once_with_its_name_free_form(index: RecallIndex) -> None:
    """Once a campaign's speakers are known, a question naming some of them is embedded in one batch
    with its name-free form, and the second-round vector search uses that vector: same legs, one call."""
    lineage = _two_speakers(index)
    counting = _CountingEmbedder(index.embedder)  # type: ignore[arg-type]
    index.embedder = counting  # type: ignore[assignment]
    question = "What did Ava say about the mountains?"
    cold = index.collect("c", question, lineage=lineage, kinds=[RecallKind.TURN])
    assert counting.calls == [[question], ["What did say about the mountains?"]]  # speakers not known yet
    counting.calls.clear()
    searched: list[str] = []
    search = index.text.search

    def noted(query: str, **kw: object) -> object:
        searched.append(threading.current_thread().name)
        return search(query, **kw)

    index.text.search = noted  # type: ignore[method-assign]
    warm = index.collect("c", question, lineage=lineage, kinds=[RecallKind.TURN])
    assert counting.calls == [[question, "What did say about the mountains?"]]
    # the BM25 leg still runs on its thread, beside the batch of two
    assert searched and all(name.startswith("recall-leg") for name in searched)
    assert {leg: [i for i, _ in hits] for leg, hits in warm.legs.items()} == {
        leg: [i for i, _ in hits] for leg, hits in cold.legs.items()
    }


def test_a_question_naming_known_speakers_searches_both_vectors_in_one_batch(index: RecallIndex) -> None:
    """Its name-free form is searched in the query's batch of vector searches (one request, one filter
    estimate), and the names-free leg reuses those hits: the same legs, ids and scores as two searches."""
    lineage = _two_speakers(index)
    question = "What did Ava say about the mountains?"
    cold = index.collect("c", question, lineage=lineage, kinds=[RecallKind.TURN])  # learns the speakers
    calls: list[tuple[str, int]] = []
    search, search_batch = index.vectors.search, index.vectors.search_batch

    def one(collection: str, vector: Sequence[float], **kw: object) -> object:
        calls.append(("search", 1))
        return search(collection, vector, **kw)  # type: ignore[arg-type]

    def batch(collection: str, vectors: Sequence[Sequence[float]], **kw: object) -> object:
        calls.append(("search_batch", len(vectors)))
        return search_batch(collection, vectors, **kw)  # type: ignore[arg-type]

    index.vectors.search = one  # type: ignore[method-assign]
    index.vectors.search_batch = batch  # type: ignore[method-assign]
    warm = index.collect("c", question, lineage=lineage, kinds=[RecallKind.TURN])
    assert calls == [("search_batch", 2)]
    assert set(warm.legs) == set(cold.legs) and "vector_without_names" in warm.legs
    for leg in ("vector", "vector_without_names"):
        assert [i for i, _ in warm.legs[leg]] == [i for i, _ in cold.legs[leg]]
        assert [s for _, s in warm.legs[leg]] == pytest.approx([s for _, s in cold.legs[leg]], abs=1e-5)
    assert [h.id for h in index.rank(warm)] == [h.id for h in index.rank(cold)]


def test_the_bm25_leg_done_first_says_whether_the_also_texts_are_searched(index: RecallIndex) -> None:
    """gather searches ``also_embed`` texts in the query's batch unless ``also_search``, given the BM25
    legs (when they are done before the vector search), says no: then the query is searched alone."""
    import time

    index.config = RecallConfig(window_before=0)
    lineage = Lineage(segments=(Segment(branch_id="b", max_depth=20),))
    _write(index, [_turn(1, "A walk in the mountains."), _turn(2, "A scruffy terrier.", speaker="Ben")])
    embed = index.embedder.embed_documents

    def after_the_leg(texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.3)  # the BM25 leg (a few ms here) is done by the time the vectors are searched
        return embed(texts)

    index.embedder.embed_documents = after_the_leg  # type: ignore[method-assign]
    calls: list[str] = []
    search, search_batch = index.vectors.search, index.vectors.search_batch
    index.vectors.search = lambda *a, **kw: (calls.append("search"), search(*a, **kw))[1]  # type: ignore[method-assign]
    index.vectors.search_batch = lambda *a, **kw: (calls.append("batch"), search_batch(*a, **kw))[1]  # type: ignore[method-assign]
    told: list[set[str]] = []
    for answer in (False, True):
        calls.clear()

        def check(legs: object, records: object, answer: bool = answer) -> bool:
            told.append(set(legs))  # type: ignore[call-overload]
            return answer

        found = index.gather(
            "c", "mountains", lineage=lineage, kinds=[RecallKind.TURN], also_embed=["walk"], also_search=check
        )
        assert calls == (["batch"] if answer else ["search"])
        assert set(found.also_vectors) == {"walk"} and set(found.also_hits) == ({"walk"} if answer else set())
    assert told and all("text" in legs for legs in told)
