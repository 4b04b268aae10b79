"""The story's shared Cypher statements, and nothing else: what several chapters of the story run.

Each function returns a statement, ``(query, params)``, for ``graph.run(*statement)``,
``tx.run(*statement)`` or ``writes.add(*statement)``; reads that return nodes name them ``n``. The
graph's shape is drawn in :mod:`story.graph`. Labels and relationship types spliced into a query
come from the story's own code, never from a request.

Sections follow the chapters: the campaign context and the commit (:mod:`story.graph`), worlds,
campaigns, branches and checkpoints (:mod:`story.campaigns`), turns and takes
(:mod:`story.timeline`), scenes, proposals and canon (:mod:`story.scenes`, :mod:`story.gate`),
memories and summaries (:mod:`story.memory`), provenance and media (:mod:`story.provenance`),
snapshots (:mod:`story.snapshots`), the live world (:mod:`story.live`) and bundles
(:mod:`story.bundle`). A chapter's own statements live beside it, written the same way
(:mod:`story.bundle_queries`; the queries of reviews, retcons, threads, triggers and versions in their
modules).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Statement = tuple[str, dict[str, Any]]

# -- any node ----------------------------------------------------------------------------------------


def node(label: str, uid: str) -> Statement:
    return f"MATCH (n:{label} {{uid: $uid}}) RETURN n", {"uid": uid}


def create_nodes(label: str, rows: Sequence[Mapping[str, Any]]) -> Statement:
    """Create a node per row (``rows`` are property maps with a ``uid``)."""
    return f"UNWIND $rows AS r CREATE (n:{label}) SET n = r", {"rows": [dict(r) for r in rows]}


def merge_nodes(label: str, rows: Sequence[Mapping[str, Any]]) -> Statement:
    """Create a node per row unless one with its ``uid`` exists (a world-level node two campaigns share)."""
    return f"UNWIND $rows AS r MERGE (n:{label} {{uid: r.uid}}) ON CREATE SET n = r", {"rows": list(rows)}


def link_nodes(src: str, rel: str, dst: str, pairs: Iterable[tuple[str, str]], **props: Any) -> Statement:
    """MERGE ``(src {uid: a})-[:rel]->(dst {uid: b})`` for each pair whose ends exist."""
    rows = [{"a": a, "b": b} for a, b in dict.fromkeys(pairs)]
    set_clause = " SET r += $props" if props else ""
    return (
        f"UNWIND $rows AS p MATCH (a:{src} {{uid: p.a}}), (b:{dst} {{uid: p.b}}) MERGE (a)-[r:{rel}]->(b){set_clause}",
        {"rows": rows, **({"props": props} if props else {})},
    )


# -- the campaign context, lineage reads and the commit ---------------------------------------------

_CONTEXT = """
MATCH (c:Campaign {uid: $c})
OPTIONAL MATCH (b:Branch {campaign_id: $c})
WITH c, collect(b) AS branches
OPTIONAL MATCH (h:Turn {uid: c.head_turn_id})
"""


def campaign_context(campaign_id: str) -> Statement:
    """A campaign ``c``, its ``branches`` and its head turn ``h`` (null before the first turn)."""
    return _CONTEXT + "RETURN c, branches, h", {"c": campaign_id}


def turn_context(campaign_id: str, parent_id: str | None) -> Statement:
    """:func:`campaign_context`, plus a turn's parent ``p`` and the ``axioms`` of the campaign's world."""
    return (
        _CONTEXT + "OPTIONAL MATCH (p:Turn {uid: $p})\n"
        "OPTIONAL MATCH (a:Axiom {world_uid: c.world_id})\n"
        "RETURN c, branches, h, p, collect(a) AS axioms",
        {"c": campaign_id, "p": parent_id},
    )


def turn_past(campaign_id: str, branch_ids: list[str], segments: list[dict[str, Any]], min_depth: int) -> Statement:
    """What a turn reads from the lineages, each row ``label``-led: the snapshots, memories and summaries
    on the head's branches (filtered by depth afterwards), and the turns of ``segments`` from ``min_depth``."""
    return (
        """
MATCH (n:Snapshot) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Snapshot' AS label, n
UNION ALL
MATCH (n:Memory) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Memory' AS label, n
UNION ALL
MATCH (n:Summary) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Summary' AS label, n
UNION ALL
UNWIND $segments AS s MATCH (n:Turn {branch_id: s.b}) WHERE n.depth <= s.d AND n.depth >= $m
RETURN 'Turn' AS label, n
""",
        {"c": campaign_id, "b": branch_ids, "segments": segments, "m": min_depth},
    )


