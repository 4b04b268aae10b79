"""Transcripts of play read into one shape: who said what, in which session, when, and where it came from.

A campaign can start from a conversation that already happened (a table's log, a show's transcript,
a benchmark's dialogue) instead of from live play; :mod:`story.importing` turns a :class:`Transcript`
into a campaign. Three formats are read, recognised from their content, not their file name:

- ``jsonl``: JSON lines ``{"session", "time", "speaker", "text", "ref"}``; ``speaker`` and ``text``
  are required, ``session`` defaults to ``"1"``, ``time`` and ``ref`` to none.
- ``crd3``: a Critical Role episode of CRD3's cleaned data (``{"METADATA", "TURNS": [{"NAMES",
  "UTTERANCES", "NUMBER"}]}``): one session named after the file, ``ref`` = ``<file>:<NUMBER>``.
- ``locomo``: a LoCoMo conversation (``session_N`` lists of ``{speaker, dia_id, text}`` with
  ``session_N_date_time``): ``ref`` = ``dia_id``; a shared image is kept as its caption. Its
  questions are not read here (the benchmark owns them).

A file that is none of these, or breaks one, is refused whole with the place named (a line number,
or the turn's position), so nothing half-read becomes a campaign.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from itertools import groupby
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import InvalidRequest

_LOCOMO_SESSION = re.compile(r"session_(\d+)")


class TranscriptInvalid(InvalidRequest):
    """A transcript that cannot be read: empty, malformed, missing a speaker or text, or of no known shape."""

    def __init__(self, message: str) -> None:
        super().__init__("transcript", message)


class TranscriptFormat(StrEnum):
    JSONL = "jsonl"
    CRD3 = "crd3"
    LOCOMO = "locomo"


class TranscriptLine(BaseModel):
    """One thing said, by one speaker (or several at once, named together)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session: str = Field(min_length=1, description="The session (sitting, episode) the line belongs to.")
    time: str | None = Field(default=None, max_length=200, description="When it was said, as the source says it.")
    speaker: str = Field(min_length=1, description="Who said it.")
    text: str = Field(min_length=1, description="What was said.")
    ref: str | None = Field(default=None, max_length=500, description="The line's id in its source.")


class TranscriptSession(BaseModel):
    """The lines of one session, in order; ``time`` is the first time any of them states."""

    model_config = ConfigDict(frozen=True)

    session: str
    time: str | None
    lines: list[TranscriptLine]


class Transcript(BaseModel):
    """A transcript as read: its name (the file's stem), its format and its lines in order."""

    model_config = ConfigDict(frozen=True)

    name: str
    format: TranscriptFormat
    lines: list[TranscriptLine]

    def sessions(self) -> list[TranscriptSession]:
        """The sessions in order of play.

        Raises:
            TranscriptInvalid: a session's lines are not contiguous (it resumes after another one).
        """
        out: list[TranscriptSession] = []
        seen: set[str] = set()
        for session, group in groupby(self.lines, key=lambda line: line.session):
            if session in seen:
                raise TranscriptInvalid(
                    f"{self.name}: session {session!r} resumes after session {out[-1].session!r}; "
                    "a session's lines must be contiguous"
                )
            seen.add(session)
            lines = list(group)
            time = next((line.time for line in lines if line.time), None)
            out.append(TranscriptSession(session=session, time=time, lines=lines))
        return out


