"""How a transcript import is cut up: story transactions of whole sessions, record batches, and what is left
to write after a resumed import's cursor (:mod:`story.importing`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

from story.transcripts import Transcript, TranscriptLine, TranscriptSession

#: Lines per story transaction (whole sessions): a session longer than this is written in several.
TURN_BATCH = 1000
#: Lines whose records are embedded and written together, at least (whole sessions, so each turn's
#: neighbours go with it: the index may embed a turn with its neighbours as context). A conversation of up
#: to this many lines is one batch: LoCoMo 41 (663 lines) imported 0.3 s faster as one batch than as two.
RECORD_BATCH = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class SessionPiece:
    """Lines ``start:stop`` of a session: what one transaction writes of it."""

    session: TranscriptSession
    start: int
    stop: int

    @property
    def lines(self) -> list[TranscriptLine]:
        return self.session.lines[self.start : self.stop]

    @property
    def opens(self) -> bool:
        """The piece starts its session (its scene opens)."""
        return self.start == 0

    @property
    def closes(self) -> bool:
        """The piece ends its session (its scene ends, and is summarised)."""
        return self.stop == len(self.session.lines)


def plan_transactions(sessions: Sequence[TranscriptSession], skip: int = 0) -> list[list[SessionPiece]]:
    """The story transactions that write ``sessions`` after their first ``skip`` lines: whole sessions in order,
    up to :data:`TURN_BATCH` lines a transaction; a longer session, or the rest of one begun before, alone,
    :data:`TURN_BATCH` lines a transaction."""
    planned: list[list[SessionPiece]] = []
    lines = TURN_BATCH
    for session in sessions:
        n = len(session.lines)
        first, skip = min(skip, n), max(0, skip - n)
        if first == n:
            continue
        if n > TURN_BATCH or first:
            planned.extend([SessionPiece(session, a, min(a + TURN_BATCH, n))] for a in range(first, n, TURN_BATCH))
            lines = TURN_BATCH
            continue
        if lines + n > TURN_BATCH:
            planned.append([])
            lines = 0
        planned[-1].append(SessionPiece(session, 0, n))
        lines += n
    return planned


def commit_kinds(pieces: Sequence[SessionPiece]) -> list[str]:
    """The commits a transaction of ``pieces`` stands for, in order: those of the single writes (a session's
    ``scene`` start, an ``import`` of its turns per piece, its ``gate`` at the end)."""
    kinds = []
    for piece in pieces:
        kinds.extend(["scene"] * piece.opens + ["import"] + ["gate"] * piece.closes)
    return kinds


def plan_batches(sessions: Sequence[TranscriptSession]) -> list[list[TranscriptSession]]:
    """Whole sessions grouped in order until a group holds :data:`RECORD_BATCH` lines (the last may hold fewer):
    the batches whose records are embedded and written together."""
    batches: list[list[TranscriptSession]] = [[]]
    lines = 0
    for session in sessions:
        if lines >= RECORD_BATCH:
            batches.append([])
            lines = 0
        batches[-1].append(session)
        lines += len(session.lines)
    return batches


def plan_remaining(
    sessions: Sequence[TranscriptSession], written: int
) -> list[tuple[list[list[SessionPiece]], list[TranscriptSession]]]:
    """The record batches (:func:`plan_batches`) left to write after the first ``written`` lines: each as its
    transactions and the sessions' lines it writes (for :func:`predicted_texts`)."""
    work = []
    for batch in plan_batches(sessions):
        size = sum(len(s.lines) for s in batch)
        if written >= size:
            written -= size
            continue
        left, rest = [], written
        for session in batch:
            if rest < len(session.lines):
                left.append(session.model_copy(update={"lines": session.lines[rest:]}))
            rest = max(0, rest - len(session.lines))
        work.append((plan_transactions(batch, written), left))
        written = 0
    return work


def fingerprint(transcript: Transcript) -> str:
    """SHA-256 of the transcript's lines (session, time, speaker, text, ref): what a resume must match."""
    digest = hashlib.sha256()
    for line in transcript.lines:
        fields = [line.session, line.time, line.speaker, line.text, line.ref]
        digest.update(json.dumps(fields, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()
