"""The ingest job end to end on local Ray and the embedded stores, with real files from the corpus.

One data folder is shared by the tests of this module, in order: a first ingest with bad files among
good ones, an unchanged re-ingest, and a changed file that supersedes its old version.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.pipeline import IngestReport, run_ingest, start_ray
from jobs.plan import IngestOptions
from schemas.common import JobStatus
from schemas.knowledge import ChunkStatus, ItemStatus, LibraryType
from schemas.settings import Settings, load_settings
from search.service import open_searcher
from stores.blob.layout import chunk_key
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store, open_text_index, open_vector_index
from tests.corpus import corpus_file

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

NEW_SECTION = "\n\n# Skyship Duels\n\nWhen two skyships duel, the captain with the brass astrolabe rolls first.\n"


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    import ray

    started = start_ray()
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ingest")
    books = root / "books"
    books.mkdir()
    shutil.copy(corpus_file("rulebooks/fate-srd/fate-accelerated-SRD.md"), books / "fate-accelerated.md")
    shutil.copy(corpus_file("pdfs/py-pdf-sample-files/pdflatex-4-pages.pdf"), books / "four-pages.pdf")
    shutil.copy(corpus_file("pdfs/py-pdf-sample-files/libreoffice-writer-password.pdf"), books / "locked.pdf")
    (books / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    (books / "empty.md").write_bytes(b"")
    (books / "notes.xyz").write_text("an unsupported format")
    return {"root": root, "books": books, "data": root / "data"}


@pytest.fixture(scope="module")
def settings(workspace: dict[str, Path]) -> Settings:
    return load_settings(data_dir=workspace["data"])


def _ingest(workspace: dict[str, Path], settings: Settings) -> IngestReport:
    options = IngestOptions(library="fate", library_type=LibraryType.RULEBOOK)
    return run_ingest([str(workspace["books"])], options, settings=settings)


def _by_name(report: IngestReport) -> dict[str, object]:
    return {Path(f.source_ref).name: f for f in report.files}


def _counts(settings: Settings) -> tuple[int, int, int]:
    graph = open_graph_store(settings)
    text = open_text_index(settings)
    vectors = open_vector_index(settings)
    try:
        chunks = graph.run("MATCH (c:Chunk) RETURN count(c) AS n")[0]["n"]
        return chunks, text.count(), vectors.count("chunks")
    finally:
        for store in (graph, text, vectors):
            store.close()


def test_first_ingest_keeps_going_past_bad_files(
    ray_local: None, workspace: dict[str, Path], settings: Settings
) -> None:
    report = _ingest(workspace, settings)
    outcomes = _by_name(report)
    assert {name: o.status for name, o in outcomes.items()} == {
        "fate-accelerated.md": "completed",
        "four-pages.pdf": "completed",
        "locked.pdf": "failed",
        "corrupt.pdf": "failed",
        "empty.md": "failed",
        "notes.xyz": "failed",
    }
    assert "password" in outcomes["locked.pdf"].error.lower()
    assert "empty" in outcomes["empty.md"].error.lower()
    assert "unsupported" in outcomes["notes.xyz"].error.lower()
    assert outcomes["four-pages.pdf"].pages == 4
    assert outcomes["fate-accelerated.md"].chunks > 50

    chunks, text_docs, vectors = _counts(settings)
    assert chunks == text_docs == vectors == report.chunks

    graph = open_graph_store(settings)
    try:
        catalog = Catalog(graph)
        jobs = {Path(j.source_ref).name: j for j in catalog.list_jobs()}
        assert jobs["fate-accelerated.md"].status is JobStatus.COMPLETED
        assert jobs["fate-accelerated.md"].embedding_model == "all-MiniLM-L6-v2"
        assert jobs["fate-accelerated.md"].chunks_created == outcomes["fate-accelerated.md"].chunks
        assert jobs["locked.pdf"].status is JobStatus.FAILED and jobs["locked.pdf"].error
        concepts = {c["normalized_name"] for c in catalog.list_concepts(limit=500)}
        assert {"fate point", "aspect", "stress"} <= concepts
        related = graph.run("MATCH (:Concept)-[r:RELATED_TO]->(:Concept) RETURN count(r) AS n")[0]["n"]
        assert related > 0
    finally:
        graph.close()

    with open_searcher(settings) as searcher:
        hits = searcher.search("what happens to my fate points at the end of a session", limit=5)
    assert hits, "search found nothing"
    assert any("refresh" in h.text.lower() for h in hits)
    top = hits[0]
    assert top.title and top.heading_path and top.chunk_id
    assert set(top.scores) & {"text", "vector"}


def test_unchanged_reingest_is_skipped_and_writes_nothing(
    ray_local: None, workspace: dict[str, Path], settings: Settings
) -> None:
    before = _counts(settings)
    report = _ingest(workspace, settings)
    outcomes = _by_name(report)
    assert outcomes["fate-accelerated.md"].status == "skipped"
    assert outcomes["four-pages.pdf"].status == "skipped"
    assert outcomes["corrupt.pdf"].status == "failed"
    assert _counts(settings) == before


def test_changed_file_supersedes_its_old_version(
    ray_local: None, workspace: dict[str, Path], settings: Settings
) -> None:
    book = workspace["books"] / "fate-accelerated.md"
    graph = open_graph_store(settings)
    catalog = Catalog(graph)
    try:
        (old,) = catalog.items_for_source(catalog.find_library("fate").uid, str(book.resolve()))
        old_chunk = next(
            iter(
                catalog.get_chunks(
                    [
                        c["uid"]
                        for c in graph.run(
                            "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk) RETURN c.uid AS uid LIMIT 1",
                            {"uid": old.uid},
                        )
                    ]
                ).values()
            )
        )
    finally:
        graph.close()

    book.write_text(book.read_text(encoding="utf-8") + NEW_SECTION, encoding="utf-8")
    report = _ingest(workspace, settings)
    outcome = _by_name(report)["fate-accelerated.md"]
    assert outcome.status == "completed" and outcome.item_uid != old.uid

    graph = open_graph_store(settings)
    catalog = Catalog(graph)
    try:
        library = catalog.find_library("fate")
        versions = catalog.items_for_source(library.uid, str(book.resolve()))
        assert [(v.version, v.status) for v in versions] == [(2, ItemStatus.READY), (1, ItemStatus.SUPERSEDED)]
        assert versions[0].supersedes_uid == old.uid and versions[1].superseded_by_uid == versions[0].uid
        kept = catalog.get_chunks([old_chunk.uid])[old_chunk.uid]
        assert kept.status is ChunkStatus.SUPERSEDED  # marked, never deleted
    finally:
        graph.close()
    blob = open_blob_store(settings)
    assert blob.get(chunk_key(old.uid, old_chunk.sequence)).decode("utf-8")  # citations still resolve
    blob.close()

    with open_searcher(settings) as searcher:
        hits = searcher.search("skyship duel brass astrolabe", limit=5)
        assert hits[0].item_uid == outcome.item_uid and "astrolabe" in hits[0].text
        for hit in searcher.search("fate points refresh at the end of a session", limit=10):
            assert hit.item_uid != old.uid


def test_search_command_prints_citations_as_json(
    ray_local: None, workspace: dict[str, Path], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from lorekeeper.cli import app
    from schemas.settings import get_settings

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(workspace["data"]))
    get_settings.cache_clear()
    runner = CliRunner()
    result = runner.invoke(app, ["search", "how many fate points do you start with", "--json", "--limit", "3"])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(hits) == 3
    for hit in hits:
        assert {"text", "title", "page_start", "page_end", "heading_path", "chunk_id", "score"} <= set(hit)

    queries = workspace["root"] / "queries.jsonl"
    queries.write_text(
        json.dumps({"id": "q1", "query": "stress and consequences"})
        + "\n"
        + json.dumps({"id": "q2", "query": "skyship astrolabe"})
        + "\n"
    )
    result = runner.invoke(app, ["search", "--queries", str(queries), "--json", "--limit", "2"])
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [a["id"] for a in answers] == ["q1", "q2"] and all(len(a["hits"]) == 2 for a in answers)


def test_ingest_from_an_s3_prefix(ray_local: None, tmp_path: Path, nanio_server: object) -> None:
    from stores.blob.s3 import S3BlobStore

    bucket = "rulebooks"
    s3 = load_settings(
        data_dir=tmp_path / "data",
        blob_url=f"s3://lorekeeper?endpoint=http://{nanio_server.endpoint}&region={nanio_server.region}",
        blob_access_key=nanio_server.access_key,
        blob_secret_key=nanio_server.secret_key,
    )
    source = S3BlobStore.from_location(s3.blob_location().model_copy(update={"bucket": bucket}), timeout_s=5)
    source.ensure_bucket()
    source.put("core/four-pages.pdf", corpus_file("pdfs/py-pdf-sample-files/pdflatex-4-pages.pdf").read_bytes())
    source.put("core/lore.md", b"# Lanterns\n\nThe lantern guild lights the harbour every dusk.\n")
    source.put("other/skip.md", b"# Not under the prefix\n")
    report = run_ingest([f"s3://{bucket}/core/"], IngestOptions(library="s3-books"), settings=s3)
    assert sorted((Path(f.source_ref).name, f.status) for f in report.files) == [
        ("four-pages.pdf", "completed"),
        ("lore.md", "completed"),
    ]
    assert all(f.source_ref.startswith(f"s3://{bucket}/core/") for f in report.files)
    blob = open_blob_store(s3)
    originals = [info.key for info in blob.list("items/")]
    assert any(key.endswith("/original/lore.md") for key in originals)
    blob.close()