def turns_on(segments: list[dict[str, Any]], min_depth: int) -> Statement:
    """The turns of each segment ``{b: branch, d: max depth}`` from depth ``min_depth``."""
    return (
        "UNWIND $segments AS s MATCH (n:Turn {branch_id: s.b}) WHERE n.depth <= s.d AND n.depth >= $m RETURN n",
        {"segments": segments, "m": min_depth},
    )


def turn_at(branch_id: str, depth: int) -> Statement:
    return "MATCH (n:Turn {branch_id: $b, depth: $d}) RETURN n", {"b": branch_id, "d": depth}


def events_on(segments: list[dict[str, Any]], after_seq: int) -> Statement:
    """The events of each segment ``{b: branch, d: max depth}`` after sequence number ``after_seq``."""
    return (
        "UNWIND $segments AS s MATCH (e:StateEvent {branch_id: s.b}) WHERE e.seq > $s AND e.depth <= s.d "
        "RETURN e.branch_id AS branch, e.seq AS seq, e.depth AS depth, e.payload_json AS payload",
        {"segments": segments, "s": after_seq},
    )


def scene_marks_on(segments: list[dict[str, Any]]) -> Statement:
    """The scene starts and ends (``scene_set``, ``scene_ended`` events) of each segment ``{b, d}``."""
    return (
        "UNWIND $segments AS s MATCH (e:StateEvent {branch_id: s.b}) WHERE e.depth <= s.d "
        "AND e.kind IN ['scene_set', 'scene_ended'] "
        "RETURN e.branch_id AS branch, e.seq AS seq, e.depth AS depth, e.payload_json AS payload",
        {"segments": segments},
    )


def snapshots_on(campaign_id: str, branch_ids: list[str]) -> Statement:
    return (
        "MATCH (n:Snapshot) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN n",
        {"c": campaign_id, "b": branch_ids},
    )


def create_commit(uid: str, campaign_id: str, version: int, kind: str, at: str) -> Statement:
    """The commit token: its unique ``uid`` is the campaign's optimistic lock (see :mod:`story.graph`)."""
    return (
        "CREATE (k:Commit {uid: $uid, campaign_id: $c, version: $v, kind: $kind, at: $now})",
        {"uid": uid, "c": campaign_id, "v": version, "kind": kind, "now": at},
    )


def set_campaign(campaign_id: str, props: dict[str, Any]) -> Statement:
    return "MATCH (c:Campaign {uid: $c}) SET c += $props", {"c": campaign_id, "props": props}


def remove_campaign_property(campaign_id: str, name: str) -> Statement:
    return f"MATCH (c:Campaign {{uid: $c}}) REMOVE c.{name}", {"c": campaign_id}


# -- worlds, campaigns, branches, checkpoints -------------------------------------------------------


def create_world(props: dict[str, Any]) -> Statement:
    return "CREATE (w:World) SET w = $props", {"props": props}


def create_axiom(world_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (w:World {uid: $w}) CREATE (a:Axiom) SET a = $props CREATE (a)-[:OF_WORLD]->(w)",
        {"w": world_id, "props": props},
    )


def axioms_of(world_id: str) -> Statement:
    return "MATCH (n:Axiom) WHERE n.world_uid = $w RETURN n ORDER BY n.created_at", {"w": world_id}


