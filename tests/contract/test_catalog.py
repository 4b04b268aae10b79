"""The library catalog over the graph protocol: the queries ingestion and search rely on, on every graph
backend that runs here (the embedded FalkorDB always, a real Neo4j under ``integration``)."""

from __future__ import annotations

import pytest

from schemas.common import JobStatus, content_id, utc_now
from schemas.errors import NotFound
from schemas.knowledge import (
    Chunk,
    ChunkStatus,
    Collection,
    Concept,
    FileType,
    IngestJob,
    IngestProgress,
    IngestSource,
    Item,
    ItemStatus,
    Library,
    LibraryType,
)
from stores.catalog import Catalog, from_props, to_props
from stores.graph.base import GraphStore
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

pytestmark = pytest.mark.contract

SHA_A = "a" * 64
SHA_B = "b" * 64


class CatalogContract:
    @pytest.fixture
    def catalog(self, graph: GraphStore) -> Catalog:
        graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        return Catalog(graph)

    def _item(self, library: Library, sha: str, *, version: int = 1, supersedes: str | None = None) -> Item:
        return Item(
            uid=content_id("item", f"{library.uid}:{sha}"),
            library_uid=library.uid,
            title="Core Rules",
            file_type=FileType.PDF,
            size_bytes=10,
            content_hash=sha,
            source_ref="/books/core.pdf",
            version=version,
            supersedes_uid=supersedes,
            status=ItemStatus.PROCESSING,
        )

    def _chunks(self, item: Item, n: int) -> list[Chunk]:
        return [
            Chunk(
                uid=content_id("chunk", f"{item.uid}:{i}"),
                item_uid=item.uid,
                sequence=i,
                text_key=f"items/{item.uid}/chunks/chunk_{i:03d}.txt",
                heading_path=["Combat", f"Section {i}"],
                page_start=i + 1,
                page_end=i + 1,
                token_count=20,
            )
            for i in range(n)
        ]

    def test_libraries_and_collections(self, catalog: Catalog) -> None:
        library = catalog.save_library(Library(name="Core", type=LibraryType.RULEBOOK))
        catalog.save_library(library)  # idempotent
        assert catalog.find_library("Core") == library
        assert [lib.uid for lib in catalog.list_libraries()] == [library.uid]
        collection = catalog.save_collection(Collection(library_uid=library.uid, name="Box set"))
        assert catalog.find_collection(library.uid, "Box set") == collection
        assert catalog.list_collections(library.uid) == [collection]
        with pytest.raises(NotFound):
            catalog.get_library("lib_missing")

    def test_items_versions_and_visibility(self, catalog: Catalog) -> None:
        library = catalog.save_library(Library(name="Core", type=LibraryType.RULEBOOK))
        old = catalog.save_item(self._item(library, SHA_A))
        catalog.save_chunks(self._chunks(old, 3))
        catalog.save_chunks(self._chunks(old, 3))  # idempotent
        assert catalog.count_chunks(old.uid) == 3
        assert catalog.visible_items([old.uid]) == set()  # processing: not searchable yet
        catalog.set_item_status(old.uid, ItemStatus.READY)
        assert catalog.visible_items([old.uid, "item_other"]) == {old.uid}

        new = catalog.save_item(self._item(library, SHA_B, version=2, supersedes=old.uid))
        catalog.save_chunks(self._chunks(new, 2))
        assert catalog.supersede(old.uid, new.uid) == 3
        catalog.set_item_status(new.uid, ItemStatus.READY)
        versions = catalog.items_for_source(library.uid, "/books/core.pdf")
        assert [(v.version, v.status) for v in versions] == [(2, ItemStatus.READY), (1, ItemStatus.SUPERSEDED)]
        assert versions[1].superseded_by_uid == new.uid
        assert catalog.visible_items([old.uid, new.uid]) == {new.uid}
        old_chunks = catalog.get_chunks([c.uid for c in self._chunks(old, 3)])
        assert {c.status for c in old_chunks.values()} == {ChunkStatus.SUPERSEDED}
        assert old_chunks[self._chunks(old, 1)[0].uid].heading_path == ["Combat", "Section 0"]

    def test_mentions_and_related_weights(self, catalog: Catalog) -> None:
        library = catalog.save_library(Library(name="Core", type=LibraryType.RULEBOOK))
        item = catalog.save_item(self._item(library, SHA_A))
        chunks = self._chunks(item, 3)
        catalog.save_chunks(chunks)
        aspect = Concept(uid="concept_aspect", name="Aspect")
        fate = Concept(uid="concept_fate_point", name="Fate Point")
        stress = Concept(uid="concept_stress", name="Stress")
        mentions = [
            (chunks[0].uid, aspect.uid),
            (chunks[0].uid, fate.uid),
            (chunks[1].uid, aspect.uid),
            (chunks[1].uid, fate.uid),
            (chunks[2].uid, stress.uid),
        ]
        catalog.save_mentions([aspect, fate, stress], mentions)
        catalog.save_mentions([aspect, fate, stress], mentions)  # idempotent
        assert catalog.refresh_related(item.uid) == 1
        catalog.refresh_related(item.uid)
        rows = catalog.graph.run(
            "MATCH (a:Concept)-[r:RELATED_TO]->(b:Concept) RETURN a.uid AS a, b.uid AS b, r.weight AS w"
        )
        assert rows == [{"a": aspect.uid, "b": fate.uid, "w": 2}]
        listed = {c["normalized_name"]: c["mentions"] for c in catalog.list_concepts()}
        assert listed == {"aspect": 2, "fate point": 2, "stress": 1}
        assert [c.uid for c in catalog.concepts_by_name(["fate point"])] == [fate.uid]

    def test_jobs_round_trip_and_filter(self, catalog: Catalog) -> None:
        job = IngestJob(source=IngestSource.PATH, source_ref="/books/core.pdf")
        catalog.save_job(job)
        assert catalog.get_job(job.id) == job
        started = job.validated_copy(
            status=JobStatus.PROCESSING, started_at=utc_now(), progress=IngestProgress(fraction=0.4, stage="embedding")
        )
        catalog.save_job(started)
        assert catalog.get_job(job.id).progress.fraction == 0.4
        other = catalog.save_job(IngestJob(source=IngestSource.PATH, source_ref="/books/other.pdf"))
        assert [j.id for j in catalog.list_jobs(status=JobStatus.PROCESSING)] == [job.id]
        assert {j.id for j in catalog.list_jobs()} == {job.id, other.id}
        with pytest.raises(NotFound):
            catalog.get_job("ingest_missing")


class TestCatalogEmbedded(CatalogContract):
    @pytest.fixture
    def graph(self, embedded_graph: GraphStore) -> GraphStore:
        return embedded_graph


@pytest.mark.integration
class TestCatalogNeo4j(CatalogContract):
    @pytest.fixture
    def graph(self, neo4j_graph: GraphStore) -> GraphStore:
        return neo4j_graph


def test_props_round_trip_nested_values() -> None:
    job = IngestJob(
        source=IngestSource.S3,
        source_ref="s3://b/k.pdf",
        s3_key="k.pdf",
        progress=IngestProgress(fraction=0.5, stage="chunking", message="page 3/9"),
    )
    props = to_props(job, key="id")
    assert props["uid"] == job.id and isinstance(props["progress_json"], str)
    assert from_props(IngestJob, props, key="id") == job
