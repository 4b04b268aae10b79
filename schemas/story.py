"""The story side: worlds, campaigns, the turn tree, scenes, proposals and canon.

Story history is a tree: turns link to their parent; branches name lines through it; a turn has
alternate takes with one selected; checkpoints are named pointers to turns. Turns only *propose*
changes (:class:`ProposedChange`); the canonization gate turns accepted
ones into typed state events (:mod:`schemas.events`) and canon (:class:`Fact`, :class:`Entity`,
:class:`Relationship`, :class:`StoryThread`). Nothing canonical is deleted: a retcon supersedes.

The models live in :mod:`schemas.campaign` (worlds, campaigns, branches, turns, takes, checkpoints,
scenes), :mod:`schemas.canon` (entities, facts, axioms, relationships, threads, world state),
:mod:`schemas.proposals` (dice, resolutions, proposals, issues, the gate's report) and
:mod:`schemas.narration` (memories, summaries, prompts, retrieval, presentation, provenance); this
module re-exports every one of them, so ``from schemas.story import X`` is the way to import them.
"""

from schemas.campaign import (
    AUTOMATIC_CHECKPOINT_KINDS,
    Branch,
    BranchDisposition,
    Campaign,
    Checkpoint,
    GenerationMetadata,
    InputMode,
    PointOfView,
    Scene,
    SceneStatus,
    SnapshotKind,
    Speaker,
    SpeakerKind,
    StoryProfile,
    Take,
    Tense,
    Turn,
    TurnStatus,
    TurnVersion,
    World,
    WorldStateCheckpointKind,
)
from schemas.canon import (
    Axiom,
    Entity,
    Evidence,
    Fact,
    Relationship,
    RelationshipStatus,
    StoryThread,
    ThreadStatus,
    WorldStateView,
)

# Not story models, but importable from here before the models moved out (serve/mcp.py imports
# Authority from here): kept as explicit re-exports so those imports keep working.
from schemas.common import AttributeValue as AttributeValue
from schemas.common import Authority as Authority
from schemas.common import BlobKey as BlobKey
from schemas.common import CanonLevel as CanonLevel
from schemas.common import Confidence as Confidence
from schemas.common import EntityKind as EntityKind
from schemas.common import EntityStatus as EntityStatus
from schemas.common import FactStatus as FactStatus
from schemas.common import Id as Id
from schemas.common import LorekeeperModel as LorekeeperModel
from schemas.common import Name as Name
from schemas.common import Sha256Hex as Sha256Hex
from schemas.common import Text as Text
from schemas.common import UtcDatetime as UtcDatetime
from schemas.common import new_id as new_id
from schemas.common import utc_now as utc_now
from schemas.events import StateEventList as StateEventList
from schemas.narration import (
    DialogueBlock,
    DiceRollBlock,
    ImageBlock,
    Memory,
    NarrationBlock,
    PresentationBlock,
    PromptSection,
    PromptSectionKind,
    PromptSnapshot,
    ProvenancePassage,
    RecalledHit,
    RetrievalHit,
    RetrievalLeg,
    RetrievalRecord,
    RetrievalSource,
    SubjectiveKind,
    Summary,
    SummaryScope,
    SystemNoteBlock,
    TurnPresentation,
    TurnProvenance,
)
from schemas.proposals import (
    ChangeType,
    DiceRoll,
    EventIssue,
    GateReport,
    IssueSeverity,
    ProposalContent,
    ProposalDecision,
    ProposalReview,
    ProposalStatus,
    ProposedChange,
    ProposedEntity,
    ProposedEvent,
    ProposedFact,
    ProposedRelationship,
    ProposedStateChange,
    Resolution,
    ResolutionMethod,
    ResolutionOutcome,
    ReviewAction,
)

__all__ = [
    "Axiom",
    "Branch",
    "BranchDisposition",
    "Campaign",
    "ChangeType",
    "Checkpoint",
    "DialogueBlock",
    "DiceRoll",
    "DiceRollBlock",
    "Entity",
    "EventIssue",
    "Evidence",
    "Fact",
    "GateReport",
    "GenerationMetadata",
    "ImageBlock",
    "InputMode",
    "IssueSeverity",
    "Memory",
    "NarrationBlock",
    "PointOfView",
    "PresentationBlock",
    "PromptSection",
    "PromptSectionKind",
    "PromptSnapshot",
    "ProposalDecision",
    "ProvenancePassage",
    "ProposalContent",
    "ProposalReview",
    "ProposalStatus",
    "ProposedChange",
    "ProposedEntity",
    "ProposedEvent",
    "ProposedFact",
    "ProposedRelationship",
    "ProposedStateChange",
    "RecalledHit",
    "Relationship",
    "RelationshipStatus",
    "Resolution",
    "ResolutionMethod",
    "ResolutionOutcome",
    "RetrievalHit",
    "RetrievalLeg",
    "RetrievalRecord",
    "RetrievalSource",
    "ReviewAction",
    "Scene",
    "SceneStatus",
    "SnapshotKind",
    "Speaker",
    "SpeakerKind",
    "StoryProfile",
    "StoryThread",
    "SubjectiveKind",
    "Summary",
    "SummaryScope",
    "SystemNoteBlock",
    "Take",
    "Tense",
    "ThreadStatus",
    "Turn",
    "TurnPresentation",
    "TurnProvenance",
    "TurnStatus",
    "World",
    "WorldStateCheckpointKind",
    "TurnVersion",
    "AUTOMATIC_CHECKPOINT_KINDS",
    "WorldStateView",
]
