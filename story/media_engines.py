"""Media engines: what turns a media job (an image, a sound, speech from text, text from speech) into bytes.

An engine is chosen by name from :data:`MEDIA_ENGINES` (``LOREKEEPER_MEDIA_ENGINE``; a deployment may
:func:`register_media_engine` its own, e.g. one calling an image or speech model). Two ship here:

* ``none`` (the default): makes nothing. A job submitted while it is bound stays queued (``pending``)
  with a note saying why, until an engine that does its task is bound and the jobs are run.
* ``development``: a deterministic engine for development and tests, honest about what it makes — an
  image job gives an SVG placeholder card that shows the prompt's text; a sound or speech job gives a WAV
  of **silence** (speech: as long as the text would take to say at 150 words a minute), with the text in
  the record's metadata. It does not transcribe speech (``stt`` jobs wait for a real engine). It runs no
  model and never reaches the network.
"""

from __future__ import annotations

import io
import math
import textwrap
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from xml.sax.saxutils import escape

from schemas.errors import ConfigError
from schemas.media import MediaJob, MediaTask

__all__ = [
    "MEDIA_ENGINES",
    "DevelopmentMediaEngine",
    "MediaEngine",
    "MediaEngineFailed",
    "NoMediaEngine",
    "Rendered",
    "media_engine",
    "register_media_engine",
]


@dataclass(frozen=True)
class Rendered:
    """What an engine made for a job: the bytes and what a media record needs to say about them."""

    data: bytes
    mime: str
    width: int | None = None
    height: int | None = None
    duration_seconds: float | None = None
    alt_text: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class MediaEngineFailed(Exception):
    """The engine could not make what the job asks (the job is marked failed with this message)."""


class MediaEngine(Protocol):
    """Makes media for jobs. ``tasks`` are what it can do; :meth:`render` may raise :class:`MediaEngineFailed`."""

    name: str
    tasks: frozenset[MediaTask]

    def render(self, job: MediaJob, source: bytes | None) -> Rendered:
        """The bytes for ``job`` (``source``: the audio an ``stt`` job transcribes)."""
        ...


class NoMediaEngine:
    """No engine: every job waits, queued."""

    name = "none"
    tasks: frozenset[MediaTask] = frozenset()

    def render(self, job: MediaJob, source: bytes | None) -> Rendered:
        raise MediaEngineFailed("no media engine is bound (LOREKEEPER_MEDIA_ENGINE=none)")


#: A speaking pace of 150 words a minute, for the length of the development engine's silent speech.
WORDS_PER_SECOND = 2.5
SAMPLE_RATE = 8000
MAX_SECONDS = 600.0
SOUND_SECONDS = 5.0
CARD_WIDTH, CARD_HEIGHT = 768, 432


class DevelopmentMediaEngine:
    """Deterministic placeholders (an SVG card, WAVs of silence): for development and tests, not for play."""

    name = "development"
    tasks = frozenset({MediaTask.IMAGE, MediaTask.AUDIO, MediaTask.TTS})

    def render(self, job: MediaJob, source: bytes | None) -> Rendered:
        if job.task is MediaTask.IMAGE:
            return self._card(job.prompt)
        if job.task is MediaTask.TTS:
            words = len(job.prompt.split())
            seconds = min(MAX_SECONDS, max(0.5, math.ceil(words / WORDS_PER_SECOND * 10) / 10))
            meta = {"engine": self.name, "content": "silence", "text": job.prompt[:2000]}
            return Rendered(_silence(seconds), "audio/wav", duration_seconds=seconds, metadata=meta)
        if job.task is MediaTask.AUDIO:
            meta = {"engine": self.name, "content": "silence", "prompt": job.prompt[:2000]}
            return Rendered(_silence(SOUND_SECONDS), "audio/wav", duration_seconds=SOUND_SECONDS, metadata=meta)
        raise MediaEngineFailed(f"the development engine does not do {job.task.value}")

    def _card(self, prompt: str) -> Rendered:
        lines = textwrap.wrap(" ".join(prompt.split()), 60)[:12] or [""]
        texts = "".join(
            f'<text x="32" y="{96 + 26 * i}" font-family="sans-serif" font-size="20">{escape(line)}</text>'
            for i, line in enumerate(lines)
        )
        svg = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{CARD_WIDTH}" height="{CARD_HEIGHT}" '
            f'viewBox="0 0 {CARD_WIDTH} {CARD_HEIGHT}"><rect width="100%" height="100%" fill="#f4efe4"/>'
            '<text x="32" y="48" font-family="sans-serif" font-size="16" fill="#8a6d3b">'
            "placeholder image (development media engine)</text>"
            f"{texts}</svg>"
        )
        meta = {"engine": self.name, "content": "placeholder", "prompt": prompt[:2000]}
        alt = f"Placeholder card: {prompt}"[:2000]
        return Rendered(svg.encode(), "image/svg+xml", CARD_WIDTH, CARD_HEIGHT, alt_text=alt, metadata=meta)


def _silence(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(b"\0\0" * round(seconds * SAMPLE_RATE))
    return out.getvalue()


MEDIA_ENGINES: dict[str, Callable[[], MediaEngine]] = {
    NoMediaEngine.name: NoMediaEngine,
    DevelopmentMediaEngine.name: DevelopmentMediaEngine,
}
"""The media engines by name (``LOREKEEPER_MEDIA_ENGINE``)."""


def register_media_engine(name: str, factory: Callable[[], MediaEngine]) -> None:
    """Make an engine choosable by name (a deployment's image or speech model)."""
    MEDIA_ENGINES[name] = factory


def media_engine(name: str) -> MediaEngine:
    """The engine called ``name``.

    Raises:
        ConfigError: no engine has that name.
    """
    try:
        return MEDIA_ENGINES[name]()
    except KeyError:
        known = ", ".join(sorted(MEDIA_ENGINES))
        raise ConfigError("LOREKEEPER_MEDIA_ENGINE", f"no media engine {name!r} (known: {known})") from None
