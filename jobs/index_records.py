"""What ingestion (and ``reindex``) writes to the search indexes for a chunk: the text that is embedded,
and its full-text document and vector point with the keyword fields the filters use."""

from __future__ import annotations

from typing import Any

import numpy as np

from schemas.knowledge import Chunk, Item, Library
from stores.text.base import TextDocument
from stores.vector.base import VectorPoint


def embedding_text(heading_path: list[str], text: str) -> str:
    """What gets embedded: the heading path gives a short chunk the context a reader would have."""
    if heading_path:
        return " > ".join(heading_path) + "\n" + text
    return text


def index_records(
    library: Library, item: Item, chunk: Chunk, text: str, vector: Any, model: str
) -> tuple[TextDocument, VectorPoint]:
    """A chunk's full-text document and vector point: keyword fields for filters, citation data, the model.

    Ingestion and ``reindex`` both build index records here, so the two indexes always agree.
    """
    fields: dict[str, str | list[str]] = {
        "library": library.uid,
        "library_type": library.type.value,
        "item": item.uid,
        "classification": item.classification.value,
    }
    if item.collection_uid:
        fields["collection"] = item.collection_uid
    data = {
        "sequence": chunk.sequence,
        "page_start": chunk.page_start,
        "page_end": chunk.page_end,
        "heading_path": chunk.heading_path,
        "title": item.title,
        "token_count": chunk.token_count,
    }
    document = TextDocument(
        id=chunk.uid, text=text, title=item.title, heading=" > ".join(chunk.heading_path), fields=fields, data=data
    )
    point = VectorPoint(
        id=chunk.uid,
        vector=np.asarray(vector, dtype=np.float32).tolist(),
        payload={**fields, **data, "embedding_model": model},
    )
    return document, point
