"""The campaign bundle's format, and the checks an import makes before it writes anything.

An import treats the bundle as untrusted: the checksums show only that it was not damaged, since
anyone can recompute them. It imports only what a campaign owns, and checks all of it before it
writes anything, so a corrupt, crafted or clashing bundle changes nothing:

- records: only the labels an export writes (:data:`CAMPAIGN_LABELS`, the world, and the cited
  knowledge when the manifest says so), all of the manifest's campaign; the ids the story engine
  derives (commits, resolutions, live entities) must derive from this campaign's records, and every
  id a record names (:data:`REFERENCES`) must be in the bundle or nowhere in the store. API keys,
  ingest jobs and anything else are refused.
- relationships: only the types and label pairs of :data:`EDGE_TYPES`, between records of the bundle
  (or from a campaign record to a shared record of the store, such as a cited chunk).
- shared records (world, axioms, library, item, chunk): created when new; when the store holds one
  already, the bundle's copy must be the same, and nothing new may be added under it or linked to
  it except by the campaign's own records.
- blobs: each named by a record, under a key that record may own (content-addressed, under the
  campaign's own prefixes, the text of an imported chunk, a media file), holding the bytes its name
  or record says, and never overwriting other bytes already in the store.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import zipfile
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from schemas.campaign import Campaign
from schemas.common import Id
from stores.blob.base import BlobStore
from stores.blob.layout import validate_key
from stores.catalog import from_props
from stores.graph.base import GraphStore
from story import cypher
from story.errors import StoryConflict, StoryInvalid, validation_message
from story.gate import resolution_uid
from story.graph import commit_uid
from story.live import live_uid

FORMAT = "lorekeeper-campaign"
FORMAT_VERSION = 1
MAX_UNCOMPRESSED_BYTES = 4 << 30  # refuse zip bombs before reading them
MAX_MEMBERS = 200_000

#: Node properties that name a blob the bundle must carry.
BLOB_PROPERTIES = ("blob_key", "presentation_key", "text_key")

#: Labels of a campaign's own records (each carries the campaign's ``campaign_id``): what an export
#: finds for a campaign, and all an import creates besides the shared labels below.
CAMPAIGN_LABELS = frozenset(
    {
        "Campaign", "Branch", "Turn", "Take", "Scene", "Checkpoint", "ProposedChange", "ProposalReview", "Resolution",
        "StateEvent", "Commit", "Entity", "Fact", "Relationship", "StoryThread", "Happening", "Memory",
        "Summary", "Snapshot", "PromptSnapshot", "Retrieval", "MediaAsset", "LiveEntity", "TurnVersion",
        "Trigger", "TriggerActivation", "Presentation", "MediaJob", "SceneNote", "StorySpan", "PruneRecord",
    }
)  # fmt: skip

#: The campaign's world and its axioms: in every bundle, shared with the world's other campaigns.
WORLD_LABELS = frozenset({"World", "Axiom"})

#: The library records of the passages a campaign cites: in a bundle exported with ``include_knowledge``.
KNOWLEDGE_LABELS = frozenset({"Library", "Item", "Chunk"})

#: Labels that may exist already in the target store (shared with other campaigns): never changed there.
SHARED_LABELS = WORLD_LABELS | KNOWLEDGE_LABELS

_CANON = ("Entity", "Fact", "Relationship", "StoryThread", "Happening")

#: The relationships a bundle may carry, each with the (source, target) labels it may connect: the
#: story graph's shape (see :mod:`story.graph`, :mod:`story.live`) and the cited knowledge's.
EDGE_TYPES: dict[str, frozenset[tuple[str, str]]] = {
    "IN_WORLD": frozenset({("Campaign", "World")}),
    "OF_WORLD": frozenset({("Axiom", "World")}),
    "OF_CAMPAIGN": frozenset({("Branch", "Campaign"), ("Scene", "Campaign")}),
    "CHILD_OF": frozenset({("Turn", "Turn")}),
    "TAKE_OF": frozenset({("Take", "Turn")}),
    "VERSION_OF": frozenset({("TurnVersion", "Turn")}),
    "FORKED_AT": frozenset({("Branch", "Turn")}),
    "PROPOSED_IN": frozenset({("ProposedChange", "Scene")}),
    "RESOLVES": frozenset({("Resolution", "ProposedChange")}),
    "REVIEWS": frozenset({("ProposalReview", "ProposedChange")}),
    "FROM_REVIEW": frozenset({("StateEvent", "ProposalReview")}),
    "COMMITTED_IN": frozenset({("StateEvent", "Commit")}),
    "FROM_PROPOSAL": frozenset({("StateEvent", "ProposedChange")}),
    "ESTABLISHED_BY": frozenset((label, "StateEvent") for label in _CANON),
    "SUPPORTED_BY": frozenset((label, t) for label in _CANON for t in ("Scene", "Turn", "Resolution", "Chunk")),
    "REPLACES": frozenset({("Fact", "Fact")}),
    "DEPENDS_ON": frozenset({("Fact", "Fact")}),
    "INFORMED_BY": frozenset({("Turn", "Chunk")}),
    "AT_TURN": frozenset((label, "Turn") for label in ("Checkpoint", "Memory", "Summary", "Snapshot", "SceneNote")),
    "FOR_TURN": frozenset({("PromptSnapshot", "Turn"), ("Retrieval", "Turn")}),
    "HAS_MEDIA": frozenset({("Scene", "MediaAsset")}),
    "LOCATED_IN": frozenset({("LiveEntity", "LiveEntity")}),
    "HELD_BY": frozenset({("LiveEntity", "LiveEntity")}),
    "RELATED": frozenset({("LiveEntity", "LiveEntity")}),
    "HAS_ITEM": frozenset({("Library", "Item")}),
    "HAS_CHUNK": frozenset({("Item", "Chunk")}),
}

#: Properties that name another record, with its label. Stories are read by these ids (a branch's
#: turns and events by ``branch_id``, a turn's takes by ``turn_uid``), so each must name a record of
#: the bundle, or none in the store: never another campaign's.
REFERENCES: dict[str, str] = {
    **dict.fromkeys(("branch_id", "parent_branch_id", "active_branch_id"), "Branch"),
    **dict.fromkeys(
        (
            "turn_id",
            "turn_uid",
            "parent_uid",
            "parent_turn_id",
            "head_turn_id",
            "fork_turn_id",
            "tip_turn_id",
            "anchor_turn_id",
            "anchor_turn_uid",
            "start_turn_id",
            "end_turn_id",
        ),
        "Turn",
    ),
    **dict.fromkeys(("scene_id", "scene_uid"), "Scene"),
    "selected_take_id": "Take",
    "proposal_uid": "ProposedChange",
    "review_uid": "ProposalReview",
    "commit_uid": "Commit",
    **dict.fromkeys(("world_id", "world_uid"), "World"),
    "library_uid": "Library",
    "item_uid": "Item",
}

#: A shared record's parent, by the property naming it: a bundle may add one only with a new parent.
_SHARED_PARENT = {"Axiom": "world_uid", "Item": "library_uid", "Chunk": "item_uid"}

#: First key segments the blob layout gives to other owners (items, their images, ingest uploads,
#: campaigns' snapshots and exports, content-addressed blobs): a media file may not use them.
_OWNED_FOLDERS = frozenset({"items", "images", "uploads", "snapshots", "exports", "cas"})

_SHA256 = re.compile(r"[0-9a-f]{64}")
NODES_MEMBER = "graph/nodes.jsonl"
EDGES_MEMBER = "graph/edges.jsonl"
MANIFEST_MEMBER = "manifest.json"
BLOBS_PREFIX = "blobs/"


# -- reading ---------------------------------------------------------------------------------------

#: What zipfile, zlib and struct raise on damaged bytes (a flipped bit in a header, a length, a flag
#: or the deflate stream): each means a corrupt bundle, never a server error. UnicodeDecodeError (a
#: member name) is a ValueError; RuntimeError is an "encrypted" flag; NotImplementedError a
#: compression method.
_DAMAGED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    OverflowError,
)


def read_verified(source: Path | IO[bytes] | bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    if isinstance(source, bytes | bytearray):
        source = io.BytesIO(source)
    try:
        with zipfile.ZipFile(source) as zf:
            return _verified_members(zf)
    except _DAMAGED as exc:
        raise StoryInvalid(f"the bundle is corrupt (not a readable zip: {exc or type(exc).__name__})") from None


def _verified_members(zf: zipfile.ZipFile) -> tuple[dict[str, Any], dict[str, bytes]]:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise StoryInvalid(f"the bundle has {len(infos)} members; at most {MAX_MEMBERS}")
    if sum(i.file_size for i in infos) > MAX_UNCOMPRESSED_BYTES:
        raise StoryInvalid("the bundle unpacks to more than 4 GiB; refused")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise StoryInvalid("the bundle has duplicate member names")
    for name in names:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or "\\" in name:
            raise StoryInvalid(f"the bundle has an unsafe member name {name!r}")
    if MANIFEST_MEMBER not in names:
        raise StoryInvalid("the bundle has no manifest.json")
    manifest = _json_object(zf.read(MANIFEST_MEMBER), MANIFEST_MEMBER)
    if manifest.get("format") != FORMAT:
        raise StoryInvalid(f"not a campaign bundle (format is not {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise StoryInvalid(f"bundle format version {manifest.get('format_version')!r} is not {FORMAT_VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not {NODES_MEMBER, EDGES_MEMBER} <= set(files):
        raise StoryInvalid("the bundle's manifest lists no graph files")
    present = set(names) - {MANIFEST_MEMBER}
    if present != set(files):
        extra, lost = sorted(present - set(files)), sorted(set(files) - present)
        raise StoryInvalid(f"the bundle does not match its manifest (extra {extra}, missing {lost})")
    for name in files:
        if name not in (NODES_MEMBER, EDGES_MEMBER) and not name.startswith(BLOBS_PREFIX):
            raise StoryInvalid(f"the bundle has an unknown member {name!r}")
    members: dict[str, bytes] = {}
    for name, digest in files.items():
        data = zf.read(name)  # a CRC error or a broken deflate stream: the bytes were changed
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoryInvalid(f"bundle member {name!r} does not match its checksum: tampered or corrupt")
        members[name] = data
    for key in ("campaign_id", "world_id"):
        try:
            TypeAdapter(Id).validate_python(manifest.get(key))
        except ValidationError:
            raise StoryInvalid(f"the bundle's manifest has no valid {key}") from None
    if not isinstance(manifest.get("include_knowledge", False), bool):
        raise StoryInvalid("the bundle's manifest has a malformed include_knowledge")
    return manifest, members


def _json_object(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise StoryInvalid(f"{where} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise StoryInvalid(f"{where} is not a JSON object")
    return value


def _json_lines(data: bytes, member: str) -> list[dict[str, Any]]:
    return [
        _json_object(line, f"{member} line {number}")
        for number, line in enumerate(data.splitlines(), 1)
        if line.strip()
    ]


# -- checking --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BundleEdge:
    type: str
    src_label: str
    src: str
    dst_label: str
    dst: str
    props: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ParsedBundle:
    """A bundle's records once their shape and ownership are checked (nothing read from a store yet)."""

    campaign_id: str
    world_id: str
    nodes: dict[str, dict[str, dict[str, Any]]]  # label -> uid -> props
    edges: list[BundleEdge]
    blobs: dict[str, bytes]  # blob key -> bytes
    references: dict[str, set[str]]  # label -> uids that records name but the bundle does not hold


