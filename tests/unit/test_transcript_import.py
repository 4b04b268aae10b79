"""A transcript imported as a campaign, on the embedded stores: a scene per session, a turn per line with
its ref and time, the story engine's own lineage, and every line recalled by meaning."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
from schemas.errors import Conflict, InvalidRequest, NotFound, Unavailable
from schemas.imports import TranscriptImportState
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters
from schemas.settings import Settings
from schemas.story import InputMode, SceneStatus, SpeakerKind, TurnStatus
from stores.blob.local import LocalBlobStore
from story import import_plan, importing
from story.errors import CampaignIncomplete
from story.formation import SceneMemoryFormer
from story.graph import StoryGraph, Writes
from story.recall_index import RecallIndex, open_recall_index
from story.service import StoryService
from story.transcripts import Transcript, TranscriptFormat, TranscriptLine, read_transcript
from tests.corpus import corpus_file

pytestmark = pytest.mark.servers

LINES = [
    ("1", "1 May 2023", "Ada", "I finally adopted a puppy from the shelter, a scruffy terrier named Biscuit.", "s1:1"),
    ("1", "1 May 2023", "Bo", "The quarterly budget review went badly; my manager wants cuts everywhere.", "s1:2"),
    ("1", "1 May 2023", "Ada", "Did you see the lunar eclipse last night? The moon turned copper red.", "s1:3"),
    ("2", "9 June 2023", "Bo", "I signed up for a pottery class on Thursdays to get away from screens.", "s2:1"),
    ("2", "9 June 2023", "Ada", "My grandmother's recipe for plum dumplings finally came out right.", "s2:2"),
    ("2", "9 June 2023", "Bo", "We are moving to Lisbon in the autumn for my partner's new job.", "s2:3"),
]


def conversation(name: str = "ada-and-bo") -> Transcript:
    lines = [TranscriptLine(session=s, time=t, speaker=who, text=text, ref=ref) for s, t, who, text, ref in LINES]
    return Transcript(name=name, format=TranscriptFormat.JSONL, lines=lines)


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    """One model for the module: loading it is the slow part, and it holds no state between tests."""
    model = SentenceTransformerEmbedder(EmbeddingConfig())
    model.load()
    return model


@pytest.fixture
def recall_index(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[RecallIndex]:
    index = open_recall_index(Settings(data_dir=tmp_path), embedder=embedder)
    yield index
    index.close()


@pytest.fixture
def story(embedded_graph: object, local_blob_store: LocalBlobStore, recall_index: RecallIndex) -> StoryService:
    service = StoryService(embedded_graph, local_blob_store, recall=recall_index)  # type: ignore[arg-type]
    service.prepare()
    return service


def refs(hits: list) -> list[str | None]:  # noqa: ANN001 - RecallHit
    return [h.ref for h in hits]


def found(story: StoryService, campaign_id: str, query: str, ref: str, *, limit: int = 3) -> RecallHit:
    """The hit of ``ref`` among the first ``limit``, which the vector leg ranked first: the line was found by
    its meaning (fusion and re-scoring are the recall index's to tune, and may place a neighbour above it).
    Import without summaries for it: a session's summary may quote the line, and rank above it."""
    hits = story.recall(campaign_id, query, limit=limit)
    hit = next((h for h in hits if h.ref == ref), None)
    assert hit is not None, f"{ref} not in {refs(hits)} for {query!r}"
    assert hit.ranks.get("vector") == 1, (query, hit.ranks)
    return hit


# -- the campaign it makes -------------------------------------------------------------------------


def test_a_scene_per_session_and_a_turn_per_line(story: StoryService) -> None:
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    # six lines and the two sessions' summaries
    assert (report.campaign_id, report.sessions, report.turns, report.summaries, report.records) == (
        campaign.id,
        2,
        6,
        2,
        8,
    )
    assert campaign.name == "Ada and Bo"
    assert story.get_world(campaign.world_id).name == "Ada and Bo"

    scenes = story.scenes(campaign.id)
    assert [(s.title, s.status) for s in scenes] == [
        ("Session 1 (1 May 2023)", SceneStatus.COMPLETED),
        ("Session 2 (9 June 2023)", SceneStatus.COMPLETED),
    ]
    turns = story.history(campaign.id)
    assert [(t.ref, t.story_time, t.speaker.name, t.text) for t in turns] == [
        (ref, time, who, text) for _, time, who, text, ref in LINES
    ]
    for turn in turns:
        assert turn.status is TurnStatus.RECORDED and turn.narration is None
        assert turn.input_mode is InputMode.DIALOGUE and turn.speaker.kind is SpeakerKind.PLAYER
    assert [t.scene_id for t in turns] == [scenes[0].id] * 3 + [scenes[1].id] * 3
    assert (scenes[0].end_turn_id, scenes[1].start_turn_id, scenes[1].end_turn_id) == (
        turns[2].id,
        turns[2].id,
        turns[5].id,
    )


def test_each_session_is_summarised_as_a_scene_that_ended_in_play(story: StoryService) -> None:
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo")
    turns = story.history(campaign.id)
    scenes = story.scenes(campaign.id)
    summaries = sorted(
        story.summaries(campaign.id), key=lambda s: turns.index(next(t for t in turns if t.id == s.anchor_turn_id))
    )
    assert [(s.scene_id, s.anchor_turn_id, s.from_turn_id) for s in summaries] == [
        (scenes[0].id, turns[2].id, turns[0].id),
        (scenes[1].id, turns[5].id, turns[3].id),
    ]
    assert summaries[0].text.startswith("Session 1 (1 May 2023): ")
    assert "Biscuit" in summaries[0].text and "Lisbon" not in summaries[0].text
    # recalled like a summary a GM writes, and only on its lineage: the first session's end sees one
    hits = story.recall(campaign.id, "what happened in the second session", limit=10)
    assert {h.kind for h in hits} >= {RecallKind.SUMMARY, RecallKind.TURN}
    early = story.recall(campaign.id, "what happened", as_of_turn_id=turns[2].id, limit=10)
    assert [h.id for h in early if h.kind is RecallKind.SUMMARY] == [summaries[0].id]


def test_summaries_can_be_left_out(story: StoryService, recall_index: RecallIndex) -> None:
    campaign, report = story.import_transcript(conversation(), "Ada and Bo", summaries=False)
    assert (report.summaries, report.records) == (0, 6)
    assert story.summaries(campaign.id) == [] and recall_index.count(campaign.id) == 6


def test_the_lineage_is_the_engines_own(story: StoryService) -> None:
    """Parent links, depths, the branch tip and the head are what six add_turn calls would leave."""
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo")
    turns = story.history(campaign.id)
    assert [t.depth for t in turns] == list(range(6))
    assert [t.parent_turn_id for t in turns] == [None, *(t.id for t in turns[:-1])]
    (branch,) = story.branches(campaign.id)
    assert {t.branch_id for t in turns} == {branch.id} and branch.tip_turn_id == turns[-1].id
    assert campaign.head_turn_id == turns[-1].id
    assert [t.id for t in story.history(campaign.id, turn_id=turns[3].id)] == [t.id for t in turns[:4]]

    # play goes on from where the transcript ends, with the engine's undo and redo
    told = story.add_turn(campaign.id, "And then?", narration="The tide turns.")
    assert (told.parent_turn_id, told.depth, told.branch_id) == (turns[-1].id, 6, branch.id)
    story.undo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id == turns[-1].id
    story.redo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id == told.id


def test_into_an_existing_world(story: StoryService) -> None:
    world = story.create_world("Shared")
    campaign, report = story.import_transcript(conversation(), "Ada and Bo", world_id=world.id)
    assert campaign.world_id == report.world_id == world.id
    assert [c.id for c in story.list_campaigns(world.id)] == [campaign.id]


def test_refused_before_anything_is_written(story: StoryService) -> None:
    with pytest.raises(NotFound, match="no world 'world_missing'"):
        story.import_transcript(conversation(), "Lost", world_id="world_missing")
    with pytest.raises(InvalidRequest, match="needs a name"):
        story.import_transcript(conversation(), "   ")
    with pytest.raises(InvalidRequest, match="has no lines"):
        story.import_transcript(Transcript(name="void", format=TranscriptFormat.JSONL, lines=[]), "Void")
    jumbled = conversation().model_copy(update={"lines": [*conversation().lines, conversation().lines[0]]})
    with pytest.raises(InvalidRequest, match="resumes after"):
        story.import_transcript(jumbled, "Jumbled")
    assert story.list_campaigns() == []


# -- recall ------------------------------------------------------------------------------------------


def test_recall_finds_a_line_by_meaning_with_its_ref(story: StoryService) -> None:
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo", summaries=False)
    found(story, campaign.id, "Which of them owns a dog now?", "s1:1")
    found(story, campaign.id, "relocating abroad", "s2:3")
    hit = found(story, campaign.id, "a ceramics course", "s2:1")
    assert (hit.speakers, hit.story_time) == (["Bo"], "9 June 2023")
    assert hit.turn_id == story.history(campaign.id)[3].id


def test_recall_follows_the_lineage_of_an_imported_campaign(story: StoryService) -> None:
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo")
    turns = story.history(campaign.id)
    story.create_branch(campaign.id, turns[2].id, name="what if")  # after session 1
    story.add_turn(campaign.id, "Let us talk about the weather instead.", narration="Clouds gather.")
    seen = refs(story.recall(campaign.id, "relocating abroad", limit=10))
    assert seen and not {"s2:1", "s2:2", "s2:3"} & set(seen)  # session 2 lies on the other branch
    assert "s2:3" in refs(story.recall(campaign.id, "relocating abroad", as_of_turn_id=turns[5].id, limit=3))
    assert "s2:3" not in refs(story.recall(campaign.id, "relocating abroad", as_of_turn_id=turns[2].id, limit=10))


def test_two_imports_are_two_campaigns_and_reindexing_is_idempotent(
    story: StoryService, recall_index: RecallIndex
) -> None:
    first, _ = story.import_transcript(conversation(), "Ada and Bo")
    second, _ = story.import_transcript(conversation(), "Ada and Bo")
    assert first.id != second.id
    first_turns = {t.id for t in story.history(first.id)}
    assert recall_index.count(first.id) == recall_index.count(second.id) == 8
    assert {h.turn_id for h in story.recall(second.id, "moving house", limit=10)}.isdisjoint(first_turns)

    before = [(h.id, h.ref) for h in story.recall(first.id, "a new pet", limit=6)]
    assert story.rebuild_recall(first.id) == 8
    assert story.rebuild_recall(first.id) == 8
    assert recall_index.count(first.id) == 8
    assert [(h.id, h.ref) for h in story.recall(first.id, "a new pet", limit=6)] == before


def test_without_a_memory_index_the_story_is_still_written(embedded_graph: object, local_blob_store: object) -> None:
    story = StoryService(embedded_graph, local_blob_store)  # type: ignore[arg-type]
    story.prepare()
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    assert (report.turns, report.records, report.summaries) == (6, 0, 2)
    assert len(story.history(campaign.id)) == 6
    assert len(story.summaries(campaign.id)) == 2


def test_a_locomo_conversation_from_the_corpus(story: StoryService) -> None:
    transcript = read_transcript(corpus_file("memory/locomo-dev/26.json"))
    campaign, report = story.import_transcript(transcript, "LoCoMo 26")
    assert (report.turns, report.sessions, report.summaries, report.records) == (419, 19, 19, 438)
    turns = story.history(campaign.id)
    assert [t.ref for t in turns] == [line.ref for line in transcript.lines]
    assert turns[0].story_time == "1:56 pm on 8 May, 2023"
    assert story.scenes(campaign.id)[0].title == "Session 1 (1:56 pm on 8 May, 2023)"
    # the first question of the conversation's QA; its evidence is D1:3
    assert "D1:3" in refs(story.recall(campaign.id, "When did Caroline go to the LGBTQ support group?", limit=5))


def test_a_conversation_of_up_to_a_thousand_lines_is_indexed_as_one_batch() -> None:
    """One embedding call and one index write for a LoCoMo conversation: as two batches (512 lines) LoCoMo 41
    imported 0.3 s slower."""
    sessions = read_transcript(corpus_file("memory/locomo-dev/41.json")).sessions()
    assert sum(len(s.lines) for s in sessions) == 663
    assert importing.plan_batches(sessions) == [sessions]


# -- transactions and crash safety -------------------------------------------------------------------


def commits(story: StoryService, campaign_id: str) -> list[tuple[int, str]]:
    rows = story.graph.run(
        "MATCH (k:Commit {campaign_id: $c}) RETURN k.version AS v, k.kind AS kind ORDER BY k.version",
        {"c": campaign_id},
    )
    return [(int(r["v"]), r["kind"]) for r in rows]


def test_sessions_are_written_in_one_story_transaction_with_the_commits_of_the_single_writes(
    story: StoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sessions (scene start, turns, end and summary) go in one transaction; the commit history is still
    the one a scene start, a batch of turns and a scene end leave, each its own version."""
    transactions: list[str] = []
    commit = StoryGraph.commit

    def counted(self: StoryGraph, ctx: object, writes: Writes, *, kind: str, **props: object) -> int:
        transactions.append(kind)
        return commit(self, ctx, writes, kind=kind, **props)  # type: ignore[arg-type]

    monkeypatch.setattr(StoryGraph, "commit", counted)
    writes = story.graph.run
    written: list[str] = []

    def no_write_outside(query: str, params: object = None) -> object:
        if "CREATE" in query or "SET" in query or "MERGE" in query:
            written.append(query)
        return writes(query, params)  # type: ignore[arg-type]

    monkeypatch.setattr(story.graph, "run", no_write_outside)
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    assert report.summaries == 2
    # the sessions' transaction, then the import's last commit once the index holds their records
    assert [k for k in transactions if k != "campaign"] == ["scene", "imported"]
    assert not [q for q in written if "Summary" in q or "Scene" in q]  # no summary written on its own
    kinds = [kind for _, kind in commits(story, campaign.id)]
    assert kinds[-7:] == ["scene", "import", "gate", "scene", "import", "gate", "imported"]
    versions = [v for v, _ in commits(story, campaign.id)]
    assert versions == list(range(1, len(versions) + 1))
    (row,) = story.graph.run("MATCH (c:Campaign {uid: $c}) RETURN c.version AS v", {"c": campaign.id})
    assert row["v"] == versions[-1]


def test_a_failed_session_leaves_the_sessions_before_it_whole_and_nothing_of_itself(
    story: StoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction per session here: the second one fails (its summary cannot be formed), and the campaign
    holds the first session whole (scene ended, summary) and no scene, turn or summary of the second."""
    monkeypatch.setattr(import_plan, "TURN_BATCH", 3)
    assert story.memory_former is not None
    former: SceneMemoryFormer = story.memory_former

    class _FailsOnSession2:
        name = "failing"

        def form(self, scene: object, turns: Sequence[object], cast: object) -> object:
            if getattr(scene, "title", "").startswith("Session 2"):
                raise RuntimeError("the former is down")
            return former.form(scene, turns, cast)  # type: ignore[arg-type]

    story.memory_former = _FailsOnSession2()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="former is down"):
        story.import_transcript(conversation(), "Ada and Bo")
    (campaign,) = story.list_campaigns()
    scenes = story.scenes(campaign.id)
    assert [(s.title, s.status) for s in scenes] == [("Session 1 (1 May 2023)", SceneStatus.COMPLETED)]
    assert [t.ref for t in story.history(campaign.id)] == ["s1:1", "s1:2", "s1:3"]
    assert [s.scene_id for s in story.summaries(campaign.id)] == [scenes[0].id]
    # the campaign says it is unfinished, and takes no play until the import is resumed
    assert campaign.transcript_import is not None and campaign.transcript_import.written == 3
    with pytest.raises(CampaignIncomplete, match="3 of 6 lines written"):
        story.start_scene(campaign.id, title="next")
    story.memory_former = former
    resumed, report = story.resume_transcript_import(conversation())
    assert (resumed.id, resumed.transcript_import, report.resumed_from, report.turns) == (campaign.id, None, 3, 3)
    assert [t.ref for t in story.history(campaign.id)] == [ref for *_, ref in LINES]
    assert len(story.summaries(campaign.id)) == 2
    # nothing is left half done: the campaign takes a new scene as it would after ending one in play
    assert story.start_scene(campaign.id, title="next").order == 2


def test_a_session_longer_than_a_transaction_is_written_in_several_as_the_single_writes_would(
    story: StoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session over :data:`importing.TURN_BATCH` lines spans transactions (its scene open until the last);
    the result is the same campaign, turns, summaries and commits."""
    monkeypatch.setattr(import_plan, "TURN_BATCH", 2)
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    assert (report.turns, report.summaries) == (6, 2)
    turns = story.history(campaign.id)
    assert [t.ref for t in turns] == [ref for *_, ref in LINES]
    assert [t.depth for t in turns] == list(range(6))
    scenes = story.scenes(campaign.id)
    assert [(s.status, s.start_turn_id, s.end_turn_id) for s in scenes] == [
        (SceneStatus.COMPLETED, None, turns[2].id),
        (SceneStatus.COMPLETED, turns[2].id, turns[5].id),
    ]
    assert [s.anchor_turn_id for s in story.summaries(campaign.id)] == [turns[2].id, turns[5].id]
    kinds = [kind for _, kind in commits(story, campaign.id)]
    assert kinds[-9:] == ["scene", "import", "import", "gate", "scene", "import", "import", "gate", "imported"]


class _IndexThatFailsOnItsSecondWrite(RecallIndex):
    """Its second batch's vectors are refused (the import writes a batch's full text, then its vectors)."""

    def __init__(self, index: RecallIndex) -> None:
        super().__init__(index.text, index.vectors, index.embedder)
        self.batches: list[int] = []

    def write_vectors(self, records: Sequence[RecallRecord], vectors: np.ndarray) -> int:
        self.batches.append(len(records))
        if len(self.batches) == 2:
            raise Unavailable("memory index", "down")
        return super().write_vectors(records, vectors)


def test_sessions_are_indexed_in_batches_and_a_failed_batch_fails_the_import_after_the_graph_writes(
    embedded_graph: object, local_blob_store: object, recall_index: RecallIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches go to the index on a thread while later sessions are written; a batch that fails is raised
    once every session is in the graph, and a rebuild then indexes the whole campaign."""
    monkeypatch.setattr(import_plan, "RECORD_BATCH", 2)  # a batch per session (3 lines each)
    failing = _IndexThatFailsOnItsSecondWrite(recall_index)
    story = StoryService(embedded_graph, local_blob_store, recall=failing)  # type: ignore[arg-type]
    story.prepare()
    with pytest.raises(Unavailable, match="memory index: down"):
        story.import_transcript(conversation(), "Ada and Bo")
    assert failing.batches == [4, 4]  # whole sessions (three lines and a summary), never split over two batches
    (campaign,) = [c for c in story.list_campaigns() if c.name == "Ada and Bo"]
    assert len(story.history(campaign.id)) == 6  # the graph, the record of truth, holds every line
    assert recall_index.count(campaign.id) == 4
    assert campaign.transcript_import is not None and campaign.transcript_import.written == 6
    # resumed: nothing left for the graph; the index gets what it lacks, and the campaign is whole
    healthy = StoryService(embedded_graph, local_blob_store, recall=recall_index)  # type: ignore[arg-type]
    resumed, report = healthy.resume_transcript_import(conversation(), campaign.id)
    assert (report.turns, report.resumed_from, report.reconciled, resumed.transcript_import) == (0, 6, 4, None)
    assert recall_index.count(campaign.id) == 8
    assert healthy.rebuild_recall(campaign.id) == 8


class _WatchedEmbedder:
    """The module's model, noting every text it embeds and when a batch of turn texts begins."""

    def __init__(self, model: SentenceTransformerEmbedder, turn_text: str) -> None:
        self.model, self.turn_text = model, turn_text
        self.name, self.dim = model.name, model.dim
        self.texts: list[str] = []
        self.turns_begun = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if any(self.turn_text in t for t in texts):
            self.turns_begun.set()
        self.texts.extend(texts)
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)


