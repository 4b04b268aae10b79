"""The story's structure: worlds, campaigns and branches, the turn tree (turns, takes), checkpoints
and scenes.

Story history is a tree: turns link to their parent; branches name lines through it; a turn has
alternate takes with one selected; checkpoints are named pointers to turns. Re-exported by
:mod:`schemas.story`.
"""

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, NonNegativeFloat, NonNegativeInt, field_validator, model_validator

from schemas.common import (
    Id,
    LorekeeperModel,
    UtcDatetime,
    utc_now,
)
from schemas.imports import TranscriptImportState
from schemas.knowledge import Classification
from schemas.model_roles import ModelRoles
from schemas.story_ids import default_id
from schemas.text import LongText, Name, Note, Text, TextOrEmpty, TextRule

__all__ = [
    "Branch",
    "BranchDisposition",
    "Campaign",
    "Checkpoint",
    "GenerationMetadata",
    "InputMode",
    "LibraryPin",
    "PointOfView",
    "Scene",
    "SceneStatus",
    "SnapshotKind",
    "Speaker",
    "SpeakerKind",
    "StoryProfile",
    "Take",
    "Tense",
    "Turn",
    "TurnStatus",
    "World",
    "WorldStateCheckpointKind",
    "TurnVersion",
    "AUTOMATIC_CHECKPOINT_KINDS",
]


# ============================================================================================
# world, campaign, branches


class World(LorekeeperModel):
    """A universe: its axioms and entities are shared by the campaigns set in it."""

    id: Id = default_id("world")
    name: Name
    description: Text | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)


class PointOfView(StrEnum):
    FIRST_PERSON = "first_person"
    SECOND_PERSON = "second_person"
    THIRD_LIMITED = "third_limited"
    THIRD_OMNISCIENT = "third_omniscient"


class Tense(StrEnum):
    PAST = "past"
    PRESENT = "present"


class StoryProfile(LorekeeperModel):
    """How the narrator tells this campaign's story."""

    genre: Name = Field(description="e.g. 'fantasy', 'science fiction', 'horror'.")
    subgenre: Name | None = Field(default=None, description="e.g. 'sword and sorcery'.")
    tone: Name | None = Field(default=None, description="e.g. 'grim', 'whimsical'.")
    style: Note | None = Field(default=None, description="Prose style notes, e.g. 'terse, vivid'.")
    point_of_view: PointOfView = PointOfView.SECOND_PERSON
    tense: Tense = Tense.PRESENT


class LibraryPin(LorekeeperModel):
    """A library, or one item of it, that a campaign draws on, and as what it uses it."""

    library_id: Id | None = Field(default=None, description="A library: every item in it, now and later.")
    item_id: Id | None = Field(default=None, description="One item (one edition of a work).")
    use: Classification | None = Field(
        default=None,
        description="How the campaign uses it: canon (may back source-authority facts), reference or "
        "inspiration; null = as each item is classified.",
    )

    @model_validator(mode="after")
    def _check_target(self) -> Self:
        if (self.library_id is None) == (self.item_id is None):
            raise ValueError("a library pin names exactly one of library_id or item_id")
        return self

    @property
    def target(self) -> tuple[str, str]:
        """``("library" | "item", id)``: what the pin names."""
        return ("item", self.item_id) if self.item_id is not None else ("library", str(self.library_id))


def check_library_pins(pins: list[LibraryPin]) -> list[LibraryPin]:
    """Refuse a library or item pinned twice (which of the two uses would hold?)."""
    seen: set[tuple[str, str]] = set()
    for pin in pins:
        if pin.target in seen:
            raise ValueError(f"{pin.target[0]} {pin.target[1]!r} is pinned twice; pin it once, with one use")
        seen.add(pin.target)
    return pins


