"""Review before canon: the GM's review of a pending proposal, and the gate's dry run over the queue.

The promotion path is raw → narrative → **review** → canon. A turn's narration proposes typed changes; the
gate lets some through on their authority alone, and a system proposal below the confidence threshold
(:func:`story.policy.awaits_review`) waits for the GM: the gate leaves it pending, at the scene's end too, and
reports it as awaiting review. The GM reviews any pending proposal (:meth:`Reviews.review`): accepts it,
rejects it or edits it (typed content, checked as a new proposal's), always with a rationale. A review is one
write to the graph (the review node, its link to the proposal, the proposal's latest review), in a transaction
guarded by the campaign's version, so a gate judging the scene at the same moment judges the proposal with
the review or without it, never half. Every review is kept (:class:`~schemas.story.ProposalReview`, with who
and when); the latest counts.

The gate applies the latest review when it next judges the proposal, at a commit naming it or at the scene's
end (:func:`as_reviewed`): a rejected proposal is rejected with the GM's rationale; an accepted or edited one
is judged on the GM's authority, with the edited content in place of the proposed one, and the canon it makes
names the proposal and the review (``proposal_uid``, ``review_uid``, ``reviewed_by`` on the canon node and
its state event, which links ``FROM_PROPOSAL`` and ``FROM_REVIEW``). A proposal the end left pending can be
reviewed after the end and made canon by a commit naming it (:func:`refuse_late_commit`).

The queue (:meth:`Reviews.queue`) lists a scene's proposals, each pending one with what the gate would decide
now and why: the gate's own judgement (:func:`story.gate.judge_pending`: reviews, evidence,
authority, contradictions with current canon, the rulebook and house rules, the world's axioms when a judge is
bound, the rules) over the same reads, with nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from schemas.common import Authority
from schemas.events import SceneEnded
from schemas.proposals import (
    ChangeType,
    ProposalContent,
    ProposalDecision,
    ProposalReview,
    ProposalStatus,
    ProposedChange,
    ProposedStateChange,
    ReviewAction,
)
from schemas.review import GateVerdict, QueuedProposal
from schemas.text import STORED
from stores.catalog import from_props
from story.anchors import anchor_proposals
from story.axioms import AxiomRulings
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryInvalid, validation_message
from story.gate import CanonBatch, judge_pending
from story.graph import CampaignContext, StoryGraph, Writes, node_props
from story.state import WorldState

if TYPE_CHECKING:
    from story.scenes import Scenes

log = structlog.get_logger(__name__)

_PENDING = ProposalStatus.PENDING.value


def as_reviewed(proposal: ProposedChange) -> ProposedChange:
    """``proposal`` as the gate judges it: after a GM's accept or edit, on the GM's authority (and with the
    edited content); otherwise as it is (a rejection is the gate's to apply, with the GM's rationale).

    An internal copy, never stored: the proposal keeps what was proposed, its review what the GM made of it.
    """
    review = proposal.review
    if review is None or review.action is ReviewAction.REJECT:
        return proposal
    update: dict[str, Any] = {"authority": Authority.GM}
    if review.action is ReviewAction.EDIT and review.content is not None:
        update.update(content=review.content, type=ChangeType(review.content.type))
    return proposal.model_copy(update=update)


def refuse_scene_end(content: ProposalContent) -> None:
    """A scene ends by ``end_scene``: no proposal (nor an edit of one) carries its end.

    Raises:
        InvalidReference: a state change holds a scene_ended event.
    """
    if isinstance(content, ProposedStateChange):
        for index, event in enumerate(content.events):
            if isinstance(event, SceneEnded):  # the end judges the scene's proposals: it is no proposal
                raise InvalidReference(f"content.events[{index}]", "a scene ends by end_scene, not by a proposal")


def refuse_late_commit(scene_id: str, pending: Sequence[ProposedChange]) -> None:
    """After a scene's end on this branch, a commit takes only proposals the end left pending that the GM has
    reviewed since (anything else was judged by the end, or waits for a review that changes nothing yet).

    Raises:
        StoryInvalid: nothing pending is named, or a named proposal has no review.
    """
    if not pending:
        raise StoryInvalid(f"scene {scene_id!r} has ended on this branch; nothing more can be committed in it")
    unreviewed = [p.id for p in pending if p.review is None and not p.reviewed_by]
    if unreviewed:
        raise StoryInvalid(
            f"scene {scene_id!r} has ended on this branch: a commit now takes only the proposals its end left "
            f"pending that the GM has reviewed since; review {', '.join(map(repr, unreviewed))} first"
        )


def _record(campaign_id: str, proposal: ProposedChange, review: ProposalReview) -> Statement:
    """One statement: the review node linked to the pending proposal, and the proposal's latest review (a GM's
    accept or edit is its approval, ``reviewed_by``; a rejection withdraws it)."""
    props = node_props(
        review,
        campaign_id=campaign_id,
        proposal_uid=proposal.id,
        scene_uid=proposal.scene_id,
        turn_uid=proposal.turn_id,
    )
    approved = None if review.action is ReviewAction.REJECT else review.reviewer
    return (
        "MATCH (p:ProposedChange {uid: $p}) WHERE p.status = $pending "
        "CREATE (r:ProposalReview) SET r = $props CREATE (r)-[:REVIEWS]->(p) "
        "SET p.review_json = $review, p.reviewed_by = $by",
        {
            "p": proposal.id,
            "pending": _PENDING,
            "props": props,
            "review": json.dumps(review.model_dump(mode="json"), sort_keys=True),
            "by": approved,
        },
    )


def reviews_at_turn(story: StoryGraph, turn_id: str) -> list[ProposalReview]:
    """The reviews of the proposals a turn made and of those whose canon is anchored at it, oldest first."""
    made = story.nodes(("MATCH (n:ProposalReview) WHERE n.turn_uid = $t RETURN n", {"t": turn_id}))
    canon = story.nodes(
        ("MATCH (e:StateEvent {turn_uid: $t})-[:FROM_REVIEW]->(n:ProposalReview) RETURN DISTINCT n", {"t": turn_id})
    )
    rows = {r["uid"]: r for r in [*made, *canon]}
    found = [from_props(ProposalReview, r, key="id") for r in rows.values()]
    return sorted(found, key=lambda r: (r.reviewed_at, r.id))


class Reviews:
    """The GM's reviews of pending proposals, and the queue with the gate's dry run."""

    def __init__(self, core: StoryCore, scenes: Scenes) -> None:
        self.core = core
        self.story = core.story
        self.scenes = scenes

    def review(
        self,
        proposal_id: str,
        reviewer: str,
        *,
        action: ReviewAction = ReviewAction.ACCEPT,
        rationale: str = "approved on review",
        content: ProposalContent | None = None,
    ) -> ProposedChange:
        """Record a review of a pending proposal (one transaction); the gate applies it when it next judges it.

        Returns:
            The proposal with its review.

        Raises:
            StoryNotFound: no such proposal.
            StoryInvalid: it is no longer pending, or the review is malformed (an edit whose content does not
                make a valid proposal, with the schema's message), and nothing is written.
        """
        proposal = self.scenes.get_proposal(proposal_id)
        try:
            record = ProposalReview(
                proposal_id=proposal.id, action=action, content=content, rationale=rationale, reviewer=reviewer
            )
            reviewed = proposal.validated_copy(
                review=record, reviewed_by=None if action is ReviewAction.REJECT else reviewer
            )
            if record.content is not None:  # checked as a new proposal with this content would be
                proposal.validated_copy(type=ChangeType(record.content.type), content=record.content)
                refuse_scene_end(record.content)
        except ValidationError as exc:
            raise StoryInvalid(f"malformed review: {validation_message(exc)}") from None
        campaign_id = self.scenes.get_scene(proposal.scene_id).campaign_id

        def build(ctx: CampaignContext, writes: Writes) -> tuple[ProposedChange, dict[str, Any]]:
            current = self.scenes.get_proposal(proposal_id)  # read in the guarded write: a gate may have judged it
            if current.status is not ProposalStatus.PENDING:
                raise StoryInvalid(
                    f"proposal {proposal_id!r} is already {current.status.value}; only a pending proposal is reviewed"
                )
            writes.add(*_record(ctx.id, current, record))
            return reviewed, {}

        out = self.core.mutate(campaign_id, "review", build)
        log.info(
            "proposal_reviewed",
            campaign_id=campaign_id,
            scene_id=proposal.scene_id,
            proposal_id=proposal.id,
            review_id=record.id,
            action=record.action.value,
            reviewer=reviewer,
        )
        return out

    def reviews_of(self, proposal_id: str) -> list[ProposalReview]:
        """Every review of a proposal, oldest first."""
        rows = self.story.nodes(
            ("MATCH (n:ProposalReview) WHERE n.proposal_uid = $p RETURN n ORDER BY n.reviewed_at", {"p": proposal_id})
        )
        return [from_props(ProposalReview, r, key="id") for r in rows]

    # -- the queue ------------------------------------------------------------------------------------

    def queue(
        self, scene_id: str, status: ProposalStatus | None = None, *, dry_run: bool = True
    ) -> list[QueuedProposal]:
        """A scene's proposals (of one status, if given), oldest first; with ``dry_run``, each pending one with
        the gate's verdict if it judged the scene's pending proposals now. Writes nothing."""
        proposals = self.scenes.proposals(scene_id, status)
        verdicts: dict[str, GateVerdict] = {}
        if dry_run and any(p.status is ProposalStatus.PENDING for p in proposals):
            verdicts = self.dry_run(scene_id)
        return [
            QueuedProposal.model_validate({**p.model_dump(), "verdict": verdicts.get(p.id)}, context=STORED)
            for p in proposals
        ]

    def _judge(
        self, ctx: CampaignContext, state: WorldState, scene_id: str, pending: list[ProposedChange]
    ) -> tuple[list[ProposalDecision], CanonBatch, WorldState, AxiomRulings]:
        axioms = self.scenes.campaigns.axioms(ctx.campaign.world_id) if pending else []
        judge = self.scenes.axiom_judge
        policy = self.core.policy
        return judge_pending(
            self.core.graph,
            ctx,
            state,
            scene_id,
            pending,
            policy=policy,
            axioms=axioms,
            axiom_judge=judge,
            anchors=None,
        )

    def dry_run(self, scene_id: str) -> dict[str, GateVerdict]:
        """By proposal id, what the gate would decide about each pending proposal of the scene now (as the
        scene's end judges them: in order, each against the world the ones before it leave)."""
        scene = self.scenes.get_scene(scene_id)
        ctx = self.story.context(scene.campaign_id)
        state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
        pending = [as_reviewed(p) for p in self.scenes.proposals(scene_id, ProposalStatus.PENDING)]
        pending.sort(key=lambda p: (p.created_at, p.id))
        anchored = anchor_proposals(self.story, ctx.lineage(), pending, state)
        decisions, _, _, rulings = self._judge(ctx, state, scene_id, anchored.judged)
        waiting = {d.proposal_id for d in decisions if d.status is ProposalStatus.PENDING}
        if_accepted: dict[str, ProposalDecision] = {}
        if waiting:  # the same batch with those the GM would accept as they stand
            accepted = [_accepted_as_is(p) if p.id in waiting else p for p in anchored.judged]
            again = self._judge(ctx, state, scene_id, accepted)[0]
            if_accepted = {d.proposal_id: _dry(d) for d in again if d.proposal_id in waiting}
        out = {
            d.proposal_id: GateVerdict(
                decision=_dry(d),
                awaiting_review=d.proposal_id in waiting,
                if_accepted=if_accepted.get(d.proposal_id),
                unchecked_axioms=rulings.unchecked,
            )
            for d in decisions
        }
        branch = ctx.campaign.active_branch_id
        for proposal in pending:
            if proposal.id in anchored.off_line:
                why = f"it names turn {proposal.turn_id!r}, not on the line of branch {branch!r} up to the head: it "
                why += "waits for its own line"
                decision = ProposalDecision(
                    proposal_id=proposal.id, status=ProposalStatus.PENDING, rationale=why, authority=proposal.authority
                )
                out[proposal.id] = GateVerdict(decision=decision)
        return out


def _accepted_as_is(proposal: ProposedChange) -> ProposedChange:
    review = ProposalReview(
        proposal_id=proposal.id, action=ReviewAction.ACCEPT, rationale="if accepted as it stands", reviewer="the GM"
    )
    return as_reviewed(proposal.model_copy(update={"review": review}))


def _dry(decision: ProposalDecision) -> ProposalDecision:
    """A dry run's decision: its events are not written, so it names none."""
    return decision.model_copy(update={"event_ids": []})