def parse(manifest: dict[str, Any], members: dict[str, bytes]) -> ParsedBundle:
    """Check every record on its own and against the rest of the bundle.

    Raises:
        StoryInvalid: naming the first record that the campaign does not own.
    """
    campaign_id, world_id = manifest["campaign_id"], manifest["world_id"]
    allowed = CAMPAIGN_LABELS | WORLD_LABELS | (KNOWLEDGE_LABELS if manifest.get("include_knowledge") else set())
    nodes: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for record in _json_lines(members[NODES_MEMBER], NODES_MEMBER):
        label, props = record.get("label"), record.get("props")
        if not isinstance(label, str) or not isinstance(props, dict) or not _is_uid(props.get("uid")):
            raise StoryInvalid("the bundle holds a malformed node record")
        if label not in allowed:
            raise StoryInvalid(
                f"a campaign bundle may not carry {label[:60]!r} records: only a campaign's own records, its "
                "world and (exported with knowledge) the passages it cites are imported",
            )
        uid = props["uid"]
        _check_properties(props, f"{label} {uid}")
        if (label in CAMPAIGN_LABELS or "campaign_id" in props) and props.get("campaign_id") != campaign_id:
            raise StoryInvalid(f"the bundle mixes campaigns: {label} {uid} of {props.get('campaign_id')!r}")
        if uid in nodes[label]:
            raise StoryInvalid(f"the bundle holds {label} {uid} twice")
        nodes[label][uid] = props
    if set(nodes.get("Campaign", {})) != {campaign_id} or set(nodes.get("World", {})) != {world_id}:
        raise StoryInvalid("the bundle does not hold exactly the campaign and world its manifest names")
    _check_campaign(nodes["Campaign"][campaign_id])
    for label, records in nodes.items():
        for uid, props in records.items():
            _check_derived_id(label, uid, props, campaign_id, world_id)
    references: dict[str, set[str]] = defaultdict(set)
    for label, records in nodes.items():
        for uid, props in records.items():
            for prop, target in REFERENCES.items():
                value = props.get(prop)
                if value is None or value in nodes.get(target, {}):
                    continue
                if not _is_uid(value):
                    raise StoryInvalid(f"{label} {uid} has a malformed {prop}")
                references[target].add(value)  # dangling or foreign: told apart against the store
    edges = [_parse_edge(record, nodes) for record in _json_lines(members[EDGES_MEMBER], EDGES_MEMBER)]
    carried = {name.removeprefix(BLOBS_PREFIX): data for name, data in members.items() if name.startswith(BLOBS_PREFIX)}
    return ParsedBundle(campaign_id, world_id, dict(nodes), edges, carried, dict(references))


