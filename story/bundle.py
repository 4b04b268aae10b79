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

An import treats the bundle as untrusted and checks all of it before it writes anything, so a corrupt,
crafted or clashing bundle changes nothing: the format and those checks are in :mod:`story.bundle_checks`.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from schemas.common import utc_now
from schemas.errors import NotFound
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from story import bundle_queries, cypher
from story.bundle_checks import (
    BLOB_PROPERTIES,
    EDGES_MEMBER,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_MEMBER,
    NODES_MEMBER,
    blob_writes,
    check_against_store,
    parse,
    read_verified,
    record_props,
)
from story.errors import StoryNotFound


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
        StoryNotFound: no such campaign.
    """
    rows = graph.run(*bundle_queries.world_of_campaign(campaign_id))
    if not rows:
        raise StoryNotFound(f"no campaign {campaign_id!r}")
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
        NODES_MEMBER: b"".join(_line(n) for n in nodes),
        EDGES_MEMBER: b"".join(_line(e) for e in edges),
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
        zf.writestr(MANIFEST_MEMBER, json.dumps(manifest, indent=2, sort_keys=True))
        for name, data in members.items():
            zf.writestr(name, data)
    return BundleSummary(campaign_id, world_id, len(nodes), len(edges), len(keys) - len(missing))


def import_campaign(graph: GraphStore, blobs: BlobStore, source: Path | IO[bytes] | bytes) -> BundleSummary:
    """Import a campaign bundle into a store (empty or holding other campaigns).

    A bundle is untrusted input: its checksums only show it was not damaged on the way, since anyone
    can recompute them. So every record is checked against what the campaign owns before anything is
    written (see :mod:`story.bundle_checks`); the blobs are written next (none overwrites a different one)
    and the graph last, in one transaction.

    Raises:
        StoryInvalid: the bundle is corrupt, too large, of an unknown format, or carries a record,
            relationship or blob that is not the campaign's to import.
        StoryConflict: the campaign (or any of its records) already exists in this store, or a blob key the
            bundle names holds other content here.
    """
    manifest, members = read_verified(source)
    bundle = parse(manifest, members)
    kept = check_against_store(graph, bundle)
    writes = blob_writes(blobs, bundle, kept)
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
                tx.run(*cypher.create_nodes(label, rows))
        for (rel, src, dst), rows in sorted(grouped.items()):
            tx.run(*bundle_queries.merge_edges(rel, src, dst, rows))
    return BundleSummary(
        bundle.campaign_id,
        bundle.world_id,
        sum(len(records) for records in bundle.nodes.values()),
        len(bundle.edges),
        len(bundle.blobs),
    )


# -- collecting ------------------------------------------------------------------------------------


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _label(labels: Iterable[str]) -> str:
    return sorted(labels)[0]


def _campaign_nodes(graph: GraphStore, campaign_id: str, world_id: str) -> list[dict[str, Any]]:
    out = []
    for row in graph.run(*bundle_queries.campaign_nodes(campaign_id)):
        out.append({"label": _label(row["labels"]), "props": record_props(row["n"])})
    out.extend(
        {"label": label, "props": record_props(r["n"])}
        for label in ("World", "Axiom")
        for r in graph.run(*bundle_queries.world_nodes(label, world_id))
    )
    return sorted(out, key=lambda n: (n["label"], n["props"]["uid"]))


def _campaign_edges(graph: GraphStore, campaign_id: str, world_id: str) -> list[dict[str, Any]]:
    rows = graph.run(*bundle_queries.campaign_edges(campaign_id))
    rows += graph.run(*bundle_queries.axiom_edges(world_id))
    return _edges(rows)


def _edges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    edges = [
        {
            "type": r["type"],
            "src": r["src"],
            "src_label": _label(r["sl"]),
            "dst": r["dst"],
            "dst_label": _label(r["dl"]),
            "props": record_props(r["r"]) if isinstance(r["r"], dict) else {},
        }
        for r in rows
    ]
    return sorted(edges, key=lambda e: (e["type"], e["src"], e["dst"]))


def _knowledge_nodes(graph: GraphStore, chunk_ids: list[str]) -> list[dict[str, Any]]:
    if not chunk_ids:
        return []
    chunks = [r["n"] for r in graph.run(*cypher.nodes_by_uid("Chunk", chunk_ids))]
    item_ids = sorted({c.get("item_uid") for c in chunks if c.get("item_uid")})
    items = [r["n"] for r in graph.run(*cypher.nodes_by_uid("Item", item_ids))] if item_ids else []
    library_ids = sorted({i.get("library_uid") for i in items if i.get("library_uid")})
    libraries = [r["n"] for r in graph.run(*cypher.nodes_by_uid("Library", library_ids))] if library_ids else []
    return [
        *({"label": "Library", "props": record_props(n)} for n in libraries),
        *({"label": "Item", "props": record_props(n)} for n in items),
        *({"label": "Chunk", "props": record_props(n)} for n in chunks),
    ]


def _knowledge_edges(graph: GraphStore, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    uids = [n["props"]["uid"] for n in nodes]
    if not uids:
        return []
    rows = graph.run(*bundle_queries.knowledge_edges(uids))
    return _edges(rows)
