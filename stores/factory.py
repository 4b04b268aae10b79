"""One factory from settings: the resolved location of each family picks its backend class.

Backend modules are imported lazily, so a process that only needs one family does not load the
others' drivers, and each backend opens its client lazily in the process that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.settings import (
    BlobBackend,
    GraphBackend,
    Settings,
    TextBackend,
    TextLocation,
    VectorBackend,
)
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from stores.text.base import TextIndex
from stores.vector.base import VectorIndex


def open_blob_store(settings: Settings) -> BlobStore:
    location = settings.blob_location()
    if location.backend is BlobBackend.S3:
        from stores.blob.s3 import S3BlobStore

        return S3BlobStore.from_location(location, timeout_s=settings.store_timeout_s)
    from stores.blob.local import LocalBlobStore

    return LocalBlobStore.from_location(location, timeout_s=settings.store_timeout_s)


def open_source_blob_store(settings: Settings) -> BlobStore | None:
    """The bucket ingest copies from (``LOREKEEPER_SOURCE_BLOB_URL``), or None when it is not set."""
    location = settings.source_blob_location()
    if location is None:
        return None
    if location.backend is BlobBackend.S3:
        from stores.blob.s3 import S3BlobStore

        return S3BlobStore.from_location(
            location,
            timeout_s=settings.store_timeout_s,
            credential_vars="LOREKEEPER_SOURCE_BLOB_ACCESS_KEY / LOREKEEPER_SOURCE_BLOB_SECRET_KEY",
        )
    from stores.blob.local import LocalBlobStore

    return LocalBlobStore.from_location(location, timeout_s=settings.store_timeout_s)


def open_text_index(settings: Settings) -> TextIndex:
    """The knowledge full-text index (chunks)."""
    return _text_index(settings.text_location(), settings)


def open_memory_text_index(settings: Settings) -> TextIndex:
    """The full-text index of campaign recall (memory records), beside the knowledge one."""
    return _text_index(settings.memory_text_location(), settings)


def _text_index(location: TextLocation, settings: Settings) -> TextIndex:
    if location.backend is TextBackend.OPENSEARCH:
        from stores.text.opensearch import OpenSearchTextIndex

        return OpenSearchTextIndex.from_location(location, timeout_s=settings.store_timeout_s)
    from stores.text.tantivy import TantivyTextIndex

    return TantivyTextIndex.from_location(location, timeout_s=settings.store_timeout_s)


def open_vector_index(settings: Settings) -> VectorIndex:
    location = settings.vector_location()
    if location.backend is VectorBackend.QDRANT_EDGE:
        from stores.vector.edge import QdrantEdgeVectorIndex

        return QdrantEdgeVectorIndex.from_location(location, timeout_s=settings.store_timeout_s)
    from stores.vector.qdrant import QdrantVectorIndex

    return QdrantVectorIndex.from_location(location, timeout_s=settings.store_timeout_s)


def open_graph_store(settings: Settings) -> GraphStore:
    location = settings.graph_location()
    if location.backend is GraphBackend.EMBEDDED:
        from stores.graph.falkordb import EmbeddedFalkorGraphStore

        return EmbeddedFalkorGraphStore.from_location(location, timeout_s=settings.store_timeout_s)
    from stores.graph.neo4j import Neo4jGraphStore

    return Neo4jGraphStore.from_location(location, timeout_s=settings.store_timeout_s)


@dataclass
class Stores:
    """The four configured stores, opened together and closed together."""

    blob: BlobStore
    text: TextIndex
    vector: VectorIndex
    graph: GraphStore

    def close(self) -> None:
        for store in (self.blob, self.text, self.vector, self.graph):
            store.close()

    def __enter__(self) -> Stores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_stores(settings: Settings) -> Stores:
    """Every store family as the settings configure it (nothing connects until first use)."""
    return Stores(
        blob=open_blob_store(settings),
        text=open_text_index(settings),
        vector=open_vector_index(settings),
        graph=open_graph_store(settings),
    )
