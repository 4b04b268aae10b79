"""The ingest pipeline's row models (jobs.rows): encode → decode round trips, as the stages do them
and through Ray Data's own batch → Arrow block → numpy batch conversion, and strict column checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jobs.concepts import ChunkConcepts, ConceptMention
from jobs.document import TextChunk
from jobs.rows import (
    ChunkRow,
    ConceptRef,
    ConceptRefs,
    EmbeddedRow,
    RowSchemaError,
    RowStatus,
    SourceRow,
    WrittenRow,
)
from jobs.stages import EmbedStage, WriteStage
from schemas.common import content_id
from schemas.knowledge import ConceptKind, IngestSource

pytestmark = pytest.mark.unit

STRUCTURE = {"headings_by_level": {"1": 3, "2": 11}, "entries": 7, "furniture_dropped": 2}
FIREBALL = ConceptRef("concept_fire", "Fireball", "fireball", ConceptKind.MECHANIC, ("Fire Ball", "火球"))
MANA = ConceptRef("concept_mana", "Mana", "mana", ConceptKind.TERM)


def _via_ray(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """What Ray Data hands the next stage: the batch as an Arrow block, back as numpy columns."""
    from ray.data.block import BlockAccessor

    return BlockAccessor.for_block(BlockAccessor.batch_to_block(batch)).to_batch_format("numpy")


def _chunk(**changes: Any) -> ChunkRow:
    row = ChunkRow(
        job_id="job_1",
        item_uid="item_1",
        chunk_uid="chunk_1",
        sequence=3,
        text="Les dés: lancez 2d6 — 魔法 ✨",
        heading_path=["Chapitre 1", "Règles"],
        page_start=4,
        page_end=5,
        token_count=12,
        concepts=ConceptRefs([FIREBALL, MANA]),
        item_chunks=2,
        item_pages=9,
        structure=STRUCTURE,
        status=RowStatus.CHUNK,
        error=None,
        extract_node="node_a",
    )
    for name, value in changes.items():
        setattr(row, name, value)
    return row


def _chunks() -> list[ChunkRow]:
    return [
        _chunk(),
        # the awkward values: empty text and heading path, no pages, no concepts, empty structure
        _chunk(
            chunk_uid="chunk_2",
            sequence=0,
            text="",
            heading_path=[],
            page_start=None,
            page_end=None,
            concepts=ConceptRefs(),
            structure={},
        ),
        ChunkRow.status_row("job_2", "", RowStatus.FAILED, "bad.pdf: le fichier est vide ∅"),
        ChunkRow.status_row("job_3", "item_3", RowStatus.SKIPPED),
    ]


def _embedded() -> list[EmbeddedRow]:
    vectors = np.arange(len(_chunks()) * 4, dtype=np.float32).reshape(-1, 4) / 7
    vectors[2:] = 0  # status rows carry zero vectors
    return [EmbeddedRow.of(row, vectors[i], 0.25 * i, "node_b") for i, row in enumerate(_chunks())]


def _written() -> list[WrittenRow]:
    return [
        WrittenRow("job_1", "item_1", "chunk_1", 2, 9, STRUCTURE, RowStatus.CHUNK, None, 0.5, "a", "b", "c"),
        WrittenRow(
            "job_1", "item_1", "chunk_2", 2, 9, STRUCTURE, RowStatus.FAILED, "RuntimeError: 🔥", 0.0, "a", "b", "c"
        ),
        WrittenRow("job_2", "", "", 0, 0, {}, RowStatus.FAILED, "vide", 0.0, "", "b", "c"),
    ]


def _sources() -> list[SourceRow]:
    return [
        SourceRow("job_1", "/books/règles.pdf", "règles.pdf", IngestSource.PATH, None, None),
        SourceRow("job_2", "s3://books/a/b.epub", "b.epub", IngestSource.S3, "books", "a/b.epub"),
        SourceRow("job_3", "upload_1/c.md", "c.md", IngestSource.UPLOAD, "", ""),
    ]


def _normalized(row: Any) -> Any:
    # an empty bucket and key are written as "" and read back as None
    if isinstance(row, SourceRow):
        return SourceRow(row.job_id, row.ref, row.name, row.source, row.bucket or None, row.key or None)
    return row


def _assert_same(decoded: list[Any], original: list[Any]) -> None:
    assert len(decoded) == len(original)
    for got, want in zip(decoded, original, strict=True):
        assert type(got) is type(want)
        if isinstance(want, EmbeddedRow):
            assert isinstance(got, EmbeddedRow)
            assert got.vector.dtype == np.float32
            np.testing.assert_array_equal(got.vector, want.vector)
            got.vector = want.vector  # arrays do not compare with ==
        assert got == _normalized(want)


@pytest.mark.parametrize(
    "model, rows",
    [(SourceRow, _sources), (ChunkRow, _chunks), (EmbeddedRow, _embedded), (WrittenRow, _written)],
    ids=["source", "chunk", "embedded", "written"],
)
@pytest.mark.parametrize("through_ray", [False, True], ids=["direct", "arrow"])
def test_each_row_model_round_trips(model: Any, rows: Any, through_ray: bool) -> None:
    batch = model.encode(rows())
    assert tuple(batch) == model.columns()
    decoded = model.decode(_via_ray(batch) if through_ray else batch)
    _assert_same(decoded, rows())


def test_rows_decoded_through_ray_have_python_values() -> None:
    """No numpy scalars or arrays leak into the models (except the vector)."""
    row = EmbeddedRow.decode(_via_ray(EmbeddedRow.encode(_embedded())))[0]
    assert type(row.sequence) is int and type(row.embed_seconds) is float and type(row.text) is str
    assert type(row.heading_path) is list and all(type(h) is str for h in row.heading_path)
    assert row.status is RowStatus.CHUNK and row.error is None
    assert list(row.concepts) == [FIREBALL, MANA] and row.concepts[0].kind is ConceptKind.MECHANIC
    assert row.concepts[0].aliases == ("Fire Ball", "火球")


def test_source_rows_feed_from_items() -> None:
    items = SourceRow.items(_sources())
    assert items[0] == {
        "job_id": "job_1",
        "ref": "/books/règles.pdf",
        "name": "règles.pdf",
        "source": "path",
        "bucket": "",
        "key": "",
    }
    assert SourceRow.decode({name: [item[name] for item in items] for name in SourceRow.columns()})[1] == _sources()[1]


def test_column_lists_come_from_the_models() -> None:
    # the wire names the stages, the driver and the ingest benchmark read
    assert ChunkRow.columns() == (
        "job_id",
        "item_uid",
        "chunk_uid",
        "sequence",
        "text",
        "heading_path",
        "page_start",
        "page_end",
        "token_count",
        "concepts_json",
        "item_chunks",
        "item_pages",
        "item_structure_json",
        "status",
        "error",
        "extract_node",
    )
    assert EmbeddedRow.columns() == (*ChunkRow.columns(), "vector", "embed_seconds", "embed_node")
    assert WrittenRow.columns() == (
        "job_id",
        "item_uid",
        "chunk_uid",
        "item_chunks",
        "item_pages",
        "item_structure_json",
        "status",
        "error",
        "embed_seconds",
        "extract_node",
        "embed_node",
        "write_node",
    )


def test_wire_forms() -> None:
    batch = ChunkRow.encode(_chunks())
    assert batch["page_start"] == [4, 0, 0, 0] and batch["error"][0] == "" and batch["status"][2] == "failed"
    assert batch["item_structure_json"][1] == "{}"
    vectors = EmbeddedRow.encode(_embedded())["vector"]
    assert vectors.shape == (4, 4) and vectors.dtype == np.float32


@pytest.mark.parametrize("model", [SourceRow, ChunkRow, EmbeddedRow, WrittenRow])
def test_no_rows_round_trip(model: Any) -> None:
    assert model.decode(model.encode([])) == []
    assert model.decode({}) == []


@pytest.mark.parametrize("column", ["text", "concepts_json", "extract_node"])
def test_a_missing_column_is_named(column: str) -> None:
    batch = ChunkRow.encode(_chunks())
    del batch[column]
    with pytest.raises(RowSchemaError, match=f"ChunkRow batch is missing the column '{column}'"):
        ChunkRow.decode(batch)


def test_an_extra_column_is_named() -> None:
    batch = ChunkRow.encode(_chunks())
    batch["vector"] = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(RowSchemaError, match="ChunkRow batch has an unexpected column 'vector'"):
        ChunkRow.decode(batch)
    # an embedded batch is not a written one
    with pytest.raises(RowSchemaError, match="WrittenRow batch has an unexpected column 'sequence'"):
        WrittenRow.decode(EmbeddedRow.encode(_embedded()))


def test_ragged_columns_and_unknown_statuses_are_named() -> None:
    batch = WrittenRow.encode(_written())
    batch["error"] = batch["error"][:2]
    with pytest.raises(RowSchemaError, match="column 'error' has 2 rows, the others 3"):
        WrittenRow.decode(batch)
    batch = WrittenRow.encode(_written())
    batch["status"][0] = "done"
    with pytest.raises(RowSchemaError, match="'done' is not a RowStatus"):
        WrittenRow.decode(batch)


def test_concepts_are_parsed_only_when_read() -> None:
    text = ConceptRefs([FIREBALL]).to_json()
    lazy = ConceptRefs.from_json(text)
    assert lazy.to_json() is text  # passed on as it came (the embed stage never parses it)
    assert lazy == ConceptRefs([FIREBALL]) and len(lazy) == 1 and lazy[0] == FIREBALL
    assert ConceptRefs.from_json("") == ConceptRefs() and not ConceptRefs()


def test_chunk_rows_of_an_items_chunks_carry_their_concepts() -> None:
    mention = ConceptMention("Fate Point", "fate point", ConceptKind.MECHANIC, aliases=("FP",), score=0.5)
    chunks = [TextChunk(0, "Spend a fate point.", ["Fate"], 1, 1, 6), TextChunk(1, "Épilogue", [], None, None, 2)]
    rows = ChunkRow.of_chunks("job_1", "item_1", chunks, [ChunkConcepts(0, [mention])], 3, STRUCTURE)
    assert [row.chunk_uid for row in rows] == [content_id("chunk", "item_1:0"), content_id("chunk", "item_1:1")]
    assert list(rows[0].concepts) == [
        ConceptRef(
            content_id("concept", "mechanic:fate point"), "Fate Point", "fate point", ConceptKind.MECHANIC, ("FP",)
        )
    ]
    assert not rows[1].concepts and rows[1].page_start is None and rows[1].heading_path == []
    assert {(row.item_chunks, row.item_pages, row.status, row.error) for row in rows} == {(2, 3, RowStatus.CHUNK, None)}
    assert ChunkRow.decode(_via_ray(ChunkRow.encode(rows))) == rows


class _FakeEmbedder:
    name = "row-handling"  # the stage logs and counts by the model's name

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return np.ones((len(texts), 4), dtype=np.float32)


def test_embed_stage_embeds_chunk_rows_and_passes_status_rows_on() -> None:
    stage = EmbedStage.__new__(EmbedStage)  # no model: the stage's row handling only
    stage.embedder, stage.dim = _FakeEmbedder(), 4  # type: ignore[assignment]
    out = EmbeddedRow.decode(_via_ray(stage(_via_ray(ChunkRow.encode(_chunks())))))
    assert stage.embedder.texts == ["Chapitre 1 > Règles\nLes dés: lancez 2d6 — 魔法 ✨", ""]  # type: ignore[attr-defined]
    assert [row.vector.sum() for row in out] == [4, 4, 0, 0]
    assert [(row.chunk_uid, row.status, row.error) for row in out[2:]] == [
        ("", RowStatus.FAILED, "bad.pdf: le fichier est vide ∅"),
        ("", RowStatus.SKIPPED, None),
    ]
    assert out[0].concepts == ConceptRefs([FIREBALL, MANA]) and out[0].structure == STRUCTURE


def test_write_stage_reports_a_failed_item_on_each_of_its_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = WriteStage.__new__(WriteStage)  # no stores: the stage's row handling only
    written: list[list[str]] = []

    def write(item: Any, rows: list[EmbeddedRow]) -> None:
        written.append([row.chunk_uid for row in rows])
        raise RuntimeError("disk full")

    monkeypatch.setattr(stage, "_item", lambda uid: uid)
    monkeypatch.setattr(stage, "_write_item_rows", write)
    out = WrittenRow.decode(_via_ray(stage(_via_ray(EmbeddedRow.encode(_embedded())))))
    assert written == [["chunk_1", "chunk_2"]]  # status rows are not written
    assert [(row.status, row.error) for row in out] == [
        (RowStatus.FAILED, "RuntimeError: disk full"),
        (RowStatus.FAILED, "RuntimeError: disk full"),
        (RowStatus.FAILED, "bad.pdf: le fichier est vide ∅"),
        (RowStatus.SKIPPED, None),
    ]
    assert [row.embed_seconds for row in out] == [0.0, 0.25, 0.5, 0.75]
    assert out[0].structure == STRUCTURE and out[1].structure == {} and out[0].extract_node == "node_a"
