"""Review before canon: the GM's review of a pending proposal, and the queue that shows what the gate would
decide about each pending proposal now.

A review (:class:`~schemas.proposals.ProposalReview`) accepts, rejects or edits a proposal with a rationale; the
gate applies it when it next judges the proposal (a mid-scene commit naming it, or the scene's end). The queue
(:class:`QueuedProposal`) is the proposals of a scene, each pending one with the gate's verdict of a dry run.
"""

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.proposals import ProposalContent, ProposalDecision, ProposedChange, ReviewAction
from schemas.text import Note, Text

__all__ = ["GateVerdict", "QueuedProposal", "ReviewRequest"]


class ReviewRequest(BaseModel):
    """A GM's review of a pending proposal (who reviews is the caller's key, never the request's)."""

    model_config = ConfigDict(extra="forbid")

    action: ReviewAction = Field(description="accept, reject, or edit (canon with ``content`` in its place).")
    content: ProposalContent | None = Field(
        default=None,
        description="For 'edit': the typed content that becomes canon instead (keyed by 'type', as a proposal's).",
    )
    rationale: Note = Field(description="Why: kept with the review and shown in provenance.")

    @model_validator(mode="after")
    def _check_content(self) -> Self:
        if self.action is ReviewAction.EDIT and self.content is None:
            raise ValueError("an edit needs the new content")
        if self.action is not ReviewAction.EDIT and self.content is not None:
            raise ValueError(f"{self.action.value!r} takes no content; use action 'edit' to change it")
        return self


class GateVerdict(BaseModel):
    """What the gate would decide about a pending proposal if it judged the scene's pending proposals now, in
    order (a dry run: the review, the authority policy, the evidence, the contradiction check against current
    canon, the rulebook and house rules, the world's axioms when a judge is bound, the rules). Nothing is
    written; canon may differ by the time the gate runs."""

    model_config = ConfigDict(extra="forbid")

    decision: ProposalDecision = Field(
        description="accepted or rejected with why; pending when it would wait (for the GM's review, or for "
        "its own line of the story when it names a turn off the head's line)."
    )
    awaiting_review: bool = Field(default=False, description="It would wait for the GM's review.")
    if_accepted: ProposalDecision | None = Field(
        default=None, description="For one awaiting review: the gate's word if the GM accepted it as it stands."
    )
    unchecked_axioms: list[Text] = Field(
        default_factory=list, description="The world's axioms no judge checked it against (none bound, or it failed)."
    )


class QueuedProposal(ProposedChange):
    """A proposal of a scene; a pending one, for the GM, with the gate's verdict of a dry run."""

    verdict: GateVerdict | None = Field(
        default=None, description="The gate's dry run (pending proposals, for the GM; never stored)."
    )
