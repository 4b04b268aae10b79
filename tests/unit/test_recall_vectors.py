"""The recall's vector searches send the lineage without the campaign, and still return only the campaign's
records: on the embedded stores (tantivy folder, qdrant-edge), with two campaigns whose records clash on a
branch id (which graph ids rule out, and the check here must catch anyway)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from schemas.recall import RecallKind, RecallRecord
from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.factory import open_memory_text_index, open_vector_index
from story.lineage import Lineage, Segment, lineage_cover
from story.recall_index import RecallIndex
from story.recall_vectors import nearest, sent_filters
from tests.unit.test_recall_isolation import WordHashEmbedder

pytestmark = pytest.mark.unit


def _record(campaign: str, n: int, text: str) -> RecallRecord:
    return RecallRecord(
        id=f"{campaign}_turn_{n}",
        kind=RecallKind.TURN,
        campaign_id=campaign,
        anchor_turn_id=f"{campaign}_turn_{n}",
        branch_id="main",  # the same branch id in both campaigns: a clash
        depth=n,
        text=text,
    )


@pytest.fixture
def index(tmp_path: Path) -> RecallIndex:
    settings = Settings(data_dir=tmp_path)
    built = RecallIndex(open_memory_text_index(settings), open_vector_index(settings), WordHashEmbedder())
    yield built  # type: ignore[misc]
    built.close()


def test_the_campaign_is_sent_only_where_no_lineage_names_the_records() -> None:
    keyed = SearchFilters(campaign=["camp_a"], lineage=["main:0:0"], observer=["ent_1"])
    assert sent_filters(keyed) == SearchFilters(lineage=["main:0:0"], observer=["ent_1"])
    plain = SearchFilters(campaign=["camp_a"], kind=["turn"])
    assert sent_filters(plain) is plain


def test_a_recall_returns_no_record_of_another_campaign_whose_branch_ids_clash(index: RecallIndex) -> None:
    texts = ["the caravan vanished by the red cliffs", "we buy rope at the market", "the innkeeper serves stew"]
    for campaign in ("camp_a", "camp_b"):
        records = [_record(campaign, n, f"{campaign} {text}") for n, text in enumerate(texts * 4)]
        index.write(records)
    lineage = Lineage((Segment("main", 100),))
    with capture_logs() as logs:
        hits = index.search("camp_a", "where did the caravan vanish", lineage=lineage, limit=10)
        vector_hits = nearest(
            index.vectors,
            index.collection,
            [index.embedder.embed_query("the caravan vanished")],
            SearchFilters(campaign=["camp_a"], lineage=lineage_cover(lineage)),
            50,
        )[0]
    assert len(hits) == 10 and {h.id.split("_turn_")[0] for h in hits} == {"camp_a"}
    assert len(vector_hits) == 12 and {h.payload["campaign"] for h in vector_hits} == {"camp_a"}
    dropped = [e for e in logs if e["event"] == "recall_vector_hits_off_campaign"]
    assert dropped and all(e["campaigns"] == ["camp_a"] and e["dropped"] > 0 for e in dropped)


def test_one_query_and_a_batch_find_the_same(index: RecallIndex) -> None:
    index.write([_record("camp_a", n, f"line {n} about {word}") for n, word in enumerate(["rope", "stew", "cliffs"])])
    filters = SearchFilters(campaign=["camp_a"], lineage=lineage_cover(Lineage((Segment("main", 5),))))
    queries = [index.embedder.embed_query(q) for q in ("rope", "cliffs")]
    batch = nearest(index.vectors, index.collection, queries, filters, 3)
    alone = [nearest(index.vectors, index.collection, [q], filters, 3)[0] for q in queries]
    assert [[h.id for h in hits] for hits in batch] == [[h.id for h in hits] for hits in alone]
    assert np.isclose(batch[0][0].score, alone[0][0].score)
