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

The statements themselves live in :mod:`story.cypher`.

Every change to a campaign's story is one transaction that first creates ``(:Commit {uid:
"<campaign>#<version+1>"})``. The uniqueness constraint on ``uid`` makes it an optimistic lock
that both Neo4j and the embedded engine enforce inside the transaction: of two writers that read
the same version, one commits and the other gets ``Conflict`` and nothing of its writes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.common import utc_now
from schemas.story import Branch, Campaign, Turn
from stores.catalog import from_props, to_props
from stores.graph.base import GraphStore
from story import cypher
from story.cypher import Statement
from story.errors import StoryNotFound
from story.lineage import BranchLine, Lineage, lineage_of
from story.state import WorldState

# How a missing record is named to a client ("story: no proposal 'x'", not "no proposedchange").
_NOUNS = {"ProposedChange": "proposal", "PromptSnapshot": "prompt snapshot", "MediaAsset": "media asset"}


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


def context_of(row: Mapping[str, Any]) -> CampaignContext:
    """A campaign's context from a row of :func:`story.cypher.campaign_context` (``c``, ``branches``, ``h``)."""
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
            raise StoryNotFound(f"no turn {campaign.head_turn_id!r}")
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
    later_commits: list[str] = field(default_factory=list)
    """Kinds of the further commits this transaction stands for, in order after its own: each gets its token
    and version, as if they were written one after another (a bulk write that keeps the history of the
    single writes it replaces, e.g. a transcript import's scene, turns and gate per session)."""

    def add(self, query: str, params: dict[str, Any] | None = None, /, **more: Any) -> None:
        """Queue a statement: ``add(*statement)``, ``add(query, params)`` or ``add(query, name=value, ...)``."""
        self.statements.append((query, {**(params or {}), **more}))

    def extend(self, statements: Iterable[Statement]) -> None:
        for query, params in statements:
            self.add(query, params)


@dataclass(slots=True)
class PastRecords:
    """What :meth:`StoryGraph.past` read, by label: Snapshot, Memory, Summary and Turn rows."""

    by_label: defaultdict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))


