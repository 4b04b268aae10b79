"""The story engine: lineage and head, events and snapshots, scenes, proposals, the gate, retcons, checkpoints."""