def create_campaign(world_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (w:World {uid: $w}) CREATE (c:Campaign) SET c = $props CREATE (c)-[:IN_WORLD]->(w)",
        {"w": world_id, "props": props},
    )


def campaigns(world_id: str | None) -> Statement:
    if world_id:
        return "MATCH (n:Campaign) WHERE n.world_id = $w RETURN n ORDER BY n.created_at", {"w": world_id}
    return "MATCH (n:Campaign) RETURN n ORDER BY n.created_at", {}


def create_branch(campaign_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (c:Campaign {uid: $c}) CREATE (b:Branch) SET b = $props CREATE (b)-[:OF_CAMPAIGN]->(c)",
        {"c": campaign_id, "props": props},
    )


def branches_of(campaign_id: str) -> Statement:
    return "MATCH (n:Branch) WHERE n.campaign_id = $c RETURN n ORDER BY n.created_at", {"c": campaign_id}


def set_branch_tip(branch_id: str, turn_id: str, depth: int) -> Statement:
    return "MATCH (b:Branch {uid: $b}) SET b.tip_turn_id = $t, b.tip_depth = $d", {
        "b": branch_id,
        "t": turn_id,
        "d": depth,
    }


def retain_branch(branch_id: str) -> Statement:
    """The active branch left behind is retained."""
    return "MATCH (b:Branch {uid: $b}) WHERE b.disposition = 'active' SET b.disposition = 'retained'", {"b": branch_id}


def switch_to_branch(branch_id: str) -> Statement:
    return "MATCH (b:Branch {uid: $b}) SET b.disposition = 'active', b.archived = false", {"b": branch_id}


def activate_branch(branch_id: str) -> Statement:
    return "MATCH (b:Branch {uid: $b}) SET b.disposition = 'active'", {"b": branch_id}


def set_disposition(branch_id: str, disposition: str) -> Statement:
    return "MATCH (b:Branch {uid: $b}) SET b.disposition = $d", {"b": branch_id, "d": disposition}


def archive_branch(branch_id: str, archived: bool) -> Statement:
    return "MATCH (b:Branch {uid: $b}) SET b.archived = $a", {"b": branch_id, "a": archived}


def count_on_branch(label: str, campaign_id: str, branch_id: str) -> Statement:
    """How many records of ``label`` are anchored on a branch (``n``)."""
    return (
        f"MATCH (n:{label} {{campaign_id: $c, branch_id: $b}}) WHERE coalesce(n.automatic, false) = false "
        "RETURN count(n) AS n",
        {"c": campaign_id, "b": branch_id},
    )


def count_turns_of_branch(branch_id: str) -> Statement:
    return "MATCH (t:Turn {branch_id: $b}) RETURN count(t) AS n", {"b": branch_id}


def delete_branch(branch_id: str) -> list[Statement]:
    """Delete a branch with its own turns and their takes."""
    return [
        ("MATCH (k:Take)-[:TAKE_OF]->(:Turn {branch_id: $b}) DETACH DELETE k", {"b": branch_id}),
        ("MATCH (v:TurnVersion)-[:VERSION_OF]->(:Turn {branch_id: $b}) DETACH DELETE v", {"b": branch_id}),
        ("MATCH (k:Checkpoint {branch_id: $b, automatic: true}) DETACH DELETE k", {"b": branch_id}),
        ("MATCH (t:Turn {branch_id: $b}) DETACH DELETE t", {"b": branch_id}),
        ("MATCH (b:Branch {uid: $b}) DETACH DELETE b", {"b": branch_id}),
    ]


def delete_campaign_nodes(campaign_id: str) -> Statement:
    """Every node that carries the campaign's id (the campaign's own included) and its edges: what discarding an
    unfinished transcript import deletes (:meth:`story.importing.TranscriptImporter.discard`)."""
    return "MATCH (n) WHERE n.campaign_id = $c DETACH DELETE n", {"c": campaign_id}


