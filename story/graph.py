"""The story side of the graph: lineage nodes, canon nodes and the commit protocol.

Graph shape (every node of a campaign carries ``campaign_id``)::

    (Campaign)-[:IN_WORLD]->(World)        (Branch)-[:OF_CAMPAIGN]->(Campaign)
    (Turn)-[:CHILD_OF]->(Turn)             (Take)-[:TAKE_OF]->(Turn)
    (Scene)-[:OF_CAMPAIGN]->(Campaign)     (ProposedChange)-[:PROPOSED_IN]->(Scene)
    (StateEvent)-[:COMMITTED_IN]->(Commit) (StateEvent)-[:FROM_PROPOSAL]->(ProposedChange)
    (Entity|Fact|Relationship|StoryThread|Happening)-[:ESTABLISHED_BY]->(StateEvent)
    (Fact|Entity|…)-[:SUPPORTED_BY]->(Scene|Turn|Resolution|Chunk)
    (Fact)-[:REPLACES]->(Fact)             (Fact)-[:DEPENDS_ON]->(Fact)
    (Turn)-[:INFORMED_BY {rank, score}]->(Chunk)
    (Checkpoint|Memory|Summary|Snapshot)-[:AT_TURN]->(Turn)

Canon nodes are written once, when they enter canon; what happens to them afterwards on a branch
(superseded, disputed, retconned, ended) is a state event, so a retcon on one branch never
rewrites what another branch sees. The world state itself is the fold of the events
(:mod:`story.state`).

Every change to a campaign's story is one transaction that first creates ``(:Commit {uid:
"<campaign>#<version+1>"})``. The uniqueness constraint on ``uid`` makes it an optimistic lock
that both Neo4j and the embedded engine enforce inside the transaction: of two writers that read
the same version, one commits and the other gets ``Conflict`` and nothing of its writes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.common import utc_now
from schemas.errors import NotFound
from schemas.story import Branch, Campaign, Turn
from stores.catalog import from_props, to_props
from stores.graph.base import GraphStore
from story.lineage import BranchLine, Lineage, lineage_of
from story.state import WorldState

Statement = tuple[str, dict[str, Any]]


def commit_uid(campaign_id: str, version: int) -> str:
    return f"{campaign_id}#{version}"


#: A campaign, its branches and its head turn (``h`` is null before the first turn).
CAMPAIGN_CONTEXT = """
MATCH (c:Campaign {uid: $c})
OPTIONAL MATCH (b:Branch {campaign_id: $c})
WITH c, collect(b) AS branches
OPTIONAL MATCH (h:Turn {uid: c.head_turn_id})
RETURN c, branches, h
"""

#: :data:`CAMPAIGN_CONTEXT`, plus a turn's parent ``p`` and the axioms of the campaign's world.
TURN_CONTEXT = """
MATCH (c:Campaign {uid: $c})
OPTIONAL MATCH (b:Branch {campaign_id: $c})
WITH c, collect(b) AS branches
OPTIONAL MATCH (h:Turn {uid: c.head_turn_id})
OPTIONAL MATCH (p:Turn {uid: $p})
OPTIONAL MATCH (a:Axiom {world_uid: c.world_id})
RETURN c, branches, h, p, collect(a) AS axioms
"""

#: The records a turn reads from the lineages, each part labelled: snapshots, memories and summaries
#: on the head's branches ``$b`` (filtered by depth afterwards), and the turns on ``$segments`` at or
#: below depth ``$m``.
TURN_PAST = """
MATCH (n:Snapshot) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Snapshot' AS label, n
UNION ALL
MATCH (n:Memory) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Memory' AS label, n
UNION ALL
MATCH (n:Summary) WHERE n.campaign_id = $c AND n.branch_id IN $b RETURN 'Summary' AS label, n
UNION ALL
UNWIND $segments AS s MATCH (n:Turn {branch_id: s.b}) WHERE n.depth <= s.d AND n.depth >= $m
RETURN 'Turn' AS label, n
"""

#: The turns of each segment ``{b: branch, d: max depth}`` at or below depth ``$m``.
TURNS_ON = """
UNWIND $segments AS s MATCH (t:Turn {branch_id: s.b}) WHERE t.depth <= s.d AND t.depth >= $m RETURN t AS n
"""

#: The events of each segment ``{b: branch, d: max depth}`` after sequence number ``$s``.
EVENTS_ON = """
UNWIND $segments AS s MATCH (e:StateEvent {branch_id: s.b}) WHERE e.seq > $s AND e.depth <= s.d
RETURN e.branch_id AS branch, e.seq AS seq, e.depth AS depth, e.payload_json AS payload
"""


def _segments(lineage: Lineage) -> list[dict[str, Any]]:
    return [{"b": seg.branch_id, "d": seg.max_depth} for seg in lineage.segments]


def turns_in_order(rows: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """Turn rows (``n``) of a lineage as turns, root first (a branch holds only the depths after its
    fork, so the segments never overlap)."""
    return sorted((from_props(Turn, r["n"], key="id") for r in rows), key=lambda t: t.depth)


def snapshots_visible(rows: Iterable[dict[str, Any]], lineage: Lineage) -> list[dict[str, Any]]:
    """The snapshots whose position is on the lineage and whose events are all visible from it."""
    return [s for s in rows if lineage.contains(s["branch_id"], int(s["depth"]), int(s["max_seq"]))]


def anchored_on(rows: Iterable[dict[str, Any]], lineage: Lineage) -> list[dict[str, Any]]:
    """Records anchored on the lineage (memories, summaries), by depth then creation."""
    ordered = sorted(rows, key=lambda r: (int(r["depth"]), r["created_at"]))
    return [r for r in ordered if lineage.contains(r["branch_id"], int(r["depth"]))]


@dataclass(slots=True)
class PastRecords:
    """What :meth:`StoryGraph.past` read, by label: Snapshot, Memory, Summary and Turn rows."""

    by_label: defaultdict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))


@dataclass(slots=True)
class CampaignContext:
    """A campaign as one mutation reads it: its row, version, branches and head."""

    campaign: Campaign
    version: int
    event_seq: int
    branches: dict[str, Branch]
    lines: dict[str, BranchLine]
    tip_depth: dict[str, int]  # a branch's deepest own turn; its fork depth (or -1) while it has none
    head: Turn | None
    archived: bool = False

    @property
    def id(self) -> str:
        return self.campaign.id

    @property
    def head_depth(self) -> int:
        return self.head.depth if self.head is not None else -1

    def lineage(self, branch_id: str | None = None, depth: int | None = None) -> Lineage:
        """Lineage of a position; the head's by default."""
        branch = branch_id or self.campaign.active_branch_id
        return lineage_of(self.lines, branch, self.head_depth if depth is None else depth)

    def line_end(self, branch_id: str) -> int:
        """The deepest position on a branch's line (redo goes up to here)."""
        return self.tip_depth[branch_id]