class StoryGraph:
    """Reads and writes the story side of the graph through the :class:`GraphStore` protocol."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # -- reads ------------------------------------------------------------------------------------

    def node(self, label: str, uid: str) -> dict[str, Any]:
        rows = self.graph.run(*cypher.node(label, uid))
        if not rows:
            raise StoryNotFound(f"no {_NOUNS.get(label, label.lower())} {uid!r}")
        return rows[0]["n"]

    def nodes(self, statement: Statement) -> list[dict[str, Any]]:
        """The nodes (``n``) a read returns."""
        return [r["n"] for r in self.graph.run(*statement)]

    def context(self, campaign_id: str) -> CampaignContext:
        """Everything one mutation of the campaign needs to decide, in one read."""
        rows = self.graph.run(*cypher.campaign_context(campaign_id))
        if not rows:
            raise StoryNotFound(f"no campaign {campaign_id!r}")
        return context_of(rows[0])

    def turn_reads(self, campaign_id: str, parent_id: str | None) -> tuple[CampaignContext, Turn | None, list[str]]:
        """The campaign's context, a turn's parent and the world's axiom texts (oldest first), in one read."""
        rows = self.graph.run(*cypher.turn_context(campaign_id, parent_id))
        if not rows:
            raise StoryNotFound(f"no campaign {campaign_id!r}")
        row = rows[0]
        if parent_id is not None and row["p"] is None:
            raise StoryNotFound(f"no turn {parent_id!r}")
        parent = from_props(Turn, row["p"], key="id") if row["p"] is not None else None
        axioms = [a["text"] for a in sorted(row["axioms"], key=lambda a: a["created_at"])]
        return context_of(row), parent, axioms

    def past(self, campaign_id: str, head: Lineage, back: Lineage | None, *, min_depth: int) -> PastRecords:
        """The snapshots, memories and summaries on the head's branches and the turns on ``back``, in one read."""
        segments = _segments(back) if back is not None else []
        past = PastRecords()
        for row in self.graph.run(*cypher.turn_past(campaign_id, head.branch_ids, segments, min_depth)):
            past.by_label[row["label"]].append(row["n"])
        return past

    def active_scene(self, state: WorldState) -> str | None:
        """The scene active in ``state`` (the fold at a position), if any.

        A scene opened with its ``start_seq`` ends per branch, by a ``scene_ended`` event on the branch it is
        ended from. One without (opened before scenes ended per branch, or by a transcript import) ended
        everywhere when its node was marked completed: the fold still names it, so its node says.
        """
        return None if state.scene is None else self._still_active(state.scene["scene_id"])

    def scene_at(self, lineage: Lineage) -> str | None:
        """The scene active at a position, as :meth:`active_scene` of the fold there says, from the scene
        starts and ends on the lineage alone (no snapshot, no replay: what a turn or a proposal reads)."""
        rows = self.graph.run(*cypher.scene_marks_on(_segments(lineage)))
        marks = sorted(
            (
                (int(r["seq"]), r["payload"])
                for r in rows
                if lineage.contains(r["branch"], int(r["depth"]), int(r["seq"]))
            ),
            key=lambda mark: mark[0],
        )
        current: str | None = None
        for _, payload in marks:
            event = json.loads(payload)
            if event["kind"] == "scene_set":
                current = event["active_scene_id"]
            elif event["ended_scene_id"] == current:
                current = None
        return None if current is None else self._still_active(current)

    def _still_active(self, scene_id: str) -> str | None:
        rows = self.graph.run(*cypher.node("Scene", scene_id))
        if rows and rows[0]["n"].get("start_seq") is None and rows[0]["n"].get("status") == "completed":
            return None
        return scene_id

    def turn(self, turn_id: str) -> Turn:
        return from_props(Turn, self.node("Turn", turn_id), key="id")

    def turn_at(self, branch_id: str, depth: int) -> Turn | None:
        rows = self.nodes(cypher.turn_at(branch_id, depth))
        return from_props(Turn, rows[0], key="id") if rows else None

    def turns_on(self, lineage: Lineage, *, min_depth: int = 0) -> list[Turn]:
        """The turns on a lineage from ``min_depth`` down to its position, root first."""
        return turns_in_order(self.nodes(cypher.turns_on(_segments(lineage), min_depth)))

    def events_on(self, campaign_id: str, lineage: Lineage, *, after_seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Committed events visible from a position with a sequence number above ``after_seq``, in order."""
        rows = self.graph.run(*cypher.events_on(_segments(lineage), after_seq))
        out = [
            (int(r["seq"]), json.loads(r["payload"]))
            for r in rows
            if lineage.contains(r["branch"], int(r["depth"]), int(r["seq"]))
        ]
        out.sort(key=lambda pair: pair[0])
        return out

    def snapshots_on(self, campaign_id: str, lineage: Lineage) -> list[dict[str, Any]]:
        """Snapshots whose position is on the lineage and whose events are all visible from it."""
        return snapshots_visible(self.nodes(cypher.snapshots_on(campaign_id, lineage.branch_ids)), lineage)

    # -- writes -----------------------------------------------------------------------------------

    def commit(self, ctx: CampaignContext, writes: Writes, *, kind: str, **campaign_props: Any) -> int:
        """Apply ``writes`` with the next version of the campaign (and one more per ``writes.later_commits``),
        all or nothing.

        Returns:
            The new version.

        Raises:
            Conflict: another writer committed this version first (nothing was written).
        """
        version = ctx.version + 1
        now = utc_now().isoformat()
        with self.graph.transaction() as tx:
            tx.run(*cypher.create_commit(commit_uid(ctx.id, version), ctx.id, version, kind, now))
            for later in writes.later_commits:
                version += 1
                tx.run(*cypher.create_commit(commit_uid(ctx.id, version), ctx.id, version, later, now))
            for query, params in writes.statements:
                tx.run(query, params)
            props = {k: v for k, v in campaign_props.items() if v is not None}
            tx.run(*cypher.set_campaign(ctx.id, {**props, "version": version, "updated_at": now}))
            for name in sorted(k for k, v in campaign_props.items() if v is None):
                tx.run(*cypher.remove_campaign_property(ctx.id, name))
        return version


def _segments(lineage: Lineage) -> list[dict[str, Any]]:
    return [{"b": seg.branch_id, "d": seg.max_depth} for seg in lineage.segments]


def turns_in_order(rows: Iterable[dict[str, Any]]) -> list[Turn]:
    """Turn nodes of a lineage as turns, root first (a branch holds only the depths after its fork, so
    the segments never overlap)."""
    return sorted((from_props(Turn, r, key="id") for r in rows), key=lambda t: t.depth)


def snapshots_visible(rows: Iterable[dict[str, Any]], lineage: Lineage) -> list[dict[str, Any]]:
    """The snapshots whose position is on the lineage and whose events are all visible from it.

    A snapshot taken behind its branch's line end (``inner``: a checkpoint of an older turn) serves only
    positions that pass its branch at its very depth: the events after it on the line may have been
    committed before canon anchored at or before its depth (a commit anchors a proposal at the turn it
    names), so they are not all after its last sequence number.
    """
    out = []
    for s in rows:
        depth = int(s["depth"])
        if not lineage.contains(s["branch_id"], depth, int(s["max_seq"])):
            continue
        if s.get("inner") and (seg := lineage.segment(s["branch_id"])) is not None and seg.max_depth != depth:
            continue
        out.append(s)
    return out


def anchored_on(rows: Iterable[dict[str, Any]], lineage: Lineage) -> list[dict[str, Any]]:
    """Records anchored on the lineage (memories, summaries), by depth then creation. What a scene's end
    formed carries that end's commit sequence number (``seq``): cut where the state cuts the end's canon."""
    ordered = sorted(rows, key=lambda r: (int(r["depth"]), r["created_at"]))
    return [r for r in ordered if lineage.contains(r["branch_id"], int(r["depth"]), _seq(r.get("seq")))]


def _seq(value: Any) -> int | None:
    return None if value is None else int(value)


def node_props(model: Any, *, key: str = "id", **extra: Any) -> dict[str, Any]:
    """A story model as node properties, with denormalized extras (``None`` extras are dropped)."""
    return to_props(model, key=key) | {k: v for k, v in extra.items() if v is not None}
