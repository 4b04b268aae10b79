"""The story service: what the REST routes and MCP tools call, readable like the story it keeps.

    service = StoryService(graph, blobs)
    world = service.create_world("Eldoria")
    campaign = service.create_campaign(world.id, "The Sunken Crown", StoryProfile(genre="fantasy"))
    turn = service.add_turn(campaign.id, "I open the door", narration="It creaks open...")
    scene = service.start_scene(campaign.id, title="The vault")
    service.propose(scene.id, type="entity", content={...}, authority="gm", confidence=1.0)
    report = service.end_scene(scene.id)          # the gate: canon in one transaction
    service.undo(campaign.id); service.redo(campaign.id)
    service.state(campaign.id, turn_id=turn.id)   # what was true then

Every change to a campaign's story (turns, takes, head moves, branches, checkpoints, commits,
retcons) is one transaction guarded by the campaign's version (:mod:`story.graph`): concurrent
writers in one process queue on a per-campaign lock, writers in other processes retry on
``Conflict``. Undo, redo, retry, restore and switching branches only move pointers; nothing is
deleted but what :meth:`StoryService.delete_branch` is explicitly asked to delete.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import ValidationError

from schemas.common import Authority, EntityStatus, new_id, utc_now
from schemas.errors import Conflict, InvalidRequest, NotFound
from schemas.events import BaseStateEvent, FactAdded, FactInvalidated, FactInvalidation, SceneSet
from schemas.media import MediaAsset
from schemas.story import (
    Axiom,
    Branch,
    BranchDisposition,
    Campaign,
    Checkpoint,
    Evidence,
    GateReport,
    InputMode,
    Memory,
    PromptSnapshot,
    ProposalStatus,
    ProposedChange,
    ProvenancePassage,
    RetrievalRecord,
    Scene,
    SceneStatus,
    SnapshotKind,
    Speaker,
    SpeakerKind,
    StoryProfile,
    Summary,
    Take,
    Turn,
    TurnPresentation,
    TurnProvenance,
    TurnStatus,
    World,
    WorldStateCheckpointKind,
    WorldStateView,
)
from stores.blob.base import BlobStore
from stores.catalog import from_props
from stores.graph.base import GraphStore
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from story.bundle import BundleSummary, export_campaign, import_campaign
from story.context import TurnContext
from story.gate import CanonBatch, decision_writes, judge, scene_of, scene_outcomes, write_canon
from story.graph import (
    CampaignContext,
    StoryGraph,
    Writes,
    anchored_on,
    node_props,
    snapshots_visible,
    turns_in_order,
    unwind_create,
    unwind_link,
)
from story.lineage import BranchLine, Lineage, lineage_of
from story.live import LiveView, queue_sync, read_live
from story.policy import AUTHORITY_RANK, GatePolicy
from story.rules import check_events
from story.snapshots import DEFAULT_SNAPSHOT_INTERVAL, Snapshots, StateAt
from story.state import WorldState

T = TypeVar("T")

_SKIP = object()  # a mutation that decided there is nothing to write
_VIEW_CACHE_SIZE = 64  # typed views of recent folds kept per service (a view of a large world costs ~30 ms)


class StoryService:
    """Campaigns, their story tree, scenes, proposals, the gate, canon and provenance.

    Args:
        graph: the graph store (system of record).
        blobs: the blob store (snapshots, prompts, retrieval records, presentation).
        policy: how the gate judges proposals.
        snapshot_interval: events between state snapshots along a line of the story.
        max_retries: how often a write retries after losing a race to another process.
    """

    def __init__(
        self,
        graph: GraphStore,
        blobs: BlobStore,
        *,
        policy: GatePolicy | None = None,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        max_retries: int = 200,
    ) -> None:
        self.graph = graph
        self.blobs = blobs
        self.policy = policy or GatePolicy()
        self.story = StoryGraph(graph)
        self.snapshots = Snapshots(self.story, blobs, interval=snapshot_interval)
        self.max_retries = max_retries
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        self._views: OrderedDict[tuple[Any, ...], WorldStateView] = OrderedDict()
        self._views_lock = threading.Lock()

    def prepare(self) -> None:
        """Create the graph's constraints and indexes and the blob bucket (idempotent).

        The commit lock relies on the uniqueness constraints: call this once at start-up.
        """
        self.graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        self.blobs.ensure_bucket()

    # ==========================================================================================
    # the write protocol

    def _lock(self, campaign_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[campaign_id]

    def _mutate(
        self,
        campaign_id: str,
        kind: str,
        build: Callable[[CampaignContext, Writes], tuple[T, dict[str, Any]]],
        *,
        allow_archived: bool = False,
    ) -> T:
        """Read the campaign, let ``build`` decide the writes, commit them with the next version.

        ``build`` returns its result and the campaign properties to set; it is called again on a
        fresh read when another process committed first. Returning ``_SKIP`` as the properties
        writes nothing (an idempotent no-op).
        """
        with self._lock(campaign_id):
            for attempt in range(self.max_retries):
                ctx = self.story.context(campaign_id)
                if ctx.archived and not allow_archived:
                    raise InvalidRequest("story", f"campaign {campaign_id!r} is archived; unarchive it to change it")
                writes = Writes()
                try:
                    result, props = build(ctx, writes)
                except ValidationError as exc:
                    raise InvalidRequest("story", _errors(exc)) from None
                if props is _SKIP:
                    return result
                if writes.after_state is not None or writes.moves_head:
                    self._queue_live(ctx, writes, props)
                try:
                    self.story.commit(ctx, writes, kind=kind, **props)
                except Conflict:
                    if self.story.context(campaign_id).version == ctx.version:
                        raise  # not a lost race: a real uniqueness violation in the writes
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
                    continue
                return result
        raise Conflict("story", f"campaign {campaign_id!r} is too busy: {self.max_retries} writes raced this one")

    def _queue_live(self, ctx: CampaignContext, writes: Writes, props: dict[str, Any]) -> None:
        """Bring the live world to the state at the head this mutation leaves (same transaction)."""
        target = writes.after_state
        if target is None:
            branch = props.get("active_branch_id", ctx.campaign.active_branch_id)
            head: str | None = props.get("head_turn_id", ctx.campaign.head_turn_id)
            depth = self.story.turn(head).depth if head else -1
            target = self.snapshots.state_at(ctx.id, lineage_of(ctx.lines, branch, depth)).state
        queue_sync(writes, ctx.id, read_live(self.graph, ctx.id), target)

    def live_world(self, campaign_id: str) -> LiveView:
        """The materialized world at the head, as the graph holds it (see :mod:`story.live`)."""
        return read_live(self.graph, campaign_id)

    # ==========================================================================================
    # worlds and campaigns

    def create_world(self, name: str, *, description: str | None = None, axioms: Sequence[str] = ()) -> World:
        """A new world (universe), optionally with its axioms."""
        world = World(name=name, description=description)
        self.graph.run("CREATE (w:World) SET w = $props", {"props": node_props(world)})
        for text in axioms:
            self.add_axiom(world.id, text)
        return world

    def get_world(self, world_id: str) -> World:
        return from_props(World, self.story.node("World", world_id), key="id")

    def add_axiom(
        self,
        world_id: str,
        text: str,
        *,
        category: str | None = None,
        authority: Authority = Authority.GM,
        evidence: Evidence | None = None,
    ) -> Axiom:
        """A rule of the world that always holds; the narrator's prompt carries them all."""
        self.get_world(world_id)
        axiom = Axiom(
            world_id=world_id, text=text, category=category, authority=authority, evidence=evidence or Evidence()
        )
        self.graph.run(
            "MATCH (w:World {uid: $w}) CREATE (a:Axiom) SET a = $props CREATE (a)-[:OF_WORLD]->(w)",
            {"w": world_id, "props": node_props(axiom, world_uid=world_id)},
        )
        return axiom

    def axioms(self, world_id: str) -> list[Axiom]:
        rows = self.story.nodes("Axiom", "n.world_uid = $w", "n.created_at", w=world_id)
        return [from_props(Axiom, r, key="id") for r in rows]

    def create_campaign(
        self, world_id: str, name: str, profile: StoryProfile, *, narrator_rules: Sequence[str] = ()
    ) -> Campaign:
        """A new campaign in a world, with its main branch and no turns yet."""
        self.get_world(world_id)
        campaign_id = new_id("camp")
        branch = Branch(campaign_id=campaign_id, name="main")
        campaign = Campaign(
            id=campaign_id,
            world_id=world_id,
            name=name,
            profile=profile,
            narrator_rules=list(narrator_rules),
            active_branch_id=branch.id,
        )
        with self.graph.transaction() as tx:
            tx.run(
                "MATCH (w:World {uid: $w}) CREATE (c:Campaign) SET c = $props CREATE (c)-[:IN_WORLD]->(w)",
                {
                    "w": world_id,
                    "props": node_props(campaign, campaign_id=campaign_id, world_uid=world_id, version=0, event_seq=0),
                },
            )
            tx.run(
                "MATCH (c:Campaign {uid: $c}) CREATE (b:Branch) SET b = $props CREATE (b)-[:OF_CAMPAIGN]->(c)",
                {"c": campaign_id, "props": node_props(branch, fork_depth=-1, fork_seq=0, tip_depth=-1)},
            )
        return campaign

    def get_campaign(self, campaign_id: str) -> Campaign:
        return self.story.context(campaign_id).campaign

    def list_campaigns(self, world_id: str | None = None) -> list[Campaign]:
        where = "n.world_id = $w" if world_id else ""
        rows = self.story.nodes("Campaign", where, "n.created_at", w=world_id)
        return [from_props(Campaign, r, key="id") for r in rows]

    def archive_campaign(self, campaign_id: str, archived: bool = True) -> None:
        """Make a campaign read-only (or writable again). Nothing is deleted."""
        self._mutate(campaign_id, "archive", lambda ctx, w: (None, {"archived": archived}), allow_archived=True)

    # ==========================================================================================
    # turns and takes

    def add_turn(
        self,
        campaign_id: str,
        text: str = "",
        *,
        input_mode: InputMode = InputMode.ACTION,
        speaker: Speaker | None = None,
        narration: str | None = None,
    ) -> Turn:
        """Append a turn at the head. Below the tip of the line, this forks a new branch first.

        With ``narration``, the turn is recorded with its first take; without it, the turn is
        pending until :meth:`add_take` records the narration.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Turn, dict[str, Any]]:
            branch_id, fork = self._write_branch(ctx, writes)
            parent = ctx.head
            turn = Turn(
                campaign_id=ctx.id,
                branch_id=branch_id,
                parent_turn_id=parent.id if parent else None,
                depth=ctx.head_depth + 1,
                input_mode=input_mode,
                speaker=speaker or Speaker(kind=SpeakerKind.PLAYER),
                text=text,
            )
            take = None
            if narration is not None:
                take = Take(turn_id=turn.id, index=0, narration=narration, selected=True)
                turn = turn.validated_copy(narration=narration, selected_take_id=take.id, status=TurnStatus.ACCEPTED)
            writes.add(
                "CREATE (t:Turn) SET t = $props",
                props=node_props(turn, parent_uid=turn.parent_turn_id),
            )
            if parent is not None:
                writes.add(*unwind_link("Turn", "CHILD_OF", "Turn", [(turn.id, parent.id)]))
            if take is not None:
                writes.add(*unwind_create("Take", [node_props(take, campaign_id=ctx.id, turn_uid=turn.id)]))
                writes.add(*unwind_link("Take", "TAKE_OF", "Turn", [(take.id, turn.id)]))
            writes.add(
                "MATCH (b:Branch {uid: $b}) SET b.tip_turn_id = $t, b.tip_depth = $d",
                b=branch_id,
                t=turn.id,
                d=turn.depth,
            )
            return turn, {"head_turn_id": turn.id, "active_branch_id": branch_id, **fork}

        return self._mutate(campaign_id, "turn", build)

    def _write_branch(self, ctx: CampaignContext, writes: Writes) -> tuple[str, dict[str, Any]]:
        """The branch a write at the head goes on, forking one when the head is behind the line's end."""
        active = ctx.campaign.active_branch_id
        if ctx.line_end(active) <= ctx.head_depth:
            return active, {}
        old = ctx.branches[active]
        head = ctx.head
        branch = Branch(
            campaign_id=ctx.id,
            name=f"{old.name}.{sum(1 for b in ctx.branches.values() if b.parent_branch_id == old.id) + 1}",
            parent_branch_id=head.branch_id if head else None,
            fork_turn_id=head.id if head else None,
        )
        self._queue_branch(ctx, writes, branch, fork_depth=ctx.head_depth, previous=active)
        return branch.id, {"active_branch_id": branch.id}

    def _queue_branch(
        self, ctx: CampaignContext, writes: Writes, branch: Branch, *, fork_depth: int, previous: str
    ) -> None:
        """Queue a new active branch, retaining the previous one, and update ``ctx`` to match."""
        writes.add(
            "MATCH (c:Campaign {uid: $c}) CREATE (b:Branch) SET b = $props CREATE (b)-[:OF_CAMPAIGN]->(c)",
            c=ctx.id,
            props=node_props(branch, fork_depth=fork_depth, fork_seq=ctx.event_seq, tip_depth=fork_depth),
        )
        if branch.fork_turn_id is not None:
            writes.add(*unwind_link("Branch", "FORKED_AT", "Turn", [(branch.id, branch.fork_turn_id)]))
        writes.add(
            "MATCH (b:Branch {uid: $b}) WHERE b.disposition = 'active' SET b.disposition = 'retained'", b=previous
        )
        ctx.branches[branch.id] = branch
        ctx.lines[branch.id] = BranchLine(
            branch.id, branch.parent_branch_id, branch.fork_turn_id, fork_depth, ctx.event_seq
        )
        ctx.tip_depth[branch.id] = fork_depth
        ctx.campaign = ctx.campaign.validated_copy(active_branch_id=branch.id)

    def get_turn(self, turn_id: str) -> Turn:
        return self.story.turn(turn_id)

    def add_take(self, turn_id: str, narration: str, *, generation: Any = None, select: bool = True) -> Take:
        """Record a narration of a turn as a new take (a retry adds one); nothing is replaced.

        A retry (any take after the first) rejects the proposals still pending from the turn: they
        were extracted from a narration that is no longer the one told. Selecting an older take
        again (:meth:`select_take`) is how a revert brings back an archived version.
        """
        turn = self.story.turn(turn_id)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Take, dict[str, Any]]:
            count = self.graph.run("MATCH (k:Take {turn_uid: $t}) RETURN count(k) AS n", {"t": turn_id})[0]["n"]
            take = Take(turn_id=turn_id, index=int(count), narration=narration, selected=select, generation=generation)
            writes.add(*unwind_create("Take", [node_props(take, campaign_id=ctx.id, turn_uid=turn_id)]))
            writes.add(*unwind_link("Take", "TAKE_OF", "Turn", [(take.id, turn_id)]))
            if select:
                self._queue_select(writes, turn_id, take)
            if count:
                # a regeneration: what the replaced narration proposed no longer stands
                writes.add(
                    "MATCH (p:ProposedChange {turn_id: $t, status: 'pending'}) "
                    "SET p.status = 'rejected', p.rationale = $why, p.decided_at = $now",
                    t=turn_id,
                    why=f"the turn was regenerated (take {take.index})",
                    now=utc_now().isoformat(),
                )
            return take, {}

        return self._mutate(turn.campaign_id, "take", build)

    def select_take(self, turn_id: str, take_id: str) -> Take:
        """Make one take of a turn the selected one (the others stay)."""
        turn = self.story.turn(turn_id)
        # Another turn's take (perhaps another campaign's) answers exactly like a missing one: the
        # answer must not tell whether it exists, nor name the turn it belongs to.
        missing = NotFound("story", f"no take {take_id!r} of turn {turn_id!r}")
        try:
            take = from_props(Take, self.story.node("Take", take_id), key="id")
        except NotFound:
            raise missing from None
        if take.turn_id != turn_id:
            raise missing

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Take, dict[str, Any]]:
            self._queue_select(writes, turn_id, take)
            return take.validated_copy(selected=True), {}

        return self._mutate(turn.campaign_id, "select_take", build)

    @staticmethod
    def _queue_select(writes: Writes, turn_id: str, take: Take) -> None:
        writes.add("MATCH (k:Take {turn_uid: $t}) SET k.selected = (k.uid = $k)", t=turn_id, k=take.id)
        writes.add(
            "MATCH (t:Turn {uid: $t}) SET t.narration = $n, t.selected_take_id = $k, t.status = $s",
            t=turn_id,
            n=take.narration,
            k=take.id,
            s=TurnStatus.ACCEPTED.value,
        )

    def takes(self, turn_id: str) -> list[Take]:
        rows = self.story.nodes("Take", "n.turn_uid = $t", "n.index", t=turn_id)
        return [from_props(Take, r, key="id") for r in rows]

    # ==========================================================================================
    # head, history and branches

    def undo(self, campaign_id: str) -> Campaign:
        """Move the head back one turn. The undone turn stays, and redo brings it back."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            if ctx.head is None:
                raise InvalidRequest("story", "nothing to undo: the head is before the first turn")
            parent = ctx.head.parent_turn_id
            writes.moves_head = True
            return ctx.campaign.validated_copy(head_turn_id=parent), {"head_turn_id": parent}

        return self._mutate(campaign_id, "undo", build)

    def redo(self, campaign_id: str) -> Campaign:
        """Move the head forward one turn along the active branch's line."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            active = ctx.campaign.active_branch_id
            end = ctx.line_end(active)
            target = ctx.head_depth + 1
            if target > end:
                raise InvalidRequest("story", "nothing to redo: the head is at the tip of the branch")
            line = lineage_of(ctx.lines, active, end)
            branch = line.branch_at(target, ctx.lines)
            turn = self.story.turn_at(branch, target) if branch else None
            if turn is None:
                raise NotFound("story", f"no turn at depth {target} on branch {active!r}")
            writes.moves_head = True
            return ctx.campaign.validated_copy(head_turn_id=turn.id), {"head_turn_id": turn.id}

        return self._mutate(campaign_id, "redo", build)

    def history(self, campaign_id: str, *, turn_id: str | None = None, last: int | None = None) -> list[Turn]:
        """The turns from the root to the head (or to ``turn_id``), oldest first; ``last`` keeps the newest."""
        ctx = self.story.context(campaign_id)
        lineage = self._lineage_for(ctx, turn_id)
        if lineage.depth < 0:
            return []
        min_depth = max(0, lineage.depth - last + 1) if last else 0
        return self.story.turns_on(lineage, min_depth=min_depth)

    def branches(self, campaign_id: str, *, include_archived: bool = False) -> list[Branch]:
        rows = self.story.nodes("Branch", "n.campaign_id = $c", "n.created_at", c=campaign_id)
        return [from_props(Branch, r, key="id") for r in rows if include_archived or not r.get("archived")]

    def create_branch(self, campaign_id: str, from_turn_id: str, *, name: str | None = None) -> Branch:
        """Branch off at an earlier turn: the new branch becomes active, the original future stays."""
        turn = self.story.turn(from_turn_id)
        if turn.campaign_id != campaign_id:
            raise InvalidRequest("story", f"turn {from_turn_id!r} is not in campaign {campaign_id!r}")

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Branch, dict[str, Any]]:
            branch = Branch(
                campaign_id=ctx.id,
                name=name or f"branch-{len(ctx.branches) + 1}",
                parent_branch_id=turn.branch_id,
                fork_turn_id=turn.id,
            )
            self._queue_branch(ctx, writes, branch, fork_depth=turn.depth, previous=ctx.campaign.active_branch_id)
            writes.moves_head = True
            return branch, {"active_branch_id": branch.id, "head_turn_id": turn.id}

        return self._mutate(campaign_id, "branch", build)

    def switch_branch(self, campaign_id: str, branch_id: str) -> Campaign:
        """Make another branch active, with the head at its tip. The branch left behind is retained."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            branch = ctx.branches.get(branch_id)
            if branch is None:
                raise NotFound("story", f"no branch {branch_id!r} in campaign {campaign_id!r}")
            head = branch.tip_turn_id or branch.fork_turn_id
            previous = ctx.campaign.active_branch_id
            if previous != branch_id:
                writes.add(
                    "MATCH (b:Branch {uid: $b}) WHERE b.disposition = 'active' SET b.disposition = 'retained'",
                    b=previous,
                )
                writes.add("MATCH (b:Branch {uid: $b}) SET b.disposition = 'active', b.archived = false", b=branch_id)
            writes.moves_head = True
            campaign = ctx.campaign.validated_copy(active_branch_id=branch_id, head_turn_id=head)
            return campaign, {"active_branch_id": branch_id, "head_turn_id": head}

        return self._mutate(campaign_id, "switch", build)

    def set_disposition(self, campaign_id: str, branch_id: str, disposition: BranchDisposition) -> Branch:
        """Mark a branch that is not being played as retained (kept) or disposable (may be deleted)."""
        if disposition is BranchDisposition.ACTIVE:
            raise InvalidRequest("story", "switch to a branch to make it active")

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Branch, dict[str, Any]]:
            branch = self._branch(ctx, branch_id)
            if branch_id == ctx.campaign.active_branch_id:
                raise InvalidRequest("story", f"branch {branch_id!r} is being played; switch away from it first")
            writes.add("MATCH (b:Branch {uid: $b}) SET b.disposition = $d", b=branch_id, d=disposition.value)
            return branch.validated_copy(disposition=disposition), {}

        return self._mutate(campaign_id, "disposition", build)

    def archive_branch(self, campaign_id: str, branch_id: str, archived: bool = True) -> None:
        """Hide a branch from the default listing (or show it again). Nothing is deleted."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[None, dict[str, Any]]:
            self._branch(ctx, branch_id)
            if archived and branch_id == ctx.campaign.active_branch_id:
                raise InvalidRequest("story", f"branch {branch_id!r} is being played; switch away from it first")
            writes.add("MATCH (b:Branch {uid: $b}) SET b.archived = $a", b=branch_id, a=archived)
            return None, {}

        self._mutate(campaign_id, "archive_branch", build)

    def delete_branch(self, campaign_id: str, branch_id: str) -> int:
        """Delete a disposable branch's own turns and takes. Refused while anything depends on them.

        Canon is never deleted: a branch with committed events, child branches, checkpoints,
        memories or summaries anchored on it cannot be deleted (archive it instead).

        Returns:
            How many turns were deleted.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[int, dict[str, Any]]:
            branch = self._branch(ctx, branch_id)
            if branch.disposition is not BranchDisposition.DISPOSABLE:
                raise InvalidRequest(
                    "story", f"branch {branch_id!r} is {branch.disposition.value}; mark it disposable first"
                )
            if any(b.parent_branch_id == branch_id for b in ctx.branches.values()):
                raise InvalidRequest("story", f"branch {branch_id!r} has branches forked from it")
            for label in ("StateEvent", "Checkpoint", "Memory", "Summary", "Scene"):
                n = self.graph.run(
                    f"MATCH (n:{label} {{campaign_id: $c, branch_id: $b}}) RETURN count(n) AS n",
                    {"c": ctx.id, "b": branch_id},
                )[0]["n"]
                if n:
                    raise InvalidRequest(
                        "story", f"branch {branch_id!r} holds {n} {label} record(s); canon is never deleted"
                    )
            turns = self.graph.run("MATCH (t:Turn {branch_id: $b}) RETURN count(t) AS n", {"b": branch_id})[0]["n"]
            writes.add("MATCH (k:Take)-[:TAKE_OF]->(:Turn {branch_id: $b}) DETACH DELETE k", b=branch_id)
            writes.add("MATCH (t:Turn {branch_id: $b}) DETACH DELETE t", b=branch_id)
            writes.add("MATCH (b:Branch {uid: $b}) DETACH DELETE b", b=branch_id)
            return int(turns), {}

        return self._mutate(campaign_id, "delete_branch", build)

    @staticmethod
    def _branch(ctx: CampaignContext, branch_id: str) -> Branch:
        branch = ctx.branches.get(branch_id)
        if branch is None:
            raise NotFound("story", f"no branch {branch_id!r} in campaign {ctx.id!r}")
        return branch

    def _lineage_for(self, ctx: CampaignContext, turn_id: str | None, branch_id: str | None = None) -> Lineage:
        """Lineage of the head, of a turn on its own branch, or of a turn seen from a branch."""
        if turn_id is None:
            return ctx.lineage(branch_id)
        return self._lineage_at(ctx, self.story.turn(turn_id), branch_id)

    @staticmethod
    def _lineage_at(ctx: CampaignContext, turn: Turn, branch_id: str | None = None) -> Lineage:
        """Lineage of a turn (read already) on its own branch, or seen from a branch."""
        turn_id = turn.id
        if turn.campaign_id != ctx.id:
            raise NotFound("story", f"no turn {turn_id!r} in campaign {ctx.id!r}")
        if branch_id is None:
            branch_id = ctx.campaign.active_branch_id if ctx.head and ctx.head.id == turn_id else turn.branch_id
        if branch_id not in ctx.lines:
            raise NotFound("story", f"no branch {branch_id!r} in campaign {ctx.id!r}")
        lineage = lineage_of(ctx.lines, branch_id, turn.depth)
        if not lineage.contains(turn.branch_id, turn.depth):
            raise InvalidRequest("story", f"turn {turn_id!r} is not on the line of branch {branch_id!r}")
        return lineage

    # ==========================================================================================
    # checkpoints

    def create_checkpoint(
        self,
        campaign_id: str,
        name: str,
        *,
        turn_id: str | None = None,
        kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL,
        description: str | None = None,
    ) -> Checkpoint:
        """A named pointer to a turn (the head by default), with a snapshot of the world there."""
        ctx = self.story.context(campaign_id)
        lineage = self._lineage_for(ctx, turn_id)
        target = turn_id or (ctx.head.id if ctx.head else None)
        if target is None:
            raise InvalidRequest("story", "there is no turn to checkpoint yet")
        built = self.snapshots.state_at(campaign_id, lineage)
        snapshot_kind = {
            WorldStateCheckpointKind.BEFORE_USER_INPUT: SnapshotKind.BEFORE_USER_INPUT,
            WorldStateCheckpointKind.AFTER_USER_INPUT: SnapshotKind.AFTER_USER_INPUT,
            WorldStateCheckpointKind.AFTER_CHARACTER_ROUND: SnapshotKind.AFTER_CHARACTER_ROUND,
        }.get(kind, SnapshotKind.INTERVAL)
        snapshot_id = self.snapshots.maybe_take(
            campaign_id, lineage, built.state, turn_id=target, replayed=0, kind=snapshot_kind, force=True
        )

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Checkpoint, dict[str, Any]]:
            checkpoint = Checkpoint(
                campaign_id=ctx.id,
                branch_id=lineage.branch_id,
                turn_id=target,
                name=name,
                kind=kind,
                snapshot_id=snapshot_id,
                description=description,
            )
            writes.add(*unwind_create("Checkpoint", [node_props(checkpoint, depth=lineage.depth)]))
            writes.add(*unwind_link("Checkpoint", "AT_TURN", "Turn", [(checkpoint.id, target)]))
            return checkpoint, {}

        return self._mutate(campaign_id, "checkpoint", build)

    def checkpoints(self, campaign_id: str) -> list[Checkpoint]:
        rows = self.story.nodes("Checkpoint", "n.campaign_id = $c", "n.created_at", c=campaign_id)
        return [from_props(Checkpoint, r, key="id") for r in rows]

    def restore_checkpoint(self, campaign_id: str, checkpoint_id: str) -> Campaign:
        """Move the head to a checkpoint's turn on its branch; the first divergent write forks."""
        checkpoint = from_props(Checkpoint, self.story.node("Checkpoint", checkpoint_id), key="id")
        if checkpoint.campaign_id != campaign_id:
            raise NotFound("story", f"no checkpoint {checkpoint_id!r} in campaign {campaign_id!r}")

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            previous = ctx.campaign.active_branch_id
            if previous != checkpoint.branch_id:
                writes.add(
                    "MATCH (b:Branch {uid: $b}) WHERE b.disposition = 'active' SET b.disposition = 'retained'",
                    b=previous,
                )
                writes.add("MATCH (b:Branch {uid: $b}) SET b.disposition = 'active'", b=checkpoint.branch_id)
            writes.moves_head = True
            campaign = ctx.campaign.validated_copy(
                active_branch_id=checkpoint.branch_id, head_turn_id=checkpoint.turn_id
            )
            return campaign, {"active_branch_id": checkpoint.branch_id, "head_turn_id": checkpoint.turn_id}

        return self._mutate(campaign_id, "restore", build)

    def prune_checkpoints(self, campaign_id: str, *, keep_turns: int = 20) -> int:
        """Delete automatic checkpoints more than ``keep_turns`` behind the head. Named ones stay.

        Returns:
            How many were pruned.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[int, dict[str, Any]]:
            rows = self.story.nodes("Checkpoint", "n.campaign_id = $c AND n.kind <> 'manual'", c=ctx.id)
            old = [r["uid"] for r in rows if int(r.get("depth", 0)) < ctx.head_depth - keep_turns]
            if not old:
                return 0, _SKIP  # type: ignore[return-value]
            writes.add("MATCH (k:Checkpoint) WHERE k.uid IN $ids DETACH DELETE k", ids=old)
            return len(old), {}

        return self._mutate(campaign_id, "prune", build)

    # ==========================================================================================
    # state

    def state(self, campaign_id: str, *, turn_id: str | None = None, branch_id: str | None = None) -> WorldStateView:
        """The world as of the head, or as of a turn (on its branch, or seen from ``branch_id``)."""
        ctx = self.story.context(campaign_id)
        lineage = self._lineage_for(ctx, turn_id, branch_id)
        built = self.snapshots.state_at(campaign_id, lineage)
        return self._view(ctx, lineage, built, turn_id or (ctx.head.id if ctx.head else None))

    def _view(self, ctx: CampaignContext, lineage: Lineage, built: StateAt, at: str | None) -> WorldStateView:
        """The typed view of a fold, as of turn ``at``."""
        # The same snapshot, the same last event and the same number of events after it on the same
        # branch are the same fold: its typed view (the costly part on a large world) is reused, as
        # of this turn. Turns without canon changes, the common case in play, all hit.
        key = (ctx.id, lineage.branch_id, built.snapshot_id, built.state.last_seq, built.replayed)
        with self._views_lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
        if view is None:
            view = built.state.view(
                world_id=ctx.campaign.world_id, campaign_id=ctx.id, branch_id=lineage.branch_id, turn_id=at
            )
            with self._views_lock:
                self._views[key] = view
                while len(self._views) > _VIEW_CACHE_SIZE:
                    self._views.popitem(last=False)
        return view if view.turn_id == at else view.model_copy(update={"turn_id": at})

    def turn_context(self, campaign_id: str, *, turn: Turn, recent: int) -> TurnContext:
        """Everything a turn reads before the model runs (see :class:`~story.context.TurnContext`).

        The same values as ``get_campaign``, ``axioms``, ``state``, ``history`` (the ``recent`` turns
        before ``turn``), ``memories`` and ``summaries``, read in three round trips instead of about two
        dozen: the campaign with its parent turn and axioms, the records on its lineages, the events.
        """
        ctx, parent, axioms = self.story.turn_reads(campaign_id, turn.parent_turn_id)
        head = ctx.lineage()
        back = self._lineage_at(ctx, parent) if parent is not None else None
        min_depth = max(0, back.depth - recent + 1) if back is not None and recent else 0
        past = self.story.past(campaign_id, head, back, min_depth=min_depth).by_label
        candidates = snapshots_visible(past["Snapshot"], head)
        built = self.snapshots.state_at(campaign_id, head, candidates=candidates)
        return TurnContext(
            campaign=ctx.campaign,
            axioms=axioms,
            state=self._view(ctx, head, built, ctx.head.id if ctx.head else None),
            recent=turns_in_order({"n": t} for t in past["Turn"]) if back is not None else [],
            memories=[from_props(Memory, r, key="id") for r in anchored_on(past["Memory"], head)],
            summaries=[from_props(Summary, r, key="id") for r in anchored_on(past["Summary"], head)],
        )

    def world_state(self, campaign_id: str, *, turn_id: str | None = None) -> WorldState:
        """The raw fold (for the gate, the narrator's context and tests)."""
        ctx = self.story.context(campaign_id)
        return self.snapshots.state_at(campaign_id, self._lineage_for(ctx, turn_id)).state

    def happenings(
        self, campaign_id: str, *, about: str | None = None, before_turn: str | None = None
    ) -> list[dict[str, Any]]:
        """Canon happenings on the head's line, oldest first (older than ``before_turn`` if given)."""
        ctx = self.story.context(campaign_id)
        state = self.snapshots.state_at(campaign_id, ctx.lineage()).state
        cutoff = None
        if before_turn is not None:
            cutoff = self.story.turn(before_turn).depth
        out = []
        for hid, h in sorted(state.happenings.items(), key=lambda kv: kv[1]["seq"]):
            if about is not None and about not in h["participants"] and about != h["location_id"]:
                continue
            if cutoff is not None and h["turn_id"] and self.story.turn(h["turn_id"]).depth >= cutoff:
                continue
            out.append({"id": hid, **h})
        return out

    # ==========================================================================================
    # scenes and proposals

    def start_scene(
        self,
        campaign_id: str,
        *,
        title: str | None = None,
        location_entity_id: str | None = None,
        participant_entity_ids: Sequence[str] = (),
    ) -> Scene:
        """Open a scene at the head; its location and participants become the scene state (scene_set)."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Scene, dict[str, Any]]:
            active = self.story.nodes("Scene", "n.campaign_id = $c AND n.status = 'active'", c=ctx.id)
            if active:
                raise InvalidRequest("story", f"scene {active[0]['uid']!r} is still active; end it first")
            order = self.graph.run("MATCH (s:Scene {campaign_id: $c}) RETURN count(s) AS n", {"c": ctx.id})[0]["n"]
            branch_id, fork = self._write_branch(ctx, writes)
            scene = Scene(
                campaign_id=ctx.id,
                branch_id=branch_id,
                order=int(order),
                title=title,
                location_entity_id=location_entity_id,
                participant_entity_ids=list(participant_entity_ids),
                start_turn_id=ctx.head.id if ctx.head else None,
            )
            writes.add(
                "MATCH (c:Campaign {uid: $c}) CREATE (s:Scene) SET s = $props CREATE (s)-[:OF_CAMPAIGN]->(c)",
                c=ctx.id,
                props=node_props(scene, depth=ctx.head_depth),
            )
            event = SceneSet(
                turn_id=ctx.head.id if ctx.head else None,
                scene_id=scene.id,
                active_scene_id=scene.id,
                location_entity_id=location_entity_id,
                present_entity_ids=list(participant_entity_ids),
            )
            props = self._commit_events(
                ctx,
                writes,
                [event],
                authority=Authority.GM,
                branch_id=branch_id,
                scene_id=scene.id,
                what="the scene's location and participants",
            )
            return scene, {**fork, **props}

        return self._mutate(campaign_id, "scene", build)

    def _commit_events(
        self,
        ctx: CampaignContext,
        writes: Writes,
        events: list[BaseStateEvent],
        *,
        authority: Authority,
        branch_id: str,
        scene_id: str | None,
        what: str,
        evidence: Evidence | None = None,
    ) -> dict[str, Any]:
        """Validate events against the head's state and queue them as canon (not through proposals)."""
        state = self.snapshots.state_at(ctx.id, ctx.lineage()).state
        checked = check_events(state, events, first_seq=ctx.event_seq + 1, authority=authority.value, in_place=True)
        if checked.issues:
            raise InvalidRequest("story", f"{what} break the rules: " + "; ".join(i.message for i in checked.issues))
        writes.after_state = checked.state
        batch = CanonBatch()
        batch.add(events, authority=authority.value, confidence=1.0, evidence=evidence)
        write_canon(
            ctx,
            writes,
            batch,
            branch_id=branch_id,
            depth=ctx.head_depth,
            first_seq=ctx.event_seq + 1,
            scene_id=scene_id,
            version=ctx.version + 1,
        )
        return {"event_seq": ctx.event_seq + len(events)}

    def get_scene(self, scene_id: str) -> Scene:
        return scene_of(self.story.node("Scene", scene_id))

    def scenes(self, campaign_id: str) -> list[Scene]:
        return [scene_of(r) for r in self.story.nodes("Scene", "n.campaign_id = $c", "n.order", c=campaign_id)]

    def propose(self, scene_id: str, **fields: Any) -> ProposedChange:
        """Stage a proposed change on an active scene; the gate decides at scene end.

        ``fields`` are those of :class:`~schemas.story.ProposedChange` (type, content, authority,
        confidence, evidence, turn_id, resolution, proposed_by).

        Raises:
            ValidationFailed: the proposal is malformed (InvalidRequest carries the schema's message).
            NotFound: the scene, or a turn it cites, does not exist.
        """
        scene = self.get_scene(scene_id)
        if scene.status is not SceneStatus.ACTIVE:
            raise InvalidRequest("story", f"scene {scene_id!r} has ended; proposals go to an active scene")
        try:
            proposal = ProposedChange.model_validate({**fields, "scene_id": scene_id, "status": "pending"})
        except ValidationError as exc:
            raise InvalidRequest("story", f"malformed proposal: {_errors(exc)}") from None
        cited = [*proposal.evidence.turn_ids, *([proposal.turn_id] if proposal.turn_id else [])]
        if cited:
            rows = self.graph.run(
                "MATCH (t:Turn) WHERE t.uid IN $ids AND t.campaign_id = $c RETURN t.uid AS uid",
                {"ids": cited, "c": scene.campaign_id},
            )
            missing = sorted(set(cited) - {r["uid"] for r in rows})
            if missing:
                raise NotFound("story", f"the proposal cites turns not in this campaign: {', '.join(missing)}")
        self.graph.run(
            "MATCH (s:Scene {uid: $s}) CREATE (p:ProposedChange) SET p = $props CREATE (p)-[:PROPOSED_IN]->(s)",
            {"s": scene_id, "props": node_props(proposal, campaign_id=scene.campaign_id, scene_uid=scene_id)},
        )
        return proposal

    def review(self, proposal_id: str, reviewer: str) -> ProposedChange:
        """Record that someone reviewed and approved a pending proposal (lets a system proposal through)."""
        proposal = self.get_proposal(proposal_id)
        if proposal.status is not ProposalStatus.PENDING:
            raise InvalidRequest("story", f"proposal {proposal_id!r} is already {proposal.status.value}")
        self.graph.run("MATCH (p:ProposedChange {uid: $p}) SET p.reviewed_by = $r", {"p": proposal_id, "r": reviewer})
        return proposal.validated_copy(reviewed_by=reviewer)

    def get_proposal(self, proposal_id: str) -> ProposedChange:
        return from_props(ProposedChange, self.story.node("ProposedChange", proposal_id), key="id")

    def proposals(self, scene_id: str, status: ProposalStatus | None = None) -> list[ProposedChange]:
        where = "n.scene_uid = $s" + (" AND n.status = $st" if status else "")
        rows = self.story.nodes(
            "ProposedChange", where, "n.created_at", s=scene_id, st=status.value if status else None
        )
        return [from_props(ProposedChange, r, key="id") for r in rows]

    # -- the gate ---------------------------------------------------------------------------------

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        """Mid-scene commit: judge the given pending proposals now."""
        if not proposal_ids:
            raise InvalidRequest("story", "name the proposals to commit (or end the scene to judge them all)")
        return self._gate(scene_id, list(proposal_ids), end=False)

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport:
        """End a scene: judge every pending proposal and write the accepted ones as canon, at once.

        Idempotent: ending a completed scene again changes nothing and says so.
        """
        return self._gate(scene_id, None, end=True, summary=summary)

    def _gate(self, scene_id: str, ids: list[str] | None, *, end: bool, summary: str | None = None) -> GateReport:
        campaign_id = self.get_scene(scene_id).campaign_id
        after: dict[str, Any] = {}

        def build(ctx: CampaignContext, writes: Writes) -> tuple[GateReport, dict[str, Any]]:
            scene = self.get_scene(scene_id)
            all_proposals = self.proposals(scene_id)
            if scene.status is SceneStatus.COMPLETED:
                if end:
                    return GateReport(
                        scene_id=scene_id, campaign_id=ctx.id, branch_id=scene.branch_id, already_completed=True
                    ), _SKIP  # type: ignore[return-value]
                raise InvalidRequest("story", f"scene {scene_id!r} has ended; nothing more can be committed in it")
            known = {p.id: p for p in all_proposals}
            if ids is not None:
                missing = [i for i in ids if i not in known]
                if missing:
                    raise NotFound("story", f"no proposal {', '.join(map(repr, missing))} in scene {scene_id!r}")
            wanted = ids if ids is not None else list(known)
            pending = [known[i] for i in wanted if known[i].status is ProposalStatus.PENDING]
            pending.sort(key=lambda p: (p.created_at, p.id))
            skipped = [i for i in wanted if known[i].status is not ProposalStatus.PENDING]
            lineage = ctx.lineage()
            built = self.snapshots.state_at(ctx.id, lineage)
            first_seq = ctx.event_seq + 1
            decisions, batch, state = judge(
                pending,
                built.state,
                self.policy,
                head_turn_id=ctx.head.id if ctx.head else None,
                scene_id=scene_id,
                first_seq=first_seq,
            )
            branch_id, fork = self._write_branch(ctx, writes) if batch.events else (ctx.campaign.active_branch_id, {})
            if batch.events:
                writes.after_state = state
            decision_writes(ctx.id, writes, pending, decisions)  # first: canon links to the resolutions it creates
            write_canon(
                ctx,
                writes,
                batch,
                branch_id=branch_id,
                depth=ctx.head_depth,
                first_seq=first_seq,
                scene_id=scene_id,
                version=ctx.version + 1,
            )
            if end:
                outcomes = [*scene.canonical_outcomes, *scene_outcomes(pending, decisions)]
                props = {
                    "status": SceneStatus.COMPLETED.value,
                    "ended_at": utc_now().isoformat(),
                    "canonical_outcomes": outcomes,
                }
                if ctx.head is not None:
                    props["end_turn_id"] = ctx.head.id
                if summary:
                    props["summary"] = summary
                writes.add("MATCH (s:Scene {uid: $s}) SET s += $props", s=scene_id, props=props)
            report = GateReport(
                scene_id=scene_id,
                campaign_id=ctx.id,
                branch_id=branch_id,
                forked=bool(fork),
                decisions=decisions,
                skipped=skipped,
                events_committed=len(batch.events),
                version=ctx.version + 1,
            )
            after.update(
                lineage=ctx.lineage(branch_id),
                state=state,
                replayed=built.replayed + len(batch.events),
                turn=ctx.head.id if ctx.head else None,
                events=len(batch.events),
            )
            return report, {**fork, "event_seq": ctx.event_seq + len(batch.events)}

        report = self._mutate(campaign_id, "gate", build)
        if after.get("events"):
            self.snapshots.maybe_take(
                campaign_id, after["lineage"], after["state"], turn_id=after["turn"], replayed=after["replayed"]
            )
        return report

    # ==========================================================================================
    # retcons

    def retcon(
        self,
        campaign_id: str,
        fact_id: str,
        *,
        reason: str,
        value: Any = None,
        object_entity_id: str | None = None,
        authority: Authority = Authority.GM,
        evidence: Evidence | None = None,
    ) -> str | None:
        """Declare a fact never was true on this branch; with a new value or object, one that REPLACES it.

        Both stay in the graph: the old fact becomes retconned (superseded), the new one points at it.
        A world-state checkpoint (BEFORE_OOC_MUTATION) is taken first. Returns the new fact's id.
        """
        ctx = self.story.context(campaign_id)
        if ctx.head is not None:
            self.create_checkpoint(
                campaign_id, f"before retcon of {fact_id}", kind=WorldStateCheckpointKind.BEFORE_OOC_MUTATION
            )

        def build(ctx: CampaignContext, writes: Writes) -> tuple[str | None, dict[str, Any]]:
            state = self.snapshots.state_at(ctx.id, ctx.lineage()).state
            old = state.facts.get(fact_id)
            if old is None:
                raise NotFound("story", f"no fact {fact_id!r} on this branch of campaign {ctx.id!r}")
            if AUTHORITY_RANK[old["authority"]] > AUTHORITY_RANK[authority.value] and authority is not Authority.GM:
                raise InvalidRequest(
                    "story", f"fact {fact_id!r} has {old['authority']} authority; {authority.value} cannot retcon it"
                )
            turn = ctx.head.id if ctx.head else None
            new_id_ = None
            events: list[BaseStateEvent] = []
            if value is not None or object_entity_id is not None:
                added = FactAdded(
                    turn_id=turn,
                    subject_entity_id=old["subject"],
                    predicate=old["predicate"],
                    value=value,
                    object_entity_id=object_entity_id,
                    authority=authority,
                )
                new_id_ = added.fact_id
                events.append(added.validated_copy(replaces=fact_id))
                events.append(
                    FactInvalidated(
                        turn_id=turn,
                        fact_id=fact_id,
                        invalidation=FactInvalidation.RETCONNED,
                        reason=reason,
                        superseded_by=new_id_,
                    )
                )
            else:
                events.append(
                    FactInvalidated(
                        turn_id=turn, fact_id=fact_id, invalidation=FactInvalidation.RETCONNED, reason=reason
                    )
                )
            branch_id, fork = self._write_branch(ctx, writes)
            props = self._commit_events(
                ctx,
                writes,
                events,
                authority=authority,
                branch_id=branch_id,
                scene_id=None,
                what="the retcon",
                evidence=evidence,
            )
            return new_id_, {**fork, **props}

        return self._mutate(campaign_id, "retcon", build)

    def dependents(self, campaign_id: str, fact_id: str) -> list[str]:
        """Facts on the head's line that follow (transitively) from ``fact_id``."""
        state = self.world_state(campaign_id)
        if fact_id not in state.facts:
            raise NotFound("story", f"no fact {fact_id!r} on this branch of campaign {campaign_id!r}")
        found: list[str] = []
        frontier = [fact_id]
        while frontier:
            current = frontier.pop()
            for fid, fact in sorted(state.facts.items()):
                if current in fact["depends_on"] and fid not in found:
                    found.append(fid)
                    frontier.append(fid)
        return found

    # ==========================================================================================
    # memories and summaries

    def add_memory(self, memory: Memory) -> Memory:
        """Record what an entity remembers, anchored to the turn that produced it."""
        turn = self.story.turn(memory.anchor_turn_id)
        if turn.campaign_id != memory.campaign_id:
            raise InvalidRequest("story", f"turn {turn.id!r} is not in campaign {memory.campaign_id!r}")
        state = self.world_state(memory.campaign_id, turn_id=turn.id)
        observer = state.entities.get(memory.observer_entity_id)
        if observer is None:
            raise NotFound("story", f"observer {memory.observer_entity_id!r} does not exist at turn {turn.id!r}")
        if observer["status"] == EntityStatus.DESTROYED.value:
            raise InvalidRequest("story", f"observer {memory.observer_entity_id!r} is destroyed")
        self._anchored("Memory", memory, turn)
        return memory

    def add_summary(self, summary: Summary) -> Summary:
        """Record a summary of the story up to its anchor turn."""
        turn = self.story.turn(summary.anchor_turn_id)
        if turn.campaign_id != summary.campaign_id:
            raise InvalidRequest("story", f"turn {turn.id!r} is not in campaign {summary.campaign_id!r}")
        self._anchored("Summary", summary, turn)
        return summary

    def _anchored(self, label: str, record: Memory | Summary, turn: Turn) -> None:
        self.graph.run(
            f"MATCH (t:Turn {{uid: $t}}) CREATE (m:{label}) SET m = $props CREATE (m)-[:AT_TURN]->(t)",
            {
                "t": turn.id,
                "props": node_props(record, anchor_turn_uid=turn.id, branch_id=turn.branch_id, depth=turn.depth),
            },
        )

    def memories(
        self, campaign_id: str, *, observer_entity_id: str | None = None, turn_id: str | None = None
    ) -> list[Memory]:
        """Memories whose anchor turn is an ancestor of the head (or of ``turn_id``): the branch's past only."""
        rows = self._visible("Memory", campaign_id, turn_id)
        memories = [from_props(Memory, r, key="id") for r in rows]
        if observer_entity_id is not None:
            memories = [m for m in memories if m.observer_entity_id == observer_entity_id]
        return memories

    def summaries(self, campaign_id: str, *, turn_id: str | None = None) -> list[Summary]:
        return [from_props(Summary, r, key="id") for r in self._visible("Summary", campaign_id, turn_id)]

    def _visible(self, label: str, campaign_id: str, turn_id: str | None) -> list[dict[str, Any]]:
        ctx = self.story.context(campaign_id)
        lineage = self._lineage_for(ctx, turn_id)
        rows = self.story.nodes(
            label,
            "n.campaign_id = $c AND n.branch_id IN $b",
            "n.depth, n.created_at",
            c=campaign_id,
            b=lineage.branch_ids,
        )
        return [r for r in rows if lineage.contains(r["branch_id"], int(r["depth"]))]

    # ==========================================================================================
    # provenance and presentation

    def record_prompt(self, turn_id: str, prompt_text: str, snapshot: PromptSnapshot) -> PromptSnapshot:
        """Keep exactly what was sent to the model for a turn (text content-addressed in the blob store)."""
        turn = self.story.turn(turn_id)
        if snapshot.turn_id != turn_id:
            raise InvalidRequest("story", f"the prompt snapshot is for turn {snapshot.turn_id!r}, not {turn_id!r}")
        info = self.blobs.put_content_addressed(prompt_text.encode(), prefix="prompts", content_type="text/plain")
        if snapshot.blob_key is None:
            snapshot = snapshot.validated_copy(blob_key=info.key)
        self.graph.run(
            "MATCH (t:Turn {uid: $t}) CREATE (p:PromptSnapshot) SET p = $props CREATE (p)-[:FOR_TURN]->(t)",
            {"t": turn_id, "props": node_props(snapshot, campaign_id=turn.campaign_id, turn_uid=turn_id)},
        )
        return snapshot

    def record_retrieval(self, record: RetrievalRecord) -> RetrievalRecord:
        """Keep what retrieval returned for a turn, and link the turn to the passages it used."""
        turn = self.story.turn(record.turn_id)
        info = self.blobs.put_content_addressed(
            record.model_dump_json().encode(), prefix="retrievals", content_type="application/json"
        )
        used = [h for h in record.hits if h.used_in_prompt]
        with self.graph.transaction() as tx:
            tx.run(
                "MATCH (t:Turn {uid: $t}) CREATE (r:Retrieval) SET r = $props CREATE (r)-[:FOR_TURN]->(t)",
                {
                    "t": turn.id,
                    "props": {
                        "uid": record.id,
                        "campaign_id": turn.campaign_id,
                        "turn_uid": turn.id,
                        "query": record.query,
                        "error": record.error,
                        "blob_key": info.key,
                        "created_at": record.created_at.isoformat(),
                    },
                },
            )
            if used:
                tx.run(
                    "UNWIND $rows AS h MATCH (t:Turn {uid: $t}), (c:Chunk {uid: h.chunk}) "
                    "MERGE (t)-[r:INFORMED_BY]->(c) SET r.rank = h.rank, r.score = h.score, r.retrieval = $rid",
                    {
                        "t": turn.id,
                        "rid": record.id,
                        "rows": [
                            {
                                "chunk": h.chunk_id,
                                "rank": h.rank,
                                "score": h.rerank_score if h.rerank_score is not None else h.fused_score,
                            }
                            for h in used
                        ],
                    },
                )
        return record

    def provenance(self, turn_id: str) -> TurnProvenance:
        """Why the narrator knew what it knew at a turn: its prompt, retrievals and the passages used."""
        turn = self.story.turn(turn_id)
        prompts = self.story.nodes("PromptSnapshot", "n.turn_uid = $t", "n.created_at", t=turn_id)
        prompt = from_props(PromptSnapshot, prompts[-1], key="id") if prompts else None
        text = self.blobs.get(prompt.blob_key).decode() if prompt and prompt.blob_key else None
        retrievals = [
            RetrievalRecord.model_validate_json(self.blobs.get(r["blob_key"]))
            for r in self.story.nodes("Retrieval", "n.turn_uid = $t", "n.created_at", t=turn_id)
        ]
        rows = self.graph.run(
            "MATCH (t:Turn {uid: $t})-[r:INFORMED_BY]->(c:Chunk) OPTIONAL MATCH (i:Item {uid: c.item_uid}) "
            "RETURN c.uid AS chunk, r.rank AS rank, r.score AS score, c.item_uid AS item, i.title AS title, "
            "c.page_start AS ps, c.page_end AS pe, c.heading_path AS hp ORDER BY r.rank",
            {"t": turn_id},
        )
        passages = [
            ProvenancePassage(
                chunk_id=r["chunk"],
                rank=r["rank"],
                score=r["score"],
                item_uid=r["item"],
                title=r["title"],
                page_start=r["ps"],
                page_end=r["pe"],
                heading_path=r["hp"] or [],
            )
            for r in rows
        ]
        events = self.graph.run(
            "MATCH (e:StateEvent {turn_uid: $t}) RETURN e.uid AS uid ORDER BY e.seq", {"t": turn_id}
        )
        return TurnProvenance(
            turn_id=turn.id,
            prompt=prompt,
            prompt_text=text,
            retrievals=retrievals,
            passages=passages,
            canon_event_ids=[r["uid"] for r in events],
        )

    def note_extraction(self, turn_id: str, notes: Sequence[str]) -> None:
        """Record why parts of a turn's extracted proposals were repaired or dropped."""
        self.story.turn(turn_id)
        self.graph.run(
            "MATCH (t:Turn {uid: $t}) SET t.extraction_notes = coalesce(t.extraction_notes, []) + $n",
            {"t": turn_id, "n": [str(n)[:500] for n in notes]},
        )

    def extraction_notes(self, turn_id: str) -> list[str]:
        return list(self.story.node("Turn", turn_id).get("extraction_notes") or [])

    def set_presentation(self, presentation: TurnPresentation) -> TurnPresentation:
        """Store how a turn is shown (narration, speech, rolls, media) apart from its truth."""
        self.story.turn(presentation.turn_id)
        info = self.blobs.put_content_addressed(
            presentation.model_dump_json().encode(), prefix="presentations", content_type="application/json"
        )
        self.graph.run(
            "MATCH (t:Turn {uid: $t}) SET t.presentation_key = $k", {"t": presentation.turn_id, "k": info.key}
        )
        return presentation

    def presentation(self, turn_id: str) -> TurnPresentation | None:
        key = self.story.node("Turn", turn_id).get("presentation_key")
        return TurnPresentation.model_validate_json(self.blobs.get(key)) if key else None

    def attach_media(self, scene_id: str, asset: MediaAsset) -> MediaAsset:
        """Attach media metadata to a scene. Media illustrates; it never becomes canon."""
        scene = self.get_scene(scene_id)
        self.graph.run(
            "MATCH (s:Scene {uid: $s}) MERGE (m:MediaAsset {uid: $uid}) SET m += $props MERGE (s)-[:HAS_MEDIA]->(m)",
            {"s": scene_id, "uid": asset.id, "props": node_props(asset, campaign_id=scene.campaign_id)},
        )
        return asset

    # ==========================================================================================
    # export and import

    def export_campaign(
        self, campaign_id: str, dest: Path | IO[bytes], *, include_knowledge: bool = False
    ) -> BundleSummary:
        """Write a campaign bundle (see :mod:`story.bundle`); the campaign's writers wait meanwhile."""
        with self._lock(campaign_id):
            return export_campaign(self.graph, self.blobs, campaign_id, dest, include_knowledge=include_knowledge)

    def import_campaign(self, source: Path | IO[bytes] | bytes) -> Campaign:
        """Import a campaign bundle; refused whole (nothing written) if corrupt or already here."""
        summary = import_campaign(self.graph, self.blobs, source)
        return self.get_campaign(summary.campaign_id)

    def scene_media(self, scene_id: str) -> list[MediaAsset]:
        rows = self.graph.run(
            "MATCH (s:Scene {uid: $s})-[:HAS_MEDIA]->(m:MediaAsset) RETURN m ORDER BY m.created_at", {"s": scene_id}
        )
        return [from_props(MediaAsset, r["m"], key="id") for r in rows]


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "proposal"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
