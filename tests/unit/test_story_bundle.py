"""Campaign bundles round-trip exactly, and a bad bundle changes nothing."""

from __future__ import annotations

import hashlib
import io
import json
import random
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from schemas.errors import Conflict, InvalidRequest
from schemas.media import MediaAsset
from schemas.story import PromptSection, PromptSnapshot, RetrievalHit, RetrievalRecord
from story.service import StoryService
from tests.fixtures.story import FANTASY
from tests.unit.test_story_campaign import _tavern, new_campaign, play

pytestmark = pytest.mark.servers


@contextmanager
def _stores(folder: Path) -> Iterator[StoryService]:
    """A separate pair of embedded stores in ``folder``, closed after."""
    from stores.blob.local import LocalBlobStore
    from stores.graph.falkordb import EmbeddedFalkorGraphStore

    graph = EmbeddedFalkorGraphStore(folder / "graph")
    service = StoryService(graph, LocalBlobStore(folder / "blobs"))
    service.prepare()
    try:
        yield service
    finally:
        graph.close()


@pytest.fixture
def other_story(tmp_path: Path) -> Iterator[StoryService]:
    """A second, separate pair of stores to import into."""
    with _stores(tmp_path / "other") as service:
        yield service


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


def _records(members: dict[str, bytes], name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in members[name].splitlines()]


def _crafted(
    bundle: bytes,
    *,
    nodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    edges: list[dict[str, Any]] = (),  # type: ignore[assignment]
    blobs: dict[str, bytes] | None = None,
    edit: Any = None,
) -> bytes:
    """``bundle`` with records added (or edited by ``edit(node)``) and its checksums recomputed.

    What anyone can make from a real export: the checksums prove nothing about where a bundle came from.
    """
    members = _members(bundle)
    node_records = [edit(n) or n for n in _records(members, "graph/nodes.jsonl")] if edit else []
    lines = {
        "graph/nodes.jsonl": (node_records or _records(members, "graph/nodes.jsonl")) + list(nodes),
        "graph/edges.jsonl": _records(members, "graph/edges.jsonl") + list(edges),
    }
    for name, records in lines.items():
        members[name] = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    members.update({f"blobs/{key}": data for key, data in (blobs or {}).items()})
    manifest = json.loads(members["manifest.json"])
    manifest["files"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items() if n != "manifest.json"}
    members["manifest.json"] = json.dumps(manifest).encode()
    return _rezip(members)


