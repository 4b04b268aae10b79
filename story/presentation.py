"""A turn's presentation: typed blocks stored apart from the turn, versioned, and regenerable from its take.

A presentation is written as a blob (``presentations/<sha256>``) named by a ``Presentation`` node of the
campaign (``turn_uid``, ``version``, ``take_uid``, ``origin``, ``renderer``); every store is a new version, so
a regeneration keeps the versions before it readable (:meth:`Presentations.versions`). Nothing here writes
the turn, its takes, the campaign's tree or canon: the state hash is what it was.

:meth:`Presentations.regenerate` renders the blocks from the turn's selected take with a renderer chosen by
name from :data:`RENDERERS`. The default, ``split``, is deterministic: the player's input as an action (or
as speech for a dialogue turn), then the narration paragraph by paragraph, each quotation a speech block
whose speaker is the one entity of the table's state named beside it (before the quote or just after it;
none when no name or two), a paragraph set wholly in ``*…*`` or ``_…_`` an action, and the media records whose
turn range starts at the turn as image and audio blocks (all of them: a block a player may not see is left
out of what a player key is answered, by the secrets rule). A deployment may :func:`register_renderer` one
that restyles with a model; the story stays the same either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from schemas.campaign import InputMode, Speaker, SpeakerKind, Take, Turn
from schemas.canon import WorldStateView
from schemas.media import MediaAsset, MediaKind, MediaTarget
from schemas.presentation import (
    ActionBlock,
    AudioBlock,
    DialogueBlock,
    ImageBlock,
    NarrationBlock,
    PresentationBlock,
    PresentationOrigin,
    PresentationVersion,
    TurnPresentation,
)
from schemas.text import STORED
from stores.blob.layout import PRESENTATIONS
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryConflict, StoryInvalid, StoryNotFound
from story.media import Media
from story.viewer import TABLE

__all__ = ["RENDERERS", "PresentationRenderer", "Presentations", "RenderSource", "SplitRenderer", "register_renderer"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RenderSource:
    """What a renderer lays out: the turn, its selected take, the names of the table's entities, its media."""

    turn: Turn
    take: Take | None
    cast: Mapping[str, str]  # an entity's name → its id (the entities the whole table sees at the turn)
    media: Sequence[MediaAsset]


class PresentationRenderer(Protocol):
    name: str

    def render(self, source: RenderSource) -> list[PresentationBlock]: ...


_QUOTE = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')
_WHOLE_ACTION = re.compile(r"^(?:\*([^*]+)\*|_([^_]+)_)$", re.S)
_ADDRESSED = re.compile(r"[a-z]+/[0-9a-f]{64}")
_AFTER_WINDOW = 60  # characters after a quote read for "…," said NAME


class SplitRenderer:
    """The deterministic default: the input, then narration split into narration, speech and action blocks."""

    name = "split"

    def render(self, source: RenderSource) -> list[PresentationBlock]:
        turn, blocks = source.turn, list[PresentationBlock]()
        if turn.text.strip() and turn.input_mode is InputMode.ACTION:
            blocks.append(ActionBlock(actor=turn.speaker, text=turn.text))
        elif turn.text.strip() and turn.input_mode is InputMode.DIALOGUE:
            blocks.append(DialogueBlock(speaker=turn.speaker, text=turn.text))
        narration = source.take.narration if source.take is not None else (turn.narration or "")
        for paragraph in re.split(r"\n\s*\n", narration.strip()):
            blocks.extend(self._paragraph(" ".join(paragraph.split()), source.cast))
        for asset in source.media:
            blocks.append(_media_block(asset))
        return blocks

    def _paragraph(self, text: str, cast: Mapping[str, str]) -> list[PresentationBlock]:
        if not text:
            return []
        whole = _WHOLE_ACTION.match(text)
        if whole:
            return [ActionBlock(text=(whole.group(1) or whole.group(2)).strip())]
        blocks: list[PresentationBlock] = []
        quotes = list(_QUOTE.finditer(text))
        pos = 0
        for i, quote in enumerate(quotes):
            before = text[pos : quote.start()].strip()
            if before:
                blocks.append(NarrationBlock(text=before))
            said = (quote.group(1) or quote.group(2)).strip()
            next_start = quotes[i + 1].start() if i + 1 < len(quotes) else len(text)
            after = text[quote.end() : min(next_start, quote.end() + _AFTER_WINDOW)]
            speaker = _speaker(text[pos : quote.start()], after, cast)
            if said:
                blocks.append(DialogueBlock(speaker=speaker, text=said))
            pos = quote.end()
        rest = text[pos:].strip()
        if rest:
            blocks.append(NarrationBlock(text=rest))
        return blocks


def _speaker(before: str, after: str, cast: Mapping[str, str]) -> Speaker | None:
    """The one entity named just after a quote ("…," said Ayla), else the last named before it; None if unclear."""
    after_sentence = re.split(r"[.!?]", after, maxsplit=1)[0]
    for window, pick_last in ((after_sentence, False), (before, True)):
        found = [(m.start(), name) for name in cast for m in re.finditer(rf"\b{re.escape(name)}\b", window)]
        ids = {cast[name] for _, name in found}
        if len(ids) == 1:
            return Speaker(kind=SpeakerKind.ENTITY, entity_id=ids.pop())
        if found and pick_last:
            found.sort()
            last = found[-1][1]
            return Speaker(kind=SpeakerKind.ENTITY, entity_id=cast[last])
        if found:
            return None  # two names right after the quote: not guessed
    return None