def read_transcript(path: Path | str) -> Transcript:
    """Read a transcript file of any known format (recognised from its content).

    Raises:
        TranscriptInvalid: the file is unreadable, empty, malformed, misses a speaker or text, or
            has no known shape; the message names the file and the line or turn.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptInvalid(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TranscriptInvalid(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_transcript(content, name=path.stem, where=str(path))


def parse_transcript(content: str, *, name: str, where: str | None = None) -> Transcript:
    """Parse a transcript's text; ``where`` names it in errors (the name by default)."""
    where = where or name
    if not content.strip():
        raise TranscriptInvalid(f"{where}: the file is empty")
    try:
        document = json.loads(content)
    except json.JSONDecodeError as exc:
        document = None  # not one JSON document: JSON lines, or broken
        opener = content.lstrip().split("\n", 1)[0].strip()
        if opener in ("{", "["):  # a pretty-printed document (CRD3, LoCoMo), broken: say where
            raise TranscriptInvalid(f"{where}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    if isinstance(document, dict):
        if "TURNS" in document:
            return Transcript(name=name, format=TranscriptFormat.CRD3, lines=_crd3_lines(document, name, where))
        if any(_LOCOMO_SESSION.fullmatch(key) and isinstance(value, list) for key, value in document.items()):
            return Transcript(name=name, format=TranscriptFormat.LOCOMO, lines=_locomo_lines(document, where))
        if "speaker" not in document and "text" not in document:
            raise TranscriptInvalid(f"{where}: {_UNKNOWN_SHAPE}")
    elif document is not None and not _looks_like_lines(content):
        raise TranscriptInvalid(f"{where}: {_UNKNOWN_SHAPE}")
    return Transcript(name=name, format=TranscriptFormat.JSONL, lines=_jsonl_lines(content, where))


_UNKNOWN_SHAPE = (
    "unknown transcript shape: expected JSON lines of {session, time, speaker, text, ref}, "
    'a CRD3 episode ({"METADATA", "TURNS"}) or a LoCoMo conversation (session_N lists)'
)


def _looks_like_lines(content: str) -> bool:
    """A single JSON value that is a line's object on one line (a one-line JSONL file)."""
    return content.strip().startswith("{") and "\n" not in content.strip()


def _jsonl_lines(content: str, where: str) -> list[TranscriptLine]:
    lines: list[TranscriptLine] = []
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        place = f"{where}:{number}"
        try:
            entry = json.loads(raw)
        except ValueError as exc:
            raise TranscriptInvalid(f"{place}: malformed JSON ({exc})") from None
        if not isinstance(entry, dict):
            raise TranscriptInvalid(f"{place}: expected a JSON object with 'speaker' and 'text'")
        lines.append(
            TranscriptLine(
                session=_label(entry.get("session"), place, "session") or "1",
                time=_text(entry.get("time"), place, "time"),
                speaker=_required(entry.get("speaker"), place, "speaker"),
                text=_required(entry.get("text"), place, "text"),
                ref=_label(entry.get("ref"), place, "ref"),
            )
        )
    return lines


def _crd3_lines(document: dict[str, Any], name: str, where: str) -> list[TranscriptLine]:
    turns = document["TURNS"]
    if not isinstance(turns, list):
        raise TranscriptInvalid(f"{where}: TURNS is not a list")
    lines: list[TranscriptLine] = []
    for i, turn in enumerate(turns):
        place = f"{where}: TURNS[{i}]"
        if not isinstance(turn, dict):
            raise TranscriptInvalid(f"{place}: expected an object with NAMES, UTTERANCES and NUMBER")
        names = turn.get("NAMES")
        utterances = turn.get("UTTERANCES")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TranscriptInvalid(f"{place}: NAMES must be a list of names")
        if not isinstance(utterances, list) or not all(isinstance(u, str) for u in utterances):
            raise TranscriptInvalid(f"{place}: UTTERANCES must be a list of strings")
        number = turn.get("NUMBER", i)
        lines.append(
            TranscriptLine(
                session=name,
                speaker=_required(", ".join(n.strip() for n in names if n.strip()), place, "NAMES (speaker)"),
                text=_required(" ".join(u.strip() for u in utterances if u.strip()), place, "UTTERANCES (text)"),
                ref=f"{name}:{number}",
            )
        )
    if not lines:
        raise TranscriptInvalid(f"{where}: TURNS is empty")
    return lines


def _locomo_lines(document: dict[str, Any], where: str) -> list[TranscriptLine]:
    numbers = sorted(
        int(m.group(1))
        for key, value in document.items()
        if (m := _LOCOMO_SESSION.fullmatch(key)) and isinstance(value, list)
    )
    lines: list[TranscriptLine] = []
    for n in numbers:
        time = _text(document.get(f"session_{n}_date_time"), f"{where}: session_{n}_date_time", "time")
        for i, turn in enumerate(document[f"session_{n}"]):
            place = f"{where}: session_{n}[{i}]"
            if not isinstance(turn, dict):
                raise TranscriptInvalid(f"{place}: expected an object with speaker, dia_id and text")
            text = _text(turn.get("text"), place, "text") or ""
            caption = _text(turn.get("blip_caption"), place, "blip_caption")
            if caption:
                text = f"{text} [shares a photo: {caption}]".strip()
            lines.append(
                TranscriptLine(
                    session=str(n),
                    time=time,
                    speaker=_required(turn.get("speaker"), place, "speaker"),
                    text=_required(text, place, "text"),
                    ref=_label(turn.get("dia_id"), place, "dia_id"),
                )
            )
    if not lines:
        raise TranscriptInvalid(f"{where}: the conversation has no turns")
    return lines


def _text(value: Any, place: str, field: str) -> str | None:
    """An optional text field: a string (blank = none) or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TranscriptInvalid(f"{place}: {field} must be a string, not {type(value).__name__}")
    return value.strip() or None


def _label(value: Any, place: str, field: str) -> str | None:
    """An optional identifier: a string or a number, kept as text."""
    if isinstance(value, bool):
        raise TranscriptInvalid(f"{place}: {field} must be a string or a number, not a boolean")
    if isinstance(value, int | float):
        return str(value)
    return _text(value, place, field)


def _required(value: Any, place: str, field: str) -> str:
    text = _text(value, place, field)
    if text is None:
        raise TranscriptInvalid(f"{place}: missing {field}")
    return text
