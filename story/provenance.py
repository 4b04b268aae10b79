"""Provenance: why the narrator knew what it knew.

A turn keeps exactly what was sent to the model (its prompt snapshot, content-addressed in the blob
store), what retrieval returned and which passages it used, and why parts of its extracted proposals
were repaired or dropped. How a turn is shown is :mod:`story.presentation`'s, kept apart from its
truth; media (:mod:`story.media`) only ever illustrates: it never becomes canon.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.story import (
    PromptSnapshot,
    ProvenancePassage,
    RetrievalRecord,
    TurnProvenance,
)
from schemas.text import STORED
from stores.blob.layout import PROMPTS, RETRIEVALS
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.errors import StoryInvalid
from story.graph import node_props
from story.review import reviews_at_turn


class Provenance:
    """Prompt snapshots, retrieval records and extraction notes."""

    def __init__(self, core: StoryCore) -> None:
        self.core = core
        self.graph = core.graph
        self.blobs = core.blobs
        self.story = core.story

    def record_prompt(self, turn_id: str, prompt_text: str, snapshot: PromptSnapshot) -> PromptSnapshot:
        """Keep exactly what was sent to the model for a turn (text content-addressed in the blob store)."""
        turn = self.story.turn(turn_id)
        if snapshot.turn_id != turn_id:
            raise StoryInvalid(f"the prompt snapshot is for turn {snapshot.turn_id!r}, not {turn_id!r}")
        info = self.blobs.put_content_addressed(prompt_text.encode(), prefix=PROMPTS, content_type="text/plain")
        if snapshot.blob_key is None:
            snapshot = snapshot.validated_copy(blob_key=info.key)
        props = node_props(snapshot, campaign_id=turn.campaign_id, turn_uid=turn_id)
        self.graph.run(*cypher.create_prompt_snapshot(turn_id, props))
        return snapshot

    def record_retrieval(self, record: RetrievalRecord) -> RetrievalRecord:
        """Keep what retrieval returned for a turn, and link the turn to the passages it used."""
        turn = self.story.turn(record.turn_id)
        info = self.blobs.put_content_addressed(
            record.model_dump_json().encode(), prefix=RETRIEVALS, content_type="application/json"
        )
        props = {
            "uid": record.id,
            "campaign_id": turn.campaign_id,
            "turn_uid": turn.id,
            "query": record.query,
            "error": record.error,
            "blob_key": info.key,
            "created_at": record.created_at.isoformat(),
        }
        used = [
            {
                "chunk": h.chunk_id,
                "rank": h.rank,
                "score": h.rerank_score if h.rerank_score is not None else h.fused_score,
            }
            for h in record.hits
            if h.used_in_prompt
        ]
        with self.graph.transaction() as tx:
            tx.run(*cypher.create_retrieval(turn.id, props))
            if used:
                tx.run(*cypher.link_informed_by(turn.id, record.id, used))
        return record

    def provenance(self, turn_id: str) -> TurnProvenance:
        """Why the narrator knew what it knew at a turn: its prompt, retrievals and the passages used."""
        turn = self.story.turn(turn_id)
        prompts = self.story.nodes(cypher.prompt_snapshots_of(turn_id))
        prompt = from_props(PromptSnapshot, prompts[-1], key="id") if prompts else None
        text = self.blobs.get(prompt.blob_key).decode() if prompt and prompt.blob_key else None
        retrievals = [
            RetrievalRecord.model_validate_json(self.blobs.get(r["blob_key"]), context=STORED)
            for r in self.story.nodes(cypher.retrievals_of(turn_id))
        ]
        passages = [
            ProvenancePassage(
                chunk_id=r["chunk"],
                rank=r["rank"],
                score=r["score"],
                item_uid=r["item"],
                title=r["title"],
                page_start=r["ps"],
                page_end=r["pe"],
                heading_path=r["hp"] or [],
            )
            for r in self.graph.run(*cypher.passages_of(turn_id))
        ]
        events = self.graph.run(*cypher.events_of_turn(turn_id))
        return TurnProvenance(
            turn_id=turn.id,
            prompt=prompt,
            prompt_text=text,
            retrievals=retrievals,
            passages=passages,
            canon_event_ids=[r["uid"] for r in events],
            reviews=reviews_at_turn(self.story, turn_id),
        )

    def note_extraction(self, turn_id: str, notes: Sequence[str]) -> None:
        """Record why parts of a turn's extracted proposals were repaired or dropped."""
        self.story.turn(turn_id)
        self.graph.run(*cypher.add_extraction_notes(turn_id, [str(n)[:500] for n in notes]))

    def extraction_notes(self, turn_id: str) -> list[str]:
        return list(self.story.node("Turn", turn_id).get("extraction_notes") or [])
