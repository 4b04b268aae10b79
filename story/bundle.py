"""Campaign bundles: a zip that round-trips a campaign exactly, between stores.

Layout::

    manifest.json        format and version, the campaign and world ids, counts, sha256 of every member
    graph/nodes.jsonl    {"label": ..., "props": {...}} per node: the campaign's nodes, its world, the
                         world's axioms and, with ``include_knowledge``, the library chunks it cites
    graph/edges.jsonl    {"type", "src", "src_label", "dst", "dst_label", "props"} per relationship
    blobs/<key>          every blob those nodes name (snapshots, prompts, retrievals, presentation,
                         media, cited chunk text)

Export copies node and relationship properties verbatim, so an import gives back the same tree,
the same head (even behind the tip), the same canon and the same provenance.

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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from schemas.common import Id, utc_now
from schemas.errors import Conflict, InvalidRequest, NotFound
from stores.blob.base import BlobStore
from stores.blob.layout import validate_key
from stores.graph.base import GraphStore
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
        "Campaign", "Branch", "Turn", "Take", "Scene", "Checkpoint", "ProposedChange", "Resolution",
        "StateEvent", "Commit", "Entity", "Fact", "Relationship", "StoryThread", "Happening", "Memory",
        "Summary", "Snapshot", "PromptSnapshot", "Retrieval", "MediaAsset", "LiveEntity",
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
    "FORKED_AT": frozenset({("Branch", "Turn")}),
    "PROPOSED_IN": frozenset({("ProposedChange", "Scene")}),
    "RESOLVES": frozenset({("Resolution", "ProposedChange")}),
    "COMMITTED_IN": frozenset({("StateEvent", "Commit")}),
    "FROM_PROPOSAL": frozenset({("StateEvent", "ProposedChange")}),
    "ESTABLISHED_BY": frozenset((label, "StateEvent") for label in _CANON),
    "SUPPORTED_BY": frozenset((label, t) for label in _CANON for t in ("Scene", "Turn", "Resolution", "Chunk")),
    "REPLACES": frozenset({("Fact", "Fact")}),
    "DEPENDS_ON": frozenset({("Fact", "Fact")}),
    "INFORMED_BY": frozenset({("Turn", "Chunk")}),
    "AT_TURN": frozenset((label, "Turn") for label in ("Checkpoint", "Memory", "Summary", "Snapshot")),
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
_NODES = "graph/nodes.jsonl"
_EDGES = "graph/edges.jsonl"
_MANIFEST = "manifest.json"
_BLOBS = "blobs/"


@dataclass(frozen=True, slots=True)
class BundleSummary:
    campaign_id: str
    world_id: str
    nodes: int
    edges: int
    blobs: int


def export_campaign(
    graph: GraphStore, blobs: BlobStore, campaign_id: str, dest: Path | IO[bytes], *, include_knowledge: bool = False
) -> BundleSummary:
    """Write a campaign bundle to ``dest`` (a path or a binary stream).

    Raises:
        NotFound: no such campaign.
    """
    rows = graph.run("MATCH (c:Campaign {uid: $c}) RETURN c.world_uid AS world", {"c": campaign_id})
    if not rows:
        raise NotFound("story", f"no campaign {campaign_id!r}")
    world_id = rows[0]["world"]
    nodes = _campaign_nodes(graph, campaign_id, world_id)
    edges = _campaign_edges(graph, campaign_id, world_id)
    if include_knowledge:
        chunk_ids = sorted({e["dst"] for e in edges if e["dst_label"] == "Chunk"})
        knowledge_nodes = _knowledge_nodes(graph, chunk_ids)
        nodes.extend(knowledge_nodes)
        edges.extend(_knowledge_edges(graph, knowledge_nodes))
    keys = sorted({n["props"][p] for n in nodes for p in BLOB_PROPERTIES if isinstance(n["props"].get(p), str)})
    members: dict[str, bytes] = {
        _NODES: b"".join(_line(n) for n in nodes),
        _EDGES: b"".join(_line(e) for e in edges),
    }
    missing = []
    for key in keys:
        try:
            members[f"blobs/{key}"] = blobs.get(key)
        except NotFound:
            missing.append(key)  # a lost snapshot is a cache miss; a lost prompt is reported
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "campaign_id": campaign_id,
        "world_id": world_id,
        "created_at": utc_now().isoformat(),
        "include_knowledge": include_knowledge,
        "counts": {"nodes": len(nodes), "edges": len(edges), "blobs": len(keys) - len(missing)},
        "missing_blobs": missing,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(members.items())},
    }
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(_MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
        for name, data in members.items():
            zf.writestr(name, data)
    return BundleSummary(campaign_id, world_id, len(nodes), len(edges), len(keys) - len(missing))


def import_campaign(graph: GraphStore, blobs: BlobStore, source: Path | IO[bytes] | bytes) -> BundleSummary:
    """Import a campaign bundle into a store (empty or holding other campaigns).

    A bundle is untrusted input: its checksums only show it was not damaged on the way, since anyone
    can recompute them. So every record is checked against what the campaign owns before anything is
    written (see the module docstring); the blobs are written next (none overwrites a different one)
    and the graph last, in one transaction.

    Raises:
        InvalidRequest: the bundle is corrupt, too large, of an unknown format, or carries a record,
            relationship or blob that is not the campaign's to import.
        Conflict: the campaign (or any of its records) already exists in this store, or a blob key the
            bundle names holds other content here.
    """
    manifest, members = _read_verified(source)
    bundle = _parse(manifest, members)
    kept = _check_against_store(graph, bundle)
    writes = _blob_writes(blobs, bundle, kept)
    for key, data in writes.items():
        blobs.put(key, data)
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for edge in bundle.edges:
        if edge.src not in kept.get(edge.src_label, {}):  # the store's own record: its links stay as they are
            grouped[(edge.type, edge.src_label, edge.dst_label)].append(
                {"a": edge.src, "b": edge.dst, "props": edge.props}
            )
    with graph.transaction() as tx:
        for label, records in sorted(bundle.nodes.items()):
            rows = [props for uid, props in records.items() if uid not in kept.get(label, {})]
            if rows:
                tx.run(f"UNWIND $rows AS r CREATE (n:{label}) SET n = r", {"rows": rows})
        for (rel, src, dst), rows in sorted(grouped.items()):
            tx.run(
                f"UNWIND $rows AS e MATCH (a:{src} {{uid: e.a}}), (b:{dst} {{uid: e.b}}) "
                f"MERGE (a)-[r:{rel}]->(b) SET r += e.props",
                {"rows": rows},
            )
    return BundleSummary(
        bundle.campaign_id,
        bundle.world_id,
        sum(len(records) for records in bundle.nodes.values()),
        len(bundle.edges),
        len(bundle.blobs),
    )


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


def _read_verified(source: Path | IO[bytes] | bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    if isinstance(source, bytes | bytearray):
        source = io.BytesIO(source)
    try:
        with zipfile.ZipFile(source) as zf:
            return _verified_members(zf)
    except _DAMAGED as exc:
        raise InvalidRequest(
            "story", f"the bundle is corrupt (not a readable zip: {exc or type(exc).__name__})"
        ) from None


def _verified_members(zf: zipfile.ZipFile) -> tuple[dict[str, Any], dict[str, bytes]]:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise InvalidRequest("story", f"the bundle has {len(infos)} members; at most {MAX_MEMBERS}")
    if sum(i.file_size for i in infos) > MAX_UNCOMPRESSED_BYTES:
        raise InvalidRequest("story", "the bundle unpacks to more than 4 GiB; refused")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise InvalidRequest("story", "the bundle has duplicate member names")
    for name in names:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or "\\" in name:
            raise InvalidRequest("story", f"the bundle has an unsafe member name {name!r}")
    if _MANIFEST not in names:
        raise InvalidRequest("story", "the bundle has no manifest.json")
    manifest = _json_object(zf.read(_MANIFEST), _MANIFEST)
    if manifest.get("format") != FORMAT:
        raise InvalidRequest("story", f"not a campaign bundle (format is not {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidRequest(
            "story", f"bundle format version {manifest.get('format_version')!r} is not {FORMAT_VERSION}"
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not {_NODES, _EDGES} <= set(files):
        raise InvalidRequest("story", "the bundle's manifest lists no graph files")
    present = set(names) - {_MANIFEST}
    if present != set(files):
        extra, lost = sorted(present - set(files)), sorted(set(files) - present)
        raise InvalidRequest("story", f"the bundle does not match its manifest (extra {extra}, missing {lost})")
    for name in files:
        if name not in (_NODES, _EDGES) and not name.startswith(_BLOBS):
            raise InvalidRequest("story", f"the bundle has an unknown member {name!r}")
    members: dict[str, bytes] = {}
    for name, digest in files.items():
        data = zf.read(name)  # a CRC error or a broken deflate stream: the bytes were changed
        if hashlib.sha256(data).hexdigest() != digest:
            raise InvalidRequest("story", f"bundle member {name!r} does not match its checksum: tampered or corrupt")
        members[name] = data
    for key in ("campaign_id", "world_id"):
        try:
            TypeAdapter(Id).validate_python(manifest.get(key))
        except ValidationError:
            raise InvalidRequest("story", f"the bundle's manifest has no valid {key}") from None
    if not isinstance(manifest.get("include_knowledge", False), bool):
        raise InvalidRequest("story", "the bundle's manifest has a malformed include_knowledge")
    return manifest, members


def _json_object(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise InvalidRequest("story", f"{where} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("story", f"{where} is not a JSON object")
    return value


def _json_lines(data: bytes, member: str) -> list[dict[str, Any]]:
    return [
        _json_object(line, f"{member} line {number}")
        for number, line in enumerate(data.splitlines(), 1)
        if line.strip()
    ]


# -- checking --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Edge:
    type: str
    src_label: str
    src: str
    dst_label: str
    dst: str
    props: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Bundle:
    """A bundle's records once their shape and ownership are checked (nothing read from a store yet)."""

    campaign_id: str
    world_id: str
    nodes: dict[str, dict[str, dict[str, Any]]]  # label -> uid -> props
    edges: list[_Edge]
    blobs: dict[str, bytes]  # blob key -> bytes
    references: dict[str, set[str]]  # label -> uids that records name but the bundle does not hold