def _node_count(story: StoryService) -> int:
    return story.graph.run("MATCH (n) RETURN count(n) AS n")[0]["n"]


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
    scene = story.start_scene(campaign.id, title="The map")
    story.blobs.put("media/map.png", b"a map")  # media keys are the uploader's, not the layout's
    story.attach_media(
        scene.id,
        MediaAsset(
            kind="image",
            origin="uploaded",
            blob_key="media/map.png",
            mime="image/png",
            size_bytes=5,
            content_hash=hashlib.sha256(b"a map").hexdigest(),
            width=64,
            height=64,
            campaign_id=campaign.id,
        ),
    )
    story.end_scene(scene.id)
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
        "not_an_object",
        "unknown_relationship",
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
    data = _rezip(members)
    if damage == "not_a_zip":
        data = b"this is not a bundle"
    elif damage == "truncated":
        data = bundle[: len(bundle) // 2]
    elif damage == "foreign_node":
        data = _crafted(bundle, nodes=[{"label": "Turn", "props": {"uid": "turn_x", "campaign_id": "camp_other"}}])
    elif damage == "not_an_object":
        data = _crafted(bundle, nodes=[["Turn", {"uid": "turn_x"}]])  # type: ignore[list-item]
    elif damage == "unknown_relationship":
        world = story.get_campaign(campaign.id).world_id
        owns = {"type": "OWNS", "src_label": "Campaign", "src": campaign.id, "dst_label": "World", "dst": world}
        data = _crafted(bundle, edges=[owns])
    before = _node_count(other_story)
    with pytest.raises(InvalidRequest):
        other_story.import_campaign(data)
    assert _node_count(other_story) == before


# ---------------------------------------------------------------------------------------------------
# crafted bundles: checksums recomputed, so only the content rules stand between them and the store


@pytest.mark.parametrize("label", ["ApiKey", "IngestJob"])
def test_a_bundle_carrying_keys_or_jobs_is_refused(story: StoryService, other_story: StoryService, label: str) -> None:
    from serve.auth import ApiKeys, Unauthorized
    from stores.catalog import Catalog

    campaign = new_campaign(story)
    play(story, campaign.id, "one")
    key = "lk_k1_" + "s" * 43
    record = {
        "ApiKey": {"uid": "k1", "hash": hashlib.sha256(key.encode()).hexdigest(), "admin": True, "name": "x"},
        # a pending job survives a restart and is run: this one would put the server's file in search
        "IngestJob": {"uid": "ingest_x", "status": "pending", "source": "path", "source_ref": "/etc/hostname"},
    }[label]
    with pytest.raises(InvalidRequest, match=label):
        other_story.import_campaign(_crafted(_export(story, campaign.id), nodes=[{"label": label, "props": record}]))
    with pytest.raises(Unauthorized):
        ApiKeys(other_story.graph).verify(key)
    assert Catalog(other_story.graph).list_jobs() == []
    assert _node_count(other_story) == 0


@pytest.mark.parametrize("where", ["content_addressed", "campaign_folder", "named_by_no_record"])
def test_a_blob_named_after_another_campaigns_blob_is_refused(
    story: StoryService, other_story: StoryService, where: str
) -> None:
    victim = new_campaign(other_story)
    (victim_turn,) = play(other_story, victim.id, "a private moment")
    section = PromptSection(kind="player_input", token_count=3, content_hash="2" * 64)
    snapshot = PromptSnapshot(turn_id=victim_turn, model="m", sections=[section], content_hash="1" * 64)
    victim_key = other_story.record_prompt(victim_turn, "the victim's prompt", snapshot).blob_key
    assert victim_key is not None
    if where == "campaign_folder":  # the layout's per-campaign snapshot folder
        victim_key = f"snapshots/{victim.id}/prompt/{victim_turn}.json"
        other_story.blobs.put(victim_key, b"the victim's prompt")
    original = other_story.blobs.get(victim_key)
    campaign = new_campaign(story)
    play(story, campaign.id, "one")

    def point_at_victim(node: dict[str, Any]) -> None:
        if node["label"] == "Turn" and where != "named_by_no_record":
            node["props"]["presentation_key"] = victim_key

    forged = _crafted(_export(story, campaign.id), blobs={victim_key: b"forged provenance"}, edit=point_at_victim)
    with pytest.raises(InvalidRequest, match="blob"):
        other_story.import_campaign(forged)
    assert other_story.blobs.get(victim_key) == original
    assert other_story.provenance(victim_turn).prompt_text == "the victim's prompt"


@pytest.mark.parametrize("reach", ["edge", "branch_id", "next_commit"])
def test_a_record_reaching_into_another_campaign_is_refused(
    story: StoryService, other_story: StoryService, reach: str
) -> None:
    victim = new_campaign(other_story)
    (victim_turn,) = play(other_story, victim.id, "the victim's turn")
    victim_ctx = other_story.story.context(victim.id)
    campaign = new_campaign(story)
    (turn,) = play(story, campaign.id, "one")
    bundle = _export(story, campaign.id)
    if reach == "edge":  # the victim's turn would become a parent of ours
        edge = {"type": "CHILD_OF", "src_label": "Turn", "src": turn, "dst_label": "Turn", "dst": victim_turn}
        forged = _crafted(bundle, edges=[edge])
    elif reach == "branch_id":  # a branch's turns are found by branch id: ours would show in the victim's story
        intruder = {
            "uid": "turn_intruder",
            "campaign_id": campaign.id,
            "branch_id": victim.active_branch_id,
            "depth": 1,
            "text": "forged history",
        }
        forged = _crafted(bundle, nodes=[{"label": "Turn", "props": intruder}])
    else:  # the victim's next commit id, taken first, would lock the victim out of its own campaign
        commit = {"uid": f"{victim.id}#{victim_ctx.version + 1}", "campaign_id": campaign.id, "version": 1}
        forged = _crafted(bundle, nodes=[{"label": "Commit", "props": commit}])
    before = _node_count(other_story)
    with pytest.raises(InvalidRequest):
        other_story.import_campaign(forged)
    assert _node_count(other_story) == before
    play(other_story, victim.id, "the victim plays on")
    assert [t.text for t in other_story.history(victim.id)] == ["the victim's turn", "the victim plays on"]


@pytest.mark.parametrize("change", ["renamed_world", "new_axiom"])
def test_a_bundle_never_changes_a_shared_world(story: StoryService, other_story: StoryService, change: str) -> None:
    first = new_campaign(story)
    world_id = first.world_id
    other_story.import_campaign(_export(story, first.id))  # the world arrives with its first campaign
    axioms = [a.text for a in other_story.axioms(world_id)]
    second = story.create_campaign(world_id, "The Second Crown", FANTASY)
    play(story, second.id, "one")
    honest = _export(story, second.id)
    if change == "renamed_world":

        def rename(node: dict[str, Any]) -> None:
            if node["label"] == "World":
                node["props"]["name"] = "Conquered"

        forged = _crafted(honest, edit=rename)
    else:  # an axiom is in every prompt of every campaign of the world
        story.add_axiom(world_id, "The importer is king.")
        forged = _export(story, second.id)
    with pytest.raises(InvalidRequest, match="World|Axiom"):
        other_story.import_campaign(forged)
    assert other_story.get_world(world_id).name == "Eldoria"
    assert [a.text for a in other_story.axioms(world_id)] == axioms
    if change == "renamed_world":  # the same world, unchanged, is shared as before
        other_story.import_campaign(honest)
        assert {c.id for c in other_story.list_campaigns(world_id)} == {first.id, second.id}


def test_a_bundle_with_one_corrupt_byte_imports_exactly_or_is_refused(story: StoryService, tmp_path: Path) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "one", "two")
    bundle = _export(story, campaign.id)
    expected = (story.state(campaign.id).state_hash, [t.text for t in story.history(campaign.id)])
    rng = random.Random(20240611)
    refused = 0
    with ExitStack() as stores:
        target = stores.enter_context(_stores(tmp_path / "target"))
        for position in sorted(rng.sample(range(len(bundle)), 80)):
            damaged = bytearray(bundle)
            damaged[position] ^= rng.randrange(1, 256)
            try:
                target.import_campaign(bytes(damaged))
            except InvalidRequest:
                refused += 1
                assert _node_count(target) == 0, position
                continue
            # a byte the reader never checks (a timestamp, an unused field): the import must be exact
            imported = (target.state(campaign.id).state_hash, [t.text for t in target.history(campaign.id)])
            assert imported == expected, position
            target = stores.enter_context(_stores(tmp_path / f"target-{position}"))  # one without the campaign
    assert refused > 60  # nearly every byte matters
