"""The product's graph schema: a unique ``uid`` on every node label, indexes on what is looked up often.

Every node the product writes carries a ``uid`` (a graph id is the only cross-store reference, see the
architecture brief), so each label gets a uniqueness constraint on it: a second ``CREATE`` of the same
entity raises ``Conflict`` instead of silently duplicating canon. Writers use ``MERGE`` on ``uid``.
"""

from __future__ import annotations

from stores.graph.base import GraphSchema, PropertyIndex, UniqueConstraint

#: Every node label of the product, each with a unique ``uid``.
NODE_LABELS: tuple[str, ...] = (
    # library: what was ingested
    "Library",
    "Collection",
    "Item",
    "Chunk",
    "Concept",
    "ImageAsset",
    "IngestJob",
    "SourceFact",
    # story lineage
    "World",
    "Campaign",
    "Branch",
    "Turn",
    "Take",
    "TurnVersion",
    "Scene",
    "Checkpoint",
    "ProposedChange",
    "ProposalReview",
    "StateEvent",
    "Commit",
    "Resolution",
    "PromptSnapshot",
    "Retrieval",
    "MediaAsset",
    # canon
    "Entity",
    "Fact",
    "Axiom",
    "Relationship",
    "StoryThread",
    "Happening",
    "Memory",
    "Summary",
    "Snapshot",
    "LiveEntity",
    "ApiKey",
)

#: Properties that queries filter on besides ``uid`` (dedup on re-ingest, lineage walks, gate checks).
INDEXED_PROPERTIES: tuple[tuple[str, str], ...] = (
    ("Item", "content_hash"),  # idempotent re-ingest: same bytes, same item
    ("Item", "source_ref"),  # the path / s3 key a file came from
    ("Item", "library_uid"),
    ("Chunk", "item_uid"),  # all chunks of an item (reindex, delete)
    ("Chunk", "content_hash"),
    ("Concept", "normalized_name"),
    ("SourceFact", "subject_key"),  # the gate reads the facts of the entries a scene's proposals touch
    ("SourceFact", "item_uid"),
    ("IngestJob", "status"),
    ("IngestJob", "source"),  # a calling system's jobs, and its id for a file (GET /library/jobs?source=)
    ("IngestJob", "source_ref"),
    ("Campaign", "world_uid"),
    ("Branch", "campaign_id"),
    ("Turn", "campaign_id"),
    ("Turn", "parent_uid"),  # the turn tree is walked by parent links
    ("Take", "turn_uid"),
    ("TurnVersion", "turn_id"),  # a turn's archived versions (retake, revert)
    ("Scene", "campaign_id"),
    ("Checkpoint", "campaign_id"),
    ("ProposedChange", "scene_uid"),
    ("ProposedChange", "status"),
    ("ProposalReview", "proposal_uid"),  # a proposal's reviews (provenance)
    ("StateEvent", "turn_uid"),
    ("StateEvent", "branch_id"),  # replay: the events of one segment of a lineage
    ("StateEvent", "campaign_id"),
    ("Snapshot", "campaign_id"),
    ("Memory", "campaign_id"),
    ("Summary", "campaign_id"),
    ("Turn", "branch_id"),  # the turn at a depth of a branch (redo, history)
    ("Turn", "scene_id"),  # a scene's turns (recall's repair at scene end)
    ("Fact", "campaign_id"),
    ("Entity", "campaign_id"),
    ("LiveEntity", "campaign_id"),
    ("Entity", "world_uid"),
    ("Entity", "normalized_name"),
    ("Fact", "status"),
    ("Fact", "subject_uid"),
    ("Relationship", "world_uid"),
    ("StoryThread", "campaign_id"),
    ("Memory", "anchor_turn_uid"),
    ("Summary", "anchor_turn_uid"),
    ("Snapshot", "turn_uid"),
)

LOREKEEPER_GRAPH_SCHEMA = GraphSchema(
    constraints=tuple(UniqueConstraint(label, "uid") for label in NODE_LABELS),
    indexes=tuple(PropertyIndex(label, prop) for label, prop in INDEXED_PROPERTIES),
)
