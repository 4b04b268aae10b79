"""Worlds and their axioms, campaigns, branches and checkpoints: the frame a story is told in.

A campaign's story is a tree of turns. Each branch is a straight line of them (:mod:`story.lineage`);
a write behind the tip of the active branch forks a new one (:func:`write_branch`), so switching
branches, restoring a checkpoint or undoing only move pointers, and nothing is deleted but what
:meth:`Campaigns.delete_branch` is explicitly asked to delete.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from schemas.campaign import LibraryPin
from schemas.common import Authority, new_id
from schemas.imports import TranscriptImportState
from schemas.model_roles import ModelRoles
from schemas.search import SearchFilters
from schemas.story import (
    Axiom,
    Branch,
    BranchDisposition,
    Campaign,
    Evidence,
    StoryProfile,
    World,
)
from stores.catalog import from_props
from story import cypher
from story.bundle import BundleSummary, export_campaign, import_campaign
from story.core import SKIP, StoryCore
from story.errors import StoryInvalid, StoryNotFound, validation_message
from story.graph import CampaignContext, Writes, node_props
from story.library_pins import check_pins, knowledge_filters
from story.lineage import BranchLine

#: The records anchored on a branch that keep it from being deleted: canon is never deleted.
_HOLDS_A_BRANCH = ("StateEvent", "Checkpoint", "Memory", "Summary", "Scene", "SceneNote")

#: The snapshot kind a checkpoint kind takes (any other: an interval snapshot).


class Campaigns:
    """Worlds, axioms, campaigns, branches, checkpoints, and a campaign's export and import."""

    def __init__(self, core: StoryCore) -> None:
        self.core = core
        self.graph = core.graph
        self.story = core.story

    # -- worlds -----------------------------------------------------------------------------------

    def create_world(self, name: str, *, description: str | None = None, axioms: Sequence[str] = ()) -> World:
        """A new world (universe), optionally with its axioms."""
        world = World(name=name, description=description)
        self.graph.run(*cypher.create_world(node_props(world)))
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
        self.graph.run(*cypher.create_axiom(world_id, node_props(axiom, world_uid=world_id)))
        return axiom

    def axioms(self, world_id: str) -> list[Axiom]:
        return [from_props(Axiom, r, key="id") for r in self.story.nodes(cypher.axioms_of(world_id))]

    # -- campaigns --------------------------------------------------------------------------------

    def create_campaign(
        self,
        world_id: str,
        name: str,
        profile: StoryProfile,
        *,
        narrator_rules: Sequence[str] = (),
        library_pins: Sequence[LibraryPin] = (),
        new_world: World | None = None,
        transcript_import: TranscriptImportState | None = None,
        model_roles: ModelRoles | None = None,
    ) -> Campaign:
        """A new campaign in a world, with its main branch and no turns yet.

        ``new_world`` (whose id is ``world_id``) is created with it, in the same transaction; a campaign
        made by a transcript import is born with its ``transcript_import`` state, so a crash at any later
        moment leaves it marked unfinished (:mod:`story.importing`).

        Raises:
            StoryNotFound: no such world, or a pin names a library or item the catalog does not hold.
        """
        if new_world is None:
            self.get_world(world_id)
        elif new_world.id != world_id:
            raise StoryInvalid(f"the new world is {new_world.id!r}, not {world_id!r}")
        check_pins(self.graph, library_pins)
        campaign_id = new_id("camp")
        branch = Branch(campaign_id=campaign_id, name="main")
        try:
            campaign = Campaign(
                id=campaign_id,
                world_id=world_id,
                name=name,
                profile=profile,
                narrator_rules=list(narrator_rules),
                library_pins=list(library_pins),
                active_branch_id=branch.id,
                transcript_import=transcript_import,
                model_roles=model_roles if model_roles and model_roles.named() else None,
            )
        except ValidationError as exc:
            raise StoryInvalid(validation_message(exc)) from None
        props = node_props(campaign, campaign_id=campaign_id, world_uid=world_id, version=0, event_seq=0)
        props.pop("library_pins", None)  # kept as library_pins_json only: an empty list stored bare would shadow it
        props.update({k: v for k, v in _pins_props(campaign.library_pins).items() if v is not None})
        with self.graph.transaction() as tx:
            if new_world is not None:
                tx.run(*cypher.create_world(node_props(new_world)))
            tx.run(*cypher.create_campaign(world_id, props))
            tx.run(*cypher.create_branch(campaign_id, node_props(branch, fork_depth=-1, fork_seq=0, tip_depth=-1)))
        return campaign

    def get_campaign(self, campaign_id: str) -> Campaign:
        return self.story.context(campaign_id).campaign

    def list_campaigns(self, world_id: str | None = None) -> list[Campaign]:
        """The campaigns (of a world); an unfinished transcript import shows its ``transcript_import``."""
        return [from_props(Campaign, r, key="id") for r in self.story.nodes(cypher.campaigns(world_id))]

    def set_library_pins(self, campaign_id: str, pins: Sequence[LibraryPin]) -> Campaign:
        """Replace the libraries and items a campaign draws on (none: the whole library again).

        A versioned change of the campaign, like any other: the next turn searches the new pins and
        the next gate judges evidence by them.

        Raises:
            StoryNotFound: no such campaign, or a pin names a library or item the catalog does not hold.
            StoryInvalid: a library or item is pinned twice.
        """
        check_pins(self.graph, pins)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            campaign = ctx.campaign.validated_copy(library_pins=list(pins))
            return campaign, _pins_props(campaign.library_pins)

        return self.core.mutate(campaign_id, "library", build)

    def set_model_roles(self, campaign_id: str, roles: ModelRoles) -> Campaign:
        """Name the engines that play the campaign's seats (a seat unset: the deployment's engine for it).

        A versioned change of the campaign: the next turn and the next scene end use the new roles. Which
        names exist is the server's to check (the story knows no engines).
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            named = roles.named()
            campaign = ctx.campaign.validated_copy(model_roles=roles if named else None)
            return campaign, {"model_roles_json": json.dumps(named, sort_keys=True) if named else None}

        return self.core.mutate(campaign_id, "model_roles", build)

    def knowledge_filters(self, campaign_id: str) -> SearchFilters:
        """The filters that keep a campaign's knowledge search to what it draws on (see :mod:`story.library_pins`)."""
        return knowledge_filters(self.graph, self.get_campaign(campaign_id).library_pins)

    def archive_campaign(self, campaign_id: str, archived: bool = True) -> None:
        """Make a campaign read-only (or writable again). Nothing is deleted."""
        self.core.mutate(campaign_id, "archive", lambda ctx, w: (None, {"archived": archived}), allow_archived=True)

    def export_campaign(
        self, campaign_id: str, dest: Path | IO[bytes], *, include_knowledge: bool = False
    ) -> BundleSummary:
        """Write a campaign bundle (see :mod:`story.bundle`); the campaign's writers wait meanwhile."""
        with self.core.lock(campaign_id):
            return export_campaign(self.graph, self.core.blobs, campaign_id, dest, include_knowledge=include_knowledge)

    def import_campaign(self, source: Path | IO[bytes] | bytes) -> Campaign:
        """Import a campaign bundle; refused whole (nothing written) if corrupt or already here."""
        summary = import_campaign(self.graph, self.core.blobs, source)
        return self.get_campaign(summary.campaign_id)

    # -- branches ---------------------------------------------------------------------------------

    def branches(self, campaign_id: str, *, include_archived: bool = False) -> list[Branch]:
        rows = self.story.nodes(cypher.branches_of(campaign_id))
        return [from_props(Branch, r, key="id") for r in rows if include_archived or not r.get("archived")]

    def create_branch(self, campaign_id: str, from_turn_id: str, *, name: str | None = None) -> Branch:
        """Branch off at an earlier turn: the new branch becomes active, the original future stays."""
        turn = self.story.turn(from_turn_id)
        if turn.campaign_id != campaign_id:
            raise StoryInvalid(f"turn {from_turn_id!r} is not in campaign {campaign_id!r}")

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Branch, dict[str, Any]]:
            branch = Branch(
                campaign_id=ctx.id,
                name=name or f"branch-{len(ctx.branches) + 1}",
                parent_branch_id=turn.branch_id,
                fork_turn_id=turn.id,
            )
            queue_branch(ctx, writes, branch, fork_depth=turn.depth, previous=ctx.campaign.active_branch_id)
            writes.moves_head = True
            return branch, {"active_branch_id": branch.id, "head_turn_id": turn.id}

        return self.core.mutate(campaign_id, "branch", build)

    def switch_branch(self, campaign_id: str, branch_id: str) -> Campaign:
        """Make another branch active, with the head at its tip. The branch left behind is retained."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            branch = ctx.branches.get(branch_id)
            if branch is None:
                raise StoryNotFound(f"no branch {branch_id!r} in campaign {campaign_id!r}")
            head = branch.tip_turn_id or branch.fork_turn_id
            previous = ctx.campaign.active_branch_id
            if previous != branch_id:
                writes.add(*cypher.retain_branch(previous))
                writes.add(*cypher.switch_to_branch(branch_id))
            writes.moves_head = True
            campaign = ctx.campaign.validated_copy(active_branch_id=branch_id, head_turn_id=head)
            return campaign, {"active_branch_id": branch_id, "head_turn_id": head}

        return self.core.mutate(campaign_id, "switch", build)

    def set_disposition(self, campaign_id: str, branch_id: str, disposition: BranchDisposition) -> Branch:
        """Mark a branch that is not being played as retained (kept) or disposable (may be deleted)."""
        if disposition is BranchDisposition.ACTIVE:
            raise StoryInvalid("switch to a branch to make it active")

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Branch, dict[str, Any]]:
            branch = branch_of(ctx, branch_id)
            if branch_id == ctx.campaign.active_branch_id:
                raise StoryInvalid(f"branch {branch_id!r} is being played; switch away from it first")
            writes.add(*cypher.set_disposition(branch_id, disposition.value))
            return branch.validated_copy(disposition=disposition), {}

        return self.core.mutate(campaign_id, "disposition", build)

    def archive_branch(self, campaign_id: str, branch_id: str, archived: bool = True) -> None:
        """Hide a branch from the default listing (or show it again). Nothing is deleted."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[None, dict[str, Any]]:
            branch_of(ctx, branch_id)
            if archived and branch_id == ctx.campaign.active_branch_id:
                raise StoryInvalid(f"branch {branch_id!r} is being played; switch away from it first")
            writes.add(*cypher.archive_branch(branch_id, archived))
            return None, {}

        self.core.mutate(campaign_id, "archive_branch", build)

    def delete_branch(self, campaign_id: str, branch_id: str) -> int:
        """Delete a disposable branch's own turns and takes. Refused while anything depends on them.

        Canon is never deleted: a branch with committed events, child branches, checkpoints,
        memories or summaries anchored on it cannot be deleted (archive it instead).

        Returns:
            How many turns were deleted.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[int, dict[str, Any]]:
            branch = branch_of(ctx, branch_id)
            if branch.disposition is not BranchDisposition.DISPOSABLE:
                raise StoryInvalid(f"branch {branch_id!r} is {branch.disposition.value}; mark it disposable first")
            if any(b.parent_branch_id == branch_id for b in ctx.branches.values()):
                raise StoryInvalid(f"branch {branch_id!r} has branches forked from it")
            for label in _HOLDS_A_BRANCH:
                n = self.graph.run(*cypher.count_on_branch(label, ctx.id, branch_id))[0]["n"]
                if n:
                    raise StoryInvalid(f"branch {branch_id!r} holds {n} {label} record(s); canon is never deleted")
            turns = self.graph.run(*cypher.count_turns_of_branch(branch_id))[0]["n"]
            writes.extend(cypher.delete_branch(branch_id))
            return int(turns), {}

        return self.core.mutate(campaign_id, "delete_branch", build)

    # -- checkpoints ------------------------------------------------------------------------------

    def prune_checkpoints(self, campaign_id: str, *, keep_turns: int = 20) -> int:
        """Delete automatic checkpoints more than ``keep_turns`` behind the head. Named ones stay.

        Returns:
            How many were pruned.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[int, dict[str, Any]]:
            rows = self.story.nodes(cypher.automatic_checkpoints(ctx.id))
            old = [r["uid"] for r in rows if int(r.get("depth", 0)) < ctx.head_depth - keep_turns]
            if not old:
                return 0, SKIP
            writes.add(*cypher.delete_checkpoints(old))
            return len(old), {}

        return self.core.mutate(campaign_id, "prune", build)