def _parse(manifest: dict[str, Any], members: dict[str, bytes]) -> _Bundle:
    """Check every record on its own and against the rest of the bundle.

    Raises:
        InvalidRequest: naming the first record that the campaign does not own.
    """
    campaign_id, world_id = manifest["campaign_id"], manifest["world_id"]
    allowed = CAMPAIGN_LABELS | WORLD_LABELS | (KNOWLEDGE_LABELS if manifest.get("include_knowledge") else set())
    nodes: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for record in _json_lines(members[_NODES], _NODES):
        label, props = record.get("label"), record.get("props")
        if not isinstance(label, str) or not isinstance(props, dict) or not _is_uid(props.get("uid")):
            raise InvalidRequest("story", "the bundle holds a malformed node record")
        if label not in allowed:
            raise InvalidRequest(
                "story",
                f"a campaign bundle may not carry {label[:60]!r} records: only a campaign's own records, its "
                "world and (exported with knowledge) the passages it cites are imported",
            )
        uid = props["uid"]
        _check_properties(props, f"{label} {uid}")
        if (label in CAMPAIGN_LABELS or "campaign_id" in props) and props.get("campaign_id") != campaign_id:
            raise InvalidRequest("story", f"the bundle mixes campaigns: {label} {uid} of {props.get('campaign_id')!r}")
        if uid in nodes[label]:
            raise InvalidRequest("story", f"the bundle holds {label} {uid} twice")
        nodes[label][uid] = props
    if set(nodes.get("Campaign", {})) != {campaign_id} or set(nodes.get("World", {})) != {world_id}:
        raise InvalidRequest("story", "the bundle does not hold exactly the campaign and world its manifest names")
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
                    raise InvalidRequest("story", f"{label} {uid} has a malformed {prop}")
                references[target].add(value)  # dangling or foreign: told apart against the store
    edges = [_parse_edge(record, nodes) for record in _json_lines(members[_EDGES], _EDGES)]
    carried = {name.removeprefix(_BLOBS): data for name, data in members.items() if name.startswith(_BLOBS)}
    return _Bundle(campaign_id, world_id, dict(nodes), edges, carried, dict(references))