def _check_campaign(props: dict[str, Any]) -> None:
    """The campaign record must read back as a campaign (its profile, its library pins …): every later
    read of the campaign depends on it, so a malformed one would leave it unreadable once imported."""
    try:
        from_props(Campaign, props, key="id")
    except (ValidationError, ValueError) as exc:  # a JSON property that does not parse is a ValueError
        why = validation_message(exc) if isinstance(exc, ValidationError) else "a property is not valid JSON"
        raise StoryInvalid(f"the bundle's campaign record is malformed: {why}") from None


def _is_uid(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256


def _check_properties(props: dict[str, Any], what: str) -> None:
    """Property values are what a graph property holds: a scalar or a list of scalars."""
    for name, value in props.items():
        values = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, str | int | float) for v in values):
            raise StoryInvalid(f"{what} has a malformed property {name[:60]!r}")


def _check_derived_id(label: str, uid: str, props: dict[str, Any], campaign_id: str, world_id: str) -> None:
    """Ids the story engine derives must be derived from this campaign's own records.

    Otherwise a bundle could pre-empt an id another campaign is about to write (its next commit, a
    resolution of one of its proposals, one of its live entities) and block or hijack that write.
    """
    if label == "Commit":
        expected = commit_uid(campaign_id, props.get("version"))  # type: ignore[arg-type]
    elif label == "LiveEntity":
        expected = live_uid(campaign_id, str(props.get("entity_id")))
    elif label == "Resolution":
        expected = resolution_uid(str(props.get("proposal_uid")))
    else:
        expected = uid
    if uid != expected:
        raise StoryInvalid(f"{label} {uid} does not have the id its campaign's records give it")
    if label in ("Campaign", "Axiom") and props.get("world_uid") != world_id:
        raise StoryInvalid(f"{label} {uid} is not of the bundle's world {world_id!r}")