# -- forking -----------------------------------------------------------------------------------------


def _pins_props(pins: Sequence[LibraryPin]) -> dict[str, Any]:
    """The campaign property holding its pins (None removes it: no pins)."""
    data = [p.model_dump(mode="json", exclude_none=True) for p in pins]
    return {"library_pins_json": json.dumps(data, sort_keys=True) if data else None}


def write_branch(ctx: CampaignContext, writes: Writes) -> tuple[str, dict[str, Any]]:
    """The branch a write at the head goes on, forking one when the head is behind the line's end.

    The new branch continues the head's position: it forks from the active branch (even where the head is
    that branch's fork turn, so what the branch committed there, a scene opened before its first turn, stays).

    Returns:
        The branch, and the campaign properties the fork changes (none when there is no fork).
    """
    active = ctx.campaign.active_branch_id
    if ctx.line_end(active) <= ctx.head_depth:
        return active, {}
    old = ctx.branches[active]
    head = ctx.head
    branch = Branch(
        campaign_id=ctx.id,
        name=f"{old.name}.{sum(1 for b in ctx.branches.values() if b.parent_branch_id == old.id) + 1}",
        parent_branch_id=active if head else None,  # before the first turn: a new root
        fork_turn_id=head.id if head else None,
    )
    queue_branch(ctx, writes, branch, fork_depth=ctx.head_depth, previous=active)
    return branch.id, {"active_branch_id": branch.id}