def test_turn_texts_are_embedded_while_the_graph_is_written_and_nothing_twice(
    embedded_graph: object,
    local_blob_store: object,
    recall_index: RecallIndex,
    embedder: SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The turns' texts hold no graph id, so their embedding starts before the first turn is written (the
    first graph write waits for it here; an importer that embedded only written records would stall);
    every record's text is embedded once, and the vectors are the ones the index gives the same records."""
    watched = _WatchedEmbedder(embedder, LINES[0][3])
    index = RecallIndex(recall_index.text, recall_index.vectors, watched)  # type: ignore[arg-type]
    story = StoryService(embedded_graph, local_blob_store, recall=index)  # type: ignore[arg-type]
    story.prepare()
    write = importing.TranscriptImporter._write

    def after_the_embedding_began(self: importing.TranscriptImporter, *args: object) -> object:
        assert watched.turns_begun.wait(timeout=10), "no turn text was being embedded before the graph writes"
        return write(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importing.TranscriptImporter, "_write", after_the_embedding_began)
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    assert report.records == 8
    points = list(recall_index.vectors.scroll(recall_index.collection, filters=SearchFilters(campaign=[campaign.id])))
    records = [RecallRecord.model_validate_json(p.payload["record"]) for p in points]
    texts = [index.indexed_text(r) for r in records]
    embedded = [t for t in watched.texts if t != "warm-up"]
    assert sorted(embedded) == sorted(texts)  # each once: no record embedded twice, none left out
    expected = embedder.embed_documents(texts)
    for point, vector in zip(points, expected, strict=True):
        assert np.allclose(point.vector, vector, atol=1e-5)


