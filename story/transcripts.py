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

The whole file is read and checked before anything is written: a file that is none of these, or breaks
one, is refused whole with the file, the line and the field named (``path:LINE: session_2[4]: text …``),
so nothing half-read becomes a campaign. Refused: anything but a regular file (a FIFO or a device would
block the read), text that is not UTF-8 (UTF-16 and UTF-32 are read when a byte-order mark says so;
Latin-1 and other 8-bit encodings are not guessed), NUL characters, lone surrogates (``"\\ud800"`` in JSON),
fields longer than a turn holds (:data:`LIMITS`), a LoCoMo session key with leading zeros (``session_01``)
and a LoCoMo session that is not a list. What is read but not used is reported, not refused: fields no
format knows (:attr:`Transcript.unknown_fields`) and sessions with no lines (:attr:`Transcript.skipped`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from collections import Counter
from enum import StrEnum
from itertools import groupby
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.errors import InvalidRequest
from story.transcript_text import Located, check_text, locate, nul_problem

_LOCOMO_SESSION = re.compile(r"session_(\d+)")
_LOCOMO_KEY = re.compile(r"(?:events_)?session_(\d+)(?:_date_time|_observation|_summary)?")

#: The longest value of each field a line may hold, in characters: what a turn holds (``time`` and ``ref``),
#: a name (``speaker``, ``session``) and one thing said (``text``; CRD3's longest turn is under 3,000).
LIMITS = {"session": 200, "time": 200, "speaker": 300, "text": 50_000, "ref": 500}

_JSONL_FIELDS = frozenset(LIMITS)
_CRD3_FIELDS = frozenset({"NAMES", "UTTERANCES", "NUMBER"})
_LOCOMO_TOP = frozenset({"qa", "speaker_a", "speaker_b"})
_LOCOMO_FIELDS = frozenset({"speaker", "dia_id", "text", "blip_caption", "img_url", "query", "re-download"})


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

    session: str = Field(min_length=1, max_length=LIMITS["session"], description="The session the line is in.")
    time: str | None = Field(default=None, max_length=LIMITS["time"], description="When it was said, as told.")
    speaker: str = Field(min_length=1, max_length=LIMITS["speaker"], description="Who said it.")
    text: str = Field(min_length=1, max_length=LIMITS["text"], description="What was said.")
    ref: str | None = Field(default=None, max_length=LIMITS["ref"], description="The line's id in its source.")
    line: int | None = Field(default=None, ge=1, description="Where it starts in the file read (1-based).")

    @field_validator("session", "time", "speaker", "text", "ref")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None and (problem := nul_problem(value)):
            raise ValueError(problem)
        return value


class TranscriptSession(BaseModel):
    """The lines of one session, in order; ``time`` is the first time any of them states."""

    model_config = ConfigDict(frozen=True)

    session: str
    time: str | None
    lines: list[TranscriptLine]


class Transcript(BaseModel):
    """A transcript as read: its name (the file's stem), its format and its lines in order, with what was
    read but not imported."""

    model_config = ConfigDict(frozen=True)

    name: str
    format: TranscriptFormat
    lines: list[TranscriptLine]
    unknown_fields: dict[str, int] = Field(
        default_factory=dict, description="Fields no format knows, and on how many entries each was found."
    )
    skipped: list[str] = Field(default_factory=list, description="Sessions without lines, and where they are.")

    def sessions(self, *, where: str | None = None) -> list[TranscriptSession]:
        """The sessions in order of play; ``where`` names the transcript in errors (its name by default).

        Raises:
            TranscriptInvalid: a session's lines are not contiguous (it resumes after another one).
        """
        out: list[TranscriptSession] = []
        seen: set[str] = set()
        for session, group in groupby(self.lines, key=lambda line: line.session):
            lines = list(group)
            if session in seen:
                at = f"{where or self.name}:{lines[0].line}" if lines[0].line else where or self.name
                raise TranscriptInvalid(
                    f"{at}: session {session!r} resumes after session {out[-1].session!r}; "
                    "a session's lines must be contiguous"
                )
            seen.add(session)
            time = next((line.time for line in lines if line.time), None)
            out.append(TranscriptSession(session=session, time=time, lines=lines))
        return out


def read_transcript(path: Path | str) -> Transcript:
    """Read a transcript file of any known format (recognised from its content), and check every line.

    Raises:
        TranscriptInvalid: the file is not a regular file, unreadable, empty, not UTF-8 (or UTF-16/32
            with a byte-order mark), malformed, holds a field no turn can hold, misses a speaker or text,
            or has no known shape; the message names the file and the line (and the field).
    """
    path = Path(path)
    raw = _read_regular(path)
    content = decode(raw, str(path))
    transcript = parse_transcript(content, name=path.stem, where=str(path))
    transcript.sessions(where=str(path))  # a session's lines out of order is the file's fault too: refuse it now
    return transcript


def _read_regular(path: Path) -> bytes:
    """The file's bytes; a FIFO, socket, device or folder is refused before it could block the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TranscriptInvalid(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise TranscriptInvalid(f"{path}: is {kind}, not a transcript file; give the path of a regular file")
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read()
    except OSError as exc:
        raise TranscriptInvalid(f"{path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}

#: Byte-order marks and their codecs; UTF-32's first, since UTF-32LE's begins with UTF-16LE's.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def decode(raw: bytes, where: str) -> str:
    """A file's text: UTF-8, or the UTF-8/16/32 its byte-order mark names; no other encoding is guessed.

    Raises:
        TranscriptInvalid: bytes the encoding cannot decode, named by line and column.
    """
    encoding, start = "utf-8", 0
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            encoding, start = codec, len(bom)
            break
    body = raw[start:]
    try:
        return body.decode(encoding)
    except UnicodeDecodeError as exc:
        before = body[: exc.start].decode(encoding, errors="replace")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        bad = " ".join(f"0x{b:02X}" for b in body[exc.start : min(exc.end, exc.start + 4)])
        name = "UTF-8" if encoding == "utf-8" else encoding.upper()
        hint = ""
        if encoding == "utf-8":
            hint = "; save it as UTF-8 (Latin-1 and other 8-bit encodings are not guessed)"
            if body.count(0) * 4 > len(body):
                hint = "; it looks like UTF-16 without a byte-order mark: save it as UTF-8"
        raise TranscriptInvalid(f"{where}:{line}: not {name} text (byte {bad} at column {column}){hint}") from None


def parse_transcript(content: str, *, name: str, where: str | None = None) -> Transcript:
    """Parse a transcript's text; ``where`` names it in errors (the name by default)."""
    where = where or name
    if not content.strip():
        raise TranscriptInvalid(f"{where}: the file is empty")
    if (nul := content.find("\x00")) >= 0:  # JSON allows none raw; said plainly rather than as malformed JSON
        line = content.count("\n", 0, nul) + 1
        column = nul - (content.rfind("\n", 0, nul) + 1) + 1
        utf16 = content.count("\x00") * 4 > len(content)
        hint = " (the file looks like UTF-16 without a byte-order mark: save it as UTF-8)" if utf16 else ""
        raise TranscriptInvalid(f"{where}:{line}: a NUL character at column {column}{hint}")
    try:
        document = json.loads(content)
    except json.JSONDecodeError as exc:
        document = None  # not one JSON document: JSON lines, or broken
        opener = content.lstrip().split("\n", 1)[0].strip()
        if opener in ("{", "["):  # a pretty-printed document (CRD3, LoCoMo), broken: say where
            raise TranscriptInvalid(f"{where}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    if isinstance(document, dict):
        located = locate(content)
        if "TURNS" in document:
            return _crd3(located, name, where)
        if any(_LOCOMO_SESSION.fullmatch(key) for key in document):
            return _locomo(located, name, where)
        if "speaker" not in document and "text" not in document:
            raise TranscriptInvalid(f"{where}: {_UNKNOWN_SHAPE}")
    elif document is not None and not _looks_like_lines(content):
        raise TranscriptInvalid(f"{where}: {_UNKNOWN_SHAPE}")
    return _jsonl(content, name, where)


_UNKNOWN_SHAPE = (
    "unknown transcript shape: expected JSON lines of {session, time, speaker, text, ref}, "
    'a CRD3 episode ({"METADATA", "TURNS"}) or a LoCoMo conversation (session_N lists)'
)


def _looks_like_lines(content: str) -> bool:
    """A single JSON value that is a line's object on one line (a one-line JSONL file)."""
    return content.strip().startswith("{") and "\n" not in content.strip()


def _jsonl(content: str, name: str, where: str) -> Transcript:
    lines: list[TranscriptLine] = []
    unknown: Counter[str] = Counter()
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
        unknown.update(key for key in entry if key not in _JSONL_FIELDS)
        lines.append(
            TranscriptLine(
                session=_label(entry.get("session"), place, "session") or "1",
                time=_text(entry.get("time"), place, "time"),
                speaker=_required(entry.get("speaker"), place, "speaker"),
                text=_required(entry.get("text"), place, "text"),
                ref=_label(entry.get("ref"), place, "ref"),
                line=number,
            )
        )
    return Transcript(name=name, format=TranscriptFormat.JSONL, lines=lines, unknown_fields=dict(unknown))


def _crd3(located: Located, name: str, where: str) -> Transcript:
    document = located.document
    turns = document["TURNS"]
    if not isinstance(turns, list):
        raise TranscriptInvalid(f"{located.place(where, 'TURNS')}: TURNS is not a list")
    unknown: Counter[str] = Counter(key for key in document if key not in ("METADATA", "TURNS"))
    lines: list[TranscriptLine] = []
    for i, turn in enumerate(turns):
        line = located.line("TURNS", i)
        place = f"{located.place(where, 'TURNS', i)}: TURNS[{i}]"
        if not isinstance(turn, dict):
            raise TranscriptInvalid(f"{place}: expected an object with NAMES, UTTERANCES and NUMBER")
        unknown.update(f"TURNS.{key}" for key in turn if key not in _CRD3_FIELDS)
        names = turn.get("NAMES")
        utterances = turn.get("UTTERANCES")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TranscriptInvalid(f"{place}: NAMES must be a list of names")
        if not isinstance(utterances, list) or not all(isinstance(u, str) for u in utterances):
            raise TranscriptInvalid(f"{place}: UTTERANCES must be a list of strings")
        number = _label(turn.get("NUMBER", i), place, "NUMBER")
        lines.append(
            TranscriptLine(
                session=_required(name, where, "session (the file's name)", limit="session"),
                speaker=_required(
                    ", ".join(n.strip() for n in names if n.strip()), place, "NAMES (speaker)", limit="speaker"
                ),
                text=_required(
                    " ".join(u.strip() for u in utterances if u.strip()), place, "UTTERANCES (text)", limit="text"
                ),
                ref=_label(f"{name}:{number}", place, "ref (<file>:<NUMBER>)", limit="ref"),
                line=line,
            )
        )
    if not lines:
        raise TranscriptInvalid(f"{located.place(where, 'TURNS')}: TURNS is empty")
    return Transcript(name=name, format=TranscriptFormat.CRD3, lines=lines, unknown_fields=dict(unknown))


def _locomo(located: Located, name: str, where: str) -> Transcript:
    document = located.document
    unknown: Counter[str] = Counter()
    sessions: dict[int, list[Any]] = {}
    for key, value in document.items():
        if match := _LOCOMO_SESSION.fullmatch(key):
            digits = match.group(1)
            if digits != str(int(digits)):
                raise TranscriptInvalid(
                    f"{located.place(where, key)}: key {key!r}: a LoCoMo session is session_<n> without "
                    f"leading zeros (session_{int(digits)})"
                )
            if not isinstance(value, list):
                raise TranscriptInvalid(
                    f"{located.place(where, key)}: {key} is {_kind(value)}, not a list of turns "
                    "({speaker, dia_id, text} objects)"
                )
            sessions[int(digits)] = value
        elif not (_LOCOMO_KEY.fullmatch(key) or key in _LOCOMO_TOP):
            unknown[key] += 1
    lines: list[TranscriptLine] = []
    skipped: list[str] = []
    for n in sorted(sessions):
        key = f"session_{n}"
        time = _text(document.get(f"{key}_date_time"), located.place(where, f"{key}_date_time"), "time")
        if not sessions[n]:
            skipped.append(f"{key} ({located.place(where, key)}): no turns")
        for i, turn in enumerate(sessions[n]):
            place = f"{located.place(where, key, i)}: {key}[{i}]"
            if not isinstance(turn, dict):
                raise TranscriptInvalid(f"{place}: expected an object with speaker, dia_id and text")
            unknown.update(f"session_N[].{field}" for field in turn if field not in _LOCOMO_FIELDS)
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
                    ref=_label(turn.get("dia_id"), place, "dia_id", limit="ref"),
                    line=located.line(key, i),
                )
            )
    skipped.extend(
        f"{key} ({located.place(where, key)}): no session_{m.group(1)} to go with it"
        for key in document
        if (m := re.fullmatch(r"session_(\d+)_date_time", key)) and int(m.group(1)) not in sessions
    )
    if not lines:
        raise TranscriptInvalid(f"{where}: the conversation has no turns")
    return Transcript(
        name=name, format=TranscriptFormat.LOCOMO, lines=lines, unknown_fields=dict(unknown), skipped=skipped
    )


def _kind(value: Any) -> str:
    names = {str: "a string", dict: "an object", int: "a number", float: "a number", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _text(value: Any, place: str, field: str, *, limit: str | None = None) -> str | None:
    """An optional text field: a string (blank = none) or null, that a turn can hold."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TranscriptInvalid(f"{place}: {field} must be a string, not {type(value).__name__}")
    problem = check_text(value, LIMITS.get(limit or field, LIMITS["text"]))
    if problem:
        raise TranscriptInvalid(f"{place}: {field} {problem}")
    return value.strip() or None


def _label(value: Any, place: str, field: str, *, limit: str | None = None) -> str | None:
    """An optional identifier: a string or a number, kept as text."""
    if isinstance(value, bool):
        raise TranscriptInvalid(f"{place}: {field} must be a string or a number, not a boolean")
    if isinstance(value, int | float):
        value = str(value)
    return _text(value, place, field, limit=limit)


def _required(value: Any, place: str, field: str, *, limit: str | None = None) -> str:
    text = _text(value, place, field, limit=limit)
    if text is None:
        raise TranscriptInvalid(f"{place}: missing {field}")
    return text
