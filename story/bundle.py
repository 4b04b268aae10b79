"""Campaign bundles: a zip that round-trips a campaign exactly, between stores.

Layout::

    manifest.json        format and version, the campaign and world ids, counts, sha256 of every member
    graph/nodes.jsonl    {"label": ..., "props": {...}} per node: the campaign's nodes, its world, the
                         world's axioms and, with ``include_knowledge``, the library chunks it cites
    graph/edges.jsonl    {"type", "src", "src_label", "dst", "dst_label", "props"} per relationship
    blobs/<key>          every blob those nodes name (snapshots, prompts, retrievals, presentation,
                         media, cited chunk text)

Export copies node and relationship properties verbatim, so an import gives back the same tree,
the same head (even behind the tip), the same canon and the same provenance. Import checks the
whole bundle before it writes anything — format, checksums, member names, sizes, id collisions —
and then writes the graph in one transaction, so a corrupt, tampered or clashing bundle changes
nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from schemas.common import utc_now
from schemas.errors import Conflict, InvalidRequest, NotFound
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore

FORMAT = "lorekeeper-campaign"
FORMAT_VERSION = 1
MAX_UNCOMPRESSED_BYTES = 4 << 30  # refuse zip bombs before reading them
MAX_MEMBERS = 200_000

#: Node properties that name a blob the bundle must carry.
BLOB_PROPERTIES = ("blob_key", "presentation_key", "text_key")

#: Labels that may exist already in the target store (shared with other campaigns): merged, not created.
SHARED_LABELS = frozenset({"World", "Axiom", "Library", "Collection", "Item", "Chunk"})

_NODES = "graph/nodes.jsonl"
_EDGES = "graph/edges.jsonl"
_MANIFEST = "manifest.json"


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

    Raises:
        InvalidRequest: the bundle is corrupt, tampered with, too large or of an unknown format.
        Conflict: the campaign (or any of its records) already exists in this store.
    """
    manifest, members = _read_verified(source)
    campaign_id, world_id = manifest["campaign_id"], manifest["world_id"]
    nodes = [json.loads(line) for line in members.pop(_NODES).splitlines() if line.strip()]
    edges = [json.loads(line) for line in members.pop(_EDGES).splitlines() if line.strip()]
    by_label: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        label, props = node.get("label"), node.get("props")
        if not isinstance(label, str) or not label.isidentifier() or not isinstance(props, dict) or "uid" not in props:
            raise InvalidRequest("story", "the bundle holds a malformed node record")
        if label not in SHARED_LABELS and props.get("campaign_id") not in (campaign_id, None):
            raise InvalidRequest("story", f"the bundle mixes campaigns: a {label} of {props.get('campaign_id')!r}")
        by_label[label].append(props)
    if not any(p["uid"] == campaign_id for p in by_label.get("Campaign", [])):
        raise InvalidRequest("story", "the bundle does not hold the campaign its manifest names")
    for label, props_list in by_label.items():
        if label in SHARED_LABELS:
            continue
        uids = [p["uid"] for p in props_list]
        taken = graph.run(f"MATCH (n:{label}) WHERE n.uid IN $uids RETURN n.uid AS uid LIMIT 5", {"uids": uids})
        if taken:
            raise Conflict(
                "story",
                f"this store already holds {label} {', '.join(r['uid'] for r in taken)}: "
                f"campaign {campaign_id!r} (or part of it) was imported before",
            )
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for edge in edges:
        try:
            key = (edge["type"], edge["src_label"], edge["dst_label"])
            if not all(isinstance(k, str) and k.isidentifier() for k in key):
                raise TypeError
            grouped[key].append({"a": edge["src"], "b": edge["dst"], "props": edge.get("props") or {}})
        except (KeyError, TypeError):
            raise InvalidRequest("story", "the bundle holds a malformed edge record") from None
    for name, data in members.items():  # blobs first: content-addressed, harmless if the graph write fails
        blobs.put(name.removeprefix("blobs/"), data)
    with graph.transaction() as tx:
        for label, props_list in sorted(by_label.items()):
            if label in SHARED_LABELS:
                tx.run(f"UNWIND $rows AS r MERGE (n:{label} {{uid: r.uid}}) ON CREATE SET n = r", {"rows": props_list})
            else:
                tx.run(f"UNWIND $rows AS r CREATE (n:{label}) SET n = r", {"rows": props_list})
        for (rel, src, dst), rows in sorted(grouped.items()):
            tx.run(
                f"UNWIND $rows AS e MATCH (a:{src} {{uid: e.a}}), (b:{dst} {{uid: e.b}}) "
                f"MERGE (a)-[r:{rel}]->(b) SET r += e.props",
                {"rows": rows},
            )
    return BundleSummary(campaign_id, world_id, len(nodes), len(edges), len(members))


# -- reading ---------------------------------------------------------------------------------------


def _read_verified(source: Path | IO[bytes] | bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    if isinstance(source, bytes | bytearray):
        source = io.BytesIO(source)
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidRequest("story", f"not a campaign bundle (not a readable zip: {exc})") from None
    with zf:
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
        try:
            manifest = json.loads(zf.read(_MANIFEST))
        except KeyError:
            raise InvalidRequest("story", "the bundle has no manifest.json") from None
        except (ValueError, zipfile.BadZipFile) as exc:
            raise InvalidRequest("story", f"the bundle's manifest is unreadable: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
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
        members: dict[str, bytes] = {}
        for name, digest in files.items():
            try:
                data = zf.read(name)
            except (zipfile.BadZipFile, OSError) as exc:  # a CRC error: the bytes were changed
                raise InvalidRequest("story", f"bundle member {name!r} is corrupt: {exc}") from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise InvalidRequest(
                    "story", f"bundle member {name!r} does not match its checksum: tampered or corrupt"
                )
            members[name] = data
    for key in ("campaign_id", "world_id"):
        if not isinstance(manifest.get(key), str):
            raise InvalidRequest("story", f"the bundle's manifest has no {key}")
    return manifest, members


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