def _is_uid(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256


def _check_properties(props: dict[str, Any], what: str) -> None:
    """Property values are what a graph property holds: a scalar or a list of scalars."""
    for name, value in props.items():
        values = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, str | int | float) for v in values):
            raise InvalidRequest("story", f"{what} has a malformed property {name[:60]!r}")


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
        raise InvalidRequest("story", f"{label} {uid} does not have the id its campaign's records give it")
    if label in ("Campaign", "Axiom") and props.get("world_uid") != world_id:
        raise InvalidRequest("story", f"{label} {uid} is not of the bundle's world {world_id!r}")


def _parse_edge(record: dict[str, Any], nodes: dict[str, dict[str, dict[str, Any]]]) -> _Edge:
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
        raise InvalidRequest("story", "the bundle holds a malformed edge record")
    edge = _Edge(rel, src_label, src, dst_label, dst, props)
    if (edge.src_label, edge.dst_label) not in EDGE_TYPES.get(edge.type, ()):
        raise InvalidRequest(
            "story",
            f"a campaign bundle may not carry {edge.type[:60]!r} relationships "
            f"from {edge.src_label[:60]} to {edge.dst_label[:60]}",
        )
    _check_properties(props, f"the {edge.type} relationship of {edge.src_label} {edge.src}")
    if edge.src not in nodes.get(edge.src_label, {}) or (
        edge.dst not in nodes.get(edge.dst_label, {}) and edge.dst_label not in SHARED_LABELS
    ):
        raise InvalidRequest(
            "story",
            f"the bundle links {edge.src_label} {edge.src} to {edge.dst_label} {edge.dst}, and one of them is "
            "not in the bundle: a bundle may link only its own records (and shared ones)",
        )
    return edge


