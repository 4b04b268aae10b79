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

:class:`StoryService` is a facade: each method hands over to the chapter that tells that part of the
story, one concern to a module:

- :mod:`story.campaigns`: worlds, axioms, campaigns, branches, checkpoints, export and import;
- :mod:`story.timeline`: turns, takes, undo and redo, history, the world as of a turn, and
  everything a turn reads before the model runs (:meth:`StoryService.turn_context`);
- :mod:`story.scenes`: scenes, proposals, the gate (:mod:`story.gate`) and retcons;
- :mod:`story.memory`: memories and summaries;
- :mod:`story.recall`: the campaign's recall (the memory index follows the commits);
- :mod:`story.provenance`: prompt snapshots, retrieval records, extraction notes;
- :mod:`story.presentation` and :mod:`story.media`: a turn's presentation, media records and jobs;
- :mod:`story.desk`: the GM's notes, sessions and arcs, pruning, what happened between two turns.

What they share (the stores, the write protocol, lineage) is :mod:`story.core`; every Cypher
statement is in :mod:`story.cypher`; the story's errors (``story: …``) are in :mod:`story.errors`.

Every change to a campaign's story (turns, takes, head moves, branches, checkpoints, commits,
retcons) is one transaction guarded by the campaign's version (:mod:`story.graph`): concurrent
writers in one process queue on a per-campaign lock, writers in other processes retry on
``Conflict``. Undo, redo, retry, restore and switching branches only move pointers; nothing is
deleted but what :meth:`StoryService.delete_branch` is explicitly asked to delete.

Kept whole (about 700 lines): the facade is the one index of what the story can do, one hand-over per
use case grouped by chapter; its length is that list, and the logic lives in the chapters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import structlog

from schemas.campaign import LibraryPin
from schemas.common import Authority
from schemas.media import MediaAsset
from schemas.model_roles import ModelRoles
from schemas.recall import RecallHit, RecallKind
from schemas.retcons import Dependents, RecordRetconAnswer
from schemas.search import SearchFilters
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
    RetrievalRecord,
    Scene,
    Speaker,
    StoryProfile,
    Summary,
    Take,
    Turn,
    TurnPresentation,
    TurnProvenance,
    TurnVersion,
    World,
    WorldStateCheckpointKind,
    WorldStateView,
)
from schemas.triggers import FiredBy
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from story import catch_up, scene_end
from story.axioms import AxiomJudge
from story.bundle import BundleSummary
from story.campaigns import Campaigns
from story.checkpoints import DEFAULT_KEPT, Checkpoints
from story.context import TurnContext
from story.core import Build, StoryCore
from story.desk import Desk
from story.errors import StoryInvalid
from story.formation import ExtractiveFormer, SceneMemoryFormer
from story.graph import CampaignContext
from story.house_rules import HouseRule, house_rules
from story.importing import Progress, TranscriptImport, TranscriptImporter
from story.lineage import Lineage
from story.live import LiveView
from story.media import Media
from story.memory import Memories
from story.policy import GatePolicy
from story.presentation import Presentations
from story.provenance import Provenance
from story.recall import Recollection, Unreadable
from story.recall_index import RecallIndex
from story.recall_sync import Reconciled, reconcile, sync_scene
from story.retcons import Retcons
from story.review import Reviews
from story.scene_end import Formation
from story.scenes import Scenes
from story.snapshots import DEFAULT_SNAPSHOT_INTERVAL
from story.state import WorldState
from story.threads import Threads
from story.timeline import Timeline
from story.transcripts import Transcript
from story.triggers import Triggers
from story.versions import Versions

T = TypeVar("T")

log = structlog.get_logger(__name__)


