"""The rows that flow through the ingest pipeline, one model per stage boundary, and their one codec.

- :class:`SourceRow`, driver → extract, one per file: encoded by ``run_ingest`` (for
  ``ray.data.from_items``), decoded by ``ExtractStage``;
- :class:`ChunkRow`, extract → embed, one per chunk: encoded by ``ExtractStage``, decoded by
  ``EmbedStage``;
- :class:`EmbeddedRow`, embed → write, a chunk row with its vector: encoded by ``EmbedStage``,
  decoded by ``WriteStage``;
- :class:`WrittenRow`, write → driver, what was written: encoded by ``WriteStage``, decoded by the
  driver (``jobs.pipeline``), which finalizes each item once all its chunks are in.

A file that yields no chunks (skipped as unchanged, or failed) yields one *status row* instead
(``chunk_uid == ""``, see :meth:`ChunkRow.status_row`); later stages pass it through.

Ray Data carries a batch as columns (``dict[str, np.ndarray]`` in, lists or arrays out). The column
names and their wire forms are derived from each model's fields: :meth:`_Row.encode` turns models into
a batch and :meth:`_Row.decode` turns a batch back into models, a column at a time (cheap for a few
thousand rows per batch). Wire forms: optional pages are ``0`` and an absent error ``""`` (Arrow
columns are not nullable here), concepts and the structure figures are JSON strings, vectors one
``(rows, dim)`` float32 matrix.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from typing import Any, NamedTuple, Self, get_type_hints, overload

import numpy as np

from jobs.concepts import ChunkConcepts, ConceptMention
from jobs.document import TextChunk
from schemas.common import content_id
from schemas.knowledge import ConceptKind, IngestSource

__all__ = [
    "ChunkRow",
    "ConceptRef",
    "ConceptRefs",
    "EmbeddedRow",
    "RowSchemaError",
    "RowStatus",
    "SourceRow",
    "WrittenRow",
    "chunk_uid",
]


def chunk_uid(item_uid: str, sequence: int) -> str:
    """A chunk's id: derived from its item and position, so a re-run writes the same chunks."""
    return content_id("chunk", f"{item_uid}:{sequence}")


class RowSchemaError(ValueError):
    """A batch whose columns are not those of the row model it is decoded as (a wiring bug)."""


class RowStatus(StrEnum):
    """What a row is: a chunk, or the status row of a file that yielded no chunks."""

    CHUNK = "chunk"
    SKIPPED = "skipped"
    FAILED = "failed"


class ConceptRef(NamedTuple):
    """A concept a chunk mentions, as the write stage records it (a tuple: cheap, and safe to share)."""

    uid: str
    name: str
    normalized_name: str
    kind: ConceptKind
    aliases: tuple[str, ...] = ()

    @classmethod
    def of(cls, mention: ConceptMention) -> ConceptRef:
        uid = content_id("concept", f"{mention.kind.value}:{mention.normalized_name}")
        return cls(uid, mention.name, mention.normalized_name, mention.kind, tuple(mention.aliases))


_KINDS = {kind.value: kind for kind in ConceptKind}


class ConceptRefs(Sequence[ConceptRef]):
    """A chunk's concepts. They travel as JSON text (each concept the array of its fields) and are
    parsed only where they are read: the embed stage passes them on without a parse or a dump."""

    __slots__ = ("_json", "_refs")

    def __init__(self, refs: Iterable[ConceptRef] = ()) -> None:
        self._refs: tuple[ConceptRef, ...] | None = tuple(refs)
        self._json: str | None = None

    @classmethod
    def from_json(cls, text: str) -> ConceptRefs:
        refs = cls.__new__(cls)
        refs._refs, refs._json = None, text
        return refs

    def to_json(self) -> str:
        if self._json is None:
            self._json = json.dumps(self._refs)
        return self._json

    @property
    def refs(self) -> tuple[ConceptRef, ...]:
        if self._refs is None:
            self._refs = tuple(
                ConceptRef(uid, name, normalized, _KINDS[kind], tuple(aliases))
                for uid, name, normalized, kind, aliases in json.loads(self._json or "[]")
            )
        return self._refs

    @overload
    def __getitem__(self, index: int) -> ConceptRef: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ConceptRef, ...]: ...

    def __getitem__(self, index: int | slice) -> ConceptRef | tuple[ConceptRef, ...]:
        return self.refs[index]

    def __iter__(self) -> Iterator[ConceptRef]:
        return iter(self.refs)

    def __len__(self) -> int:
        return len(self.refs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConceptRefs) and self.refs == other.refs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ConceptRefs({list(self.refs)!r})"


