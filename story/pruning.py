"""Take and version dispositions, archiving, and pruning what the GM let go once the story has moved on.

Like a branch (:meth:`story.campaigns.Campaigns.set_disposition`), a take of a turn and an archived turn version
get a disposition from the GM: ``retained`` (kept for good) or ``disposable`` (may be removed). The selected take
is the one being told: it is never disposable and never archived (select another first). Archiving a take sets it
aside (kept, listed as archived).

:meth:`Pruning.prune` removes what is disposable once the story has moved on: more than ``keep_turns`` turns
behind the head (the setting ``LOREKEEPER_PRUNE_AFTER_TURNS`` unless the call says). It never removes canon nor
the take a turn tells:

* a disposable take that is not selected, with the versions that archive it (a retained version keeps it, and
  so does a version whose proposals became canon);
* a disposable version (its take stays unless it is disposable too);
* a disposable branch that is not played, through :meth:`story.campaigns.Campaigns.delete_branch`, which refuses
  a branch holding canon, scenes, memories, summaries or notes (kept, with why).

A prune survives a crash. It is recorded first: one transaction guarded by the campaign's version (a take
selected meanwhile is never removed) decides what goes, removes the takes and versions and writes a ``pending``
``PruneRecord`` naming the branches it will remove. The branches then go one transaction each, leaves first (a
read never meets a half-deleted branch), and the record is marked ``done`` with what it removed and kept (event
``desk_pruned``). A prune left pending is finished by the next start (:func:`story.catch_up.catch_up`) or the
next prune (:meth:`Pruning.finish`, event ``desk_prune_finished``): a planned branch already gone counts as
removed, so it ends as an uninterrupted prune would.
"""

from __future__ import annotations

from typing import Any

import structlog

from schemas.campaign import BranchDisposition, Take, Turn, TurnVersion
from schemas.desk import PruneRecord, PruneStatus
from stores.catalog import from_props
from story import cypher
from story.campaigns import Campaigns
from story.core import SKIP, StoryCore
from story.cypher import Statement
from story.errors import StoryInvalid, StoryNotFound
from story.graph import CampaignContext, Writes, node_props

log = structlog.get_logger(__name__)

DEFAULT_PRUNE_AFTER = 20
"""Turns behind the head within which nothing is pruned, when neither the call nor the settings say."""


def _disposable(label: str, campaign_id: str) -> Statement:
    return (
        f"MATCH (n:{label}) WHERE n.campaign_id = $c AND n.disposition = 'disposable' RETURN n",
        {"c": campaign_id},
    )


def _versions_of_takes(take_ids: list[str]) -> Statement:
    return "MATCH (n:TurnVersion) WHERE n.take_id IN $k RETURN n", {"k": take_ids}


def _accepted(ids: list[str]) -> Statement:
    return "MATCH (p:ProposedChange) WHERE p.uid IN $ids AND p.status = 'accepted' RETURN count(p) AS n", {"ids": ids}


def _set(label: str, uid: str, props: dict[str, Any]) -> Statement:
    return f"MATCH (n:{label} {{uid: $u}}) SET n += $p RETURN n", {"u": uid, "p": props}


def _delete(label: str, ids: list[str]) -> Statement:
    return f"MATCH (n:{label}) WHERE n.uid IN $ids DETACH DELETE n", {"ids": ids}


def _generation(ctx: CampaignContext, branch_id: str) -> int:
    """How many branches a branch descends from (a child is pruned before its parent)."""
    n, parent = 0, ctx.branches[branch_id].parent_branch_id
    while parent is not None and parent in ctx.branches:
        n, parent = n + 1, ctx.branches[parent].parent_branch_id
    return n


