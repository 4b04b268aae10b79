"""Re-ranking with a real sentence-transformers CrossEncoder: a tiny random-weight BERT built here and
saved to a temporary folder (nothing is fetched from a hub), then the search metrics it leaves behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY, generate_latest

from models.embedding import SentenceTransformerEmbedder, resolve_model_path
from models.rerank import CrossEncoderReranker, RerankConfig, resolve_reranker_path
from schemas.errors import ConfigError
from schemas.search import SearchRequest
from schemas.settings import load_settings
from search.hybrid import HybridSearcher
from search.service import open_searcher, reranker_from_settings
from tests.unit.test_search_hybrid import World, embedder, world  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def build_tiny_cross_encoder(folder: Path, *, seed: int = 7) -> Path:
    """A 2-layer BERT sequence classifier with one label and random weights, with MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def reranking(world: World, embedder: SentenceTransformerEmbedder, tiny_model: Path) -> Iterator[HybridSearcher]:  # noqa: F811
    settings = load_settings(data_dir=world.settings.data_dir, reranker_model=str(tiny_model), rerank_candidates=8)
    with open_searcher(settings) as searcher:
        searcher.embedder = embedder
        yield searcher


@pytest.mark.unit
def test_reranker_loads_offline_and_scores_pairs(tiny_model: Path) -> None:
    reranker = CrossEncoderReranker(RerankConfig(model=str(tiny_model)))
    assert reranker.name == tiny_model.name
    scores = reranker.score("what is an aspect", ["An aspect is a phrase.", "Airships cross the sky.", ""])
    assert scores.shape == (3,) and scores.dtype == np.float32 and np.isfinite(scores).all()
    assert reranker.score("q", []).shape == (0,)
    # the same pair scores the same, alone or in a batch
    alone = reranker.score("what is an aspect", ["Airships cross the sky."])
    assert alone[0] == pytest.approx(scores[1], abs=1e-5)


@pytest.mark.unit
def test_a_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LOREKEEPER_RERANKER_MODEL"):
        resolve_reranker_path(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="not a local model folder"):
        CrossEncoderReranker(RerankConfig(model="cross-encoder/ms-marco-MiniLM-L6-v2")).score("q", ["p"])
    assert reranker_from_settings(load_settings(data_dir=tmp_path)) is None


@pytest.mark.servers
def test_rerank_reorders_by_the_cross_encoder(reranking: HybridSearcher, tiny_model: Path) -> None:
    assert reranking.reranker is not None
    reference = CrossEncoderReranker(RerankConfig(model=str(tiny_model)))
    reordered = 0
    for query in ("how do I invoke an aspect", "stress and consequences", "ships over the city of towers"):
        fused = reranking.search(query, limit=8, rerank=False)
        hits = reranking.search(query, limit=8)
        assert {h.chunk_id for h in hits} == {h.chunk_id for h in fused}  # same candidates, new order
        expected = reference.score(query, [h.text for h in hits])
        assert [h.scores["rerank"] for h in hits] == pytest.approx(list(expected), abs=1e-5)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert [h.ranks["rerank"] for h in hits] == list(range(1, len(hits) + 1))
        assert all(h.reranker == tiny_model.name and h.fused_score is not None for h in hits)
        assert all({"vector", "text"} & set(h.ranks) for h in hits)  # the legs' ranks are kept
        assert all(h.reranker is None and "rerank" not in h.scores for h in fused)
        reordered += [h.chunk_id for h in hits] != [h.chunk_id for h in fused]
    assert reordered >= 1


@pytest.mark.servers
def test_rerank_reads_more_candidates_than_it_returns(reranking: HybridSearcher) -> None:
    top2 = reranking.search("aspect", limit=2)
    top8 = reranking.search("aspect", limit=8)
    assert [h.chunk_id for h in top2] == [h.chunk_id for h in top8[:2]]


@pytest.mark.servers
def test_rerank_true_without_a_model_is_refused(world: World) -> None:  # noqa: F811
    with (
        open_searcher(world.settings, reranker=None) as searcher,
        pytest.raises(ConfigError, match="no reranker is configured"),
    ):
        searcher.search_request(SearchRequest(query="aspect", rerank=True))


@pytest.mark.servers
def test_search_and_rerank_metrics_are_exposed(reranking: HybridSearcher, tiny_model: Path) -> None:
    def count(name: str, labels: dict[str, str]) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = {
        t: count("lorekeeper_search_duration_seconds_count", {"search_type": t})
        for t in ("vector", "text", "graph", "hybrid")
    }
    rerank_before = count("lorekeeper_rerank_duration_seconds_count", {"model": tiny_model.name})
    reranking.search("fate point", limit=3)
    for search_type, value in before.items():
        assert count("lorekeeper_search_duration_seconds_count", {"search_type": search_type}) == value + 1
    assert count("lorekeeper_rerank_duration_seconds_count", {"model": tiny_model.name}) == rerank_before + 1
    exposition = generate_latest(REGISTRY).decode()
    assert 'lorekeeper_search_duration_seconds_bucket{le="0.03",search_type="hybrid"}' in exposition
    assert "lorekeeper_rerank_duration_seconds_sum" in exposition
    # importing the module again (a reload, a worker) reuses the registered metrics
    import importlib

    import search.metrics

    reloaded = importlib.reload(search.metrics)
    assert reloaded.SEARCH_DURATION is not None


@pytest.mark.servers
def test_rerank_and_the_results_are_logged_and_counted(reranking: HybridSearcher, tiny_model: Path) -> None:
    """``mcp_search_rerank`` with the fields of docs/ingest-events.md, and each leg's and the whole search's
    hits counted in ``lorekeeper_search_results_total``."""
    from structlog.testing import capture_logs

    from tests.unit.test_ingest_events import table

    def results(search_type: str) -> float:
        return REGISTRY.get_sample_value("lorekeeper_search_results_total", {"search_type": search_type}) or 0.0

    before = {t: results(t) for t in ("vector", "text", "hybrid")}
    with capture_logs() as logs:
        hits = reranking.search("aspect", limit=2)
    (rerank,) = [line for line in logs if line["event"] == "mcp_search_rerank"]
    assert set(table()["mcp_search_rerank"].fields) <= set(rerank) and rerank["log_level"] == "debug"
    assert rerank["model"] == tiny_model.name and rerank["candidates_in"] >= rerank["candidates_out"] >= len(hits)
    legs = {line["event"]: line for line in logs if line["event"].endswith("_results")}
    assert results("hybrid") == before["hybrid"] + len(hits)
    assert results("vector") == before["vector"] + legs["mcp_search_vector_results"]["candidates"]
    assert results("text") == before["text"] + legs["mcp_search_fulltext_results"]["candidates"]
