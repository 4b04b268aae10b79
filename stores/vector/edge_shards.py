"""The qdrant-edge shards of one index folder that this process has open, and the folder's lock.

Every :class:`~stores.vector.edge.QdrantEdgeVectorIndex` of a process on the same folder shares one
:class:`OpenShards` (reference counted by :func:`acquire_shards` / :func:`release_shards`), which holds
the folder's exclusive lock for as long as it is open; the last release, or interpreter exit, flushes
and closes every shard before the lock is let go.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from schemas.errors import StoreError, Unavailable
from schemas.search import FILTER_FIELDS
from stores.vector.base import VectorSpace

STORE = "qdrant-edge"
SPACE_FILE = "space.json"  # a collection's VectorSpace, written last: the collection is complete
SHARD_DIR = "shard"  # the collection's EdgeShard


class OpenCollection:
    """One open shard, its vector space, and the bookkeeping of when to optimize it."""

    def __init__(self, name: str, folder: Path, shard: Any, space: VectorSpace, pending: int) -> None:
        self.name = name
        self.folder = folder
        self.shard = shard
        self.space = space
        self.pending = pending
        self.write_lock = threading.RLock()


class OpenShards:
    """The shards of one index folder opened by this process: the index's lazily opened "client"."""

    def __init__(self, root: Path, *, wait_s: float) -> None:
        self.root = root
        self.lock = threading.RLock()
        self.open: dict[str, OpenCollection] = {}
        self._lock_file = _lock_folder(root, wait_s)

    def close(self) -> None:
        with self.lock:
            collections, self.open = list(self.open.values()), {}
        try:
            for col in collections:
                with col.write_lock:
                    try:
                        col.shard.flush()
                    finally:
                        col.shard.close()
        finally:
            # Released only once every shard is flushed and closed: the next owner sees all of it.
            self._lock_file.close()


# Index objects of one process on one folder share its open shards (and its folder lock).
_SHARED: dict[Path, tuple[OpenShards, int]] = {}
_SHARED_LOCK = threading.Lock()


def _close_all_shards() -> None:
    # At interpreter exit, close shards before their folder locks are released by the OS, so a
    # process that takes the folder over next finds everything flushed.
    with _SHARED_LOCK:
        entries = list(_SHARED.values())
        _SHARED.clear()
    for shards, _ in entries:
        with contextlib.suppress(Exception):
            shards.close()


atexit.register(_close_all_shards)


def acquire_shards(root: Path, *, wait_s: float) -> OpenShards:
    key = root.resolve()
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is not None:
            _SHARED[key] = (entry[0], entry[1] + 1)
            return entry[0]
        shards = OpenShards(key, wait_s=wait_s)
        _SHARED[key] = (shards, 1)
        return shards


def release_shards(shards: OpenShards) -> None:
    with _SHARED_LOCK:
        entry = _SHARED.get(shards.root)
        if entry is not None and entry[0] is shards and entry[1] > 1:
            _SHARED[shards.root] = (shards, entry[1] - 1)
            return
        if entry is not None and entry[0] is shards:
            del _SHARED[shards.root]
    shards.close()


def _lock_folder(root: Path, wait_s: float) -> Any:
    """Hold an exclusive lock on the index folder for as long as this process has it open.

    qdrant-edge locks a shard's WAL only while it writes, so two processes could otherwise open the
    same shard and the second would load it without the first one's unflushed segments (a Ray write
    actor still shutting down while the driver reopens the folder lost points that way). The lock is
    released when the index closes or its process dies; a second opener waits up to ``wait_s``.
    """
    import fcntl

    handle = (root / ".lock").open("a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise Unavailable(
                    STORE, f"index folder {root} is in use by another process (waited {wait_s:g}s)"
                ) from None
            time.sleep(0.05)


def read_space(folder: Path) -> VectorSpace | None:
    """The collection folder's vector space, or None where it was never completed."""
    try:
        text = (folder / SPACE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return VectorSpace.model_validate(json.loads(text))
    except ValueError as exc:
        raise StoreError(STORE, f"unreadable {folder / SPACE_FILE}: {exc}") from None


def ensure_payload_indexes(shard: Any) -> None:
    """Add a keyword payload index for each filter field the shard lacks (one opened or created)."""
    from qdrant_edge import PayloadSchemaType, UpdateOperation

    present = set(shard.info().payload_schema)
    for field in FILTER_FIELDS:
        if field not in present:
            shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Keyword))
