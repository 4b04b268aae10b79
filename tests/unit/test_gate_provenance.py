"""Provenance that holds: evidence a proposal cites must exist, be the campaign's and be drawn on.

A proposal's evidence becomes SUPPORTED_BY links when the gate accepts it; a link to a chunk or a turn
that is not there is silently not written, so before this check a proposal citing a made-up chunk
became canon with no provenance at all. These tests write real library records through the catalog
(as ingestion does) on the embedded graph, and reach a missing chunk or turn the ways a store really
gets there: a campaign imported without its knowledge, a branch deleted after a proposal cited it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from schemas.campaign import LibraryPin
from schemas.common import sha256_hex
from schemas.errors import InvalidRequest, NotFound
from schemas.knowledge import Chunk, Classification, FileType, Item, ItemStatus, Library, LibraryType
from schemas.search import SearchFilters
from schemas.story import BranchDisposition, ProposalStatus
from stores.catalog import Catalog
from stores.graph.base import GraphStore, GraphTransaction, Record
from story import cypher
from story.service import StoryService
from tests.fixtures.story import FANTASY
from tests.unit.test_story_bundle import _crafted, _stores
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers


def write_book(
    graph: GraphStore,
    title: str,
    *,
    library: str = "lib_srd",
    classification: Classification = Classification.CANON,
    chunks: int = 2,
) -> tuple[Item, list[str]]:
    """An item of ``chunks`` chunks in ``library`` (created if new), written as ingestion writes them."""
    catalog = Catalog(graph)
    if not graph.run("MATCH (l:Library {uid: $u}) RETURN l.uid AS uid", {"u": library}):
        catalog.save_library(Library(uid=library, name=library, type=LibraryType.RULEBOOK))
    slug = title.lower().replace(" ", "_")
    item = Item(
        uid=f"item_{slug}",
        library_uid=library,
        title=title,
        file_type=FileType.MARKDOWN,
        size_bytes=10,
        content_hash=sha256_hex(slug),
        source_ref=f"{slug}.md",
        classification=classification,
        status=ItemStatus.READY,
    )
    catalog.save_item(item)
    rows = [
        Chunk(
            uid=f"chunk_{slug}_{n}", item_uid=item.uid, sequence=n, text_key=f"items/{item.uid}/c{n}.txt", token_count=5
        )
        for n in range(chunks)
    ]
    catalog.save_chunks(rows)
    return item, [c.uid for c in rows]


def _scene(story: StoryService) -> tuple[str, str, str, str]:
    """A campaign with a turn, an orc entity from an ended scene, and a second scene open."""
    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "We meet the orc")
    scene = story.start_scene(campaign.id, title="Meeting")
    orc = gm_entity(story, scene.id, "character", "Grusk")
    story.end_scene(scene.id)
    return campaign.id, story.start_scene(campaign.id, title="Lore").id, orc, turn_id


def _species(value: str) -> dict[str, Any]:
    return {"predicate": "species", "value": value}


def _supports(story: StoryService, fact_id: str) -> set[str]:
    rows = story.graph.run("MATCH (:Fact {uid: $f})-[:SUPPORTED_BY]->(c:Chunk) RETURN c.uid AS uid", {"f": fact_id})
    return {r["uid"] for r in rows}


def test_a_source_proposal_citing_a_real_chunk_is_canon_supported_by_it(story: StoryService) -> None:
    _, chunks = write_book(story.graph, "Monster Manual")
    campaign_id, scene_id, orc, _ = _scene(story)
    story.propose(
        scene_id,
        type="fact",
        content={"subject_entity_id": orc, **_species("orc")},
        authority="source",
        confidence=1.0,
        evidence={"chunk_ids": chunks[:1]},
    )
    (decision,) = story.end_scene(scene_id).decisions
    assert decision.status is ProposalStatus.ACCEPTED, decision.rationale
    (fact,) = [f for f in story.state(campaign_id).facts if f.predicate == "species"]
    assert _supports(story, fact.id) == {chunks[0]}


def test_proposing_with_a_chunk_that_does_not_exist_is_refused_naming_it(story: StoryService) -> None:
    _, chunks = write_book(story.graph, "Monster Manual")
    _, scene_id, orc, turn_id = _scene(story)
    for authority in ("source", "gm", "player"):
        with pytest.raises(NotFound, match="chunk_made_up") as raised:
            story.propose(
                scene_id,
                type="fact",
                content={"subject_entity_id": orc, **_species("orc")},
                authority=authority,
                confidence=1.0,
                evidence={"chunk_ids": [chunks[0], "chunk_made_up"], "turn_ids": [turn_id]},
            )
        assert chunks[0] not in str(raised.value)  # only the missing one is named
    assert story.proposals(scene_id) == []


class CountingGraph:
    """The real graph store, counting the auto-committed statements run on it (a spy, not a stand-in)."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.queries: list[str] = []

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        self.queries.append(query)
        return self.graph.run(query, params)

    def transaction(self) -> AbstractContextManager[GraphTransaction]:
        return self.graph.transaction()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.graph, name)


