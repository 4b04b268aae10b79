"""The narrator searches only the library a campaign draws on.

A campaign that pins items or libraries gets knowledge hits from those only, on every leg; one
with no pins searches the whole library as before. The library is the hybrid-search test world (three
books in three libraries, written through the stores ingestion uses, real MiniLM embeddings), searched
by the real :class:`~search.hybrid.HybridSearcher`; the echo engine narrates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from models.embedding import SentenceTransformerEmbedder
from narrator.engines import EchoEngine
from narrator.turn import TurnFlow
from schemas.campaign import LibraryPin
from schemas.serving import ServeSettings
from schemas.story import RetrievalSource
from search.service import open_searcher
from stores.blob.local import LocalBlobStore
from stores.factory import open_graph_store
from story.service import StoryService
from tests.fixtures.story import FANTASY
from tests.unit.test_narrator_recall import play
from tests.unit.test_search_hybrid import World, build_world

pytestmark = [pytest.mark.servers, pytest.mark.slow]

#: Words of the Eberron gazetteer (airships, Sharn): an unpinned campaign's search finds it first.
QUESTION = "Do airships fly between the towers of Sharn?"


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> World:
    return build_world(tmp_path_factory.mktemp("library") / "data", embedder)


@pytest.fixture
def flow(world: World, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> Iterator[TurnFlow]:
    """A turn flow on the world's stores: the story on its graph, the real searcher, ten hits a turn."""
    graph = open_graph_store(world.settings)
    try:
        story = StoryService(graph, LocalBlobStore(tmp_path / "blobs"))
        story.prepare()
        story.memory_former = None
        with open_searcher(world.settings, reranker=None) as searcher:
            searcher.embedder = embedder
            settings = ServeSettings(knowledge_hits=10, recall_hits=0, recent_turns=2)
            yield TurnFlow(story, EchoEngine("echo-narrator"), settings=settings, searcher=searcher)
    finally:
        graph.close()


def _searched_items(flow: TurnFlow, campaign_id: str) -> list[str]:
    """The items of the knowledge hits the turn's retrieval record names, best first."""
    outcome = play(flow, campaign_id, QUESTION)
    assert outcome.retrieval_error is None
    (record,) = [r for r in flow.story.provenance(outcome.turn_id).retrievals if r.source is RetrievalSource.KNOWLEDGE]
    return [str(h.item_uid) for h in record.hits]


def test_a_pinned_campaign_never_gets_a_hit_from_a_book_it_does_not_pin(flow: TurnFlow, world: World) -> None:
    fate, gazetteer, table = (world.items[t].uid for t in ("Fate Core", "Khorvaire Gazetteer", "Table Rules"))
    eberron = flow.story.create_world("Eberron")

    free = flow.story.create_campaign(eberron.id, "Anything goes", FANTASY)
    items = _searched_items(flow, free.id)
    assert items[0] == gazetteer and {fate, table} <= set(items)  # no pins: the whole library, as before

    pinned = flow.story.create_campaign(eberron.id, "Fate only", FANTASY, library_pins=[LibraryPin(item_id=fate)])
    items = _searched_items(flow, pinned.id)
    assert items and set(items) == {fate}  # the best match for the words is in a book it does not pin

    # pinned by library, changed in play: the next turn searches the new pins
    homebrew = world.libraries["Homebrew"].uid
    flow.story.set_library_pins(pinned.id, [LibraryPin(library_id=homebrew, use="reference")])
    assert set(_searched_items(flow, pinned.id)) == {table}
    flow.story.set_library_pins(pinned.id, [LibraryPin(library_id=homebrew), LibraryPin(item_id=gazetteer)])
    assert set(_searched_items(flow, pinned.id)) == {table, gazetteer}