def _check_against_store(graph: GraphStore, bundle: _Bundle) -> dict[str, dict[str, dict[str, Any]]]:
    """Check the bundle against what the store holds; return the shared records it holds already.

    A shared record already here is the store's: the bundle's copy must be the same (it is then left as
    it is), and nothing new may hang under it (an axiom in its world, an item in its library, a chunk
    in its item) or link to it except the campaign's own records. A record named by a property but
    missing from the bundle must not exist here either, or the campaign would join another's lineage.

    Raises:
        Conflict: the campaign, or any of its records, is here already.
        InvalidRequest: the bundle would change or extend a shared record, or names another's record.
    """
    for label, records in sorted(bundle.nodes.items()):
        if label in SHARED_LABELS:
            continue
        taken = _existing(graph, label, records)
        if taken:
            raise Conflict(
                "story",
                f"this store already holds {label} {', '.join(sorted(taken)[:5])}: "
                f"campaign {bundle.campaign_id!r} (or part of it) was imported before",
            )
    kept = {label: _existing(graph, label, bundle.nodes[label]) for label in SHARED_LABELS if label in bundle.nodes}
    for label, records in kept.items():
        for uid, props in records.items():
            if props != bundle.nodes[label][uid]:
                raise InvalidRequest(
                    "story",
                    f"the bundle's {label} {uid} differs from the one this store holds; a bundle never changes "
                    "a shared record (make them agree first)",
                )
    for label, parent_prop in _SHARED_PARENT.items():
        parent_label = REFERENCES[parent_prop]
        for uid, props in bundle.nodes.get(label, {}).items():
            parent = props.get(parent_prop)
            if uid not in kept.get(label, {}) and parent in kept.get(parent_label, {}):
                raise InvalidRequest(
                    "story",
                    f"the bundle would add {label} {uid} to {parent_label} {parent}, which this store holds "
                    "already; a bundle never extends a shared record",
                )
    for edge in bundle.edges:
        dst_held = edge.dst in kept.get(edge.dst_label, {}) or edge.dst not in bundle.nodes.get(edge.dst_label, {})
        if dst_held and edge.src not in kept.get(edge.src_label, {}) and edge.src_label not in CAMPAIGN_LABELS:
            raise InvalidRequest(
                "story",
                f"the bundle would link {edge.src_label} {edge.src} to {edge.dst_label} {edge.dst}, which this "
                "store holds already; a bundle never extends a shared record",
            )
    for label, uids in sorted(bundle.references.items()):
        foreign = _existing(graph, label, dict.fromkeys(uids))
        if foreign:
            raise InvalidRequest(
                "story",
                f"the bundle's records name {label} {', '.join(sorted(foreign)[:5])}, which is not in the bundle "
                "but in this store: a campaign's records may name only its own",
            )
    return kept


