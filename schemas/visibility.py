"""Who at the table may see a record: public, the GM only, or the GM and named characters' players.

A record of the story (a canon fact, a memory or subjective claim, a summary, a proposal) carries a
:class:`Visibility`. ``public`` is the table's; ``gm`` the GM's alone (a GM's hidden plans, an NPC's
secret); ``characters`` the GM's and the players' of the named characters (a character's secrets). A
memory with no visibility set is known to its observer (:func:`memory_visibility`).

:func:`may_see` is the one rule, applied by the API to every read (``serve.operations.access.visible``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from schemas.common import Id, LorekeeperModel

__all__ = ["PUBLIC", "Audience", "Visibility", "may_see", "memory_visibility"]


class Audience(StrEnum):
    """Who a record is shown to, besides the GM (who sees everything)."""

    PUBLIC = "public"  # the whole table
    GM = "gm"  # the GM only
    CHARACTERS = "characters"  # the players of the named characters


class Visibility(LorekeeperModel):
    """A record's audience: ``{"audience": "public"}``, ``{"audience": "gm"}`` or
    ``{"audience": "characters", "character_ids": ["ent_…"]}``."""

    audience: Audience = Audience.PUBLIC
    character_ids: list[Id] = Field(
        default_factory=list, description="For audience 'characters': the characters whose players may see it."
    )

    @model_validator(mode="after")
    def _characters_named(self) -> Self:
        if self.audience is Audience.CHARACTERS and not self.character_ids:
            raise ValueError("audience 'characters' names at least one character (character_ids)")
        if self.audience is not Audience.CHARACTERS and self.character_ids:
            raise ValueError(f"audience {self.audience.value!r} names no characters")
        return self


PUBLIC = Visibility()


def memory_visibility(visibility: Visibility | None, observer_entity_id: str) -> Visibility:
    """A memory's audience: as set, else known to its observer (the observer's player and the GM)."""
    if visibility is not None:
        return visibility
    return Visibility(audience=Audience.CHARACTERS, character_ids=[observer_entity_id])


def may_see(visibility: Visibility | None, *, gm: bool, character_id: str | None) -> bool:
    """Whether a caller sees a record of this visibility: the GM (and an admin) everything; a player what is
    public and what names the character their key plays. ``None`` is public."""
    if gm or visibility is None or visibility.audience is Audience.PUBLIC:
        return True
    if visibility.audience is Audience.GM:
        return False
    return character_id is not None and character_id in visibility.character_ids