def _media_block(asset: MediaAsset) -> PresentationBlock:
    what = asset.alt_text or asset.title or f"{asset.kind.value} {asset.id}"
    if asset.kind is MediaKind.IMAGE:
        return ImageBlock(media_asset_id=asset.id, alt_text=what[:20_000], caption=asset.title)
    return AudioBlock(media_asset_id=asset.id, caption=what[:20_000], duration_seconds=asset.duration_seconds)


RENDERERS: dict[str, Callable[[], PresentationRenderer]] = {SplitRenderer.name: SplitRenderer}
"""The presentation renderers by name (``regenerate(..., renderer=NAME)``)."""


def register_renderer(name: str, factory: Callable[[], PresentationRenderer]) -> None:
    """Make a renderer choosable by name (one that restyles a take with a model, say)."""
    RENDERERS[name] = factory


# -- queries --------------------------------------------------------------------------------------


def _versions_of(turn_id: str) -> Statement:
    return "MATCH (n:Presentation) WHERE n.turn_uid = $t RETURN n ORDER BY n.version", {"t": turn_id}


def _create(props: dict[str, Any]) -> Statement:
    """Create the version unless another writer took its number first (one statement: the graph runs them one at
    a time); answers a row only when it created it."""
    return (
        "OPTIONAL MATCH (e:Presentation {uid: $uid}) WITH count(e) AS taken WHERE taken = 0 "
        "CREATE (n:Presentation) SET n = $props RETURN n.uid AS uid",
        {"uid": props["uid"], "props": props},
    )


# -- the chapter ----------------------------------------------------------------------------------


