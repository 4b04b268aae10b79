"""Campaign recall: the story's own past, indexed by meaning and recalled along its lineage.

Every turn, scene summary, canon fact and memory of a campaign becomes a :class:`RecallRecord` in
the memory index (a vector collection and a full-text index beside the knowledge ones). A record
carries where it sits in the story tree (branch, depth and, for what a scene's end made, the commit
sequence number of that end), so recall returns only what the state holds at the head or at a chosen
turn, and who witnessed it, so a character recalls only what they saw or were told.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from schemas.common import Id, UtcDatetime, utc_now


class RecallKind(StrEnum):
    """What a recall record was made from."""

    TURN = "turn"  # a turn's input and its accepted narration
    SUMMARY = "summary"  # a scene (or session, arc) summary
    FACT = "fact"  # a canon fact's statement
    MEMORY = "memory"  # an observer's memory, claim or emotion
    NOTE = "note"  # a GM's note, idea or TODO on a scene (GM-only unless shared: story.notes)


class RecallRecord(BaseModel):
    """One record of the memory index, as the story engine writes it.

    The index keeps it whole (in the vector payload and the full-text document), so a recall answers
    without reading the graph.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="Graph id of the source record (turn, summary, fact, memory).")
    kind: RecallKind
    campaign_id: Id
    anchor_turn_id: Id = Field(description="The turn the record belongs to.")
    branch_id: Id = Field(
        description="Branch of its place in the story tree: the anchor turn's, or for what a scene's end made "
        "(canon outcomes, the summary and memories formed) the branch that end's canon was committed on."
    )
    depth: int = Field(ge=0, description="Depth of the anchor turn.")
    seq: int | None = Field(
        default=None,
        description="The campaign's commit sequence number of the scene end that made it (None: a turn, a memory "
        "or summary written on its own, or a record written before ends were placed): a branch forked at its "
        "depth before it was committed does not see it, as the state does not see that end's canon.",
    )
    scene_id: Id | None = None
    speakers: list[str] = Field(default_factory=list, description="Display names of who spoke.")
    participants: list[Id] = Field(default_factory=list, description="Entity ids present (the scene's).")
    observers: list[Id] = Field(
        default_factory=list,
        description="Entity ids who witnessed it or were told; empty = nobody in particular (the table's record).",
    )
    story_time: str | None = Field(default=None, description="When it happened, as the story or table says it.")
    ref: str | None = Field(default=None, description="Source reference (an imported line's id).")
    text: str = Field(min_length=1, description="What is recalled: the text shown and indexed.")
    context: str = Field(
        default="", description="Indexed with the text but not shown (e.g. the turn before, for a reply)."
    )
    salience: float = Field(default=0.5, ge=0.0, le=1.0)
    created_at: UtcDatetime = Field(default_factory=utc_now)


class RecallRequest(BaseModel):
    """``POST /api/v1/campaigns/{id}/recall``: what to recall, as of when, for whom."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000, description="What to remember, in plain words.")
    as_of_turn_id: Id | None = Field(default=None, description="Recall from this turn's lineage instead of the head's.")
    observer_entity_id: Id | None = Field(default=None, description="Only what this entity witnessed or was told.")
    kinds: list[RecallKind] | None = Field(default=None, description="Only these kinds of records; unset = all.")
    limit: int = Field(default=10, ge=1, le=100)


class RecallHit(BaseModel):
    """One recalled record, best first, with the score of each leg."""

    id: str = Field(description="Graph id of the record.")
    kind: RecallKind
    turn_id: str = Field(description="The anchor turn (for a turn record, the turn itself).")
    ref: str | None = None
    text: str
    scene_id: str | None = None
    speakers: list[str] = Field(default_factory=list)
    story_time: str | None = None
    branch_id: str = Field(description="Branch of the record's place (RecallRecord.branch_id).")
    depth: int = Field(description="Depth of the anchor turn.")
    score: float = Field(
        description="Fused score, higher is better: from the legs' ranks within this answer (and the record's own "
        "time, speakers, scene), so no other campaign's writes move it."
    )
    scores: dict[str, float] = Field(
        default_factory=dict,
        description="Raw score of each vector leg (the cosine of query and record). BM25 legs give their rank only: "
        "their raw score is computed with the statistics of the memory index every campaign shares.",
    )
    ranks: dict[str, int] = Field(default_factory=dict, description="1-based rank per leg.")


class RecallResponse(BaseModel):
    campaign_id: str
    query: str
    as_of_turn_id: str | None = None
    hits: list[RecallHit]