def queue_branch(
    ctx: CampaignContext, writes: Writes, branch: Branch, *, fork_depth: int, previous: str, fork_seq: int | None = None
) -> None:
    """Queue a new active branch, retaining the previous one, and update ``ctx`` to match.

    ``fork_seq``: the commit sequence number its ancestors are seen up to (default: now; a restore gives
    its checkpoint's, so canon committed since stays out of the new branch).
    """
    fork_seq = ctx.event_seq if fork_seq is None else fork_seq
    props = node_props(branch, fork_depth=fork_depth, fork_seq=fork_seq, tip_depth=fork_depth)
    writes.add(*cypher.create_branch(ctx.id, props))
    if branch.fork_turn_id is not None:
        writes.add(*cypher.link_nodes("Branch", "FORKED_AT", "Turn", [(branch.id, branch.fork_turn_id)]))
    writes.add(*cypher.retain_branch(previous))
    ctx.branches[branch.id] = branch
    ctx.lines[branch.id] = BranchLine(branch.id, branch.parent_branch_id, branch.fork_turn_id, fork_depth, fork_seq)
    ctx.tip_depth[branch.id] = fork_depth
    ctx.campaign = ctx.campaign.validated_copy(active_branch_id=branch.id)


def branch_of(ctx: CampaignContext, branch_id: str) -> Branch:
    branch = ctx.branches.get(branch_id)
    if branch is None:
        raise StoryNotFound(f"no branch {branch_id!r} in campaign {ctx.id!r}")
    return branch