def context_of(row: Mapping[str, Any]) -> CampaignContext:
    """A campaign's context from a row of :data:`CAMPAIGN_CONTEXT` (``c``, ``branches``, ``h``)."""
    props = row["c"]
    campaign = from_props(Campaign, props, key="id")
    branch_rows = row["branches"]
    branches = {r["uid"]: from_props(Branch, r, key="id") for r in branch_rows}
    lines = {
        r["uid"]: BranchLine(
            id=r["uid"],
            parent_branch_id=r.get("parent_branch_id"),
            fork_turn_id=r.get("fork_turn_id"),
            fork_depth=int(r.get("fork_depth", -1)),
            fork_seq=int(r.get("fork_seq", 0)),
        )
        for r in branch_rows
    }
    tip_depth = {r["uid"]: int(r.get("tip_depth", r.get("fork_depth", -1))) for r in branch_rows}
    head = None
    if campaign.head_turn_id:
        if row["h"] is None:
            raise NotFound("graph", f"no turn {campaign.head_turn_id!r}")
        head = from_props(Turn, row["h"], key="id")
    return CampaignContext(
        campaign=campaign,
        version=int(props.get("version", 0)),
        event_seq=int(props.get("event_seq", 0)),
        branches=branches,
        lines=lines,
        tip_depth=tip_depth,
        head=head,
        archived=bool(props.get("archived", False)),
    )