def _parse_edge(record: dict[str, Any], nodes: dict[str, dict[str, dict[str, Any]]]) -> BundleEdge:
    rel, src_label, src, dst_label, dst = (record.get(k) for k in ("type", "src_label", "src", "dst_label", "dst"))
    props = record.get("props") or {}
    if not (
        isinstance(rel, str)
        and isinstance(src_label, str)
        and isinstance(src, str)
        and isinstance(dst_label, str)
        and isinstance(dst, str)
        and isinstance(props, dict)
    ):
        raise StoryInvalid("the bundle holds a malformed edge record")
    edge = BundleEdge(rel, src_label, src, dst_label, dst, props)
    if (edge.src_label, edge.dst_label) not in EDGE_TYPES.get(edge.type, ()):
        raise StoryInvalid(
            f"a campaign bundle may not carry {edge.type[:60]!r} relationships "
            f"from {edge.src_label[:60]} to {edge.dst_label[:60]}",
        )
    _check_properties(props, f"the {edge.type} relationship of {edge.src_label} {edge.src}")
    if edge.src not in nodes.get(edge.src_label, {}) or (
        edge.dst not in nodes.get(edge.dst_label, {}) and edge.dst_label not in SHARED_LABELS
    ):
        raise StoryInvalid(
            f"the bundle links {edge.src_label} {edge.src} to {edge.dst_label} {edge.dst}, and one of them is "
            "not in the bundle: a bundle may link only its own records (and shared ones)",
        )
    return edge


