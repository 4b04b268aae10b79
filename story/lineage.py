"""Lineage: which turns (and which anchored records) lie on the path from the root to a position.

Every branch is a straight line of turns: a write below a branch's tip forks a new branch instead
of growing a side shoot, so a branch's own turns have consecutive depths starting just below its
fork turn. A *position* in the story is ``(branch, depth)``; its lineage is a short list of
segments ``(branch, max depth)`` — the branch itself up to the depth, then its parent branch up to
the fork, and so on to the root. Whether a record anchored at ``(b, d)`` is visible from a
position is then one comparison per segment, with no walk over parent links, which is what makes
"the state as of any turn" cheap in a campaign of many thousands of turns.

One refinement: canon committed on a parent branch after a fork was made belongs to the parent's
future, not the child's, even where it is anchored at or before the fork turn (a mid-scene commit
anchors a proposal at the turn it names, which may lie behind the head). Events carry the campaign's
commit sequence number, and a branch records the sequence number at its fork (``fork_seq``): on
every ancestor segment, a child sees only the events committed up to its fork.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from story.errors import StoryNotFound


@dataclass(frozen=True, slots=True)
class BranchLine:
    """The part of a branch that lineage needs."""

    id: str
    parent_branch_id: str | None
    fork_turn_id: str | None
    fork_depth: int  # depth of the fork turn; -1 for a root branch (its first turn has depth 0)
    fork_seq: int = 0  # the campaign's commit sequence number when the branch was forked


@dataclass(frozen=True, slots=True)
class Segment:
    """Records anchored on ``branch_id`` at a depth up to ``max_depth`` are on the lineage."""

    branch_id: str
    max_depth: int
    seq_cutoff: int | None = None  # on an ancestor's segment: only records committed up to the fork (seq <= this)

    def covers(self, depth: int, seq: int | None = None) -> bool:
        if depth > self.max_depth:
            return False
        return self.seq_cutoff is None or seq is None or seq <= self.seq_cutoff


@dataclass(frozen=True, slots=True)
class Lineage:
    """The segments from a position back to the root, nearest first."""

    segments: tuple[Segment, ...]

    @property
    def branch_id(self) -> str:
        return self.segments[0].branch_id

    @property
    def depth(self) -> int:
        return self.segments[0].max_depth

    @property
    def branch_ids(self) -> list[str]:
        return [s.branch_id for s in self.segments]

    def contains(self, branch_id: str, depth: int, seq: int | None = None) -> bool:
        """Whether a record anchored at ``(branch_id, depth)`` (committed as ``seq``) is visible here."""
        return any(s.branch_id == branch_id and s.covers(depth, seq) for s in self.segments)

    def segment(self, branch_id: str) -> Segment | None:
        return next((s for s in self.segments if s.branch_id == branch_id), None)

    def branch_at(self, depth: int, branches: Mapping[str, BranchLine]) -> str | None:
        """The branch whose own turn sits at ``depth`` on this lineage (None past the position)."""
        if depth > self.depth or depth < 0:
            return None
        for seg in self.segments:
            line = branches[seg.branch_id]
            if depth > line.fork_depth:
                return seg.branch_id
        return None


def lineage_of(branches: Mapping[str, BranchLine], branch_id: str, depth: int) -> Lineage:
    """The lineage of position ``(branch_id, depth)``.

    Raises:
        StoryNotFound: a branch on the way is unknown (a corrupt tree).
    """
    segments: list[Segment] = []
    seen: set[str] = set()
    current: str | None = branch_id
    cutoff: int | None = None
    while current is not None:
        if current in seen:
            raise StoryNotFound(f"branch {current!r} is its own ancestor")
        seen.add(current)
        line = branches.get(current)
        if line is None:
            raise StoryNotFound(f"no branch {current!r}")
        segments.append(Segment(current, depth, cutoff))
        if line.parent_branch_id is None:
            break
        # a nearer fork's cutoff is the lower: an ancestor's events after it are a sibling's future
        cutoff = line.fork_seq if cutoff is None else min(cutoff, line.fork_seq)
        depth = min(depth, line.fork_depth)
        current = line.parent_branch_id
    return Lineage(tuple(segments))


LINEAGE_LEVELS = 25  # depths up to 2**24 - 1 (16.7 M turns on one line)


def lineage_keys(branch_id: str, depth: int) -> list[str]:
    """The keys of a record anchored at ``(branch_id, depth)``: one per dyadic block holding ``depth``."""
    if not 0 <= depth < 1 << (LINEAGE_LEVELS - 1):
        raise ValueError(f"depth {depth} is outside 0..{(1 << (LINEAGE_LEVELS - 1)) - 1}")
    return [f"{branch_id}:{level}:{depth >> level}" for level in range(LINEAGE_LEVELS)]


def lineage_cover(lineage: Lineage) -> list[str]:
    """The keys whose union is every position on ``lineage``: per segment, blocks tiling ``[0, max_depth]``."""
    keys: list[str] = []
    for segment in lineage.segments:
        end = segment.max_depth + 1  # depths 0 .. max_depth
        start = 0
        for level in range(LINEAGE_LEVELS - 1, -1, -1):
            size = 1 << level
            if start + size <= end:
                keys.append(f"{segment.branch_id}:{level}:{start >> level}")
                start += size
    return keys
