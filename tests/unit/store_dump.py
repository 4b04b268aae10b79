"""What the stores hold, as one comparable value: every graph node and edge, every record of a recall index
(its vector payloads and full-text documents), every object of a local blob folder. Two dumps are equal only
when nothing was written between them (timestamps included)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from schemas.errors import NotFound


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=True)


def graph_dump(graph: Any) -> list[str]:
    """Every node (labels and properties) and edge (type, ends and properties), sorted."""
    nodes = [
        _canonical(["node", sorted(r["labels"]), r["n"]]) for r in graph.run("MATCH (n) RETURN labels(n) AS labels, n")
    ]
    edges = [
        _canonical(["edge", r["t"], r["a"], r["b"], r["r"]])
        for r in graph.run("MATCH (a)-[r]->(b) RETURN type(r) AS t, a.uid AS a, b.uid AS b, r")
    ]
    return sorted(nodes) + sorted(edges)


def recall_dump(index: Any) -> list[str]:
    """Every record of a recall index: each vector point's payload and vector, and its full-text document."""
    if index is None:
        return []
    index.ensure()
    out = []
    for point in index.vectors.scroll(index.collection):
        try:
            doc = index.text.get(point.id).model_dump(mode="json")
        except NotFound:
            doc = None
        out.append(_canonical([point.id, point.payload, [round(float(x), 6) for x in point.vector], doc]))
    out.append(_canonical(["text documents", index.text.count()]))
    return sorted(out)


def folder_dump(root: Path | None) -> list[str]:
    """Every file under ``root`` with the sha256 of its bytes."""
    if root is None or not root.exists():
        return []
    return sorted(
        f"{p.relative_to(root)} {hashlib.sha256(p.read_bytes()).hexdigest()}" for p in root.rglob("*") if p.is_file()
    )


def stores_dump(graph: Any, index: Any = None, blob_root: Path | None = None) -> dict[str, list[str]]:
    """Every store's content, once the recall records submitted so far are written: a turn's record is written
    behind the turn (story.recall_writer), so a dump taken at once could see an earlier request's record land
    between "before" and "after" and read it as a write of the request in between."""
    if index is not None and hasattr(index, "flush"):
        index.flush()
    return {"graph": graph_dump(graph), "recall": recall_dump(index), "blobs": folder_dump(blob_root)}
