"""The live world: the state at a campaign's head, materialized in the graph for graph queries.

Canon nodes (``Entity``, ``Fact``…) are written once, with provenance; the world as it stands at
the head is the fold of the events (:mod:`story.state`). Graph queries — the search's graph leg,
a Neo4j user browsing the world — want it as a graph, so each campaign keeps one materialized copy::

    (:LiveEntity {uid: "<campaign>:<entity>", entity_id, name, kind, status, attributes_json})
    (:LiveEntity)-[:LOCATED_IN]->(:LiveEntity)     (:LiveEntity)-[:HELD_BY]->(:LiveEntity)
    (:LiveEntity)-[:RELATED {rel_id, kind}]->(:LiveEntity)

Whenever the head moves or canon is committed, the copy is brought to the new state in three
phases queued into the *same* transaction as the move: create or overwrite entities in dependency
order (containers before what they contain), re-home placement and relationship edges, delete the
entities that no longer exist leaf to root. A crash anywhere leaves the old head with the old copy
or the new head with the new copy, never a mix. The copy is diffed against what is actually in the
graph, so a missing or stale copy heals on the next move.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stores.graph.base import GraphStore
from story import cypher
from story.graph import Writes
from story.state import WorldState


@dataclass(slots=True)
class LiveView:
    """What the graph holds for a campaign's live world."""

    entities: dict[str, dict[str, Any]] = field(default_factory=dict)  # entity id -> node properties
    placement: dict[tuple[str, str], str] = field(default_factory=dict)  # (entity, LOCATED_IN|HELD_BY) -> target
    relationships: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # rel id -> (source, target, kind)


def live_uid(campaign_id: str, entity_id: str) -> str:
    return f"{campaign_id}:{entity_id}"


def read_live(graph: GraphStore, campaign_id: str) -> LiveView:
    """The campaign's live world as the graph holds it now."""
    view = LiveView()
    for row in graph.run(*cypher.live_entities(campaign_id)):
        node = {k: v for k, v in row["n"].items() if not k.startswith("_")}
        view.entities[node["entity_id"]] = node
    for row in graph.run(*cypher.live_edges(campaign_id)):
        if row["type"] == "RELATED":
            view.relationships[row["rel"]] = (row["a"], row["b"], row["kind"])
        else:
            view.placement[(row["a"], row["type"])] = row["b"]
    return view


def _node(campaign_id: str, entity_id: str, e: dict[str, Any]) -> dict[str, Any]:
    node = {
        "uid": live_uid(campaign_id, entity_id),
        "campaign_id": campaign_id,
        "entity_id": entity_id,
        "name": e["name"],
        "kind": e["kind"],
        "status": e["status"],
        "aliases": list(e["aliases"]),
        "attributes_json": json.dumps(e["attributes"], sort_keys=True),
    }
    if e.get("description"):
        node["description"] = e["description"]
    return node


def _containment_depth(state_entities: dict[str, dict[str, Any]], entity_id: str) -> int:
    depth, seen, current = 0, set(), entity_id
    while current in state_entities and current not in seen:
        seen.add(current)
        parent = state_entities[current].get("holder_id") or state_entities[current].get("location_id")
        if parent is None:
            break
        depth, current = depth + 1, parent
    return depth


def queue_sync(writes: Writes, campaign_id: str, current: LiveView, target: WorldState) -> int:
    """Queue the three phases that turn ``current`` into ``target``; returns how many changes."""
    return (
        _upsert(writes, campaign_id, current, target)
        + _rehome(writes, campaign_id, current, target)
        + _remove(writes, campaign_id, current, target)
    )


def _upsert(writes: Writes, c: str, current: LiveView, target: WorldState) -> int:
    """Phase 1: create or overwrite entities, containers before contents."""
    ents = target.entities
    upserts = []
    for eid, e in ents.items():
        node = _node(c, eid, e)
        if current.entities.get(eid) != node:
            upserts.append((_containment_depth(ents, eid), node))
    upserts.sort(key=lambda pair: (pair[0], pair[1]["uid"]))
    if upserts:
        writes.add(*cypher.upsert_live([node for _, node in upserts]))
    return len(upserts)


def _rehome(writes: Writes, c: str, current: LiveView, target: WorldState) -> int:
    """Phase 2: re-home placement and relationship edges."""
    ents = target.entities
    wanted_place: dict[tuple[str, str], str] = {}
    for eid, e in ents.items():
        if e.get("location_id") in ents:
            wanted_place[(eid, "LOCATED_IN")] = e["location_id"]
        if e.get("holder_id") in ents:
            wanted_place[(eid, "HELD_BY")] = e["holder_id"]
    changes = 0
    for kind in ("LOCATED_IN", "HELD_BY"):
        moved = sorted(
            eid
            for (eid, k) in set(current.placement) | set(wanted_place)
            if k == kind and current.placement.get((eid, k)) != wanted_place.get((eid, k))
        )
        if not moved:
            continue
        changes += len(moved)
        writes.add(*cypher.unplace_live(kind, [live_uid(c, eid) for eid in moved if eid in current.entities]))
        rows = [
            {"a": live_uid(c, eid), "b": live_uid(c, wanted_place[(eid, kind)])}
            for eid in moved
            if (eid, kind) in wanted_place
        ]
        if rows:
            writes.add(*cypher.place_live(kind, rows))
    wanted_rel = {
        rid: (r["source"], r["target"], r["kind"])
        for rid, r in target.relationships.items()
        if r["status"] == "active" and r["source"] in ents and r["target"] in ents
    }
    stale = sorted(rid for rid, rel in current.relationships.items() if wanted_rel.get(rid) != rel)
    fresh = sorted(rid for rid, rel in wanted_rel.items() if current.relationships.get(rid) != rel)
    if stale:
        writes.add(*cypher.unrelate_live(c, stale))
    if fresh:
        rows = [
            {
                "a": live_uid(c, wanted_rel[rid][0]),
                "b": live_uid(c, wanted_rel[rid][1]),
                "rel": rid,
                "kind": wanted_rel[rid][2],
            }
            for rid in fresh
        ]
        writes.add(*cypher.relate_live(rows))
    return changes + len(stale) + len(fresh)


def _remove(writes: Writes, c: str, current: LiveView, target: WorldState) -> int:
    """Phase 3: delete the entities that no longer exist, leaf to root."""
    extras = [eid for eid in current.entities if eid not in target.entities]
    if not extras:
        return 0
    placed = {
        eid: current.placement.get((eid, "HELD_BY")) or current.placement.get((eid, "LOCATED_IN"))
        for eid in current.entities
    }
    as_state = {eid: {"holder_id": placed[eid]} for eid in current.entities}
    extras.sort(key=lambda eid: (-_containment_depth(as_state, eid), eid))
    writes.add(*cypher.delete_live([live_uid(c, eid) for eid in extras]))
    return len(extras)