@pytest.fixture
def other_story(tmp_path: Path) -> Iterator[StoryService]:
    with _stores(tmp_path / "other") as service:
        yield service


def test_the_gate_rejects_proposals_whose_chunks_are_not_in_this_store(
    story: StoryService, other_story: StoryService
) -> None:
    """A campaign exported with its pending proposals and imported without its knowledge: their chunks
    are not in the new store, so the gate can neither check nor link them and rejects them by name."""
    _, chunks = write_book(story.graph, "Monster Manual")
    campaign_id, scene_id, orc, turn_id = _scene(story)
    made = {
        "source": story.propose(
            scene_id,
            type="fact",
            content={"subject_entity_id": orc, **_species("orc")},
            authority="source",
            confidence=1.0,
            evidence={"chunk_ids": chunks},
        ),
        "gm": story.propose(
            scene_id,
            type="fact",
            content={"subject_entity_id": orc, "predicate": "title", "value": "Chief"},
            authority="gm",
            confidence=1.0,
            evidence={"chunk_ids": chunks[1:]},
        ),
        "turns_only": story.propose(
            scene_id,
            type="event",
            content={"title": "The orc bows"},
            authority="system",
            confidence=0.95,
            evidence={"turn_ids": [turn_id]},
        ),
    }
    buffer = io.BytesIO()
    story.export_campaign(campaign_id, buffer)  # without include_knowledge: the chunks stay behind
    other_story.import_campaign(buffer.getvalue())

    spy = CountingGraph(other_story.graph)
    judged = StoryService(spy, other_story.blobs)  # type: ignore[arg-type]
    report = judged.end_scene(scene_id)
    by_id = {d.proposal_id: d for d in report.decisions}
    source, gm = by_id[made["source"].id], by_id[made["gm"].id]
    assert source.status is ProposalStatus.REJECTED and gm.status is ProposalStatus.REJECTED
    assert f"{chunks[0]}, {chunks[1]}" in source.rationale and "do not exist" in source.rationale
    assert chunks[1] in gm.rationale and chunks[0] not in gm.rationale
    assert by_id[made["turns_only"].id].status is ProposalStatus.ACCEPTED
    # the rejections and their reasons are kept on the proposals, and nothing of them became canon
    assert judged.get_proposal(made["source"].id).rationale == source.rationale
    assert {f.predicate for f in judged.state(campaign_id).facts} == set()
    cited_query = cypher.cited([], [], "")[0]
    assert spy.queries.count(cited_query) == 1  # one read for every id the batch cites