@dataclass(slots=True)
class Writes:
    """Statements to run in one transaction, after the commit token.

    ``after_state`` (the world after the canon this commit adds) or ``moves_head`` tells the write
    protocol to bring the live world (:mod:`story.live`) along in the same transaction.
    """

    statements: list[Statement] = field(default_factory=list)
    after_state: WorldState | None = None
    moves_head: bool = False

    def add(self, query: str, params: dict[str, Any] | None = None, /, **more: Any) -> None:
        """Queue a statement: ``add(query, params)`` or ``add(query, name=value, ...)``."""
        self.statements.append((query, {**(params or {}), **more}))


class StoryGraph:
    """Reads and writes the story side of the graph through the :class:`GraphStore` protocol."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # -- reads ------------------------------------------------------------------------------------

    def node(self, label: str, uid: str) -> dict[str, Any]:
        rows = self.graph.run(f"MATCH (n:{label} {{uid: $uid}}) RETURN n", {"uid": uid})
        if not rows:
            raise NotFound("graph", f"no {label.lower()} {uid!r}")
        return rows[0]["n"]

    def nodes(self, label: str, where: str = "", order: str = "", **params: Any) -> list[dict[str, Any]]:
        query = f"MATCH (n:{label}) {('WHERE ' + where) if where else ''} RETURN n"
        if order:
            query += f" ORDER BY {order}"
        return [r["n"] for r in self.graph.run(query, params)]

    def context(self, campaign_id: str) -> CampaignContext:
        """Everything one mutation of the campaign needs to decide, in one read."""
        rows = self.graph.run(CAMPAIGN_CONTEXT, {"c": campaign_id})
        if not rows:
            raise NotFound("graph", f"no campaign {campaign_id!r}")
        return context_of(rows[0])

    def turn_reads(self, campaign_id: str, parent_id: str | None) -> tuple[CampaignContext, Turn | None, list[str]]:
        """The campaign's context, a turn's parent and the world's axiom texts, in one read."""
        rows = self.graph.run(TURN_CONTEXT, {"c": campaign_id, "p": parent_id})
        if not rows:
            raise NotFound("graph", f"no campaign {campaign_id!r}")
        row = rows[0]
        if parent_id is not None and row["p"] is None:
            raise NotFound("graph", f"no turn {parent_id!r}")
        parent = from_props(Turn, row["p"], key="id") if row["p"] is not None else None
        axioms = [a["text"] for a in sorted(row["axioms"], key=lambda a: a["created_at"])]
        return context_of(row), parent, axioms

    def past(self, campaign_id: str, head: Lineage, back: Lineage | None, *, min_depth: int) -> PastRecords:
        """What lies on the head's line (snapshots, memories, summaries) and the turns on ``back``, in one read."""
        rows = self.graph.run(
            TURN_PAST,
            {
                "c": campaign_id,
                "b": head.branch_ids,
                "segments": _segments(back) if back is not None else [],
                "m": min_depth,
            },
        )
        past = PastRecords()
        for row in rows:
            past.by_label[row["label"]].append(row["n"])
        return past

    def turn(self, turn_id: str) -> Turn:
        return from_props(Turn, self.node("Turn", turn_id), key="id")

    def turn_at(self, branch_id: str, depth: int) -> Turn | None:
        rows = self.graph.run("MATCH (t:Turn {branch_id: $b, depth: $d}) RETURN t", {"b": branch_id, "d": depth})
        return from_props(Turn, rows[0]["t"], key="id") if rows else None

    def turns_on(self, lineage: Lineage, *, min_depth: int = 0) -> list[Turn]:
        """The turns on a lineage from ``min_depth`` down to its position, root first."""
        rows = self.graph.run(TURNS_ON, {"segments": _segments(lineage), "m": min_depth})
        return turns_in_order(rows)

    def events_on(self, campaign_id: str, lineage: Lineage, *, after_seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Committed events visible from a position with a sequence number above ``after_seq``, in order."""
        rows = self.graph.run(EVENTS_ON, {"segments": _segments(lineage), "s": after_seq})
        out = [
            (int(r["seq"]), json.loads(r["payload"]))
            for r in rows
            if lineage.contains(r["branch"], int(r["depth"]), int(r["seq"]))
        ]
        out.sort(key=lambda pair: pair[0])
        return out

    def snapshots_on(self, campaign_id: str, lineage: Lineage) -> list[dict[str, Any]]:
        """Snapshots whose position is on the lineage and whose events are all visible from it."""
        rows = self.graph.run(
            "MATCH (s:Snapshot) WHERE s.campaign_id = $c AND s.branch_id IN $b RETURN s",
            {"c": campaign_id, "b": lineage.branch_ids},
        )
        return snapshots_visible([r["s"] for r in rows], lineage)

    # -- writes -----------------------------------------------------------------------------------

    def commit(self, ctx: CampaignContext, writes: Writes, *, kind: str, **campaign_props: Any) -> int:
        """Apply ``writes`` with the next version of the campaign, all or nothing.

        Returns:
            The new version.

        Raises:
            Conflict: another writer committed this version first (nothing was written).
        """
        version = ctx.version + 1
        now = utc_now().isoformat()
        with self.graph.transaction() as tx:
            tx.run(
                "CREATE (k:Commit {uid: $uid, campaign_id: $c, version: $v, kind: $kind, at: $now})",
                {"uid": commit_uid(ctx.id, version), "c": ctx.id, "v": version, "kind": kind, "now": now},
            )
            for query, params in writes.statements:
                tx.run(query, params)
            props = {k: v for k, v in campaign_props.items() if v is not None}
            tx.run(
                "MATCH (c:Campaign {uid: $c}) SET c += $props",
                {"c": ctx.id, "props": {**props, "version": version, "updated_at": now}},
            )
            for name in sorted(k for k, v in campaign_props.items() if v is None):
                tx.run(f"MATCH (c:Campaign {{uid: $c}}) REMOVE c.{name}", {"c": ctx.id})
        return version


def node_props(model: Any, *, key: str = "id", **extra: Any) -> dict[str, Any]:
    """A story model as node properties, with denormalized extras (``None`` extras are dropped)."""
    return to_props(model, key=key) | {k: v for k, v in extra.items() if v is not None}


def unwind_create(label: str, rows: Sequence[Mapping[str, Any]]) -> Statement:
    """One statement that creates a node per row (``rows`` are property maps with a ``uid``)."""
    return (f"UNWIND $rows AS r CREATE (n:{label}) SET n = r", {"rows": [dict(r) for r in rows]})


def unwind_link(src: str, rel: str, dst: str, pairs: Iterable[tuple[str, str]], **props: Any) -> Statement:
    """One statement that MERGEs ``(src {uid: a})-[:rel]->(dst {uid: b})`` for each pair that exists."""
    rows = [{"a": a, "b": b} for a, b in dict.fromkeys(pairs)]
    set_clause = " SET r += $props" if props else ""
    return (
        f"UNWIND $rows AS p MATCH (a:{src} {{uid: p.a}}), (b:{dst} {{uid: p.b}}) MERGE (a)-[r:{rel}]->(b){set_clause}",
        {"rows": rows, **({"props": props} if props else {})},
    )
