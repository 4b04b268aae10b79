"""The two executors of an ingest write the same thing: the same folder run in this process and on local
Ray ends with the same items, chunks (ids, text, pages), index documents and vectors, the same file
outcomes, and a timeline saying which path ran."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.pipeline import IngestReport, run_ingest
from jobs.plan import IngestExecutor, IngestOptions
from schemas.knowledge import Library, LibraryType
from schemas.settings import Settings, load_settings
from stores.catalog import Catalog
from stores.factory import open_graph_store, open_text_index, open_vector_index
from tests.corpus import corpus_file

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("books")
    shutil.copy(corpus_file("rulebooks/fate-srd/fate-accelerated-SRD.md"), folder / "fate-accelerated.md")
    shutil.copy(corpus_file("pdfs/py-pdf-sample-files/pdflatex-4-pages.pdf"), folder / "four-pages.pdf")
    (folder / "empty.md").write_bytes(b"")
    return folder


def _run(books: Path, data: Path, executor: IngestExecutor) -> tuple[IngestReport, Settings]:
    settings = load_settings(data_dir=data)
    options = IngestOptions(library="fate", library_type=LibraryType.RULEBOOK, executor=executor)
    return run_ingest([str(books)], options, settings=settings), settings


def _stored(settings: Settings) -> dict[str, Any]:
    graph = open_graph_store(settings)
    text = open_text_index(settings)
    vectors = open_vector_index(settings)
    try:
        chunks = graph.run(
            "MATCH (i:Item)-[:HAS_CHUNK]->(c:Chunk) RETURN i.uid AS item, i.status AS status, c.uid AS uid, "
            "c.content_hash AS hash, c.page_start AS page ORDER BY uid"
        )
        ids = [row["uid"] for row in chunks]
        sample = sorted(vectors.get("chunks", ids[::25]), key=lambda point: point.id)
        return {
            "chunks": [(r["item"], r["status"], r["uid"], r["hash"], r["page"]) for r in chunks],
            "text": text.count(),
            "vectors": vectors.count("chunks"),
            "sample": [(point.id, np.asarray(point.vector)) for point in sample],
        }
    finally:
        for store in (graph, text, vectors):
            store.close()


def _same_library(settings: Settings, uid: str) -> None:
    """The library of the first run, created with its uid (item and chunk ids derive from it)."""
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    graph = open_graph_store(settings)
    try:
        graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        Catalog(graph).save_library(Library(uid=uid, name="fate", type=LibraryType.RULEBOOK))
    finally:
        graph.close()


def test_in_process_and_ray_write_the_same_chunks(books: Path, tmp_path: Path) -> None:
    local, local_settings = _run(books, tmp_path / "local", IngestExecutor.LOCAL)
    _same_library(load_settings(data_dir=tmp_path / "ray"), local.library_uid)
    ray_report, ray_settings = _run(books, tmp_path / "ray", IngestExecutor.RAY)

    assert (local.executor, ray_report.executor) == ("local", "ray")
    outcomes = {Path(f.source_ref).name: (f.status, f.item_uid, f.chunks, f.pages) for f in local.files}
    assert outcomes == {Path(f.source_ref).name: (f.status, f.item_uid, f.chunks, f.pages) for f in ray_report.files}
    assert outcomes["fate-accelerated.md"][0] == "completed" and outcomes["fate-accelerated.md"][2] > 50
    assert outcomes["four-pages.pdf"][0] == "completed" and outcomes["empty.md"][0] == "failed"

    here, there = _stored(local_settings), _stored(ray_settings)
    assert here["chunks"] == there["chunks"] and len(here["chunks"]) == local.chunks
    assert {status for _, status, *_ in here["chunks"]} == {"ready"}
    assert here["text"] == there["text"] == here["vectors"] == there["vectors"] == local.chunks
    assert [uid for uid, _ in here["sample"]] == [uid for uid, _ in there["sample"]] and here["sample"]
    for (_, mine), (_, theirs) in zip(here["sample"], there["sample"], strict=True):
        assert np.allclose(mine, theirs, atol=1e-4)  # batches of the same size, the same model

    # each run says where it went, on one clock: Ray's phases only on Ray, the model load timed here
    phases, ray_phases = local.timeline_dict()["phases"], ray_report.timeline_dict()["phases"]
    assert {"model_load", "stage_opening", "pipeline"} <= set(phases) and "ray_start" not in phases
    assert {"ray_start", "ray_data_planning", "first_batch", "pipeline"} <= set(ray_phases)
    for report in (local, ray_report):
        timeline = report.timeline_dict()
        assert 0 < timeline["first_file_done_s"] <= timeline["first_searchable_s"] <= timeline["total_s"]