class Campaign(LorekeeperModel):
    """One story played in a world, with its own turn tree."""

    id: Id = default_id("camp")
    world_id: Id
    name: Name
    profile: StoryProfile
    narrator_rules: list[Text] = Field(
        default_factory=list,
        description="Standing instructions to the narrator, first in every prompt, in order.",
    )
    library_pins: list[LibraryPin] = Field(
        default_factory=list,
        max_length=500,
        description="The libraries and items the campaign draws on: the narrator's knowledge search and "
        "the gate use only those. Empty = the whole library, each item as it is classified.",
    )
    active_branch_id: Id = Field(description="Branch the players are on.")
    head_turn_id: Id | None = Field(
        default=None,
        description="Current turn; may sit behind the branch tip after undo. Null before turn 1.",
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime | None = None
    model_roles: ModelRoles | None = Field(
        default=None,
        description="The engine that plays each seat (narrator, extractor, summarizer, judge); unset: the "
        "deployment's.",
    )
    transcript_import: TranscriptImportState | None = Field(
        default=None,
        description="Set while the campaign is an unfinished transcript import: it is refused for play until "
        "the import is resumed (`lorekeeper campaign import-transcript FILE --resume`). None: a whole campaign.",
    )

    _check_pins = field_validator("library_pins")(check_library_pins)


class BranchDisposition(StrEnum):
    """What to do with a branch's turns."""

    ACTIVE = "active"  # the branch being played
    RETAINED = "retained"  # kept: can be switched back to
    DISPOSABLE = "disposable"  # may be garbage-collected (e.g. abandoned redo tail)


class Branch(LorekeeperModel):
    """A named line through the turn tree. The root branch has no parent and no fork turn."""

    id: Id = default_id("branch")
    campaign_id: Id
    name: Name = "main"
    disposition: BranchDisposition = BranchDisposition.ACTIVE
    parent_branch_id: Id | None = Field(default=None, description="Branch this one forked from.")
    fork_turn_id: Id | None = Field(
        default=None, description="Last shared turn: the new branch's first turn is its child."
    )
    tip_turn_id: Id | None = Field(
        default=None, description="Newest retained turn on the branch (redo goes up to here)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_fork(self) -> Self:
        if (self.parent_branch_id is None) != (self.fork_turn_id is None):
            raise ValueError(
                "give both parent_branch_id and fork_turn_id for a forked branch, or neither for a root branch"
            )
        if self.parent_branch_id == self.id:
            raise ValueError("a branch cannot be its own parent")
        return self


# ============================================================================================
# turns and takes


class InputMode(StrEnum):
    """How the player's input is meant."""

    ACTION = "action"  # what my character does
    DIALOGUE = "dialogue"  # what my character says
    DIRECTION = "direction"  # out-of-character steering of the story
    CONTINUE = "continue"  # no input: narrate on


class SpeakerKind(StrEnum):
    PLAYER = "player"
    GM = "gm"
    NARRATOR = "narrator"
    ENTITY = "entity"  # an in-world character or creature


class Speaker(LorekeeperModel):
    """Who is speaking or acting."""

    kind: SpeakerKind
    entity_id: Id | None = Field(
        default=None,
        description="The speaking entity: required for kind 'entity', optional for 'player' "
        "(their character), not allowed for 'gm' and 'narrator'.",
    )
    name: Name | None = Field(default=None, description="Display name, e.g. a player's handle.")

    @model_validator(mode="after")
    def _check_entity(self) -> Self:
        if self.kind is SpeakerKind.ENTITY and self.entity_id is None:
            raise ValueError("a speaker of kind 'entity' needs entity_id (which entity speaks)")
        if self.kind in (SpeakerKind.GM, SpeakerKind.NARRATOR) and self.entity_id is not None:
            raise ValueError(
                f"a speaker of kind {self.kind.value!r} has no entity_id; use kind 'entity' for an in-world speaker"
            )
        return self


class GenerationMetadata(LorekeeperModel):
    """How a narration was generated."""

    model: Name = Field(description="Model name that generated the text.")
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    cached_prompt_tokens: NonNegativeInt = Field(default=0, description="Prompt tokens served from the prefix cache.")
    latency_ms: NonNegativeFloat = Field(default=0.0, description="Wall time of the generation.")
    time_to_first_token_ms: NonNegativeFloat | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    seed: int | None = None
    finish_reason: Name | None = Field(default=None, description="e.g. 'stop', 'length'.")
    prompt_snapshot_id: Id | None = Field(default=None, description="The PromptSnapshot this generation used.")

    @model_validator(mode="after")
    def _check_counts(self) -> Self:
        if self.cached_prompt_tokens > self.prompt_tokens:
            raise ValueError("cached_prompt_tokens cannot exceed prompt_tokens")
        if self.time_to_first_token_ms is not None and self.time_to_first_token_ms > self.latency_ms:
            raise ValueError("time_to_first_token_ms cannot exceed latency_ms")
        return self


class TurnStatus(StrEnum):
    PENDING = "pending"  # recorded, narration being generated
    ACCEPTED = "accepted"
    FAILED = "failed"
    SUPERSEDED = "superseded"  # replaced (e.g. regenerated after an OOC correction)
    # kept as it was said, with no narration to wait for: a line of an imported transcript
    RECORDED = "recorded"


class Turn(LorekeeperModel):
    """One exchange: the player's input and the narration. Turns form a tree by parent links."""

    id: Id = default_id("turn")
    campaign_id: Id
    branch_id: Id = Field(description="Branch the turn was written on.")
    parent_turn_id: Id | None = Field(default=None, description="Previous turn; null for the first.")
    depth: NonNegativeInt = Field(default=0, description="Distance from the root turn (0 for the first turn).")
    input_mode: InputMode = InputMode.ACTION
    speaker: Speaker = Field(default_factory=lambda: Speaker(kind=SpeakerKind.PLAYER))
    text: TextOrEmpty = Field(default="", description="The player's input; empty only for 'continue'.")
    narration: LongText | None = Field(default=None, description="Narration of the selected take.")
    selected_take_id: Id | None = None
    generation: GenerationMetadata | None = None
    status: TurnStatus = TurnStatus.PENDING
    error: Text | None = Field(default=None, description="Why generation failed (status 'failed').")
    scene_id: Id | None = Field(default=None, description="The scene active when the turn was recorded.")
    ref: Annotated[str, TextRule(500)] | None = Field(
        default=None, description="Source reference of an imported turn (a transcript's line id)."
    )
    story_time: Annotated[str, TextRule(200)] | None = Field(
        default=None, description="When it happened, in the story or at the table (free text)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_turn(self) -> Self:
        if self.parent_turn_id == self.id:
            raise ValueError("a turn cannot be its own parent")
        if self.parent_turn_id is None and self.depth != 0:
            raise ValueError(f"a turn without a parent has depth 0, got {self.depth}")
        if self.parent_turn_id is not None and self.depth == 0:
            raise ValueError("a turn with a parent has depth >= 1")
        if self.input_mode is not InputMode.CONTINUE and not self.text.strip():
            raise ValueError(
                f"input mode {self.input_mode.value!r} needs text; use input_mode 'continue' "
                "to narrate on without input"
            )
        if self.status is TurnStatus.ACCEPTED and not (self.narration and self.narration.strip()):
            raise ValueError("an accepted turn needs its narration")
        if self.status is TurnStatus.FAILED and not self.error:
            raise ValueError("a failed turn needs an error message")
        return self


class Take(LorekeeperModel):
    """An alternate narration of a turn; exactly one take of a turn is selected."""

    id: Id = default_id("take")
    turn_id: Id
    index: NonNegativeInt = Field(default=0, description="Order of generation, from 0.")
    narration: LongText
    selected: bool = False
    generation: GenerationMetadata | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)
    disposition: BranchDisposition | None = Field(
        default=None, description="Set by the GM: retained (kept) or disposable (pruned once the story moved on)."
    )
    archived: bool = Field(default=False, description="Set aside by the GM (kept, listed as archived).")


# ============================================================================================
# checkpoints and snapshots


class WorldStateCheckpointKind(StrEnum):
    """When a world-state checkpoint was taken."""

    BEFORE_USER_INPUT = "before_user_input"
    AFTER_USER_INPUT = "after_user_input"
    AFTER_CHARACTER_ROUND = "after_character_round"
    BEFORE_OOC_MUTATION = "before_ooc_mutation"  # before an out-of-character edit of canon
    MANUAL = "manual"  # named by a user
    BEFORE_RESTORE = "before_restore"  # the world a restore (a retake, a revert) found, so a revert brings it back


#: The kinds taken by the story itself at a turn's boundaries and restores (pruned); the others are named.
AUTOMATIC_CHECKPOINT_KINDS = frozenset(
    {
        WorldStateCheckpointKind.BEFORE_USER_INPUT,
        WorldStateCheckpointKind.AFTER_USER_INPUT,
        WorldStateCheckpointKind.AFTER_CHARACTER_ROUND,
        WorldStateCheckpointKind.BEFORE_RESTORE,
    }
)


class SnapshotKind(StrEnum):
    """When an automatic graph-state snapshot was taken (subset of checkpoint kinds)."""

    BEFORE_USER_INPUT = "before_user_input"
    AFTER_USER_INPUT = "after_user_input"
    AFTER_CHARACTER_ROUND = "after_character_round"
    INTERVAL = "interval"  # every K events along a line of the story, to bound replay


class Checkpoint(LorekeeperModel):
    """A named pointer to a turn, restorable."""

    id: Id = default_id("cp")
    campaign_id: Id
    branch_id: Id
    turn_id: Id
    name: Name
    kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL
    snapshot_id: Id | None = Field(
        default=None, description="The (:Snapshot) node of the state taken with the checkpoint, if any."
    )
    description: Note | None = None
    automatic: bool = Field(
        default=False, description="Taken by the story at a turn's boundary or a restore (pruned); false: named."
    )
    depth: int | None = Field(
        default=None, ge=-1, description="Depth of the position on its branch (a turn's, or its parent's before input)."
    )
    seq: NonNegativeInt | None = Field(
        default=None,
        description="The campaign's commit sequence number when it was taken: the state is the events on the "
        "position's lineage up to it (none: all of them, a checkpoint taken before restores rewound).",
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)


class TurnVersion(LorekeeperModel):
    """A take of a turn that a retake (or a revert) replaced, archived with what went with it."""

    id: Id = default_id("tver")
    campaign_id: Id
    turn_id: Id
    take_id: Id = Field(description="The take replaced (it stays among the turn's takes).")
    narration: LongText
    replaced_by: Id | None = Field(default=None, description="The take that replaced it, once told.")
    proposal_ids: list[Id] = Field(
        default_factory=list, description="What the take proposed that was pending: marked superseded."
    )
    checkpoint_id: Id | None = Field(
        default=None, description="The world as the replacement found it; a revert restores it while not pruned."
    )
    reverted_at: UtcDatetime | None = Field(default=None, description="When a revert brought this version back.")
    created_at: UtcDatetime = Field(default_factory=utc_now)
    disposition: BranchDisposition | None = Field(
        default=None, description="Set by the GM: retained (kept) or disposable (pruned once the story moved on)."
    )


# ============================================================================================
# scenes


class SceneStatus(StrEnum):
    """A scene's status at a position (a scene ends per branch): ``not_begun`` only in a read from a line it has
    not begun on (it began on another branch, or after the position); a stored scene is active or completed."""

    ACTIVE = "active"
    COMPLETED = "completed"
    NOT_BEGUN = "not_begun"


class Scene(LorekeeperModel):
    """A unit of play; proposals made in it are canonized when it ends."""

    id: Id = default_id("scene")
    campaign_id: Id
    branch_id: Id
    order: NonNegativeInt = Field(description="Position of the scene in the campaign, from 0.")
    status: SceneStatus = SceneStatus.ACTIVE
    title: Name | None = None
    location_entity_id: Id | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list)
    summary: LongText | None = None
    canonical_outcomes: list[Text] = Field(
        default_factory=list, description="What became canon when the scene ended, in words."
    )
    start_turn_id: Id | None = None
    end_turn_id: Id | None = None
    started_at: UtcDatetime = Field(default_factory=utc_now)
    ended_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _check_status(self) -> Self:
        if self.status is SceneStatus.COMPLETED and self.ended_at is None:
            raise ValueError("a completed scene needs ended_at")
        if self.status is not SceneStatus.COMPLETED and self.ended_at is not None:
            raise ValueError(f"a scene that is {self.status.value} has no ended_at; set status 'completed'")
        if self.ended_at is not None and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        return self