class Presentations:
    """Turn presentations: set, read (any version), list versions, regenerate (:data:`RENDERERS`).

    Args:
        core: the stores and lineage.
        media: the campaign's media (block references are checked against it).
        state: the world view as of a turn (``state(campaign_id, turn_id=…)``), for the cast of a rendering.
    """

    def __init__(self, core: StoryCore, media: Media, state: Callable[..., WorldStateView]) -> None:
        self.core = core
        self.story = core.story
        self.blobs = core.blobs
        self.graph = core.graph
        self.media = media
        self._state = state
        self.renderer = SplitRenderer.name
        """The renderer a regeneration uses when it names none."""

    def set(self, presentation: TurnPresentation) -> TurnPresentation:
        """Store blocks for a turn as its next version (origin ``set``).

        Raises:
            StoryNotFound: no such turn.
            InvalidReference: a block names a take, media, blob or speaker the turn's campaign does not have.
        """
        turn = self.story.turn(presentation.turn_id)
        self.media.writable(turn.campaign_id)
        self._check(turn, presentation)
        return self._store(turn, presentation, PresentationOrigin.SET, None)

    def get(self, turn_id: str, version: int | None = None) -> TurnPresentation:
        """The turn's presentation: the latest version, or ``version``.

        Raises:
            StoryNotFound: no such turn, none stored for it, or no such version.
        """
        turn = self.story.turn(turn_id)
        rows = self.story.nodes(_versions_of(turn_id))
        if not rows:
            legacy = self._legacy(turn_id)
            if legacy is not None and version in (None, 1):
                return legacy
            raise StoryNotFound(f"turn {turn_id!r} has no presentation" + (f" version {version}" if version else ""))
        row = rows[-1] if version is None else next((r for r in rows if r["version"] == version), None)
        if row is None:
            raise StoryNotFound(f"turn {turn.id!r} has no presentation version {version} (it has 1 to {len(rows)})")
        return TurnPresentation.model_validate_json(self.blobs.get(row["blob_key"]), context=STORED)

    def current(self, turn_id: str) -> TurnPresentation | None:
        """The latest version, or None while none is stored."""
        try:
            return self.get(turn_id)
        except StoryNotFound:
            self.story.turn(turn_id)  # a missing turn stays an error
            return None

    def versions(self, turn_id: str) -> list[PresentationVersion]:
        """Every stored version of the turn's presentation, oldest first (blocks counted, not carried)."""
        self.story.turn(turn_id)
        rows = self.story.nodes(_versions_of(turn_id))
        if not rows and (legacy := self._legacy(turn_id)) is not None:
            key = self.story.node("Turn", turn_id)["presentation_key"]
            return [_version(legacy, key)]
        return [from_props(PresentationVersion, {**r, "turn_id": turn_id, "take_id": r.get("take_uid")}) for r in rows]

    def regenerate(self, turn_id: str, renderer: str | None = None) -> TurnPresentation:
        """Render the turn's presentation again from its selected take, as its next version (origin
        ``regenerated``); the turn, its takes and canon are not touched.

        Raises:
            StoryNotFound: no such turn.
            StoryInvalid: no narration to present yet, or no renderer of that name.
        """
        name = renderer or self.renderer
        if name not in RENDERERS:
            raise StoryInvalid(f"no presentation renderer {name!r} (known: {', '.join(sorted(RENDERERS))})")
        turn = self.story.turn(turn_id)
        self.media.writable(turn.campaign_id)
        takes = [from_props(Take, r, key="id") for r in self.story.nodes(cypher.takes_of(turn_id))]
        take = next((t for t in takes if t.selected), None)
        if take is None and not turn.narration:
            raise StoryInvalid(f"turn {turn_id!r} has no narration to present yet")
        state = self._state(turn.campaign_id, turn_id=turn_id)
        cast = {e.name: e.id for e in TABLE.state(state).entities}
        # every record starting here; a block a player may not see is left out at the door (the secrets rule)
        media = [
            a for a in self.media.records(turn.campaign_id, target=MediaTarget.TURNS) if a.start_turn_id == turn_id
        ]
        blocks = RENDERERS[name]().render(RenderSource(turn=turn, take=take, cast=cast, media=media))
        if not blocks:
            raise StoryInvalid(f"renderer {name!r} made no blocks for turn {turn_id!r}")
        drafted = TurnPresentation(turn_id=turn_id, take_id=take.id if take else None, blocks=blocks)
        return self._store(turn, drafted, PresentationOrigin.REGENERATED, name)

    # -- internals --------------------------------------------------------------------------------

    def _store(
        self, turn: Turn, presentation: TurnPresentation, origin: PresentationOrigin, renderer: str | None
    ) -> TurnPresentation:
        # the campaign's lock orders the versions of stores in this process; another process's store of the same
        # number is caught by the create, and this one takes the next
        with self.core.lock(turn.campaign_id):
            for _ in range(self.core.max_retries):
                rows = self.story.nodes(_versions_of(turn.id))
                version = (rows[-1]["version"] if rows else (1 if self._legacy(turn.id) else 0)) + 1
                stored = presentation.validated_copy(version=version, origin=origin, renderer=renderer)
                info = self.blobs.put_content_addressed(
                    stored.model_dump_json().encode(), prefix=PRESENTATIONS, content_type="application/json"
                )
                props = {
                    "uid": f"pres_{turn.id}_{version}",
                    "campaign_id": turn.campaign_id,
                    "turn_uid": turn.id,
                    "version": version,
                    "blob_key": info.key,
                    "origin": origin.value,
                    "blocks": len(stored.blocks),
                    "created_at": stored.created_at.isoformat(),
                }
                props |= {k: v for k, v in (("take_uid", stored.take_id), ("renderer", renderer)) if v is not None}
                if self.graph.run(*_create(props)):
                    log.info(
                        "presentation_stored",
                        turn_id=turn.id,
                        version=version,
                        origin=origin.value,
                        blocks=len(stored.blocks),
                    )
                    return stored
        raise StoryConflict(f"turn {turn.id!r}: {self.core.max_retries} presentations raced this one")

    def _legacy(self, turn_id: str) -> TurnPresentation | None:
        """A presentation stored before versions (named by the turn's ``presentation_key``), as version 1."""
        key = self.story.node("Turn", turn_id).get("presentation_key")
        if not key:
            return None
        old = TurnPresentation.model_validate_json(self.blobs.get(key), context=STORED)
        return old.model_copy(update={"version": 1})

    def _check(self, turn: Turn, presentation: TurnPresentation) -> None:
        """Every reference of the blocks is the turn's campaign's: its take, media, blobs and speakers."""
        if presentation.take_id is not None:
            takes = {r["uid"] for r in self.story.nodes(cypher.takes_of(turn.id))}
            if presentation.take_id not in takes:
                raise InvalidReference("take_id", f"turn {turn.id!r} has no take {presentation.take_id!r}")
        for i, block in enumerate(presentation.blocks):
            where = f"blocks.{i}"
            media_id = getattr(block, "media_asset_id", None)
            if media_id is not None:
                try:
                    self.media.get(turn.campaign_id, media_id)
                except StoryNotFound:
                    raise InvalidReference(
                        f"{where}.media_asset_id", f"no media {media_id!r} in the campaign"
                    ) from None
            blob_key = getattr(block, "blob_key", None)
            if blob_key is not None and not (_ADDRESSED.fullmatch(blob_key) and self.blobs.exists(blob_key)):
                raise InvalidReference(f"{where}.blob_key", f"{blob_key!r} is no content-addressed blob of this store")
            for role in ("speaker", "actor", "roller"):
                person = getattr(block, role, None)
                if person is not None and person.entity_id is not None:
                    self.media.require(
                        turn.campaign_id, "Entity", person.entity_id, f"{where}.{role}.entity_id", "entity"
                    )


def _version(presentation: TurnPresentation, key: str) -> PresentationVersion:
    return PresentationVersion(
        turn_id=presentation.turn_id,
        version=presentation.version or 1,
        take_id=presentation.take_id,
        origin=presentation.origin,
        renderer=presentation.renderer,
        blocks=len(presentation.blocks),
        blob_key=key,
        created_at=presentation.created_at,
    )
