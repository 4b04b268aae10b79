"""World state as of any position: the nearest usable snapshot on its lineage plus the events after it.

Snapshots are content-addressed JSON in the blob store (``snapshots/<sha256>``), with a
``(:Snapshot)`` node that says where in the tree they were taken, how many events they fold and the
highest commit sequence number among them. One is taken whenever a commit leaves more than
``interval`` events to replay, so a state read replays at most about ``interval`` events. A snapshot
is a cache: losing one costs a longer replay, never a wrong answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from schemas.common import new_id, utc_now
from schemas.errors import NotFound
from schemas.story import SnapshotKind
from stores.blob.base import BlobStore
from stores.blob.layout import SNAPSHOTS
from story import cypher
from story.graph import StoryGraph
from story.lineage import Lineage
from story.state import WorldState

#: Default number of events between snapshots along a line of the story.
DEFAULT_SNAPSHOT_INTERVAL = 64


@dataclass(frozen=True, slots=True)
class StateAt:
    """A state and how it was built (for tests and benchmarks)."""

    state: WorldState
    snapshot_id: str | None
    replayed: int


class SnapshotCache:
    """Decoded snapshots by content hash (they never change), least recently used out first."""

    def __init__(self, size: int = 256) -> None:
        self._items: OrderedDict[str, WorldState] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, content_hash: str) -> WorldState | None:
        with self._lock:
            state = self._items.get(content_hash)
            if state is not None:
                self._items.move_to_end(content_hash)
            return state

    def put(self, content_hash: str, state: WorldState) -> None:
        with self._lock:
            self._items[content_hash] = state
            self._items.move_to_end(content_hash)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class Snapshots:
    """Builds states from snapshots and events, and takes snapshots after commits."""

    def __init__(
        self, graph: StoryGraph, blobs: BlobStore, *, interval: int = DEFAULT_SNAPSHOT_INTERVAL, cache_size: int = 256
    ) -> None:
        if interval < 1:
            raise ValueError(f"snapshot interval must be >= 1, got {interval}")
        self.graph = graph
        self.blobs = blobs
        self.interval = interval
        self.cache = SnapshotCache(cache_size)

    def state_at(
        self, campaign_id: str, lineage: Lineage, *, candidates: list[dict[str, Any]] | None = None
    ) -> StateAt:
        """The world state at a position (a copy the caller may change).

        ``candidates`` are the snapshots on the lineage when the caller read them already.
        """
        base, snapshot_id = WorldState(), None
        if candidates is None:
            candidates = self.graph.snapshots_on(campaign_id, lineage)
        for snap in sorted(candidates, key=lambda s: int(s["max_seq"]), reverse=True):
            try:
                base = self._load(snap["blob_key"], snap["content_hash"])
            except (NotFound, ValueError):
                continue  # a lost or outdated snapshot only costs a longer replay
            snapshot_id = snap["uid"]
            break
        state = base.copy()
        events = self.graph.events_on(campaign_id, lineage, after_seq=state.last_seq if snapshot_id else 0)
        for seq, event in events:
            state.apply(event, seq=seq)
        return StateAt(state, snapshot_id, len(events))

    def _load(self, key: str, content_hash: str) -> WorldState:
        cached = self.cache.get(content_hash)
        if cached is None:
            cached = WorldState.from_json(self.blobs.get(key))
            self.cache.put(content_hash, cached)
        return cached

    def maybe_take(
        self,
        campaign_id: str,
        lineage: Lineage,
        state: WorldState,
        *,
        turn_id: str | None,
        replayed: int,
        kind: SnapshotKind = SnapshotKind.INTERVAL,
        force: bool = False,
        inner: bool = False,
    ) -> str | None:
        """Snapshot ``state`` at the lineage's position if ``replayed`` events reached the interval.

        ``inner``: the position is behind its branch's line end (see :func:`story.graph.snapshots_visible`).
        """
        if not force and replayed < self.interval:
            return None
        data = state.to_json()
        info = self.blobs.put_content_addressed(data, prefix=SNAPSHOTS, content_type="application/json")
        content_hash = info.key.rsplit("/", 1)[-1]
        self.cache.put(content_hash, state.copy())
        uid = new_id("snap")
        row = {
            "uid": uid,
            "id": uid,
            "campaign_id": campaign_id,
            "branch_id": lineage.branch_id,
            "depth": lineage.depth,
            "max_seq": state.last_seq,
            "event_count": state.event_count,
            "blob_key": info.key,
            "content_hash": content_hash,
            "state_hash": state.state_hash,
            "kind": kind.value,
            "created_at": utc_now().isoformat(),
        }
        if turn_id is not None:
            row["turn_uid"] = turn_id
        if inner:
            row["inner"] = True
        with self.graph.graph.transaction() as tx:
            tx.run(*cypher.create_nodes("Snapshot", [row]))
            if turn_id is not None:
                tx.run(*cypher.link_nodes("Snapshot", "AT_TURN", "Turn", [(uid, turn_id)]))
        return uid
