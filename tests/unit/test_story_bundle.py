"""Campaign bundles round-trip exactly, and a bad bundle changes nothing."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.errors import Conflict, InvalidRequest
from schemas.story import PromptSection, PromptSnapshot, RetrievalHit, RetrievalRecord
from story.service import StoryService
from tests.unit.test_story_campaign import _tavern, new_campaign, play

pytestmark = pytest.mark.unit


@pytest.fixture
def other_story(tmp_path: Path) -> Iterator[StoryService]:
    """A second, separate pair of stores to import into."""
    from stores.blob.local import LocalBlobStore
    from stores.graph.falkordb import EmbeddedFalkorGraphStore

    graph = EmbeddedFalkorGraphStore(tmp_path / "other-graph")
    service = StoryService(graph, LocalBlobStore(tmp_path / "other-blobs"))
    service.prepare()
    try:
        yield service
    finally:
        graph.close()


def _members(bundle: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _export(story: StoryService, campaign_id: str, **kw: bool) -> bytes:
    buffer = io.BytesIO()
    story.export_campaign(campaign_id, buffer, **kw)
    return buffer.getvalue()


def _rezip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def _undone_campaign(story: StoryService) -> str:
    from schemas.knowledge import Chunk, Item, Library
    from stores.catalog import Catalog

    campaign, ids, (t1, t2, t3) = _tavern(story)
    catalog = Catalog(story.graph)
    catalog.save_library(Library(uid="lib_1", name="Lore", type="lore"))
    catalog.save_item(
        Item(
            uid="item_1",
            library_uid="lib_1",
            title="Bestiary",
            file_type="markdown",
            size_bytes=5,
            content_hash="f" * 64,
            source_ref="b.md",
        )
    )
    catalog.save_chunks(
        [
            Chunk(
                uid="chunk_9",
                item_uid="item_1",
                sequence=0,
                text_key="items/item_1/chunks/chunk_000.txt",
                token_count=7,
            )
        ]
    )
    story.blobs.put("items/item_1/chunks/chunk_000.txt", b"Ghouls fear silver.")
    story.record_prompt(
        t3,
        "the prompt",
        PromptSnapshot(
            turn_id=t3,
            model="m",
            content_hash="1" * 64,
            sections=[PromptSection(kind="player_input", token_count=1, content_hash="2" * 64)],
        ),
    )
    story.record_retrieval(RetrievalRecord(turn_id=t3, query="ghouls", hits=[RetrievalHit(chunk_id="chunk_9", rank=1)]))
    story.create_checkpoint(campaign.id, "at the crypt")
    play(story, campaign.id, "after the crypt", "even later")
    story.undo(campaign.id)
    story.undo(campaign.id)  # exported with the head behind the tip
    return campaign.id


def test_an_undone_campaign_round_trips_exactly(story: StoryService, other_story: StoryService) -> None:
    campaign_id = _undone_campaign(story)
    bundle = _export(story, campaign_id, include_knowledge=True)
    other_story.create_world("Somewhere else")  # the target already holds other things
    other = new_campaign(other_story)
    play(other_story, other.id, "their own story")

    imported = other_story.import_campaign(bundle)
    original = story.get_campaign(campaign_id)
    assert imported.head_turn_id == original.head_turn_id  # still behind the tip, not redone
    assert [t.id for t in other_story.history(campaign_id)] == [t.id for t in story.history(campaign_id)]
    assert other_story.state(campaign_id).state_hash == story.state(campaign_id).state_hash
    assert [b.id for b in other_story.branches(campaign_id)] == [b.id for b in story.branches(campaign_id)]
    other_story.redo(campaign_id)
    story.redo(campaign_id)
    assert other_story.history(campaign_id)[-1].text == "after the crypt"
    story.undo(campaign_id)
    other_story.undo(campaign_id)
    head = story.get_campaign(campaign_id).head_turn_id
    assert other_story.provenance(head).model_dump() == story.provenance(head).model_dump()  # type: ignore[arg-type]
    assert other_story.provenance(head).passages[0].title == "Bestiary"  # type: ignore[arg-type]
    mine = _members(_export(story, campaign_id, include_knowledge=True))
    theirs = _members(_export(other_story, campaign_id, include_knowledge=True))
    assert len(mine["graph/nodes.jsonl"].splitlines()) > 50 and len(mine["graph/edges.jsonl"].splitlines()) > 50
    assert _same_graph(mine, theirs)
    assert {k: v for k, v in mine.items() if k.startswith("blobs/")} == {
        k: v for k, v in theirs.items() if k.startswith("blobs/")
    }
    assert [t.text for t in other_story.history(other.id)] == ["their own story"]  # the other campaign is untouched


def _same_graph(a: dict[str, bytes], b: dict[str, bytes]) -> bool:
    def records(data: bytes, drop: tuple[str, ...]) -> list[str]:
        out = []
        for line in data.splitlines():
            rec = json.loads(line)
            for key in drop:
                rec.get("props", {}).pop(key, None)
            out.append(json.dumps(rec, sort_keys=True))
        return sorted(out)

    # the redo and undo after the import ran at different moments in the two stores: the times differ
    volatile = ("updated_at", "at")
    return records(a["graph/nodes.jsonl"], volatile) == records(b["graph/nodes.jsonl"], volatile) and records(
        a["graph/edges.jsonl"], ()
    ) == records(b["graph/edges.jsonl"], ())


def test_importing_the_same_bundle_twice_is_a_conflict(story: StoryService, other_story: StoryService) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "one", "two")
    bundle = _export(story, campaign.id)
    other_story.import_campaign(bundle)
    before = other_story.graph.run("MATCH (n) RETURN count(n) AS n")[0]["n"]
    with pytest.raises(Conflict, match="imported before"):
        other_story.import_campaign(bundle)
    assert other_story.graph.run("MATCH (n) RETURN count(n) AS n")[0]["n"] == before


@pytest.mark.parametrize(
    "damage",
    [
        "tamper_nodes",
        "drop_member",
        "extra_member",
        "bad_version",
        "not_a_zip",
        "truncated",
        "unsafe_name",
        "foreign_node",
    ],
)
def test_a_bad_bundle_is_refused_and_changes_nothing(
    story: StoryService, other_story: StoryService, damage: str
) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "one")
    bundle = _export(story, campaign.id)
    members = _members(bundle)
    manifest = json.loads(members["manifest.json"])
    if damage == "tamper_nodes":
        members["graph/nodes.jsonl"] = members["graph/nodes.jsonl"].replace(b'"one"', b'"eno"')
    elif damage == "drop_member":
        del members["graph/edges.jsonl"]
    elif damage == "extra_member":
        members["blobs/evil"] = b"x"
    elif damage == "bad_version":
        manifest["format_version"] = 99
        members["manifest.json"] = json.dumps(manifest).encode()
    elif damage == "unsafe_name":
        members["../../etc/passwd"] = b"x"
    elif damage == "foreign_node":
        nodes = members["graph/nodes.jsonl"] + b'{"label":"Turn","props":{"uid":"turn_x","campaign_id":"camp_other"}}\n'
        members["graph/nodes.jsonl"] = nodes
        manifest["files"]["graph/nodes.jsonl"] = __import__("hashlib").sha256(nodes).hexdigest()
        members["manifest.json"] = json.dumps(manifest).encode()
    data = _rezip(members)
    if damage == "not_a_zip":
        data = b"this is not a bundle"
    elif damage == "truncated":
        data = bundle[: len(bundle) // 2]
    before = other_story.graph.run("MATCH (n) RETURN count(n) AS n")[0]["n"]
    with pytest.raises(InvalidRequest):
        other_story.import_campaign(data)
    assert other_story.graph.run("MATCH (n) RETURN count(n) AS n")[0]["n"] == before