class Pruning:
    """Dispositions of takes and versions, archiving takes, and pruning (``campaigns`` deletes branches)."""

    def __init__(self, core: StoryCore, campaigns: Campaigns) -> None:
        self.core = core
        self.story = core.story
        self.campaigns = campaigns

    # -- dispositions -----------------------------------------------------------------------------------

    def set_take(
        self,
        campaign_id: str,
        turn_id: str,
        take_id: str,
        *,
        disposition: BranchDisposition | None = None,
        archived: bool | None = None,
    ) -> Take:
        """Mark a take retained or disposable, archive it or bring it back.

        Raises:
            StoryNotFound: no such take of the turn in the campaign.
            StoryInvalid: ``active`` asked (select the take instead), nothing asked, or the selected take made
                disposable or archived (select another take first).
        """
        if disposition is None and archived is None:
            raise StoryInvalid("give a disposition or archived")
        if disposition is BranchDisposition.ACTIVE:
            raise StoryInvalid("select a take to make it the one told")
        take = self._take(campaign_id, turn_id, take_id)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Take, dict[str, Any]]:
            current = self.story.turn(turn_id)
            letting_go = disposition is BranchDisposition.DISPOSABLE or archived
            if letting_go and current.selected_take_id == take_id:
                raise StoryInvalid(f"take {take_id!r} is the one told: select another take first")
            changes: dict[str, Any] = {}
            if disposition is not None:
                changes["disposition"] = disposition
            if archived is not None:
                changes["archived"] = archived
            changed = take.validated_copy(**changes)
            props = {k: v for k, v in node_props(changed).items() if k in ("disposition", "archived")}
            writes.add(*_set("Take", take_id, props))
            return changed, {}

        changed = self.core.mutate(campaign_id, "take_disposition", build)
        log.info("take_disposed", campaign_id=campaign_id, take_id=take_id, disposition=disposition, archived=archived)
        return changed

    def set_version(
        self, campaign_id: str, turn_id: str, version_id: str, disposition: BranchDisposition
    ) -> TurnVersion:
        """Mark an archived version retained or disposable. Raises StoryInvalid for ``active``, StoryNotFound."""
        if disposition is BranchDisposition.ACTIVE:
            raise StoryInvalid("revert to a version to tell it again")
        rows = self.core.graph.run(*cypher.node("TurnVersion", version_id))
        if not rows or rows[0]["n"].get("campaign_id") != campaign_id or rows[0]["n"].get("turn_id") != turn_id:
            raise StoryNotFound(f"no version {version_id!r} of turn {turn_id!r}")
        version = from_props(TurnVersion, rows[0]["n"], key="id").validated_copy(disposition=disposition)
        self.core.graph.run(*_set("TurnVersion", version_id, {"disposition": disposition.value}))
        log.info("version_disposed", campaign_id=campaign_id, version_id=version_id, disposition=disposition.value)
        return version

    def _take(self, campaign_id: str, turn_id: str, take_id: str) -> Take:
        missing = StoryNotFound(f"no take {take_id!r} of turn {turn_id!r}")
        rows = self.core.graph.run(*cypher.node("Take", take_id))
        if not rows or rows[0]["n"].get("turn_uid") != turn_id or rows[0]["n"].get("campaign_id") != campaign_id:
            raise missing
        return from_props(Take, rows[0]["n"], key="id")

    # -- pruning ----------------------------------------------------------------------------------------

    def prune(self, campaign_id: str, *, keep_turns: int = DEFAULT_PRUNE_AFTER, dry_run: bool = False) -> PruneRecord:
        """Remove the disposable takes, versions and branches the story has moved on from (see the module).

        A prune a crash cut short is finished first (:meth:`finish`).

        Returns:
            What was removed (``dry_run``: what would be) and what was kept, with why.
        """
        if keep_turns < 0:
            raise StoryInvalid("keep_turns is at least 0")
        if not dry_run:
            self.finish(campaign_id)
        record = self._decide(campaign_id, keep_turns, dry_run)
        if dry_run:
            record.branches = list(record.branches_planned)
        else:
            record = self._roll_forward(record)
        log.info(
            "desk_pruned",
            campaign_id=campaign_id,
            dry_run=dry_run,
            keep_turns=keep_turns,
            takes=len(record.takes),
            versions=len(record.versions),
            branches=len(record.branches),
            kept=len(record.kept),
        )
        return record

    def finish(self, campaign_id: str | None = None) -> list[PruneRecord]:
        """Finish the prunes a crash (or a failed store) left pending, of one campaign or of all.

        Their takes and versions went with their record; what is left is removing their planned branches, which is
        idempotent (a branch already gone was removed by the prune before it stopped).

        Returns:
            The prunes finished.
        """
        query = "MATCH (n:PruneRecord) WHERE n.status = $s"
        params: dict[str, Any] = {"s": PruneStatus.PENDING.value}
        if campaign_id is not None:
            query, params = query + " AND n.campaign_id = $c", params | {"c": campaign_id}
        pending = [from_props(PruneRecord, r, key="id") for r in self.story.nodes((query + " RETURN n", params))]
        finished = [self._roll_forward(record) for record in sorted(pending, key=lambda r: r.created_at)]
        for record in finished:
            log.info("desk_prune_finished", campaign_id=record.campaign_id, prune_id=record.id)
        return finished

    def _decide(self, campaign_id: str, keep_turns: int, dry_run: bool) -> PruneRecord:
        """Choose what goes, and (unless dry) record it as a pending prune in the transaction that removes its takes
        and versions, guarded by the campaign's version (a take selected meanwhile is never removed)."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[PruneRecord, dict[str, Any]]:
            record = PruneRecord(
                campaign_id=campaign_id,
                keep_turns=keep_turns,
                head_turn_id=ctx.head.id if ctx.head else None,
                dry_run=dry_run,
                status=PruneStatus.DONE if dry_run else PruneStatus.PENDING,
            )
            self._choose_takes(ctx, record)
            self._choose_branches(ctx, record)
            if dry_run:
                return record, SKIP
            if record.versions:
                writes.add(*_delete("TurnVersion", record.versions))
            if record.takes:
                writes.add(*_delete("Take", record.takes))
            writes.add(*cypher.create_nodes("PruneRecord", [node_props(record)]))
            return record, {}

        return self.core.mutate(campaign_id, "prune_decided", build)

    def _choose_branches(self, ctx: CampaignContext, record: PruneRecord) -> None:
        """The disposable branches not played and forked before the horizon, leaves first."""
        for branch in sorted(ctx.branches.values(), key=lambda b: -_generation(ctx, b.id)):
            if branch.disposition is not BranchDisposition.DISPOSABLE or branch.id == ctx.campaign.active_branch_id:
                continue
            fork = ctx.lines[branch.id].fork_depth if branch.id in ctx.lines else -1
            if fork >= ctx.head_depth - record.keep_turns:
                record.kept[branch.id] = f"forked within {record.keep_turns} turns of the head"
            else:
                record.branches_planned.append(branch.id)

    def _roll_forward(self, record: PruneRecord) -> PruneRecord:
        """Remove a pending prune's planned branches (each in its own transaction, leaves first), then mark it done.

        Idempotent: a planned branch already gone counts as removed; one refused (something came to rest on it, or
        it is played now) is kept with why, the same answer every time.
        """
        removed: list[str] = []
        kept = dict(record.kept)
        for branch_id in record.branches_planned:
            ctx = self.story.context(record.campaign_id)
            if branch_id not in ctx.branches:
                removed.append(branch_id)  # gone before a crash stopped this prune
            elif branch_id == ctx.campaign.active_branch_id:
                kept[branch_id] = "played since the prune was decided"
            else:
                try:
                    self.campaigns.delete_branch(record.campaign_id, branch_id)
                    removed.append(branch_id)
                except StoryInvalid as exc:
                    kept[branch_id] = exc.message
        done = record.validated_copy(branches=removed, kept=kept, status=PruneStatus.DONE)
        self._mark_done(done)
        return done

    def _mark_done(self, record: PruneRecord) -> None:
        props = {k: v for k, v in node_props(record).items() if k in ("branches", "kept_json", "status")}
        self.core.graph.run(*_set("PruneRecord", record.id, props))

    def _choose_takes(self, ctx: CampaignContext, record: PruneRecord) -> None:
        """The disposable takes and versions the story moved on from (into ``record``)."""
        campaign_id, keep_turns = record.campaign_id, record.keep_turns
        horizon = ctx.head_depth - keep_turns
        takes = [from_props(Take, r, key="id") for r in self.story.nodes(_disposable("Take", campaign_id))]
        versions = [
            from_props(TurnVersion, r, key="id") for r in self.story.nodes(_disposable("TurnVersion", campaign_id))
        ]
        turns = {t: self.story.turn(t) for t in {k.turn_id for k in takes} | {v.turn_id for v in versions}}
        removed_versions = self._takes(record, takes, turns, horizon)
        for version in versions:
            if version.id in removed_versions or version.id in record.kept:
                continue
            if turns[version.turn_id].depth >= horizon:
                record.kept[version.id] = f"within {keep_turns} turns of the head"
            else:
                removed_versions.add(version.id)
        record.versions = sorted(removed_versions)

    def _takes(self, record: PruneRecord, takes: list[Take], turns: dict[str, Turn], horizon: int) -> set[str]:
        """Choose the disposable takes to remove (into ``record``); returns the versions that go with them."""
        going: set[str] = set()
        archiving: dict[str, list[TurnVersion]] = {}
        if takes:
            for row in self.story.nodes(_versions_of_takes([k.id for k in takes])):
                version = from_props(TurnVersion, row, key="id")
                archiving.setdefault(version.take_id, []).append(version)
        for take in takes:
            turn = turns[take.turn_id]
            versions = archiving.get(take.id, [])
            if turn.selected_take_id == take.id:
                why = "the take the turn tells"
            elif turn.depth >= horizon:
                why = f"within {record.keep_turns} turns of the head"
            elif any(v.disposition is BranchDisposition.RETAINED for v in versions):
                why = "a retained version archives it"
            elif self._canon_rests_on(versions):
                why = "canon rests on what it proposed"
            else:
                record.takes.append(take.id)
                going.update(v.id for v in versions)
                continue
            record.kept[take.id] = why
        return going

    def _canon_rests_on(self, versions: list[TurnVersion]) -> bool:
        ids = [p for v in versions for p in v.proposal_ids]
        return bool(ids) and int(self.core.graph.run(*_accepted(ids))[0]["n"]) > 0

    def records(self, campaign_id: str) -> list[PruneRecord]:
        """The campaign's prunes, oldest first."""
        rows = self.story.nodes(
            ("MATCH (n:PruneRecord) WHERE n.campaign_id = $c RETURN n ORDER BY n.created_at", {"c": campaign_id})
        )
        return [from_props(PruneRecord, r, key="id") for r in rows]
