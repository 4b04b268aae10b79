"""Typed reference checks: what a request names must be there, at its position, and of the right kind.

A turn's speaker, a scene's location and participants, a memory's observer, subjects and anchor: each
names an entity (or a turn) of the campaign, and each role takes some kinds only. A reference that is
not there, or names the wrong kind (a character as a scene's location, a building as a memory's
observer), is refused with an :class:`~story.errors.InvalidReference` that names the request's field
(400), before anything is written. Entities are looked up in the world at the position the record
takes (the head for a turn or a scene, the anchor turn for a memory), so an entity that comes into
the story later cannot be named earlier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.common import EntityKind, EntityStatus
from schemas.story import Speaker, SpeakerKind, Turn
from story.errors import InvalidReference
from story.rules import PLACE_KINDS
from story.state import WorldState

#: Kinds of entity that speak, act in a turn and remember: beings.
BEING_KINDS = frozenset({EntityKind.CHARACTER.value, EntityKind.CREATURE.value})


def entity_of(state: WorldState, entity_id: str, field: str, *, kinds: frozenset[str] | None = None) -> dict[str, Any]:
    """The entity ``entity_id`` names in ``state``, checked to be of one of ``kinds`` (any when None).

    Raises:
        InvalidReference: no such entity at this position, or one of another kind.
    """
    entity = state.entities.get(entity_id)
    if entity is None:
        raise InvalidReference(field, f"no entity {entity_id!r} in this campaign at this point of the story")
    if kinds is not None and entity["kind"] not in kinds:
        wanted = " or ".join(sorted(kinds))
        raise InvalidReference(field, f"{entity_id!r} ({entity['name']}) is a {entity['kind']}, not a {wanted}")
    return entity


def check_speaker(state: WorldState, speaker: Speaker | None) -> None:
    """A turn's speaker: an entity speaker (or a player's character) is a being of the campaign."""
    if speaker is None or speaker.entity_id is None:
        return
    entity = entity_of(state, speaker.entity_id, "speaker.entity_id", kinds=BEING_KINDS)
    if speaker.kind is SpeakerKind.ENTITY and entity["status"] == EntityStatus.DESTROYED.value:
        raise InvalidReference("speaker.entity_id", f"{speaker.entity_id!r} is destroyed")


def check_scene_refs(state: WorldState, location_entity_id: str | None, participant_entity_ids: Sequence[str]) -> None:
    """A scene's location is a place (a location, structure or vehicle); its participants are entities."""
    if location_entity_id is not None:
        entity_of(state, location_entity_id, "location_entity_id", kinds=PLACE_KINDS)
    for index, entity_id in enumerate(participant_entity_ids):
        entity_of(state, entity_id, f"participant_entity_ids[{index}]")


def check_memory_refs(state: WorldState, observer_entity_id: str, subject_entity_ids: Sequence[str]) -> None:
    """A memory's observer is a being that is there at the anchor turn; its subjects exist there too."""
    observer = entity_of(state, observer_entity_id, "observer_entity_id", kinds=BEING_KINDS)
    if observer["status"] == EntityStatus.DESTROYED.value:
        raise InvalidReference("observer_entity_id", f"{observer_entity_id!r} is destroyed")
    for index, entity_id in enumerate(subject_entity_ids):
        entity_of(state, entity_id, f"subject_entity_ids[{index}]")


def check_turn_of(turn: Turn | None, campaign_id: str, turn_id: str, field: str) -> Turn:
    """A turn a record is anchored to: a real turn of the campaign (never another campaign's).

    Raises:
        InvalidReference: there is no such turn in the campaign (another campaign's reads the same).
    """
    if turn is None or turn.campaign_id != campaign_id:
        raise InvalidReference(field, f"no turn {turn_id!r} in campaign {campaign_id!r}")
    return turn