def _existing(graph: GraphStore, label: str, uids: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = graph.run(f"MATCH (n:{label}) WHERE n.uid IN $uids RETURN n", {"uids": list(uids)})
    return {r["n"]["uid"]: _props(r["n"]) for r in rows}


def _blob_writes(blobs: BlobStore, bundle: _Bundle, kept: dict[str, dict[str, dict[str, Any]]]) -> dict[str, bytes]:
    """The blobs to write: each key must be one the naming record may own, and none overwrites.

    A blob key is allowed when it is content-addressed (``<prefix>/<sha256 of the bytes>``), under the
    campaign's own prefixes (``snapshots/<campaign>/``, ``exports/<campaign>/``), the text of an
    imported chunk under its own item, or a media file outside the layout's owned folders whose bytes
    match the asset's hash. Blobs named only by shared records the store holds already are its own
    and are not written; a key that holds other bytes here is never overwritten.

    Raises:
        InvalidRequest: a record names a key it may not own, a blob is not named by any record, or a
            blob's bytes are not the content its name or its record says.
        Conflict: the store holds other bytes under a key the bundle writes.
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
                    raise InvalidRequest(
                        "story",
                        f"{label} {uid} names blob {str(key)[:120]!r}, which a campaign bundle may not write: "
                        f"only content-addressed keys and keys of campaign {bundle.campaign_id!r} are imported",
                    )
                named.add(key)
                if uid not in kept.get(label, {}):
                    namers[key].append((label, props))
    writes: dict[str, bytes] = {}
    for key, data in sorted(bundle.blobs.items()):
        if key not in named:  # an unnamed blob could only be a plant for someone else's key
            raise InvalidRequest("story", f"bundle member {_BLOBS}{key} is not named by any record of the bundle")
        if key not in namers:
            continue  # named only by shared records this store holds: its blobs, not the bundle's
        digest = hashlib.sha256(data).hexdigest()
        addressed = _content_address(key)
        if addressed is not None and addressed != digest:
            raise InvalidRequest("story", f"blob {key!r} does not hold the content its name is the hash of")
        if any(label == "MediaAsset" and props.get("content_hash") != digest for label, props in namers[key]):
            raise InvalidRequest("story", f"blob {key!r} does not hold the content its media asset's hash says")
        if blobs.exists(key):
            if addressed is None and blobs.get(key) != data:
                raise Conflict(
                    "story", f"this store holds other content under blob {key!r}; an import never overwrites"
                )
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


# -- collecting ------------------------------------------------------------------------------------


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _props(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if not k.startswith("_")}


def _label(labels: Iterable[str]) -> str:
    return sorted(labels)[0]


def _campaign_nodes(graph: GraphStore, campaign_id: str, world_id: str) -> list[dict[str, Any]]:
    out = []
    for row in graph.run("MATCH (n) WHERE n.campaign_id = $c RETURN labels(n) AS labels, n", {"c": campaign_id}):
        out.append({"label": _label(row["labels"]), "props": _props(row["n"])})
    out.extend(
        {"label": label, "props": _props(r["n"])}
        for label in ("World", "Axiom")
        for r in graph.run(f"MATCH (n:{label}) WHERE n.uid = $w OR n.world_uid = $w RETURN n", {"w": world_id})
    )
    return sorted(out, key=lambda n: (n["label"], n["props"]["uid"]))


def _campaign_edges(graph: GraphStore, campaign_id: str, world_id: str) -> list[dict[str, Any]]:
    rows = graph.run(
        "MATCH (a)-[r]->(b) WHERE a.campaign_id = $c "
        "RETURN a.uid AS src, labels(a) AS sl, type(r) AS type, r, b.uid AS dst, labels(b) AS dl",
        {"c": campaign_id},
    )
    rows += graph.run(
        "MATCH (a:Axiom {world_uid: $w})-[r]->(b) "
        "RETURN a.uid AS src, labels(a) AS sl, type(r) AS type, r, b.uid AS dst, labels(b) AS dl",
        {"w": world_id},
    )
    return _edges(rows)


def _edges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    edges = [
        {
            "type": r["type"],
            "src": r["src"],
            "src_label": _label(r["sl"]),
            "dst": r["dst"],
            "dst_label": _label(r["dl"]),
            "props": _props(r["r"]) if isinstance(r["r"], dict) else {},
        }
        for r in rows
    ]
    return sorted(edges, key=lambda e: (e["type"], e["src"], e["dst"]))


def _knowledge_nodes(graph: GraphStore, chunk_ids: list[str]) -> list[dict[str, Any]]:
    if not chunk_ids:
        return []
    chunks = graph.run("MATCH (c:Chunk) WHERE c.uid IN $ids RETURN c", {"ids": chunk_ids})
    item_ids = sorted({r["c"].get("item_uid") for r in chunks if r["c"].get("item_uid")})
    items = graph.run("MATCH (i:Item) WHERE i.uid IN $ids RETURN i", {"ids": item_ids}) if item_ids else []
    library_ids = sorted({r["i"].get("library_uid") for r in items if r["i"].get("library_uid")})
    libraries = graph.run("MATCH (l:Library) WHERE l.uid IN $ids RETURN l", {"ids": library_ids}) if library_ids else []
    return [
        *({"label": "Library", "props": _props(r["l"])} for r in libraries),
        *({"label": "Item", "props": _props(r["i"])} for r in items),
        *({"label": "Chunk", "props": _props(r["c"])} for r in chunks),
    ]


def _knowledge_edges(graph: GraphStore, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    uids = [n["props"]["uid"] for n in nodes]
    if not uids:
        return []
    rows = graph.run(
        "MATCH (a)-[r]->(b) WHERE a.uid IN $u AND b.uid IN $u AND type(r) IN ['HAS_ITEM', 'HAS_CHUNK'] "
        "RETURN a.uid AS src, labels(a) AS sl, type(r) AS type, r, b.uid AS dst, labels(b) AS dl",
        {"u": uids},
    )
    return _edges(rows)