def delete_world_if_empty(world_id: str) -> Statement:
    """Delete a world no campaign is in and no axiom belongs to."""
    return (
        "MATCH (w:World {uid: $w}) WHERE NOT (w)<-[:IN_WORLD]-(:Campaign) AND NOT (w)<-[:OF_WORLD]-(:Axiom) "
        "DETACH DELETE w",
        {"w": world_id},
    )


def automatic_checkpoints(campaign_id: str) -> Statement:
    return "MATCH (n:Checkpoint) WHERE n.campaign_id = $c AND n.kind <> 'manual' RETURN n", {"c": campaign_id}


def delete_checkpoints(ids: list[str]) -> Statement:
    return "MATCH (k:Checkpoint) WHERE k.uid IN $ids DETACH DELETE k", {"ids": ids}


# -- turns and takes --------------------------------------------------------------------------------


def create_turn(props: dict[str, Any]) -> Statement:
    return "CREATE (t:Turn) SET t = $props", {"props": props}


def count_takes(turn_id: str) -> Statement:
    return "MATCH (k:Take {turn_uid: $t}) RETURN count(k) AS n", {"t": turn_id}


def takes_of(turn_id: str) -> Statement:
    return "MATCH (n:Take) WHERE n.turn_uid = $t RETURN n ORDER BY n.index", {"t": turn_id}


def select_take(turn_id: str, take_id: str, narration: str, status: str) -> list[Statement]:
    """Mark one take of a turn selected (the others not), and make its narration the turn's."""
    return [
        ("MATCH (k:Take {turn_uid: $t}) SET k.selected = (k.uid = $k)", {"t": turn_id, "k": take_id}),
        (
            "MATCH (t:Turn {uid: $t}) SET t.narration = $n, t.selected_take_id = $k, t.status = $s",
            {"t": turn_id, "n": narration, "k": take_id, "s": status},
        ),
    ]


def reject_pending_of_turn(turn_id: str, why: str, at: str) -> Statement:
    return (
        "MATCH (p:ProposedChange {turn_id: $t, status: 'pending'}) "
        "SET p.status = 'rejected', p.rationale = $why, p.decided_at = $now",
        {"t": turn_id, "why": why, "now": at},
    )


# -- scenes, proposals and canon ------------------------------------------------------------------


def active_scenes(campaign_id: str) -> Statement:
    return "MATCH (n:Scene) WHERE n.campaign_id = $c AND n.status = 'active' RETURN n", {"c": campaign_id}


def count_scenes(campaign_id: str) -> Statement:
    return "MATCH (s:Scene {campaign_id: $c}) RETURN count(s) AS n", {"c": campaign_id}


def create_scene(campaign_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (c:Campaign {uid: $c}) CREATE (s:Scene) SET s = $props CREATE (s)-[:OF_CAMPAIGN]->(c)",
        {"c": campaign_id, "props": props},
    )


def scenes_of(campaign_id: str) -> Statement:
    return "MATCH (n:Scene) WHERE n.campaign_id = $c RETURN n ORDER BY n.order", {"c": campaign_id}


def update_scene(scene_id: str, props: dict[str, Any]) -> Statement:
    return "MATCH (s:Scene {uid: $s}) SET s += $props", {"s": scene_id, "props": props}


#: The property of a completed scene whose end is not finished: the gate's commit sets it, the commit of the
#: memories and summary the end forms clears it (:mod:`story.scene_end`).
END_PENDING = "end_pending"


def scenes_ending() -> Statement:
    """Every scene, of any campaign, whose end the gate committed and whose memories are still to be formed."""
    return f"MATCH (n:Scene) WHERE n.{END_PENDING} = true RETURN n ORDER BY n.campaign_id, n.order", {}


def end_finished(scene_id: str) -> Statement:
    """Mark a scene's end finished (in the transaction that writes what it formed)."""
    return f"MATCH (s:Scene {{uid: $s}}) SET s.{END_PENDING} = false", {"s": scene_id}


