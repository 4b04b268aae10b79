"""Stage sizing and chunk caps: pure functions of the cluster and the model."""

from __future__ import annotations

import pytest

from jobs.plan import fit_chunking, plan_stages
from schemas.knowledge import LibraryType, chunking_defaults

pytestmark = pytest.mark.unit


def test_cpu_plan_overlaps_stages_on_two_cores() -> None:
    plan = plan_stages(2, 0, embedded_stores=True)
    assert plan.embed_gpus == 0 and plan.write_concurrency == 1
    # the three stages fit on two CPUs at once, so extraction and writes overlap with embedding
    assert plan.extract_cpus * plan.extract_concurrency + plan.embed_cpus + plan.write_cpus <= 2


def test_gpu_plan_scales_embedding_with_gpus_and_writes_with_servers() -> None:
    plan = plan_stages(64, 4, embedded_stores=False)
    assert (plan.embed_concurrency, plan.embed_gpus) == (4, 1)
    assert plan.write_concurrency > 1
    assert plan_stages(64, 4, embedded_stores=True).write_concurrency == 1


@pytest.mark.parametrize("library_type", list(LibraryType))
def test_chunks_fit_the_model_window(library_type: LibraryType) -> None:
    fitted = fit_chunking(chunking_defaults(library_type), 256)
    assert fitted.max_tokens <= 256 and fitted.target_tokens <= fitted.max_tokens
    assert fitted.overlap_tokens < fitted.target_tokens
    assert fitted.strategy == chunking_defaults(library_type).strategy


def test_node_spread_places_actors_on_the_nodes_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each new actor of a stage asks (softly) for the next alive node with CPUs; one node: nothing."""
    import ray

    from jobs.stages import NodeSpread

    a, b, c, d = ("a" * 56, "b" * 56, "c" * 56, "d" * 56)  # node ids are 28-byte hex strings
    nodes = [
        {"NodeID": b, "Alive": True, "Resources": {"CPU": 4.0}},
        {"NodeID": a, "Alive": True, "Resources": {"CPU": 4.0}},
        {"NodeID": c, "Alive": False, "Resources": {"CPU": 4.0}},  # dead
        {"NodeID": d, "Alive": True, "Resources": {"memory": 1.0}},  # no CPU to run a stage
    ]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    here = type("Context", (), {"get_node_id": lambda self: a})()  # the driver runs on node a: it goes last
    monkeypatch.setattr(ray, "get_runtime_context", lambda: here)
    spread = NodeSpread()
    placed = [spread()["scheduling_strategy"] for _ in range(3)]
    assert [s.node_id for s in placed] == [b, a, b] and all(s.soft for s in placed)
    monkeypatch.setattr(ray, "nodes", lambda: nodes[:1])
    assert NodeSpread()() == {}


def test_a_small_job_runs_in_process_and_a_large_one_on_ray() -> None:
    from jobs.plan import IngestExecutor, IngestOptions, choose_executor, estimate_chunks

    options = IngestOptions(library="fate")
    # the README's folder: 553 kB of Markdown and 773 kB of HTML gave 1,848 chunks
    fate = [("Fate-Condensed.md", 135_498), ("accelerated.md", 72_302), ("core.html", 773_242), ("toolkit.md", 345_527)]
    assert 1000 <= estimate_chunks(fate) <= options.local_max_chunks
    executor, why = choose_executor(options, fate, cluster=None)
    assert executor is IngestExecutor.LOCAL and "chunks" in why
    big = fate * 4
    executor, why = choose_executor(options, big, cluster=None)
    assert executor is IngestExecutor.RAY and f"over {options.local_max_chunks}" in why
    # a named cluster always takes Ray; a forced executor is kept whatever the size
    assert choose_executor(options, fate, cluster="ray://head:10001")[0] is IngestExecutor.RAY
    forced = IngestOptions(library="fate", executor=IngestExecutor.RAY)
    assert choose_executor(forced, fate, cluster=None) == (IngestExecutor.RAY, "asked for (ray)")
    local = IngestOptions(library="fate", executor=IngestExecutor.LOCAL)
    assert choose_executor(local, big, cluster="ray://head:10001")[0] is IngestExecutor.LOCAL
    # files of types the pipeline does not read add nothing; an image is one chunk
    assert estimate_chunks([("notes.xyz", 10_000_000), ("map.png", 5_000_000)]) == 1


def test_an_object_jobs_declared_size_reaches_the_executor_choice() -> None:
    """An s3_key or source-bucket job is sized by its file_size (checked against the object at the door), not
    taken for a one-chunk file: a 40 MB book from a library service is a job for Ray."""
    from jobs.pipeline import _source_of
    from jobs.plan import IngestExecutor, IngestOptions, choose_executor
    from schemas.knowledge import IngestJob, IngestSource

    copied = IngestJob(
        origin=IngestSource.SOURCE_BUCKET,
        source_ref="doc-1",
        s3_key="books/core.pdf",
        raw_key="items/item_1/original/core.pdf",
        file_size=40_000_000,
    )
    in_product = IngestJob(
        origin=IngestSource.S3, source_ref="s3://lore/core.pdf", s3_key="core.pdf", file_size=40_000_000
    )
    options = IngestOptions(library="srd")
    for job in (copied, in_product):
        file = _source_of(job)
        assert file.size == 40_000_000
        assert choose_executor(options, [(file.name, file.size)], cluster=None)[0] is IngestExecutor.RAY
