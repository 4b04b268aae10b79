"""The Cypher of campaign bundles (export and import, :mod:`story.bundle`): a campaign's and its world's
nodes and edges read whole, and edges merged back. Written as :mod:`story.cypher` writes its statements.
"""

from __future__ import annotations

from typing import Any

from story.cypher import Statement

_EDGE_COLUMNS = "RETURN a.uid AS src, labels(a) AS sl, type(r) AS type, r, b.uid AS dst, labels(b) AS dl"


def world_of_campaign(campaign_id: str) -> Statement:
    return "MATCH (c:Campaign {uid: $c}) RETURN c.world_uid AS world", {"c": campaign_id}


def campaign_nodes(campaign_id: str) -> Statement:
    """Every node of a campaign, with its ``labels``."""
    return "MATCH (n) WHERE n.campaign_id = $c RETURN labels(n) AS labels, n", {"c": campaign_id}


def world_nodes(label: str, world_id: str) -> Statement:
    """The world itself (``World``) or its records (``Axiom``)."""
    return f"MATCH (n:{label}) WHERE n.uid = $w OR n.world_uid = $w RETURN n", {"w": world_id}


def campaign_edges(campaign_id: str) -> Statement:
    """A campaign's own edges; not those to the library's source facts, which a bundle does not carry (the
    canon node keeps their ids in ``source_fact_ids``)."""
    return f"MATCH (a)-[r]->(b) WHERE a.campaign_id = $c AND NOT b:SourceFact {_EDGE_COLUMNS}", {"c": campaign_id}


def axiom_edges(world_id: str) -> Statement:
    return f"MATCH (a:Axiom {{world_uid: $w}})-[r]->(b) {_EDGE_COLUMNS}", {"w": world_id}


def knowledge_edges(uids: list[str]) -> Statement:
    """The library's own edges between the given records."""
    return (
        "MATCH (a)-[r]->(b) WHERE a.uid IN $u AND b.uid IN $u AND type(r) IN ['HAS_ITEM', 'HAS_CHUNK'] "
        + _EDGE_COLUMNS,
        {"u": uids},
    )


def merge_edges(rel: str, src: str, dst: str, rows: list[dict[str, Any]]) -> Statement:
    """MERGE a ``rel`` edge per row ``{a, b, props}`` between existing nodes, setting its properties."""
    return (
        f"UNWIND $rows AS e MATCH (a:{src} {{uid: e.a}}), (b:{dst} {{uid: e.b}}) "
        f"MERGE (a)-[r:{rel}]->(b) SET r += e.props",
        {"rows": rows},
    )