class StoryService:
    """Campaigns, their story tree, scenes, proposals, the gate, canon and provenance.

    Args:
        graph: the graph store (system of record).
        blobs: the blob store (snapshots, prompts, retrieval records, presentation).
        policy: how the gate judges proposals (settable later: ``service.policy = ...``).
        snapshot_interval: events between state snapshots along a line of the story.
        max_retries: how often a write retries after losing a race to another process.
        recall: the memory index the campaign's past is written to and recalled from; None turns
            recall off (the story engine alone).
    """

    def __init__(
        self,
        graph: GraphStore,
        blobs: BlobStore,
        *,
        policy: GatePolicy | None = None,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        max_retries: int = 200,
        recall: RecallIndex | None = None,
        checkpoints_kept: int = DEFAULT_KEPT,
    ) -> None:
        core = StoryCore(
            graph, blobs, policy=policy or GatePolicy(), snapshot_interval=snapshot_interval, max_retries=max_retries
        )
        self._core = core
        self.graph = graph
        self.blobs = blobs
        self.story = core.story
        self.snapshots = core.snapshots
        self._campaigns = Campaigns(core)
        self._timeline = Timeline(core, Versions(core, Checkpoints(core, keep=checkpoints_kept)))
        self.versions = self._timeline.versions
        """Rewinds, turn versions, reverts and the checkpoints (``versions.checkpoints``): :mod:`story.versions`."""
        self._scenes = Scenes(core, self._campaigns)
        self.reviews = Reviews(core, self._scenes)
        """The GM's reviews of pending proposals and the queue with the gate's dry run: :mod:`story.review`."""
        self.threads = Threads(self._scenes, self._timeline.state)
        self.triggers = Triggers(self._scenes)
        """The GM's triggers, fired at each turn and scene end, and their activations: :mod:`story.triggers`."""
        """Threads opened, advanced, resolved and abandoned by the GM, listed as of a turn: :mod:`story.threads`."""
        self._memories = Memories(core)
        self._provenance = Provenance(core)
        self.media = Media(core)
        """Media records and media jobs (engine: ``media.engine``, default none): :mod:`story.media`."""
        self.presentations = Presentations(core, self.media, self._timeline.state)
        """Turn presentations, versioned and regenerable from the selected take: :mod:`story.presentation`."""
        self._recall = Recollection(core, recall)
        self.memory_former: SceneMemoryFormer | None = ExtractiveFormer()
        """Forms the memories of those present and the summary when a scene ends (None: none form)."""
        self.desk = Desk(
            core,
            recall,
            campaigns=self._campaigns,
            state=self._timeline.state,
            add_summary=self.add_summary,
            former=lambda: self.memory_former,
        )
        """The GM's desk: notes on scenes, sessions and arcs, take dispositions and pruning: :mod:`story.desk`."""

    @property
    def policy(self) -> GatePolicy:
        return self._core.policy

    @policy.setter
    def policy(self, policy: GatePolicy) -> None:
        self._core.policy = policy

    @property
    def axiom_judge(self) -> AxiomJudge | None:
        """Reads proposals against the world's axioms at the gate (None: the report lists them unchecked)."""
        return self._scenes.axiom_judge

    @axiom_judge.setter
    def axiom_judge(self, judge: AxiomJudge | None) -> None:
        self._scenes.axiom_judge = judge

    @property
    def max_retries(self) -> int:
        return self._core.max_retries

    @max_retries.setter
    def max_retries(self, value: int) -> None:
        self._core.max_retries = value

    def prepare(self) -> None:
        """Create the graph's constraints and indexes and the blob bucket (idempotent).

        The commit lock relies on the uniqueness constraints: call this once at start-up.
        """
        self.graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        self.blobs.ensure_bucket()

    def _mutate(self, campaign_id: str, kind: str, build: Build[T], *, allow_archived: bool = False) -> T:
        """One change to a campaign's story (see :meth:`story.core.StoryCore.mutate`)."""
        return self._core.mutate(campaign_id, kind, build, allow_archived=allow_archived)

    def _lineage_for(self, ctx: CampaignContext, turn_id: str | None, branch_id: str | None = None) -> Lineage:
        return self._core.lineage_for(ctx, turn_id, branch_id)

    # -- worlds, campaigns, branches, checkpoints (story.campaigns) -------------------------------

    def create_world(self, name: str, *, description: str | None = None, axioms: Sequence[str] = ()) -> World:
        return self._campaigns.create_world(name, description=description, axioms=axioms)

    def get_world(self, world_id: str) -> World:
        return self._campaigns.get_world(world_id)

    def add_axiom(
        self,
        world_id: str,
        text: str,
        *,
        category: str | None = None,
        authority: Authority = Authority.GM,
        evidence: Evidence | None = None,
    ) -> Axiom:
        return self._campaigns.add_axiom(world_id, text, category=category, authority=authority, evidence=evidence)

    def axioms(self, world_id: str) -> list[Axiom]:
        return self._campaigns.axioms(world_id)

    def create_campaign(
        self,
        world_id: str,
        name: str,
        profile: StoryProfile,
        *,
        narrator_rules: Sequence[str] = (),
        library_pins: Sequence[LibraryPin] = (),
        model_roles: ModelRoles | None = None,
    ) -> Campaign:
        return self._campaigns.create_campaign(
            world_id, name, profile, narrator_rules=narrator_rules, library_pins=library_pins, model_roles=model_roles
        )

    def get_campaign(self, campaign_id: str) -> Campaign:
        return self._campaigns.get_campaign(campaign_id)

    def set_library_pins(self, campaign_id: str, pins: Sequence[LibraryPin]) -> Campaign:
        return self._campaigns.set_library_pins(campaign_id, pins)

    def set_model_roles(self, campaign_id: str, roles: ModelRoles) -> Campaign:
        return self._campaigns.set_model_roles(campaign_id, roles)

    def knowledge_filters(self, campaign_id: str) -> SearchFilters:
        return self._campaigns.knowledge_filters(campaign_id)

    def list_campaigns(self, world_id: str | None = None) -> list[Campaign]:
        return self._campaigns.list_campaigns(world_id)

    def archive_campaign(self, campaign_id: str, archived: bool = True) -> None:
        self._campaigns.archive_campaign(campaign_id, archived)

    def branches(self, campaign_id: str, *, include_archived: bool = False) -> list[Branch]:
        return self._campaigns.branches(campaign_id, include_archived=include_archived)

    def create_branch(self, campaign_id: str, from_turn_id: str, *, name: str | None = None) -> Branch:
        return self._campaigns.create_branch(campaign_id, from_turn_id, name=name)

    def switch_branch(self, campaign_id: str, branch_id: str) -> Campaign:
        return self._campaigns.switch_branch(campaign_id, branch_id)

    def set_disposition(self, campaign_id: str, branch_id: str, disposition: BranchDisposition) -> Branch:
        return self._campaigns.set_disposition(campaign_id, branch_id, disposition)

    def archive_branch(self, campaign_id: str, branch_id: str, archived: bool = True) -> None:
        self._campaigns.archive_branch(campaign_id, branch_id, archived)

    def delete_branch(self, campaign_id: str, branch_id: str) -> int:
        return self._campaigns.delete_branch(campaign_id, branch_id)

    def create_checkpoint(
        self,
        campaign_id: str,
        name: str,
        *,
        turn_id: str | None = None,
        kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL,
        description: str | None = None,
    ) -> Checkpoint:
        return self.versions.checkpoints.create(campaign_id, name, turn_id=turn_id, kind=kind, description=description)

    def checkpoints(self, campaign_id: str, *, automatic: bool | None = None) -> list[Checkpoint]:
        return self.versions.checkpoints.list(campaign_id, automatic=automatic)

    def restore_checkpoint(self, campaign_id: str, checkpoint_id: str) -> Campaign:
        return self.versions.checkpoints.restore(campaign_id, checkpoint_id)

    def revert_turn_version(self, campaign_id: str, turn_id: str, version_id: str) -> TurnVersion:
        version = self.versions.revert(campaign_id, turn_id, version_id)
        self._recall.turn_told(turn_id)
        return version

    def prune_checkpoints(self, campaign_id: str, *, keep_turns: int = 20) -> int:
        return self._campaigns.prune_checkpoints(campaign_id, keep_turns=keep_turns)

    def export_campaign(
        self, campaign_id: str, dest: Path | IO[bytes], *, include_knowledge: bool = False
    ) -> BundleSummary:
        return self._campaigns.export_campaign(campaign_id, dest, include_knowledge=include_knowledge)

    def import_campaign(self, source: Path | IO[bytes] | bytes) -> Campaign:
        """Import a campaign bundle, then index its recall from the graph (online: recall answers at once)."""
        campaign = self._campaigns.import_campaign(source)
        if self._recall.index is not None:
            self.reconcile_recall(campaign.id)
        return campaign

    # -- turns, takes, the head, history and state (story.timeline) -------------------------------

    def add_turn(
        self,
        campaign_id: str,
        text: str = "",
        *,
        input_mode: InputMode = InputMode.ACTION,
        speaker: Speaker | None = None,
        narration: str | None = None,
        ref: str | None = None,
        story_time: str | None = None,
    ) -> Turn:
        turn = self._timeline.add_turn(
            campaign_id,
            text,
            input_mode=input_mode,
            speaker=speaker,
            narration=narration,
            ref=ref,
            story_time=story_time,
        )
        if turn.narration is not None:
            self._recall.turn_recorded(turn)
        self.triggers.evaluate(turn, FiredBy.TURN)
        return turn

    def get_turn(self, turn_id: str) -> Turn:
        return self._timeline.get_turn(turn_id)

    def add_take(self, turn_id: str, narration: str, *, generation: Any = None, select: bool = True) -> Take:
        take = self._timeline.add_take(turn_id, narration, generation=generation, select=select)
        if select:
            self._recall.turn_told(turn_id)
        return take

    def select_take(self, turn_id: str, take_id: str) -> Take:
        take = self._timeline.select_take(turn_id, take_id)
        self._recall.turn_told(turn_id)
        return take

    def takes(self, turn_id: str, *, include_archived: bool = False) -> list[Take]:
        return self._timeline.takes(turn_id, include_archived=include_archived)

    def undo(self, campaign_id: str) -> Campaign:
        return self._timeline.undo(campaign_id)

    def redo(self, campaign_id: str) -> Campaign:
        return self._timeline.redo(campaign_id)

    def history(
        self,
        campaign_id: str,
        *,
        turn_id: str | None = None,
        branch_id: str | None = None,
        last: int | None = None,
    ) -> list[Turn]:
        return self._timeline.history(campaign_id, turn_id=turn_id, branch_id=branch_id, last=last)

    def state(self, campaign_id: str, *, turn_id: str | None = None, branch_id: str | None = None) -> WorldStateView:
        return self._timeline.state(campaign_id, turn_id=turn_id, branch_id=branch_id)

    def world_state(self, campaign_id: str, *, turn_id: str | None = None) -> WorldState:
        return self._timeline.world_state(campaign_id, turn_id=turn_id)

    def happenings(
        self, campaign_id: str, *, about: str | None = None, before_turn: str | None = None
    ) -> list[dict[str, Any]]:
        return self._timeline.happenings(campaign_id, about=about, before_turn=before_turn)

    def live_world(self, campaign_id: str) -> LiveView:
        return self._timeline.live_world(campaign_id)

    def turn_context(self, campaign_id: str, *, turn: Turn, recent: int) -> TurnContext:
        return self._timeline.turn_context(campaign_id, turn=turn, recent=recent)

    # -- scenes, proposals, the gate and retcons (story.scenes) -----------------------------------

    def start_scene(
        self,
        campaign_id: str,
        *,
        title: str | None = None,
        location_entity_id: str | None = None,
        participant_entity_ids: Sequence[str] = (),
    ) -> Scene:
        return self._scenes.start_scene(
            campaign_id,
            title=title,
            location_entity_id=location_entity_id,
            participant_entity_ids=participant_entity_ids,
        )

    def get_scene(self, scene_id: str, *, branch_id: str | None = None, turn_id: str | None = None) -> Scene:
        """A scene as read at a position, the head by default: :meth:`Scenes.get_scene`."""
        return self._scenes.get_scene(scene_id, branch_id=branch_id, turn_id=turn_id)

    def scene_record(self, scene_id: str) -> Scene:
        """A scene as its node stores it: :meth:`Scenes.scene_record`."""
        return self._scenes.scene_record(scene_id)

    def active_scene(
        self, campaign_id: str, *, branch_id: str | None = None, turn_id: str | None = None
    ) -> Scene | None:
        return self._scenes.active_scene(campaign_id, branch_id=branch_id, turn_id=turn_id)

    def scenes(self, campaign_id: str, *, branch_id: str | None = None, turn_id: str | None = None) -> list[Scene]:
        """The campaign's scenes, each as read at a position: :meth:`Scenes.scenes`."""
        return self._scenes.scenes(campaign_id, branch_id=branch_id, turn_id=turn_id)

    def propose(self, scene_id: str, **fields: Any) -> ProposedChange:
        return self._scenes.propose(scene_id, **fields)

    def review(self, proposal_id: str, reviewer: str, **review: Any) -> ProposedChange:
        """Review a pending proposal (``action``, ``rationale``, ``content``: :meth:`story.review.Reviews.review`)."""
        return self.reviews.review(proposal_id, reviewer, **review)

    def get_proposal(self, proposal_id: str) -> ProposedChange:
        return self._scenes.get_proposal(proposal_id)

    def proposals(self, scene_id: str, status: ProposalStatus | None = None) -> list[ProposedChange]:
        return self._scenes.proposals(scene_id, status)

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        return self._scenes.commit(scene_id, proposal_ids)

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport:
        """End a scene: the gate's canon, then the summary and memories it forms (:mod:`story.scene_end`).

        Ending a completed scene again answers ``already_completed``; if a crash cut its end short, the
        end is finished now.
        """
        report = self._scenes.end_scene(scene_id, summary=summary)
        self.finish_scene_end(scene_id)
        if (head := self.get_campaign(self._scenes.scene_record(scene_id).campaign_id).head_turn_id) is not None:
            self.triggers.evaluate(self.get_turn(head), FiredBy.SCENE_END)
        return report

    def finish_scene_end(self, scene_id: str) -> Formation | None:
        """Form and commit what a completed scene's end forms if that is still to do (never raising for
        the former's sake), then index the scene's records the recall index misses."""
        if not scene_end.end_pending(self, scene_id):
            return None
        formation = scene_end.finish_scene_end(self, scene_id)
        sync_scene(self._recall, self._scenes.scene_record(scene_id).campaign_id, scene_id)
        return formation

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
        """Declare a fact never was (or replace its value) on the head's branch: :meth:`Scenes.retcon`.

        Raises:
            StoryInvalid: declared with an authority other than gm or source (a retcon is a ruling).
        """
        if authority not in (Authority.GM, Authority.SOURCE):
            raise StoryInvalid(f"a retcon is declared with gm (or source) authority, not {authority.value}")
        new_id = self._scenes.retcon(
            campaign_id,
            fact_id,
            reason=reason,
            value=value,
            object_entity_id=object_entity_id,
            authority=authority,
            evidence=evidence,
        )
        if self._recall.index is not None:  # the old outcome out of recall, the replacing fact in
            self.reconcile_recall(campaign_id)
        return new_id

    def house_rules(self, campaign_id: str, *, turn_id: str | None = None) -> list[HouseRule]:
        """The GM's rulings against the rulebook in force as of the head (or a turn): :mod:`story.house_rules`."""
        self._campaigns.get_campaign(campaign_id)  # a missing campaign is not one without house rules
        return house_rules(self._core, campaign_id, turn_id=turn_id)

    def dependents(self, campaign_id: str, fact_id: str) -> list[str]:
        return self._scenes.dependents(campaign_id, fact_id)

    def record_dependents(self, campaign_id: str, record_id: str) -> Dependents:
        """What current canon rests on a record of any kind: :meth:`story.retcons.Retcons.dependents`."""
        return Retcons(self._scenes).dependents(campaign_id, record_id)

    def retcon_record(self, campaign_id: str, record_id: str, **retcon: Any) -> RecordRetconAnswer:
        """Retcon a record of any kind (:meth:`story.retcons.Retcons.retcon`), then bring recall in line."""
        answer = Retcons(self._scenes).retcon(campaign_id, record_id, **retcon)
        if self._recall.index is not None:
            self.reconcile_recall(campaign_id)
        return answer

    # -- memories and summaries (story.memory) ------------------------------------------------------

    def memory_anchor(self, campaign_id: str, anchor_turn_id: str | None = None) -> str:
        """The turn a new memory belongs to: the one named, else the campaign's head.

        Raises:
            StoryInvalid: none named and the campaign has no turn yet.
        """
        if anchor_turn_id is not None:
            return anchor_turn_id
        head = self._campaigns.get_campaign(campaign_id).head_turn_id
        if head is None:
            raise StoryInvalid(f"campaign {campaign_id!r} has no turn yet to anchor a memory to")
        return head

    def add_memory(self, memory: Memory) -> Memory:
        memory = self._memories.add_memory(memory)
        self._recall.memory_added(memory)
        return memory

    def add_summary(self, summary: Summary) -> Summary:
        summary = self._memories.add_summary(summary)
        self._recall.summary_added(summary)
        return summary

    def memories(
        self,
        campaign_id: str,
        *,
        observer_entity_id: str | None = None,
        turn_id: str | None = None,
        branch_id: str | None = None,
    ) -> list[Memory]:
        return self._memories.memories(
            campaign_id, observer_entity_id=observer_entity_id, turn_id=turn_id, branch_id=branch_id
        )

    def summaries(self, campaign_id: str, *, turn_id: str | None = None, branch_id: str | None = None) -> list[Summary]:
        return self._memories.summaries(campaign_id, turn_id=turn_id, branch_id=branch_id)

    def get_memory(self, campaign_id: str, memory_id: str) -> Memory:
        return self._memories.get_memory(campaign_id, memory_id)

    def retract_memory(self, campaign_id: str, memory_id: str, *, reason: str) -> Memory:
        """Withdraw a memory (kept in the graph, marked retracted) and take it out of recall."""
        memory = self._memories.retract_memory(campaign_id, memory_id, reason=reason)
        self._recall.memory_retracted(memory.id)
        return memory

    # -- recall (story.recall) ------------------------------------------------------------------------

    @property
    def recall_index(self) -> RecallIndex | None:
        """The memory index this service writes to and recalls from (None: recall is off)."""
        return self._recall.index

    def recall(
        self,
        campaign_id: str,
        query: str,
        *,
        as_of_turn_id: str | None = None,
        branch_id: str | None = None,
        observer_entity_id: str | None = None,
        kinds: Sequence[RecallKind] | None = None,
        limit: int = 10,
        wait_for_turns: bool = True,
    ) -> list[RecallHit]:
        return self._recall.recall(
            campaign_id,
            query,
            as_of_turn_id=as_of_turn_id,
            branch_id=branch_id,
            observer_entity_id=observer_entity_id,
            kinds=kinds,
            limit=limit,
            wait_for_turns=wait_for_turns,
        )

    def rebuild_recall(self, campaign_id: str, *, unreadable: Unreadable | None = None) -> int:
        """Rebuild a campaign's recall from the graph (``unreadable``: told of, and skipping, a record that
        cannot be read; without it such a record raises)."""
        return self._recall.rebuild(campaign_id, unreadable=unreadable)

    def finish_scene_ends(self) -> int:
        """Finish every scene end a crash (or a failed former) left pending (:mod:`story.catch_up`)."""
        return catch_up.finish_scene_ends(self)

    def reconcile_recall(self, campaign_id: str) -> Reconciled:
        """Bring a campaign's recall index in line with its graph (:func:`story.recall_sync.reconcile`)."""
        return reconcile(self._recall, campaign_id)

    def catch_up(self) -> list[Reconciled]:
        """What the server runs at start-up (:func:`story.catch_up.catch_up`)."""
        return catch_up.catch_up(self)

    def import_transcript(
        self,
        transcript: Transcript,
        name: str,
        *,
        world_id: str | None = None,
        profile: StoryProfile | None = None,
        on_progress: Progress | None = None,
        summaries: bool = True,
    ) -> tuple[Campaign, TranscriptImport]:
        """A new campaign whose turns are a transcript's lines, indexed for recall in bulk (:mod:`story.importing`).

        With ``summaries`` (and a memory former, as scene ends use), each session gets its scene summary. A
        failed or killed import leaves the campaign marked unfinished: :meth:`resume_transcript_import`.
        """
        importer = self._importer(summaries)
        return importer.run(transcript, name, world_id=world_id, profile=profile, on_progress=on_progress)

    def resume_transcript_import(
        self, transcript: Transcript, campaign_id: str | None = None, *, on_progress: Progress | None = None
    ) -> tuple[Campaign, TranscriptImport]:
        """Finish an unfinished import of ``transcript`` (by default the one of its lines) without duplicates."""
        return self._importer(True).resume(transcript, campaign_id, on_progress=on_progress)

    def discard_transcript_import(self, campaign_id: str) -> None:
        """Delete an unfinished transcript import's campaign whole (a finished campaign is refused)."""
        self._importer(False).discard(campaign_id)

    def _importer(self, summaries: bool) -> TranscriptImporter:
        return TranscriptImporter(
            self._core,
            self._campaigns,
            self._scenes,
            self._recall.index,
            memories=self._memories,
            former=self.memory_former if summaries else None,
        )

    # -- provenance, presentation and media (story.provenance, story.presentation, story.media) -------

    def record_prompt(self, turn_id: str, prompt_text: str, snapshot: PromptSnapshot) -> PromptSnapshot:
        return self._provenance.record_prompt(turn_id, prompt_text, snapshot)

    def record_retrieval(self, record: RetrievalRecord) -> RetrievalRecord:
        return self._provenance.record_retrieval(record)

    def provenance(self, turn_id: str) -> TurnProvenance:
        return self._provenance.provenance(turn_id)

    def note_extraction(self, turn_id: str, notes: Sequence[str]) -> None:
        self._provenance.note_extraction(turn_id, notes)

    def extraction_notes(self, turn_id: str) -> list[str]:
        return self._provenance.extraction_notes(turn_id)

    def set_presentation(self, presentation: TurnPresentation) -> TurnPresentation:
        return self.presentations.set(presentation)

    def presentation(self, turn_id: str) -> TurnPresentation | None:
        return self.presentations.current(turn_id)

    def attach_media(self, scene_id: str, asset: MediaAsset) -> MediaAsset:
        return self.media.attach_to_scene(scene_id, asset)

    def scene_media(self, scene_id: str) -> list[MediaAsset]:
        return self.media.scene_media(scene_id)