def test_the_gate_rejects_a_proposal_citing_a_turn_deleted_since(story: StoryService) -> None:
    campaign = new_campaign(story)
    (t1,) = play(story, campaign.id, "We camp")
    main = story.get_campaign(campaign.id).active_branch_id
    scene = story.start_scene(campaign.id, title="Night")
    side = story.create_branch(campaign.id, t1, name="what if")
    (t2,) = play(story, campaign.id, "A dream of wolves")
    story.switch_branch(campaign.id, main)
    dreamt = story.propose(
        scene.id,
        type="event",
        content={"title": "Wolves howl"},
        authority="player",
        confidence=1.0,
        evidence={"turn_ids": [t1, t2]},
        resolution={"method": "gm_ruling", "outcome": "success"},
    )
    story.set_disposition(campaign.id, side.id, BranchDisposition.DISPOSABLE)
    assert story.delete_branch(campaign.id, side.id) == 1
    (decision,) = story.end_scene(scene.id).decisions
    assert decision.proposal_id == dreamt.id and decision.status is ProposalStatus.REJECTED
    assert t2 in decision.rationale and t1 not in decision.rationale and "turn" in decision.rationale
    assert story.happenings(campaign.id) == []


# -- the library a campaign draws on --------------------------------------------------------------


def _gm_cites(story: StoryService, scene_id: str, orc: str, chunk: str, value: str, authority: str = "gm") -> str:
    return story.propose(
        scene_id,
        type="fact",
        content={"subject_entity_id": orc, "predicate": f"lore_{value}", "value": value},
        authority=authority,
        confidence=1.0,
        evidence={"chunk_ids": [chunk]},
    ).id


def _statuses(story: StoryService, scene_id: str) -> dict[str, tuple[ProposalStatus, str]]:
    return {d.proposal_id: (d.status, d.rationale or "") for d in story.end_scene(scene_id).decisions}


def test_a_campaign_that_pins_its_library_cites_only_what_it_pins(story: StoryService) -> None:
    manual, (in_manual, _) = write_book(story.graph, "Monster Manual")
    _, (in_volo, _) = write_book(story.graph, "Volos Guide", library="lib_extra")
    campaign_id, scene_id, orc, _ = _scene(story)
    story.set_library_pins(campaign_id, [LibraryPin(item_id=manual.uid)])
    pinned, unpinned = _gm_cites(story, scene_id, orc, in_manual, "a"), _gm_cites(story, scene_id, orc, in_volo, "b")
    decided = _statuses(story, scene_id)
    assert decided[pinned][0] is ProposalStatus.ACCEPTED
    status, why = decided[unpinned]
    assert status is ProposalStatus.REJECTED and in_volo in why and "does not draw on" in why
    assert in_manual not in why

    # a library pin takes in every item of the library
    story.set_library_pins(campaign_id, [LibraryPin(item_id=manual.uid), LibraryPin(library_id="lib_extra")])
    scene_id = story.start_scene(campaign_id).id
    again = _gm_cites(story, scene_id, orc, in_volo, "b")
    assert _statuses(story, scene_id)[again][0] is ProposalStatus.ACCEPTED


def test_source_authority_needs_passages_the_campaign_uses_as_canon(story: StoryService) -> None:
    house, (house_rule, _) = write_book(story.graph, "Table Rules", classification=Classification.REFERENCE)
    manual, (in_manual, _) = write_book(story.graph, "Monster Manual")
    campaign_id, scene_id, orc, _ = _scene(story)
    # unpinned: each item as it is classified
    as_source = _gm_cites(story, scene_id, orc, house_rule, "a", authority="source")
    as_gm = _gm_cites(story, scene_id, orc, house_rule, "b")
    decided = _statuses(story, scene_id)
    assert decided[as_source][0] is ProposalStatus.REJECTED and f"{house_rule} (reference)" in decided[as_source][1]
    assert decided[as_gm][0] is ProposalStatus.ACCEPTED  # evidence for a GM's word needs only to exist

    # the campaign's use overrides the item's classification, both ways
    story.set_library_pins(
        campaign_id,
        [
            LibraryPin(item_id=house.uid, use=Classification.CANON),
            LibraryPin(item_id=manual.uid, use=Classification.INSPIRATION),
        ],
    )
    scene_id = story.start_scene(campaign_id).id
    canon_here = _gm_cites(story, scene_id, orc, house_rule, "a", authority="source")
    ideas_only = _gm_cites(story, scene_id, orc, in_manual, "c", authority="source")
    decided = _statuses(story, scene_id)
    assert decided[canon_here][0] is ProposalStatus.ACCEPTED
    assert decided[ideas_only][0] is ProposalStatus.REJECTED and f"{in_manual} (inspiration)" in decided[ideas_only][1]