def check_against_store(graph: GraphStore, bundle: ParsedBundle) -> dict[str, dict[str, dict[str, Any]]]:
    """Check the bundle against what the store holds; return the shared records it holds already.

    A shared record already here is the store's: the bundle's copy must be the same (it is then left as
    it is), and nothing new may hang under it (an axiom in its world, an item in its library, a chunk
    in its item) or link to it except the campaign's own records. A record named by a property but
    missing from the bundle must not exist here either, or the campaign would join another's lineage.

    Raises:
        StoryConflict: the campaign, or any of its records, is here already.
        StoryInvalid: the bundle would change or extend a shared record, or names another's record.
    """
    for label, records in sorted(bundle.nodes.items()):
        if label in SHARED_LABELS:
            continue
        taken = _existing(graph, label, records)
        if taken:
            raise StoryConflict(
                f"this store already holds {label} {', '.join(sorted(taken)[:5])}: "
                f"campaign {bundle.campaign_id!r} (or part of it) was imported before",
            )
    kept = {label: _existing(graph, label, bundle.nodes[label]) for label in SHARED_LABELS if label in bundle.nodes}
    for label, records in kept.items():
        for uid, props in records.items():
            if props != bundle.nodes[label][uid]:
                raise StoryInvalid(
                    f"the bundle's {label} {uid} differs from the one this store holds; a bundle never changes "
                    "a shared record (make them agree first)",
                )
    for label, parent_prop in _SHARED_PARENT.items():
        parent_label = REFERENCES[parent_prop]
        for uid, props in bundle.nodes.get(label, {}).items():
            parent = props.get(parent_prop)
            if uid not in kept.get(label, {}) and parent in kept.get(parent_label, {}):
                raise StoryInvalid(
                    f"the bundle would add {label} {uid} to {parent_label} {parent}, which this store holds "
                    "already; a bundle never extends a shared record",
                )
    for edge in bundle.edges:
        dst_held = edge.dst in kept.get(edge.dst_label, {}) or edge.dst not in bundle.nodes.get(edge.dst_label, {})
        if dst_held and edge.src not in kept.get(edge.src_label, {}) and edge.src_label not in CAMPAIGN_LABELS:
            raise StoryInvalid(
                f"the bundle would link {edge.src_label} {edge.src} to {edge.dst_label} {edge.dst}, which this "
                "store holds already; a bundle never extends a shared record",
            )
    for label, uids in sorted(bundle.references.items()):
        foreign = _existing(graph, label, dict.fromkeys(uids))
        if foreign:
            raise StoryInvalid(
                f"the bundle's records name {label} {', '.join(sorted(foreign)[:5])}, which is not in the bundle "
                "but in this store: a campaign's records may name only its own",
            )
    return kept