def turns_in_campaign(turn_ids: list[str], campaign_id: str) -> Statement:
    """Which of ``turn_ids`` (``uid``) are turns of the campaign."""
    return (
        "MATCH (t:Turn) WHERE t.uid IN $ids AND t.campaign_id = $c RETURN t.uid AS uid",
        {"ids": turn_ids, "c": campaign_id},
    )


def create_proposal(scene_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (s:Scene {uid: $s}) CREATE (p:ProposedChange) SET p = $props CREATE (p)-[:PROPOSED_IN]->(s)",
        {"s": scene_id, "props": props},
    )


def proposals_of(scene_id: str, status: str | None) -> Statement:
    where = "n.scene_uid = $s" + (" AND n.status = $st" if status else "")
    return (
        f"MATCH (n:ProposedChange) WHERE {where} RETURN n ORDER BY n.created_at",
        {"s": scene_id, "st": status},
    )


def decide_proposals(rows: list[dict[str, Any]]) -> Statement:
    """Set each proposal's decision (``{uid, props: {status, rationale, decided_at}}``)."""
    return "UNWIND $rows AS r MATCH (p:ProposedChange {uid: r.uid}) SET p += r.props", {"rows": rows}


# -- memories and summaries -------------------------------------------------------------------------


def turns_of_scene(scene_id: str) -> Statement:
    return "MATCH (n:Turn) WHERE n.scene_id = $s RETURN n ORDER BY n.depth", {"s": scene_id}


def turns_of_campaign(campaign_id: str) -> Statement:
    """Every turn of a campaign, on every branch (a rebuild of its recall)."""
    return "MATCH (n:Turn) WHERE n.campaign_id = $c RETURN n ORDER BY n.depth", {"c": campaign_id}


def anchored_of_campaign(label: str, campaign_id: str) -> Statement:
    """Every Memory or Summary of a campaign, on every branch."""
    return f"MATCH (n:{label}) WHERE n.campaign_id = $c RETURN n ORDER BY n.depth, n.created_at", {"c": campaign_id}


def create_anchored(label: str, turn_id: str, props: dict[str, Any]) -> Statement:
    """A Memory or Summary anchored at a turn."""
    return (
        f"MATCH (t:Turn {{uid: $t}}) CREATE (m:{label}) SET m = $props CREATE (m)-[:AT_TURN]->(t)",
        {"t": turn_id, "props": props},
    )


def create_anchored_at(label: str, turn_id: str, rows: Sequence[Mapping[str, Any]]) -> Statement:
    """Memories or Summaries (their property maps) anchored at one turn, in one statement."""
    return (
        f"MATCH (t:Turn {{uid: $t}}) UNWIND $rows AS r CREATE (m:{label}) SET m = r CREATE (m)-[:AT_TURN]->(t)",
        {"t": turn_id, "rows": [dict(r) for r in rows]},
    )


def anchored_at(label: str, turn_id: str) -> Statement:
    """Every Memory or Summary anchored at a turn, retracted ones too."""
    return f"MATCH (n:{label}) WHERE n.anchor_turn_uid = $t RETURN n", {"t": turn_id}


def retract_memory(memory_id: str, at: str, reason: str) -> Statement:
    """Mark a memory retracted (it stays, with when and why); returns it, or nothing if it was retracted already."""
    return (
        "MATCH (n:Memory {uid: $m}) WHERE n.retracted_at IS NULL "
        "SET n.retracted_at = $at, n.retraction_reason = $why RETURN n",
        {"m": memory_id, "at": at, "why": reason},
    )


def anchored_on(label: str, campaign_id: str, branch_ids: list[str]) -> Statement:
    """The Memory or Summary records on a lineage's branches (filtered by depth afterwards)."""
    return (
        f"MATCH (n:{label}) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN n ORDER BY n.depth, n.created_at",
        {"c": campaign_id, "b": branch_ids},
    )


# -- provenance, presentation and media ---------------------------------------------------------------