def test_pins_name_what_the_library_holds_once(story: StoryService) -> None:
    manual, _ = write_book(story.graph, "Monster Manual")
    world = story.create_world("Eldoria")
    with pytest.raises(NotFound, match="item 'item_nope'"):
        story.create_campaign(world.id, "x", FANTASY, library_pins=[LibraryPin(item_id="item_nope")])
    campaign = story.create_campaign(world.id, "x", FANTASY, library_pins=[LibraryPin(item_id=manual.uid)])
    assert story.get_campaign(campaign.id).library_pins == [LibraryPin(item_id=manual.uid)]
    with pytest.raises(NotFound) as raised:
        story.set_library_pins(campaign.id, [LibraryPin(library_id="lib_nope"), LibraryPin(item_id="item_gone")])
    assert "library 'lib_nope'" in str(raised.value) and "item 'item_gone'" in str(raised.value)
    with pytest.raises(InvalidRequest, match="pinned twice"):
        story.set_library_pins(campaign.id, [LibraryPin(library_id="lib_srd"), LibraryPin(library_id="lib_srd")])
    assert story.get_campaign(campaign.id).library_pins == [LibraryPin(item_id=manual.uid)]  # refused: unchanged
    assert story.set_library_pins(campaign.id, []).library_pins == []
    assert story.get_campaign(campaign.id).library_pins == []


def test_knowledge_filters_keep_to_the_pins(story: StoryService) -> None:
    manual, _ = write_book(story.graph, "Monster Manual")
    guide, _ = write_book(story.graph, "Volos Guide", library="lib_extra")
    tome, _ = write_book(story.graph, "Mordenkainens Tome", library="lib_extra")
    campaign = new_campaign(story)
    assert story.knowledge_filters(campaign.id) == SearchFilters()  # no pins: the whole library
    story.set_library_pins(campaign.id, [LibraryPin(library_id="lib_extra")])
    assert story.knowledge_filters(campaign.id) == SearchFilters(library=["lib_extra"])
    story.set_library_pins(campaign.id, [LibraryPin(item_id=manual.uid), LibraryPin(library_id="lib_extra")])
    assert story.knowledge_filters(campaign.id) == SearchFilters(item=sorted([manual.uid, guide.uid, tome.uid]))


def test_a_bundle_carries_the_pins(story: StoryService, other_story: StoryService) -> None:
    manual, _ = write_book(story.graph, "Monster Manual")
    campaign = new_campaign(story)
    pins = [LibraryPin(item_id=manual.uid, use=Classification.CANON), LibraryPin(library_id="lib_srd")]
    story.set_library_pins(campaign.id, pins)
    buffer = io.BytesIO()
    story.export_campaign(campaign.id, buffer)
    bundle = buffer.getvalue()

    def both_targets(node: dict[str, Any]) -> None:
        if node["label"] == "Campaign":
            node["props"]["library_pins_json"] = '[{"item_id": "a", "library_id": "b"}]'

    with pytest.raises(InvalidRequest, match="campaign record is malformed.*exactly one of library_id or item_id"):
        other_story.import_campaign(_crafted(bundle, edit=both_targets))
    with pytest.raises(NotFound):
        other_story.get_campaign(campaign.id)  # refused whole

    other_story.import_campaign(bundle)  # a store without those books: the pins travel as they are
    assert other_story.get_campaign(campaign.id).library_pins == pins