def record_props(value: dict[str, Any]) -> dict[str, Any]:
    """A node's properties as a bundle holds them (without the ``_labels`` the store adds)."""
    return {k: v for k, v in value.items() if not k.startswith("_")}


def _existing(graph: GraphStore, label: str, uids: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = graph.run(*cypher.nodes_by_uid(label, list(uids)))
    return {r["n"]["uid"]: record_props(r["n"]) for r in rows}


def blob_writes(blobs: BlobStore, bundle: ParsedBundle, kept: dict[str, dict[str, dict[str, Any]]]) -> dict[str, bytes]:
    """The blobs to write: each key must be one the naming record may own, and none overwrites.

    A blob key is allowed when it is content-addressed (``<prefix>/<sha256 of the bytes>``), under the
    campaign's own prefixes (``snapshots/<campaign>/``, ``exports/<campaign>/``), the text of an
    imported chunk under its own item, or a media file outside the layout's owned folders whose bytes
    match the asset's hash. Blobs named only by shared records the store holds already are its own
    and are not written; a key that holds other bytes here is never overwritten.

    Raises:
        StoryInvalid: a record names a key it may not own, a blob is not named by any record, or a
            blob's bytes are not the content its name or its record says.
        StoryConflict: the store holds other bytes under a key the bundle writes.
    """
    named: set[str] = set()
    namers: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)  # records the import creates
    for label, records in bundle.nodes.items():
        for uid, props in records.items():
            for prop in BLOB_PROPERTIES:
                key = props.get(prop)
                if key is None:
                    continue
                if not isinstance(key, str) or not _may_name(validate_key(key), label, props, bundle.campaign_id):
                    raise StoryInvalid(
                        f"{label} {uid} names blob {str(key)[:120]!r}, which a campaign bundle may not write: "
                        f"only content-addressed keys and keys of campaign {bundle.campaign_id!r} are imported",
                    )
                named.add(key)
                if uid not in kept.get(label, {}):
                    namers[key].append((label, props))
    writes: dict[str, bytes] = {}
    for key, data in sorted(bundle.blobs.items()):
        if key not in named:  # an unnamed blob could only be a plant for someone else's key
            raise StoryInvalid(f"bundle member {BLOBS_PREFIX}{key} is not named by any record of the bundle")
        if key not in namers:
            continue  # named only by shared records this store holds: its blobs, not the bundle's
        digest = hashlib.sha256(data).hexdigest()
        addressed = _content_address(key)
        if addressed is not None and addressed != digest:
            raise StoryInvalid(f"blob {key!r} does not hold the content its name is the hash of")
        if any(label == "MediaAsset" and props.get("content_hash") != digest for label, props in namers[key]):
            raise StoryInvalid(f"blob {key!r} does not hold the content its media asset's hash says")
        if blobs.exists(key):
            if addressed is None and blobs.get(key) != data:
                raise StoryConflict(f"this store holds other content under blob {key!r}; an import never overwrites")
            continue
        writes[key] = data
    return writes


def _content_address(key: str) -> str | None:
    """The digest a content-addressed key (``<prefix>/<64 hex>``) claims, else None."""
    parts = key.split("/")
    return parts[1] if len(parts) == 2 and _SHA256.fullmatch(parts[1]) else None


def _may_name(key: str, label: str, props: dict[str, Any], campaign_id: str) -> bool:
    if _content_address(key) is not None or key.startswith((f"snapshots/{campaign_id}/", f"exports/{campaign_id}/")):
        return True
    if label == "Chunk":
        item = props.get("item_uid")
        return isinstance(item, str) and "/" not in item and key.startswith(f"items/{item}/chunks/")
    return label == "MediaAsset" and key.split("/", 1)[0] not in _OWNED_FOLDERS
