"""Scenes, proposals, the gate that makes them canon, and retcons.

Nothing a narrator or a player says becomes true on its own: it is proposed in an active scene, and
the gate (:mod:`story.gate`) judges the pending proposals when the scene ends (or at a mid-scene
commit), writing the accepted ones as canon in one transaction. A scene's location and participants,
and a retcon, are canon the GM states directly, checked against the rules (:mod:`story.rules`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from schemas.common import Authority, utc_now
from schemas.events import BaseStateEvent, FactAdded, FactInvalidated, FactInvalidation, SceneEnded
from schemas.retcons import RecordKind
from schemas.story import (
    Evidence,
    GateReport,
    ProposalDecision,
    ProposalStatus,
    ProposedChange,
    Scene,
    SceneStatus,
    WorldStateCheckpointKind,
)
from stores.catalog import from_props
from story import cypher
from story.anchors import Anchors, anchor_proposals
from story.axioms import AxiomJudge
from story.campaigns import Campaigns, write_branch
from story.checkpoints import Checkpoints
from story.citations import read_citations
from story.core import SKIP, StoryCore
from story.errors import InvalidReference, StoryInvalid, StoryNotFound, validation_message
from story.gate import CanonBatch, decision_writes, judge_pending, scene_of, write_canon
from story.graph import CampaignContext, Writes, node_props
from story.outcomes import OUTCOME_CANON, outcome_canon, outcomes_in_words
from story.policy import AUTHORITY_RANK
from story.recall import end_mark
from story.references import check_scene_refs
from story.retcons import dependents_in, mark_writes
from story.review import as_reviewed, refuse_late_commit, refuse_scene_end
from story.rules import check_events
from story.scene_status import SceneMarks, active_at, scene_marks, seen_at
from story.scene_writes import scene_opening
from story.state import WorldState
from story.summary_amends import queue_amendments, retold_records
from story.viewer import told_to_table


class Scenes:
    """Scenes, proposals, the gate and retcons; ``campaigns`` takes the checkpoint before a retcon."""

    def __init__(self, core: StoryCore, campaigns: Campaigns) -> None:
        self.core = core
        self.graph = core.graph
        self.story = core.story
        self.campaigns = campaigns
        self.axiom_judge: AxiomJudge | None = None
        """Reads proposals against the world's axioms at the gate (None: the report lists them unchecked)."""

    # -- scenes -----------------------------------------------------------------------------------

    def start_scene(
        self,
        campaign_id: str,
        *,
        title: str | None = None,
        location_entity_id: str | None = None,
        participant_entity_ids: Sequence[str] = (),
    ) -> Scene:
        """Open a scene at the head; its location and participants become the scene state (scene_set).

        Raises:
            StoryInvalid: a scene is still active at the head (one active on another branch does not count).
            InvalidReference: the location is not a place there, or a participant is not there.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Scene, dict[str, Any]]:
            state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
            self._refuse_active(state)
            check_scene_refs(state, location_entity_id, participant_entity_ids)
            order = self.graph.run(*cypher.count_scenes(ctx.id))[0]["n"]
            branch_id, fork = write_branch(ctx, writes)
            scene, event = scene_opening(
                ctx,
                branch_id,
                int(order),
                title=title,
                location_entity_id=location_entity_id,
                participant_entity_ids=participant_entity_ids,
            )
            # start_seq: its scene_set's sequence number; with it, the scene ends per branch (scene_ended)
            props = node_props(scene, depth=ctx.head_depth, start_seq=ctx.event_seq + 1)
            writes.add(*cypher.create_scene(ctx.id, props))
            what = "the scene's location and participants"
            props = self._commit_events(
                ctx,
                writes,
                [event],
                authority=Authority.GM,
                branch_id=branch_id,
                scene_id=scene.id,
                what=what,
                state=state,
            )
            return scene, {**fork, **props}

        return self.core.mutate(campaign_id, "scene", build)

    def open_scenes_in_bulk(self, ctx: CampaignContext) -> tuple[int, WorldState]:
        """What a bulk write that opens scenes in one transaction (:func:`queue_scene`) reads once: how many
        scenes the campaign has, and the world at the head.

        Raises:
            StoryInvalid: a scene is still active at the head (as :meth:`start_scene` refuses).
        """
        state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
        self._refuse_active(state)
        order = int(self.graph.run(*cypher.count_scenes(ctx.id))[0]["n"])
        return order, state

    def _refuse_active(self, state: WorldState) -> None:
        """Refuse a second scene where one is active (the world at the head: a scene is active per branch)."""
        active = self.story.active_scene(state)
        if active is not None:
            raise StoryInvalid(f"scene {active!r} is still active on this branch; end it first")

    def active_scene(
        self, campaign_id: str, *, branch_id: str | None = None, turn_id: str | None = None
    ) -> Scene | None:
        """The scene active at a position (the head; a branch's tip; a turn), if any.

        A scene shared by two branches (a fork while it was active) and ended on one is still active on
        the other: it is returned as active there, whatever its node last recorded (:mod:`story.scene_status`).
        """
        marks = self._marks(campaign_id, branch_id, turn_id)
        if marks.open_id is None:
            return None
        props = self.story.node("Scene", marks.open_id)
        return seen_at(props, marks) if active_at(props, marks) else None

    def _marks(self, campaign_id: str, branch_id: str | None, turn_id: str | None) -> SceneMarks:
        ctx = self.story.context(campaign_id)
        return scene_marks(self.graph, self.core.lineage_for(ctx, turn_id, branch_id))

    def _active_here(self, ctx: CampaignContext, row: dict[str, Any], active: str | None) -> bool:
        """Whether the scene (its node) is the one ``active`` at the head; False when it ended on this line.

        Raises:
            StoryInvalid: the scene is not on the head's line (it began on another branch, or ahead of the head).
        """
        if active == row["uid"]:
            return True
        start_seq = row.get("start_seq")
        seq = None if start_seq is None else int(start_seq)
        if not ctx.lineage().contains(row["branch_id"], int(row.get("depth", -1)), seq):
            raise StoryInvalid(
                f"scene {row['uid']!r} is not on the line of branch {ctx.campaign.active_branch_id!r} up to the "
                f"head: it began on branch {row['branch_id']!r}"
            )
        return False

    def get_scene(self, scene_id: str, *, branch_id: str | None = None, turn_id: str | None = None) -> Scene:
        """A scene as read at a position (the head; a branch's tip; a turn): its status, end and outcomes on that
        line (:mod:`story.scene_status`), as :meth:`active_scene` and a new scene's refusal read them.

        Raises:
            StoryNotFound: no such scene, or no such branch or turn in its campaign.
            StoryInvalid: the turn is not on the line of ``branch_id``.
        """
        props = self.story.node("Scene", scene_id)
        return seen_at(props, self._marks(str(props["campaign_id"]), branch_id, turn_id))

    def scene_record(self, scene_id: str) -> Scene:
        """A scene as its node stores it (what was last written to it, on whichever branch)."""
        return scene_of(self.story.node("Scene", scene_id))

    def scenes(self, campaign_id: str, *, branch_id: str | None = None, turn_id: str | None = None) -> list[Scene]:
        """The campaign's scenes in order, each as read at a position (as :meth:`get_scene`)."""
        marks = self._marks(campaign_id, branch_id, turn_id)
        return [seen_at(r, marks) for r in self.story.nodes(cypher.scenes_of(campaign_id))]

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
        state: WorldState | None = None,
    ) -> dict[str, Any]:
        """Validate events against the head's state (``state`` when read already; it is folded into) and
        queue them as canon (not through proposals)."""
        if state is None:
            state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
        checked = check_events(state, events, first_seq=ctx.event_seq + 1, authority=authority.value, in_place=True)
        if checked.issues:
            raise StoryInvalid(f"{what} break the rules: " + "; ".join(i.message for i in checked.issues))
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

    # -- proposals --------------------------------------------------------------------------------

    def propose(self, scene_id: str, **fields: Any) -> ProposedChange:
        """Stage a proposed change on an active scene; the gate decides at scene end.

        ``fields`` are those of :class:`~schemas.story.ProposedChange` (type, content, authority,
        confidence, evidence, turn_id, resolution, proposed_by).

        Raises:
            StoryInvalid: the scene has ended, or the proposal is malformed (with the schema's message).
            StoryNotFound: the scene, or a turn or chunk it cites, does not exist (the gate checks
                again, and also the campaign's library pins: :mod:`story.citations`).
        """
        row = self.story.node("Scene", scene_id)
        scene = scene_of(row)
        ctx = self.story.context(scene.campaign_id)
        if not self._active_here(ctx, row, self.story.scene_at(ctx.lineage())):
            raise StoryInvalid(f"scene {scene_id!r} has ended on this branch; proposals go to an active scene")
        try:
            proposal = ProposedChange.model_validate({**fields, "scene_id": scene_id, "status": "pending"})
        except ValidationError as exc:
            raise StoryInvalid(f"malformed proposal: {validation_message(exc)}") from None
        refuse_scene_end(proposal.content)
        chunks, turns = read_citations(self.graph, scene.campaign_id, [proposal]).missing(proposal)
        if turns:
            raise StoryNotFound(f"the proposal cites turns not in this campaign: {', '.join(turns)}")
        if chunks:
            raise StoryNotFound(f"the proposal cites chunks that do not exist: {', '.join(chunks)}")
        props = node_props(proposal, campaign_id=scene.campaign_id, scene_uid=scene_id)
        self.graph.run(*cypher.create_proposal(scene_id, props))
        return proposal

    def get_proposal(self, proposal_id: str) -> ProposedChange:
        return from_props(ProposedChange, self.story.node("ProposedChange", proposal_id), key="id")

    def proposals(self, scene_id: str, status: ProposalStatus | None = None) -> list[ProposedChange]:
        rows = self.story.nodes(cypher.proposals_of(scene_id, status.value if status else None))
        return [from_props(ProposedChange, r, key="id") for r in rows]

    # -- the gate ---------------------------------------------------------------------------------

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        """Mid-scene commit: judge the given pending proposals now. After the scene's end on this branch, a
        commit takes the proposals the end left pending that the GM has reviewed since (:mod:`story.review`)."""
        if not proposal_ids:
            raise StoryInvalid("name the proposals to commit (or end the scene to judge them all)")
        return self._gate(scene_id, list(proposal_ids), end=False)

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport:
        """End a scene: judge every pending proposal and write the accepted ones as canon, at once.

        Idempotent: ending a completed scene again changes nothing and says so.

        Raises:
            InvalidReference: a summary is given for a scene with no turns on this branch (nothing to keep it on).
        """
        if summary:
            self._refuse_empty_summary(scene_id)
        return self._gate(scene_id, None, end=True, summary=summary)

    def _refuse_empty_summary(self, scene_id: str) -> None:
        """A GM's summary is kept on the scene's turns (anchored at the last): refused when it has none here."""
        scene = self.scene_record(scene_id)
        lineage = self.story.context(scene.campaign_id).lineage()
        rows = self.story.nodes(cypher.turns_of_scene(scene_id))
        if not any(lineage.contains(r["branch_id"], int(r["depth"])) for r in rows):
            raise InvalidReference(
                "summary", f"scene {scene_id!r} has no turns on this branch to summarize; end it without a summary"
            )

    def _gate(self, scene_id: str, ids: list[str] | None, *, end: bool, summary: str | None = None) -> GateReport:
        campaign_id = self.scene_record(scene_id).campaign_id
        after: dict[str, Any] = {}

        def build(ctx: CampaignContext, writes: Writes) -> tuple[GateReport, dict[str, Any]]:
            row = self.story.node("Scene", scene_id)
            scene = scene_of(row)
            built = self.core.snapshots.state_at(ctx.id, ctx.lineage())
            chosen = self._to_judge(ctx, scene_id, row, built.state, ids, end=end)
            if chosen is None:  # an end of a scene already ended on this branch
                branch = ctx.campaign.active_branch_id
                report = GateReport(scene_id=scene_id, campaign_id=ctx.id, branch_id=branch, already_completed=True)
                return report, SKIP
            pending, skipped, anchored = chosen
            first_seq = ctx.event_seq + 1
            head = ctx.head.id if ctx.head else None
            # a scene's end is canon at the end
            decisions, batch, state, rulings = judge_pending(
                self.graph,
                ctx,
                built.state,
                scene_id,
                pending,
                policy=self.core.policy,
                axioms=self.campaigns.axioms(ctx.campaign.world_id) if pending else [],
                axiom_judge=self.axiom_judge,
                anchors=None if end else anchored.depths,
            )
            canon = len(batch.events)
            if end:  # the scene ends on this branch only: a branch that shares it keeps it open
                closing = SceneEnded(turn_id=head, scene_id=scene_id, ended_scene_id=scene_id)
                state.apply(closing.model_dump(mode="json"), seq=first_seq + canon, authority=Authority.GM.value)
                batch.add([closing], authority=Authority.GM.value, confidence=1.0)
            branch_id, fork = write_branch(ctx, writes) if batch.events else (ctx.campaign.active_branch_id, {})
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
            event_seq = ctx.event_seq + len(batch.events)
            if end:
                judged = (pending, decisions)
                event_seq = _write_end(ctx, writes, (row, scene), judged, summary, (state, batch), branch_id)
            after.update(
                lineage=ctx.lineage(branch_id),
                state=state,
                replayed=built.replayed + len(batch.events),
                turn=head,
                events=len(batch.events),
            )
            report = GateReport(
                scene_id=scene_id,
                campaign_id=ctx.id,
                branch_id=branch_id,
                forked=bool(fork),
                decisions=decisions,
                skipped=skipped,
                events_committed=canon,
                version=ctx.version + 1,
                unchecked_axioms=rulings.unchecked,
                awaiting_review=[d.proposal_id for d in decisions if d.status is ProposalStatus.PENDING],
            )
            return report, {**fork, "event_seq": event_seq}

        report = self.core.mutate(campaign_id, "gate", build)
        if after.get("events"):
            self.core.snapshots.maybe_take(
                campaign_id, after["lineage"], after["state"], turn_id=after["turn"], replayed=after["replayed"]
            )
        return report

    def _to_judge(
        self,
        ctx: CampaignContext,
        scene_id: str,
        row: dict[str, Any],
        state: WorldState,
        ids: list[str] | None,
        *,
        end: bool,
    ) -> tuple[list[ProposedChange], list[str], Anchors] | None:
        """The proposals a commit or an end judges (those on the head's line; the others wait for their own),
        the named ones already decided, and where each is anchored; None for an end of a scene already ended on
        this branch."""
        if not self._active_here(ctx, row, self.story.active_scene(state)):  # per branch
            if end:
                return None
            pending, skipped = self._pending(scene_id, ids)
            refuse_late_commit(scene_id, pending)  # after the end: only what the GM reviewed since
        else:
            pending, skipped = self._pending(scene_id, ids)
        anchored = anchor_proposals(self.story, ctx.lineage(), pending, state)
        if anchored.off_line and ids is not None:
            raise StoryInvalid(
                f"proposal(s) {', '.join(map(repr, anchored.off_line))} come from turns not on the line of branch "
                f"{ctx.campaign.active_branch_id!r} up to the head; move the head to them (redo, switch) first"
            )
        return anchored.judged, skipped, anchored

    def _pending(self, scene_id: str, ids: list[str] | None) -> tuple[list[ProposedChange], list[str]]:
        """The pending proposals to judge (all of the scene's, or those named), oldest first, and the
        named ones already decided."""
        known = {p.id: p for p in self.proposals(scene_id)}
        if ids is not None:
            missing = [i for i in ids if i not in known]
            if missing:
                raise StoryNotFound(f"no proposal {', '.join(map(repr, missing))} in scene {scene_id!r}")
        wanted = ids if ids is not None else list(known)
        pending = [as_reviewed(known[i]) for i in wanted if known[i].status is ProposalStatus.PENDING]
        pending.sort(key=lambda p: (p.created_at, p.id))
        return pending, [i for i in wanted if known[i].status is not ProposalStatus.PENDING]

    # -- retcons ----------------------------------------------------------------------------------

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
        # the whole retcon is checked (the fact, the authority, the events it writes) before the checkpoint it
        # takes first is written: a refused retcon writes nothing
        turn = ctx.head.id if ctx.head else None
        old = _retconnable(self.core.snapshots.state_at(ctx.id, ctx.lineage()).state, ctx.id, fact_id, authority)
        _retcon_events(old, fact_id, turn, reason, value, object_entity_id, authority)
        if ctx.head is not None:
            Checkpoints(self.core).create(
                campaign_id, f"before retcon of {fact_id}", kind=WorldStateCheckpointKind.BEFORE_OOC_MUTATION
            )

        def build(ctx: CampaignContext, writes: Writes) -> tuple[str | None, dict[str, Any]]:
            state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
            old = _retconnable(state, ctx.id, fact_id, authority)
            turn = ctx.head.id if ctx.head else None
            new_id_, events = _retcon_events(old, fact_id, turn, reason, value, object_entity_id, authority)
            branch_id, fork = write_branch(ctx, writes)
            retold = retold_records(self.story, ctx.id, state, events)  # the words of the world before it
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
            mark_writes(ctx, writes, events, branch_id=branch_id, reason=reason)  # the stored node says so
            queue_amendments(self.story, ctx, writes, retold, events=events, branch_id=branch_id)  # what told it
            return new_id_, {**fork, **props}

        return self.core.mutate(campaign_id, "retcon", build)

    def dependents(self, campaign_id: str, fact_id: str) -> list[str]:
        """Current facts on the head's line that follow (transitively) from ``fact_id`` (:mod:`story.retcons`)."""
        if fact_id not in (state := self.core.fold(campaign_id)).facts:
            raise StoryNotFound(f"no fact {fact_id!r} on this branch of campaign {campaign_id!r}")
        return [d.id for d in dependents_in(state, RecordKind.FACT, fact_id)]


def _write_end(
    ctx: CampaignContext,
    writes: Writes,
    scene_row: tuple[dict[str, Any], Scene],
    judged: tuple[list[ProposedChange], list[ProposalDecision]],
    summary: str | None,
    after: tuple[WorldState, CanonBatch],
    branch_id: str,
) -> int:
    """Queue the scene node's end (:func:`_ended`) and where it was committed; returns the end's event sequence.

    The end takes a sequence number of its own even without canon, and the node says where each end was
    committed: the records an end makes (:mod:`story.recall`) are cut where its canon is.
    """
    (row, scene), (state, batch) = scene_row, after
    event_seq = ctx.event_seq + max(len(batch.events), 1)
    ended = _ended(ctx, scene_row, *judged, summary, (state, batch.events))
    placed = end_mark(row, len(scene.canonical_outcomes), ended, branch_id=branch_id, seq=event_seq)
    writes.add(*cypher.update_scene(scene.id, {**ended, **placed}))
    return event_seq


def _ended(
    ctx: CampaignContext,
    scene_row: tuple[dict[str, Any], Scene],
    pending: list[ProposedChange],
    decisions: list[ProposalDecision],
    summary: str | None,
    after: tuple[WorldState, list[BaseStateEvent]],
) -> dict[str, Any]:
    """What a scene's node says once it ends: completed, and its end not finished until the memories and
    summary it forms are written (:mod:`story.scene_end`), so a crash in between leaves that to do. Its
    outcomes in words are the table's (no secret's: :func:`story.viewer.told_to_table`), with their canon ids
    (:data:`story.outcomes.OUTCOME_CANON`)."""
    (row, scene), (state, events) = scene_row, after
    told, decided = told_to_table(pending, decisions, state.entities)
    words, canon = outcomes_in_words(told, decided, events, state.entities)
    before = outcome_canon(row, len(scene.canonical_outcomes))
    props: dict[str, Any] = {
        "status": SceneStatus.COMPLETED.value,
        "ended_at": utc_now().isoformat(),
        "canonical_outcomes": [*scene.canonical_outcomes, *words],
        OUTCOME_CANON: json.dumps([*before, *canon]),
        cypher.END_PENDING: True,
    }
    if ctx.head is not None:
        props["end_turn_id"] = ctx.head.id
    if summary:
        props["summary"] = summary
    return props


def _retconnable(state: WorldState, campaign_id: str, fact_id: str, authority: Authority) -> dict[str, Any]:
    """The fact a retcon acts on, if ``authority`` may retcon it.

    Raises:
        StoryNotFound: no such fact on this branch.
        StoryInvalid: the fact's authority outranks the retcon's (a GM may retcon anything).
    """
    old = state.facts.get(fact_id)
    if old is None:
        raise StoryNotFound(f"no fact {fact_id!r} on this branch of campaign {campaign_id!r}")
    if AUTHORITY_RANK[old["authority"]] > AUTHORITY_RANK[authority.value] and authority is not Authority.GM:
        raise StoryInvalid(f"fact {fact_id!r} has {old['authority']} authority; {authority.value} cannot retcon it")
    return dict(old)


def _retcon_events(
    old: dict[str, Any],
    fact_id: str,
    turn: str | None,
    reason: str,
    value: Any,
    object_entity_id: str | None,
    authority: Authority,
) -> tuple[str | None, list[BaseStateEvent]]:
    """The events of a retcon: the fact invalidated, and with a new value or object the fact that replaces it."""
    if value is None and object_entity_id is None:
        invalidated = FactInvalidated(
            turn_id=turn, fact_id=fact_id, invalidation=FactInvalidation.RETCONNED, reason=reason
        )
        return None, [invalidated]
    added = FactAdded(
        turn_id=turn,
        subject_entity_id=old["subject"],
        predicate=old["predicate"],
        value=value,
        object_entity_id=object_entity_id,
        authority=authority,
        visibility=old.get("visibility"),  # the new value keeps the fact's audience
    )
    new_id_ = added.fact_id
    return new_id_, [
        added.validated_copy(replaces=fact_id),
        FactInvalidated(
            turn_id=turn,
            fact_id=fact_id,
            invalidation=FactInvalidation.RETCONNED,
            reason=reason,
            superseded_by=new_id_,
        ),
    ]