class _Row:
    """The codec shared by the row models (a base without state, so the models keep their slots)."""

    __slots__ = ()

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The batch's column names, in field order."""
        return tuple(c.name for c in _codec(cls))

    @classmethod
    def encode(cls, rows: Sequence[Self]) -> dict[str, Any]:
        """The column batch of ``rows`` (lists, and a float32 matrix for a vector field)."""
        return {c.name: c.encode([getattr(row, c.attr) for row in rows]) for c in _codec(cls)}

    @classmethod
    def decode(cls, batch: Mapping[str, Any]) -> list[Self]:
        """The rows of a column batch; its columns must be exactly this model's.

        Raises:
            RowSchemaError: a column is missing, unexpected, or of another length than the others.
        """
        if not batch:  # Ray Data may hand an empty block over without its schema
            return []
        codec = _codec(cls)
        names = {c.name for c in codec}
        for name in batch:
            if name not in names:
                raise RowSchemaError(f"{cls.__name__} batch has an unexpected column {name!r}")
        values = []
        size = -1
        for c in codec:
            if c.name not in batch:
                raise RowSchemaError(f"{cls.__name__} batch is missing the column {c.name!r}")
            column = c.decode(batch[c.name])
            if size not in (-1, len(column)):
                raise RowSchemaError(
                    f"{cls.__name__} batch column {c.name!r} has {len(column)} rows, the others {size}"
                )
            size = len(column)
            values.append(column)
        return [cls(*fields) for fields in zip(*values, strict=True)]

    @classmethod
    def items(cls, rows: Sequence[Self]) -> list[dict[str, Any]]:
        """The encoded rows one dict each, for ``ray.data.from_items``."""
        batch = cls.encode(rows)
        return [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]


@dataclass(slots=True)
class SourceRow(_Row):
    """A file for the extract stage to fetch: a local path (``ref``) or an object-store key."""

    job_id: str
    ref: str
    name: str
    source: IngestSource
    bucket: str | None
    key: str | None


@dataclass(slots=True)
class ChunkRow(_Row):
    """A chunk out of the extract stage, with what the writer and the driver need of its item.

    ``item_chunks`` tells the driver when all of an item's chunks are written; ``structure`` is the
    item's structure figures (``StructureFigures.to_dict()``; ``{}`` on status rows), one dict shared
    by the rows of an item once decoded: read it, do not change it.
    """

    job_id: str
    item_uid: str  # "" on the status row of a file that failed before its item was known
    chunk_uid: str  # "" on a status row
    sequence: int
    text: str
    heading_path: list[str]
    page_start: int | None
    page_end: int | None
    token_count: int
    concepts: ConceptRefs = field(metadata={"column": "concepts_json"})
    item_chunks: int
    item_pages: int
    structure: dict[str, Any] = field(metadata={"column": "item_structure_json"})
    status: RowStatus
    error: str | None
    extract_node: str

    @classmethod
    def of_chunks(
        cls,
        job_id: str,
        item_uid: str,
        chunks: Sequence[TextChunk],
        mentions: Sequence[ChunkConcepts],
        page_count: int,
        structure: dict[str, Any],
    ) -> list[ChunkRow]:
        """The rows of an item's chunks, each with the concepts it mentions."""
        by_sequence = {m.sequence: m.concepts for m in mentions}
        return [
            ChunkRow(
                job_id=job_id,
                item_uid=item_uid,
                chunk_uid=chunk_uid(item_uid, chunk.sequence),
                sequence=chunk.sequence,
                text=chunk.text,
                heading_path=list(chunk.heading_path),
                page_start=chunk.page_start,
                page_end=chunk.page_end,
                token_count=chunk.token_count,
                concepts=ConceptRefs(ConceptRef.of(m) for m in by_sequence.get(chunk.sequence, ())),
                item_chunks=len(chunks),
                item_pages=page_count,
                structure=structure,
                status=RowStatus.CHUNK,
                error=None,
                extract_node="",
            )
            for chunk in chunks
        ]

    @classmethod
    def status_row(cls, job_id: str, item_uid: str, status: RowStatus, error: str | None = None) -> ChunkRow:
        """The one row of a file that yields no chunks."""
        return ChunkRow(job_id, item_uid, "", -1, "", [], None, None, 0, ConceptRefs(), 0, 0, {}, status, error, "")


@dataclass(slots=True)
class EmbeddedRow(ChunkRow):
    """A chunk row with its vector (zeros on a status row) and the embed stage's share of time per chunk."""

    vector: np.ndarray
    embed_seconds: float
    embed_node: str

    @classmethod
    def of(cls, row: ChunkRow, vector: np.ndarray, embed_seconds: float, embed_node: str) -> EmbeddedRow:
        fields = (*_chunk_fields(row), vector, embed_seconds, embed_node)  # positional: cheaper than keywords
        return cls(*fields)


_chunk_fields: Callable[[ChunkRow], Any] = attrgetter(*(f.name for f in dataclasses.fields(ChunkRow)))


@dataclass(slots=True)
class WrittenRow(_Row):
    """What the write stage did with a row: the driver counts these to finish each item.

    ``status`` is ``failed`` (with the error) for a chunk whose item could not be written.
    """

    job_id: str
    item_uid: str
    chunk_uid: str
    item_chunks: int
    item_pages: int
    structure: dict[str, Any] = field(metadata={"column": "item_structure_json"})
    status: RowStatus
    error: str | None
    embed_seconds: float
    extract_node: str
    embed_node: str
    write_node: str


