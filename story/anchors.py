"""Where the gate anchors each proposal's canon: at the turn it names, on the line of the head.

A proposal extracted from turn T says something happened at T, so its canon is anchored at T's depth
(on the branch the gate writes to), not at the head: an undo or a fork back to T or after it keeps it,
one before T does not. Two refinements keep the world at each turn whole:

- a proposal naming a turn off the head's line (another branch's, or one ahead of the head after an
  undo) is not judged here: it waits for its own line (a commit naming it is refused);
- canon never comes before what it is about: a proposal is anchored no earlier than the turns at which
  the entities it touches came into the story (those created earlier in the same batch included).

Proposals that name no turn are anchored at the head, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.events import EntityCreated
from schemas.story import ProposedChange
from story import cypher
from story.graph import StoryGraph
from story.lineage import Lineage
from story.policy import proposal_events
from story.state import WorldState


@dataclass(slots=True)
class Anchors:
    """The proposals the gate judges at the head, the depth each is anchored at, and those off the line."""

    judged: list[ProposedChange] = field(default_factory=list)
    depths: dict[str, int] = field(default_factory=dict)  # proposal id -> anchor depth (absent: the head)
    off_line: list[str] = field(default_factory=list)


def anchor_proposals(
    story: StoryGraph, lineage: Lineage, pending: Sequence[ProposedChange], state: WorldState
) -> Anchors:
    """Sort ``pending`` (in gate order) into those on ``lineage`` (the head's) with their anchors, and the rest.

    ``state`` is the world at the head: the turns its entities came in at bound the anchors from below.
    """
    events = {p.id: proposal_events(p, turn_id=p.turn_id, scene_id="anchor") for p in pending if p.turn_id is not None}
    touched = {entity_id for batch in events.values() for event in batch for entity_id in event.entity_ids}
    born = {state.entities[e].get("created_turn_id") for e in touched if e in state.entities}
    wanted = sorted({p.turn_id for p in pending if p.turn_id is not None} | {t for t in born if t})
    rows = story.nodes(cypher.nodes_by_uid("Turn", wanted)) if wanted else []
    depth_of = {r["uid"]: int(r["depth"]) for r in rows if lineage.contains(r["branch_id"], int(r["depth"]))}
    out = Anchors()
    created: dict[str, int] = {}  # entities created by the batch -> their anchor
    for proposal in pending:
        if proposal.turn_id is None:
            out.judged.append(proposal)
            continue
        if proposal.turn_id not in depth_of:
            out.off_line.append(proposal.id)
            continue
        depth = depth_of[proposal.turn_id]
        for event in events[proposal.id]:
            for entity_id in event.entity_ids:
                if entity_id in created:
                    depth = max(depth, created[entity_id])
                elif (entity := state.entities.get(entity_id)) is not None:
                    depth = max(depth, depth_of.get(entity.get("created_turn_id") or "", -1))
            if isinstance(event, EntityCreated):
                created[event.entity_id] = depth
        out.judged.append(proposal)
        out.depths[proposal.id] = depth
    return out