def create_prompt_snapshot(turn_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (t:Turn {uid: $t}) CREATE (p:PromptSnapshot) SET p = $props CREATE (p)-[:FOR_TURN]->(t)",
        {"t": turn_id, "props": props},
    )


def create_retrieval(turn_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (t:Turn {uid: $t}) CREATE (r:Retrieval) SET r = $props CREATE (r)-[:FOR_TURN]->(t)",
        {"t": turn_id, "props": props},
    )


def link_informed_by(turn_id: str, retrieval_id: str, rows: list[dict[str, Any]]) -> Statement:
    """Link a turn to the chunks it used (``{chunk, rank, score}``), noting the retrieval."""
    return (
        "UNWIND $rows AS h MATCH (t:Turn {uid: $t}), (c:Chunk {uid: h.chunk}) "
        "MERGE (t)-[r:INFORMED_BY]->(c) SET r.rank = h.rank, r.score = h.score, r.retrieval = $rid",
        {"t": turn_id, "rid": retrieval_id, "rows": rows},
    )


def prompt_snapshots_of(turn_id: str) -> Statement:
    return "MATCH (n:PromptSnapshot) WHERE n.turn_uid = $t RETURN n ORDER BY n.created_at", {"t": turn_id}


def retrievals_of(turn_id: str) -> Statement:
    return "MATCH (n:Retrieval) WHERE n.turn_uid = $t RETURN n ORDER BY n.created_at", {"t": turn_id}


def passages_of(turn_id: str) -> Statement:
    """The chunks that informed a turn, by rank, with their item's title and place."""
    return (
        "MATCH (t:Turn {uid: $t})-[r:INFORMED_BY]->(c:Chunk) OPTIONAL MATCH (i:Item {uid: c.item_uid}) "
        "RETURN c.uid AS chunk, r.rank AS rank, r.score AS score, c.item_uid AS item, i.title AS title, "
        "c.page_start AS ps, c.page_end AS pe, c.heading_path AS hp ORDER BY r.rank",
        {"t": turn_id},
    )


def events_of_turn(turn_id: str) -> Statement:
    return "MATCH (e:StateEvent {turn_uid: $t}) RETURN e.uid AS uid ORDER BY e.seq", {"t": turn_id}


def add_extraction_notes(turn_id: str, notes: list[str]) -> Statement:
    return (
        "MATCH (t:Turn {uid: $t}) SET t.extraction_notes = coalesce(t.extraction_notes, []) + $n",
        {"t": turn_id, "n": notes},
    )


def set_presentation_key(turn_id: str, key: str) -> Statement:
    return "MATCH (t:Turn {uid: $t}) SET t.presentation_key = $k", {"t": turn_id, "k": key}


def attach_media(scene_id: str, asset_id: str, props: dict[str, Any]) -> Statement:
    return (
        "MATCH (s:Scene {uid: $s}) MERGE (m:MediaAsset {uid: $uid}) SET m += $props MERGE (s)-[:HAS_MEDIA]->(m)",
        {"s": scene_id, "uid": asset_id, "props": props},
    )


def media_of(scene_id: str) -> Statement:
    return (
        "MATCH (s:Scene {uid: $s})-[:HAS_MEDIA]->(n:MediaAsset) RETURN n ORDER BY n.created_at",
        {"s": scene_id},
    )


# -- the live world --------------------------------------------------------------------------------


def live_entities(campaign_id: str) -> Statement:
    return "MATCH (n:LiveEntity {campaign_id: $c}) RETURN n", {"c": campaign_id}


def live_edges(campaign_id: str) -> Statement:
    return (
        "MATCH (a:LiveEntity {campaign_id: $c})-[r]->(b:LiveEntity) "
        "RETURN a.entity_id AS a, type(r) AS type, b.entity_id AS b, r.rel_id AS rel, r.kind AS kind",
        {"c": campaign_id},
    )