# -------------------------------------------------------------------------------------------- codec


@dataclass(frozen=True, slots=True)
class _ColumnCodec:
    name: str  # the column
    attr: str  # the field
    encode: Callable[[list[Any]], Any]  # a field's values → the column
    decode: Callable[[Any], list[Any]]  # a column (array or list) → the field's values


def _values(column: Any) -> list[Any]:
    """A column's cells as Python objects (``tolist`` unboxes numpy scalars in one pass)."""
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def _strs(column: Any) -> list[str]:
    return [str(v) for v in _values(column)]


def _optional_strs(column: Any) -> list[str | None]:
    return [str(v) or None for v in _values(column)]


def _ints(column: Any) -> list[int]:
    return [int(v) for v in _values(column)]


def _optional_ints(column: Any) -> list[int | None]:
    return [int(v) or None for v in _values(column)]


def _floats(column: Any) -> list[float]:
    return [float(v) for v in _values(column)]


def _str_lists(column: Any) -> list[list[str]]:
    # Arrow list columns arrive as an object array of arrays (a 2-D array if all are one length).
    return [[str(s) for s in _values(cell)] for cell in _values(column)]


def _structures_encode(values: list[dict[str, Any]]) -> list[str]:
    # an item's structure is one dict shared by all its rows: dumped once
    done: dict[int, str] = {}
    out = []
    for value in values:
        text = done.get(id(value))
        if text is None:
            text = done[id(value)] = json.dumps(value)
        out.append(text)
    return out


def _structures_decode(column: Any) -> list[dict[str, Any]]:
    # equal texts (an item's structure on each of its rows) are parsed once, into one shared dict
    done: dict[str, dict[str, Any]] = {}
    out = []
    for text in _strs(column):
        if text not in done:
            done[text] = json.loads(text) if text else {}
        out.append(done[text])
    return out


def _concepts_encode(values: list[ConceptRefs]) -> list[str]:
    return [v.to_json() for v in values]


def _concepts_decode(column: Any) -> list[ConceptRefs]:
    return [ConceptRefs.from_json(text) for text in _strs(column)]


def _vectors_encode(values: list[np.ndarray]) -> np.ndarray:
    if not values:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack(values).astype(np.float32, copy=False)


def _vectors_decode(column: Any) -> list[np.ndarray]:
    # a tensor column arrives as one 2-D array; a list of vectors (a batch built by hand) is stacked
    matrix = column if isinstance(column, np.ndarray) and column.ndim == 2 else None
    if matrix is None:
        cells = list(column)
        matrix = np.stack(cells) if cells else np.zeros((0, 0), dtype=np.float32)
    return list(matrix.astype(np.float32, copy=False))


_Codec = tuple[Callable[[list[Any]], Any], Callable[[Any], list[Any]]]


def _enum_codec(kind: type[StrEnum]) -> _Codec:
    members = {member.value: member for member in kind}

    def decode(column: Any) -> list[Any]:
        try:
            return [members[v] for v in _strs(column)]
        except KeyError as exc:
            raise RowSchemaError(f"{exc.args[0]!r} is not a {kind.__name__}") from None

    return (lambda values: [v.value for v in values]), decode


#: A field's type → (encode, decode) of its column.
_CODECS: dict[Any, _Codec] = {
    str: (list, _strs),
    str | None: (lambda values: [v or "" for v in values], _optional_strs),
    int: (list, _ints),
    int | None: (lambda values: [v or 0 for v in values], _optional_ints),
    float: (list, _floats),
    list[str]: (lambda values: [list(v) for v in values], _str_lists),
    ConceptRefs: (_concepts_encode, _concepts_decode),
    dict[str, Any]: (_structures_encode, _structures_decode),
    np.ndarray: (_vectors_encode, _vectors_decode),
    RowStatus: _enum_codec(RowStatus),
    IngestSource: _enum_codec(IngestSource),
}


_CODEC_OF: dict[type[_Row], tuple[_ColumnCodec, ...]] = {}


def _codec(model: type[_Row]) -> tuple[_ColumnCodec, ...]:
    """A model's columns, from its fields (in order; ``metadata["column"]`` renames one) and their types."""
    codec = _CODEC_OF.get(model)
    if codec is None:
        codec = _CODEC_OF[model] = _build_codec(model)
    return codec


def _build_codec(model: type[_Row]) -> tuple[_ColumnCodec, ...]:
    hints = get_type_hints(model)
    out = []
    for f in dataclasses.fields(model):  # type: ignore[arg-type]
        if hints[f.name] not in _CODECS:
            raise TypeError(f"{model.__name__}.{f.name}: no column codec for {hints[f.name]!r}")
        encode, decode = _CODECS[hints[f.name]]
        out.append(_ColumnCodec(f.metadata.get("column", f.name), f.name, encode, decode))
    return tuple(out)
