"""The story's own errors: what a client reads as ``story: …``.

Each subclasses the store error of the same meaning (:mod:`schemas.errors`), so the API answers them
with the same status (404, 409, 400) and whoever catches ``NotFound``, ``Conflict`` or
``InvalidRequest`` still catches them; only the name before the colon says the story reported them,
not the graph it is kept in.
"""

from __future__ import annotations

from pydantic import ValidationError

from schemas.errors import Conflict, InvalidRequest, NotFound, NotSupported
from schemas.imports import TranscriptImportState

#: The name a client reads before the message (``StoreError.store``).
STORY = "story"


class StoryNotFound(NotFound):
    """The story holds no such campaign, world, turn, take, branch, scene, proposal, checkpoint or fact."""

    def __init__(self, message: str) -> None:
        super().__init__(STORY, message)


class StoryConflict(Conflict):
    """The change clashes with the story as it stands (a campaign too busy, a record imported before)."""

    def __init__(self, message: str) -> None:
        super().__init__(STORY, message)


class CampaignIncomplete(StoryConflict):
    """A campaign whose transcript import has not finished: it takes no play (turns, scenes, ...) until the
    import is resumed (409)."""

    def __init__(self, campaign_id: str, state: TranscriptImportState) -> None:
        super().__init__(
            f"campaign {campaign_id!r} is an unfinished import of transcript {state.source!r} "
            f"({state.written:,} of {state.lines:,} lines written); finish it with "
            f"`lorekeeper campaign import-transcript FILE --resume` before playing it"
        )
        self.campaign_id = campaign_id


class StoryInvalid(InvalidRequest):
    """The story refuses the request as it stands (nothing to undo, an archived campaign, a bad bundle)."""

    def __init__(self, message: str) -> None:
        super().__init__(STORY, message)


class InvalidReference(StoryInvalid):
    """A field of a request names something that is not there, or not of the kind it must be (400).

    ``field`` is the request's field (``speaker.entity_id``, ``location_entity_id``, ``observer_entity_id``,
    ``anchor_turn_id``…); the message starts with it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.context["field"] = field


class RecallUnavailable(NotSupported):
    """Recall was asked of a story service built without a memory index (501)."""

    def __init__(self, message: str) -> None:
        super().__init__(STORY, message)


def validation_message(exc: ValidationError) -> str:
    """The first few problems of a model's validation, ``where: what`` each, for a :class:`StoryInvalid`."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "proposal"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