def upsert_live(rows: list[dict[str, Any]]) -> Statement:
    return "UNWIND $rows AS r MERGE (n:LiveEntity {uid: r.uid}) SET n = r", {"rows": rows}


def unplace_live(kind: str, uids: list[str]) -> Statement:
    """Drop the ``kind`` (LOCATED_IN or HELD_BY) edges of these live entities."""
    return f"UNWIND $ids AS id MATCH (n:LiveEntity {{uid: id}})-[p:{kind}]->() DELETE p", {"ids": uids}


def place_live(kind: str, rows: list[dict[str, Any]]) -> Statement:
    return (
        f"UNWIND $rows AS r MATCH (a:LiveEntity {{uid: r.a}}), (b:LiveEntity {{uid: r.b}}) CREATE (a)-[:{kind}]->(b)",
        {"rows": rows},
    )


def unrelate_live(campaign_id: str, rel_ids: list[str]) -> Statement:
    return (
        "UNWIND $ids AS id MATCH (:LiveEntity {campaign_id: $c})-[r:RELATED]->() WHERE r.rel_id = id DELETE r",
        {"ids": rel_ids, "c": campaign_id},
    )


def relate_live(rows: list[dict[str, Any]]) -> Statement:
    return (
        "UNWIND $rows AS r MATCH (a:LiveEntity {uid: r.a}), (b:LiveEntity {uid: r.b}) "
        "CREATE (a)-[:RELATED {rel_id: r.rel, kind: r.kind}]->(b)",
        {"rows": rows},
    )


def delete_live(uids: list[str]) -> Statement:
    return "UNWIND $ids AS id MATCH (n:LiveEntity {uid: id}) DETACH DELETE n", {"ids": uids}


# -- nodes by id (bundles, anchors) -----------------------------------------------------------------


def nodes_by_uid(label: str, uids: list[str]) -> Statement:
    return f"MATCH (n:{label}) WHERE n.uid IN $uids RETURN n", {"uids": uids}


# -- what a campaign cites and draws on (story.citations, story.library_pins) -----------------------


def cited(chunk_ids: list[str], turn_ids: list[str], campaign_id: str) -> Statement:
    """Every cited chunk that exists with the item it belongs to, and every cited turn of the campaign."""
    return (
        "MATCH (c:Chunk) WHERE c.uid IN $chunks "
        "OPTIONAL MATCH (i:Item {uid: c.item_uid}) "
        "RETURN 'chunk' AS kind, c.uid AS uid, i.uid AS item, i.library_uid AS library, "
        "i.classification AS classification "
        "UNION ALL "
        "MATCH (t:Turn) WHERE t.uid IN $turns AND t.campaign_id = $c "
        "RETURN 'turn' AS kind, t.uid AS uid, null AS item, null AS library, null AS classification",
        {"chunks": chunk_ids, "turns": turn_ids, "c": campaign_id},
    )


def known_targets(library_ids: list[str], item_ids: list[str]) -> Statement:
    """Which of the named libraries and items exist."""
    return (
        "MATCH (l:Library) WHERE l.uid IN $libraries RETURN 'library' AS kind, l.uid AS uid "
        "UNION ALL "
        "MATCH (i:Item) WHERE i.uid IN $items RETURN 'item' AS kind, i.uid AS uid",
        {"libraries": library_ids, "items": item_ids},
    )


def items_of_libraries(library_ids: list[str]) -> Statement:
    return "MATCH (i:Item) WHERE i.library_uid IN $libraries RETURN i.uid AS uid", {"libraries": library_ids}


# -- house rules (story.house_rules) ------------------------------------------------------------------


def house_rule_facts(campaign_id: str, fact_ids: list[str]) -> Statement:
    """The facts among ``fact_ids`` that a GM ruled against the rulebook (``house_rule``)."""
    return (
        "MATCH (n:Fact) WHERE n.uid IN $ids AND n.campaign_id = $c AND n.house_rule = true RETURN n",
        {"ids": fact_ids, "c": campaign_id},
    )
