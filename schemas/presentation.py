"""How a turn is shown: an ordered list of typed blocks, kept apart from the turn's truth and versioned.

A turn's truth is its input, its takes and what it proposed; its *presentation* is how a client lays it out —
narration, a character's speech, an action, a dice roll, a note, an image or a sound. A presentation is
stored beside the turn (never in it), each store a new version, so a regeneration keeps the one before it
readable. Media blocks point at a media record (:class:`schemas.media.MediaAsset`) or at a content-addressed
blob; a player is never shown a block whose media they may not see. Re-exported by :mod:`schemas.story`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from schemas.campaign import Speaker
from schemas.common import BlobKey, Id, LorekeeperModel, UtcDatetime, utc_now
from schemas.proposals import DiceRoll
from schemas.text import LongText, Name, Text

__all__ = [
    "ActionBlock",
    "AudioBlock",
    "DialogueBlock",
    "DiceRollBlock",
    "ImageBlock",
    "NarrationBlock",
    "PresentationBlock",
    "PresentationOrigin",
    "PresentationVersion",
    "SystemNoteBlock",
    "TurnPresentation",
]


class NarrationBlock(LorekeeperModel):
    type: Literal["narration"] = "narration"
    text: LongText


class DialogueBlock(LorekeeperModel):
    """Speech: what someone says, in their own words."""

    type: Literal["dialogue"] = "dialogue"
    speaker: Speaker | None = Field(
        default=None, description="Who speaks (an entity, the player, the GM); null when the text does not say."
    )
    text: LongText


class ActionBlock(LorekeeperModel):
    """What someone does, told apart from the narration (a player's declared action)."""

    type: Literal["action"] = "action"
    actor: Speaker | None = Field(default=None, description="Who acts; null when the text does not say.")
    text: LongText


class DiceRollBlock(LorekeeperModel):
    type: Literal["dice_roll"] = "dice_roll"
    roll: DiceRoll
    label: Name | None = Field(default=None, description="What was rolled for, e.g. 'Stealth'.")
    roller: Speaker | None = None


class SystemNoteBlock(LorekeeperModel):
    type: Literal["system_note"] = "system_note"
    text: Text
    level: Literal["info", "warning"] = "info"


def _one_reference(media_asset_id: str | None, blob_key: str | None) -> None:
    if (media_asset_id is None) == (blob_key is None):
        raise ValueError("a media block names exactly one of media_asset_id (a media record) or blob_key (a blob)")


class ImageBlock(LorekeeperModel):
    """An image: a media record of the campaign, or a content-addressed blob."""

    type: Literal["image"] = "image"
    media_asset_id: Id | None = Field(default=None, description="The MediaAsset (or ImageAsset uid) to show.")
    blob_key: BlobKey | None = Field(default=None, description="Or a content-addressed blob (``<prefix>/<sha256>``).")
    alt_text: Text
    caption: Text | None = None

    @model_validator(mode="after")
    def _check_reference(self) -> Self:
        _one_reference(self.media_asset_id, self.blob_key)
        return self


class AudioBlock(LorekeeperModel):
    """A sound to play with the turn (a voiced line, ambience): a media record or a content-addressed blob."""

    type: Literal["audio"] = "audio"
    media_asset_id: Id | None = Field(default=None, description="The MediaAsset to play.")
    blob_key: BlobKey | None = Field(default=None, description="Or a content-addressed blob (``<prefix>/<sha256>``).")
    caption: Text | None = Field(default=None, description="What is heard, for those who cannot hear it.")
    duration_seconds: NonNegativeFloat | None = None

    @model_validator(mode="after")
    def _check_reference(self) -> Self:
        _one_reference(self.media_asset_id, self.blob_key)
        return self


PresentationBlock = Annotated[
    NarrationBlock | DialogueBlock | ActionBlock | DiceRollBlock | SystemNoteBlock | ImageBlock | AudioBlock,
    Field(discriminator="type"),
]
"""One block of a turn as a client shows it, keyed by ``type``."""


class PresentationOrigin(StrEnum):
    """How a presentation version came to be."""

    SET = "set"  # written by the GM (or a client) as given
    REGENERATED = "regenerated"  # rendered from the turn's selected take by a renderer


class TurnPresentation(LorekeeperModel):
    """A turn laid out for a client: narration, speech, actions, rolls, notes, images and sounds, in order.

    ``version``, ``origin``, ``renderer`` and ``created_at`` are set by the story when it stores the
    presentation; a client sends the blocks (and may name the take they show)."""

    turn_id: Id
    take_id: Id | None = Field(default=None, description="The take the blocks show (a regeneration: the selected one).")
    blocks: list[PresentationBlock] = Field(min_length=1, max_length=500)
    version: PositiveInt | None = Field(default=None, description="1 for the first stored, then one more each store.")
    origin: PresentationOrigin = PresentationOrigin.SET
    renderer: Name | None = Field(default=None, description="The renderer that made a regenerated presentation.")
    created_at: UtcDatetime = Field(default_factory=utc_now)


class PresentationVersion(LorekeeperModel):
    """One stored version of a turn's presentation, without its blocks."""

    turn_id: Id
    version: PositiveInt
    take_id: Id | None = None
    origin: PresentationOrigin
    renderer: Name | None = None
    blocks: int = Field(ge=0, description="How many blocks it has.")
    blob_key: BlobKey
    created_at: UtcDatetime