class _GatedEmbedder(_WatchedEmbedder):
    """Holds its first batch of turns until ``gate`` is set, noting each call's texts."""

    def __init__(self, model: SentenceTransformerEmbedder, gate: threading.Event) -> None:
        super().__init__(model, LINES[0][3])
        self.gate = gate
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if list(texts) != ["warm-up"]:
            if not self.calls:
                assert self.gate.wait(timeout=10), "the first batch was never written"
            self.calls.append(list(texts))
        return super().embed_documents(texts)


def test_a_batchs_summaries_are_embedded_before_the_next_batchs_turns(
    embedded_graph: object,
    local_blob_store: object,
    recall_index: RecallIndex,
    embedder: SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next batch's turns are queued from the start; a batch's summaries, known once its sessions are
    written, still go first, so the batch's vectors are written while the next batch is embedded rather
    than at the end."""
    monkeypatch.setattr(import_plan, "RECORD_BATCH", 2)  # a batch per session
    written = threading.Event()
    add = importing._Indexing.add

    def added(self: importing._Indexing, records: Sequence[RecallRecord]) -> None:
        add(self, records)
        written.set()

    monkeypatch.setattr(importing._Indexing, "add", added)
    gated = _GatedEmbedder(embedder, written)
    index = RecallIndex(recall_index.text, recall_index.vectors, gated)  # type: ignore[arg-type]
    story = StoryService(embedded_graph, local_blob_store, recall=index)  # type: ignore[arg-type]
    story.prepare()
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")
    assert (report.summaries, recall_index.count(campaign.id)) == (2, 8)

    def job(texts: list[str]) -> str:
        if len(texts) == 1:
            return "summary"
        return "turns 1" if any(LINES[0][3] in t for t in texts) else "turns 2"

    assert [job(texts) for texts in gated.calls] == ["turns 1", "summary", "turns 2", "summary"]


def test_a_wrongly_predicted_text_is_embedded_as_the_index_would(
    story: StoryService, recall_index: RecallIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedding started early is looked up by exact text: a text the prediction missed is embedded
    when its batch is written, so the prediction can only cost time, never a wrong vector."""
    monkeypatch.setattr(importing, "predicted_texts", lambda index, sessions: ["not a line of it"])
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo", summaries=False)
    assert recall_index.count(campaign.id) == 6
    found(story, campaign.id, "Which of them owns a dog now?", "s1:1")
    found(story, campaign.id, "relocating abroad", "s2:3")


# -- unfinished imports: refused for play, resumed without duplicates ----------------------------------


def test_an_import_stopped_inside_a_long_session_resumes_in_its_scene(
    story: StoryService, recall_index: RecallIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lines a transaction: the import stops after the first piece of session 1; the resume writes the rest
    of that session into the scene left open, and the campaign is the one an uninterrupted import makes."""
    monkeypatch.setattr(import_plan, "TURN_BATCH", 2)
    write = importing.TranscriptImporter._write
    calls: list[int] = []

    def stops_at_the_second(self: importing.TranscriptImporter, *args: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise Unavailable("graph", "gone")
        return write(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importing.TranscriptImporter, "_write", stops_at_the_second)
    with pytest.raises(Unavailable, match="gone"):
        story.import_transcript(conversation(), "Ada and Bo")
    (campaign,) = story.list_campaigns()
    assert campaign.transcript_import is not None and campaign.transcript_import.written == 2
    assert [(s.status, s.end_turn_id) for s in story.scenes(campaign.id)] == [(SceneStatus.ACTIVE, None)]
    monkeypatch.setattr(importing.TranscriptImporter, "_write", write)

    resumed, report = story.resume_transcript_import(conversation(), campaign.id)
    assert (report.resumed_from, report.turns, report.summaries, resumed.transcript_import) == (2, 4, 2, None)
    clean, _ = story.import_transcript(conversation(), "Clean")

    def shape(campaign_id: str) -> tuple[object, ...]:
        turns = story.history(campaign_id)
        index = {t.id: n for n, t in enumerate(turns)}
        scenes = [
            (s.title, s.status, index.get(s.start_turn_id or ""), index.get(s.end_turn_id or ""))
            for s in story.scenes(campaign_id)
        ]
        summaries = sorted((index[s.from_turn_id or ""], index[s.anchor_turn_id]) for s in story.summaries(campaign_id))
        kinds = [kind for _, kind in commits(story, campaign_id)]
        return [(t.ref, t.depth, t.scene_id is not None) for t in turns], scenes, summaries, kinds

    assert shape(campaign.id) == shape(clean.id)
    assert recall_index.count(campaign.id) == recall_index.count(clean.id) == 8


def test_a_resume_needs_the_same_lines_and_an_unfinished_campaign(story: StoryService) -> None:
    campaign, _ = story.import_transcript(conversation(), "Ada and Bo")
    with pytest.raises(InvalidRequest, match="not an unfinished transcript import"):
        story.resume_transcript_import(conversation(), campaign.id)
    with pytest.raises(InvalidRequest, match="no unfinished import of transcript 'ada-and-bo'"):
        story.resume_transcript_import(conversation())
    other = conversation().model_copy(update={"lines": conversation().lines[:5]})
    unfinished = story.graph.run(
        "MATCH (c:Campaign {uid: $c}) SET c.transcript_import_json = $s RETURN c.uid AS uid",
        {"c": campaign.id, "s": importing._state_json(_state(conversation(), written=3))},
    )
    assert unfinished
    with pytest.raises(InvalidRequest, match="is not the one campaign .* was imported from"):
        story.resume_transcript_import(other, campaign.id)
    with pytest.raises(Conflict, match=f"campaign '{campaign.id}' \\(3 of 6 lines written\\); resume it"):
        story.import_transcript(conversation(), "Again")


def _state(transcript: Transcript, *, written: int) -> TranscriptImportState:
    return TranscriptImportState(
        source=transcript.name,
        format=transcript.format.value,
        fingerprint=importing.fingerprint(transcript),
        lines=len(transcript.lines),
        written=written,
    )


def test_an_import_is_refused_before_any_write_while_another_process_holds_the_recall_index(
    story: StoryService, recall_index: RecallIndex
) -> None:
    """A running server holds the embedded vector index's folder: the import used to write the whole campaign
    to the graph and none of it to the index. Here a process holds the folder's lock as the server does."""
    folder = Path(recall_index.vectors.path)  # type: ignore[attr-defined]
    folder.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(folder / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(Unavailable) as refused:
            story.import_transcript(conversation(), "Ada and Bo")
        assert "held by another process" in str(refused.value)
        assert "stop the server" in str(refused.value) and "Nothing was written" in str(refused.value)
        assert story.list_campaigns() == []
        assert story.graph.run("MATCH (w:World) RETURN count(w) AS n")[0]["n"] == 0
    finally:
        holder.kill()
        holder.wait()
    campaign, report = story.import_transcript(conversation(), "Ada and Bo")  # the server stopped: it goes
    assert (report.turns, recall_index.count(campaign.id)) == (6, 8)


HOLD_THE_LOCK = """
import fcntl, sys, time
lock = open(sys.argv[1], "a+")
fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def test_the_summary_reports_what_the_file_held_that_was_left_out(story: StoryService) -> None:
    transcript = conversation().model_copy(update={"unknown_fields": {"emotion": 2}, "skipped": ["session_3 (x:9)"]})
    _, report = story.import_transcript(transcript, "Ada and Bo", summaries=False)
    assert (report.unknown_fields, report.skipped_sessions) == ({"emotion": 2}, ["session_3 (x:9)"])


def test_an_unfinished_import_can_be_discarded_whole_and_a_whole_campaign_cannot(
    embedded_graph: object, local_blob_store: object, recall_index: RecallIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    story = StoryService(embedded_graph, local_blob_store, recall=recall_index)  # type: ignore[arg-type]
    story.prepare()
    kept, _ = story.import_transcript(conversation(), "Kept")
    monkeypatch.setattr(import_plan, "RECORD_BATCH", 2)  # a batch per session: the second one fails
    failing = StoryService(embedded_graph, local_blob_store, recall=_IndexThatFailsOnItsSecondWrite(recall_index))  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        failing.import_transcript(conversation(name="other"), "Half")
    (half,) = [c for c in story.list_campaigns() if c.transcript_import is not None]
    assert recall_index.count(half.id) == 4  # the first session and its summary
    with pytest.raises(InvalidRequest, match="is whole, not an unfinished transcript import"):
        story.discard_transcript_import(kept.id)

    story.discard_transcript_import(half.id)
    assert [c.id for c in story.list_campaigns()] == [kept.id]
    left = story.graph.run("MATCH (n) WHERE n.campaign_id = $c RETURN count(n) AS n", {"c": half.id})
    assert left[0]["n"] == 0 and recall_index.count(half.id) == 0
    with pytest.raises(NotFound):
        story.get_world(half.world_id)  # the import made it, and nothing else is in it
    assert len(story.history(kept.id)) == 6 and recall_index.count(kept.id) == 8


def test_the_refusals_are_api_errors_that_survive_pickling() -> None:
    """A play refusal answers 409 and a held store 503 wherever they are raised (a Ray replica pickles them)."""
    state = _state(conversation(), written=3)
    for error, status in ((CampaignIncomplete("camp_x", state), 409), (importing.ImportBlocked("held"), 503)):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), copy.status_code, copy.client_message) == (type(error), status, error.client_message)
    assert "(3 of 6 lines written)" in CampaignIncomplete("camp_x", state).client_message
