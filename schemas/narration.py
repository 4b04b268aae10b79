"""What the narrator works from and what a turn shows: memories and summaries, prompt snapshots,
retrieval records, a turn's presentation and its provenance. Re-exported by :mod:`schemas.story`.
"""

from enum import StrEnum
from typing import Self

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from schemas.common import (
    BlobKey,
    Confidence,
    Id,
    LorekeeperModel,
    Sha256Hex,
    UtcDatetime,
    utc_now,
)
from schemas.model_roles import ModelCall
from schemas.presentation import (
    DialogueBlock,
    DiceRollBlock,
    ImageBlock,
    NarrationBlock,
    PresentationBlock,
    SystemNoteBlock,
    TurnPresentation,
)
from schemas.proposals import ProposalReview
from schemas.story_ids import default_id
from schemas.text import LongText, Name, Note, Text
from schemas.visibility import Visibility

__all__ = [
    "DialogueBlock",
    "DiceRollBlock",
    "ImageBlock",
    "Memory",
    "NarrationBlock",
    "PresentationBlock",
    "PromptSection",
    "PromptSectionKind",
    "PromptSnapshot",
    "ProvenancePassage",
    "RecalledHit",
    "RetrievalHit",
    "RetrievalLeg",
    "RetrievalRecord",
    "RetrievalSource",
    "SubjectiveKind",
    "Summary",
    "SummaryScope",
    "SystemNoteBlock",
    "TurnPresentation",
    "TurnProvenance",
]


# ============================================================================================
# memories, summaries, snapshots of what the narrator saw


class SubjectiveKind(StrEnum):
    """Kinds of observer-scoped (subjective) records."""

    MEMORY = "memory"  # what the observer remembers happening
    CLAIM = "claim"  # what the observer believes or was told (may be false)
    EMOTION = "emotion"  # how the observer feels about something


class Memory(LorekeeperModel):
    """What one entity remembers, believes or feels. Retrieved only on the anchor's lineage."""

    id: Id = default_id("mem")
    campaign_id: Id
    observer_entity_id: Id = Field(description="Whose memory this is (observer-scoped).")
    kind: SubjectiveKind = SubjectiveKind.MEMORY
    text: Text
    subject_entity_ids: list[Id] = Field(default_factory=list, description="Who/what it is about.")
    anchor_turn_id: Id = Field(
        description="Turn that produced it; retrieved only when this turn is an ancestor of the head."
    )
    salience: Confidence = Field(default=0.5, description="How much it matters to the observer.")
    created_at: UtcDatetime = Field(default_factory=utc_now)
    retracted_at: UtcDatetime | None = Field(
        default=None,
        description="When it was retracted: it stays in the graph but is no longer listed or recalled.",
    )
    retraction_reason: Note | None = Field(default=None, description="Why it was retracted.")
    visibility: Visibility | None = Field(
        default=None, description="Who at the table may see it; unset: known to its observer (their player and the GM)."
    )


class SummaryScope(StrEnum):
    SCENE = "scene"
    SESSION = "session"
    ARC = "arc"  # several scenes
    CAMPAIGN = "campaign"


class Summary(LorekeeperModel):
    """A summary of the story up to its anchor turn."""

    id: Id = default_id("sum")
    campaign_id: Id
    scope: SummaryScope
    scene_id: Id | None = Field(default=None, description="The scene, for scope 'scene'.")
    anchor_turn_id: Id = Field(description="Last turn the summary covers.")
    from_turn_id: Id | None = Field(default=None, description="First turn it covers, if bounded.")
    text: LongText
    token_count: NonNegativeInt = 0
    created_at: UtcDatetime = Field(default_factory=utc_now)
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")

    @model_validator(mode="after")
    def _check_scope(self) -> Self:
        if self.scope is SummaryScope.SCENE and self.scene_id is None:
            raise ValueError("a scene summary needs scene_id")
        return self


class PromptSectionKind(StrEnum):
    """Prompt sections in their required order (stable order keeps the prefix cache warm)."""

    NARRATOR_RULES = "narrator_rules"
    WORLD_AXIOMS = "world_axioms"
    SCENE_STATE = "scene_state"
    RETRIEVED_KNOWLEDGE = "retrieved_knowledge"
    MEMORIES = "memories"
    RECENT_TURNS = "recent_turns"
    PLAYER_INPUT = "player_input"


_SECTION_RANK = {kind: rank for rank, kind in enumerate(PromptSectionKind)}
_CHAT_RANK = {
    kind: rank
    for rank, kind in enumerate(
        [
            PromptSectionKind.NARRATOR_RULES,
            PromptSectionKind.WORLD_AXIOMS,
            PromptSectionKind.SCENE_STATE,
            PromptSectionKind.RECENT_TURNS,
            PromptSectionKind.RETRIEVED_KNOWLEDGE,
            PromptSectionKind.MEMORIES,
            PromptSectionKind.PLAYER_INPUT,
        ]
    )
}
"""The chat layout's order (:mod:`narrator.context` since Dec 2026): the recent turns as chat messages right
after the stable head, what the turn retrieved in its last message, so a table's next prompt begins with this
one. Snapshots written before keep the enum's order; both are valid."""


class PromptSection(LorekeeperModel):
    kind: PromptSectionKind
    token_count: NonNegativeInt
    content_hash: Sha256Hex = Field(description="sha256 of the section's text.")


