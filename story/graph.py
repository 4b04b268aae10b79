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
        """Everything one mutation of the campaign needs to decide, in three reads."""
        props = self.node("Campaign", campaign_id)
        campaign = from_props(Campaign, props, key="id")
        branch_rows = self.nodes("Branch", "n.campaign_id = $c", c=campaign_id)
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
        head = self.turn(campaign.head_turn_id) if campaign.head_turn_id else None
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

    def turn(self, turn_id: str) -> Turn:
        return from_props(Turn, self.node("Turn", turn_id), key="id")

    def turn_at(self, branch_id: str, depth: int) -> Turn | None:
        rows = self.graph.run("MATCH (t:Turn {branch_id: $b, depth: $d}) RETURN t", {"b": branch_id, "d": depth})
        return from_props(Turn, rows[0]["t"], key="id") if rows else None

    def turns_on(self, lineage: Lineage, *, min_depth: int = 0) -> list[Turn]:
        """The turns on a lineage from ``min_depth`` down to its position, root first."""
        out: list[Turn] = []
        for seg in lineage.segments:
            rows = self.graph.run(
                "MATCH (t:Turn {branch_id: $b}) WHERE t.depth <= $d AND t.depth >= $m RETURN t",
                {"b": seg.branch_id, "d": seg.max_depth, "m": min_depth},
            )
            out.extend(from_props(Turn, r["t"], key="id") for r in rows)
        # a branch holds only the depths after its fork, so the segments never overlap
        return sorted(out, key=lambda t: t.depth)

    def events_on(self, campaign_id: str, lineage: Lineage, *, after_seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Committed events visible from a position with a sequence number above ``after_seq``, in order."""
        out: list[tuple[int, dict[str, Any]]] = []
        for seg in lineage.segments:
            rows = self.graph.run(
                "MATCH (e:StateEvent {branch_id: $b}) WHERE e.seq > $s AND e.depth <= $d "
                "RETURN e.seq AS seq, e.depth AS depth, e.payload_json AS payload",
                {"b": seg.branch_id, "s": after_seq, "d": seg.max_depth},
            )
            out.extend(
                (int(r["seq"]), json.loads(r["payload"])) for r in rows if seg.covers(int(r["depth"]), int(r["seq"]))
            )
        out.sort(key=lambda pair: pair[0])
        return out

    def snapshots_on(self, campaign_id: str, lineage: Lineage) -> list[dict[str, Any]]:
        """Snapshots whose position is on the lineage and whose events are all visible from it."""
        rows = self.graph.run(
            "MATCH (s:Snapshot) WHERE s.campaign_id = $c AND s.branch_id IN $b RETURN s",
            {"c": campaign_id, "b": lineage.branch_ids},
        )
        return [
            r["s"] for r in rows if lineage.contains(r["s"]["branch_id"], int(r["s"]["depth"]), int(r["s"]["max_seq"]))
        ]

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