class PromptSnapshot(LorekeeperModel):
    """What exactly was sent to the narrator for a turn; the full text is in the object store."""

    id: Id = default_id("psnap")
    turn_id: Id
    model: Name
    sections: list[PromptSection] = Field(
        min_length=1,
        description="Sections in prompt order (the PromptSectionKind order, or the chat layout's: recent turns "
        "before the retrieved knowledge and memories).",
    )
    content_hash: Sha256Hex = Field(description="sha256 of the whole assembled prompt.")
    blob_key: BlobKey | None = Field(default=None, description="Object-store key of the prompt.")
    calls: list[ModelCall] = Field(
        default_factory=list,
        max_length=8,
        description="The model calls of the turn: the narration and the extraction, each with its seat, engine, "
        "model and generation settings.",
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @property
    def total_tokens(self) -> int:
        return sum(s.token_count for s in self.sections)

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        orders = ([rank[s.kind] for s in self.sections] for rank in (_SECTION_RANK, _CHAT_RANK))
        if not any(ranks == sorted(ranks) for ranks in orders):
            order = " -> ".join(k.value for k in PromptSectionKind)
            got = " -> ".join(s.kind.value for s in self.sections)
            raise ValueError(f"prompt sections must follow the order {order}; got {got}")
        return self


class RetrievalLeg(StrEnum):
    VECTOR = "vector"
    FULL_TEXT = "full_text"
    GRAPH = "graph"


class RetrievalSource(StrEnum):
    """What a retrieval searched: the ingested books, or the campaign's own past."""

    KNOWLEDGE = "knowledge"  # the libraries (hits are chunks)
    RECALL = "recall"  # the campaign's memory index (hits are turns, summaries, facts, memories)


class RecalledHit(LorekeeperModel):
    """A record of the campaign's past that recall returned for a turn, named by the turn it belongs to."""

    record_id: str = Field(min_length=1, max_length=200, description="Graph id of the recalled record.")
    kind: str = Field(min_length=1, max_length=40, description="turn, summary, fact or memory.")
    turn_id: Id = Field(description="The turn the record belongs to (for a turn record, the turn itself).")
    rank: PositiveInt = Field(description="1-based rank after fusion.")
    leg_scores: dict[RetrievalLeg, float] = Field(default_factory=dict)
    fused_score: float | None = None
    used_in_prompt: bool = Field(default=True, description="Whether it made it into the prompt.")


class RetrievalHit(LorekeeperModel):
    chunk_id: Id
    rank: PositiveInt = Field(description="1-based rank after fusion (and rerank).")
    item_uid: Id | None = None
    leg_scores: dict[RetrievalLeg, float] = Field(
        default_factory=dict, description="Raw score from each leg that found the chunk."
    )
    fused_score: float | None = None
    rerank_score: float | None = None
    used_in_prompt: bool = Field(default=True, description="Whether it made it into the prompt.")


class RetrievalRecord(LorekeeperModel):
    """What retrieval returned for a turn (provenance of the narrator's knowledge)."""

    id: Id = default_id("ret")
    turn_id: Id
    source: RetrievalSource = RetrievalSource.KNOWLEDGE
    query: Text
    filters: dict[str, list[str]] = Field(
        default_factory=dict, description="Filters applied, e.g. {'library_type': ['rulebook']}."
    )
    hits: list[RetrievalHit] = Field(default_factory=list)
    recalled: list[RecalledHit] = Field(
        default_factory=list, description="For source 'recall': the records of the campaign's past, best first."
    )
    error: Text | None = Field(
        default=None, description="Why retrieval failed; the turn was then narrated without what it would have found."
    )
    latency_ms: NonNegativeFloat | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_ranks(self) -> Self:
        for ranks in ([h.rank for h in self.hits], [h.rank for h in self.recalled]):
            if ranks != sorted(set(ranks)):
                raise ValueError(f"hit ranks must be unique and ascending, got {ranks}")
        return self

    @property
    def recalled_turn_ids(self) -> list[str]:
        """The turns whose records made it into the prompt, in rank order (each once)."""
        return list(dict.fromkeys(h.turn_id for h in self.recalled if h.used_in_prompt))


# ============================================================================================
# why the narrator knew what it knew


class ProvenancePassage(LorekeeperModel):
    """An ingested passage that informed a turn."""

    chunk_id: Id
    rank: PositiveInt
    score: float | None = None
    item_uid: Id | None = None
    title: str | None = None
    page_start: PositiveInt | None = None
    page_end: PositiveInt | None = None
    heading_path: list[str] = Field(default_factory=list)


class TurnProvenance(LorekeeperModel):
    """Why the narrator knew what it knew at a turn, and what the turn made canon."""

    turn_id: Id
    prompt: PromptSnapshot | None = None
    prompt_text: str | None = Field(default=None, description="The exact prompt sent to the model.")
    retrievals: list[RetrievalRecord] = Field(default_factory=list)
    passages: list[ProvenancePassage] = Field(default_factory=list)
    canon_event_ids: list[Id] = Field(default_factory=list, description="Committed events anchored at the turn.")
    reviews: list[ProposalReview] = Field(
        default_factory=list,
        description="The GM's reviews of the proposals the turn made or of those whose canon is anchored at it, "
        "oldest first (who, when, what and why).",
    )
