"""Turn records written to the memory index behind the turn, many turns to a commit.

A turn's record costs the index one full-text commit (tantivy writes its segment and fsyncs: 50-190 ms
on a loaded 2-core machine, ~10x the rest of the write) and one vector upsert. Made on the turn's
thread, that commit was most of a turn's overhead, and concurrent tables queued for the folder's one
writer. :class:`RecallWriter` takes the records (:meth:`RecallWriter.submit` returns at once) and one
thread writes what has gathered since its last write in one :meth:`story.recall_index.RecallIndex.write`:
one embedding call, one commit, one upsert, however many tables played meanwhile.

Nothing acknowledged is lost: the graph is the record, committed before the record is submitted. The
index write keeps its order (full text, then vectors), so a process killed before or during a batch
leaves those records without vectors, and the reconciliation at start-up
(:func:`story.recall_sync.reconcile`) or the scene's end (:func:`story.recall_sync.sync_scene`) writes
them. Readers that must see every record acknowledged so far call :meth:`RecallWriter.flush` first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import structlog

from schemas.errors import LorekeeperError
from schemas.recall import RecallRecord

log = structlog.get_logger(__name__)


class RecallWriter:
    """One thread writing submitted records in batches, in the order submitted (see the module's doc).

    Args:
        write: writes a batch to the index (:meth:`story.recall_index.RecallIndex.write_now`).
    """

    def __init__(self, write: Callable[[Sequence[RecallRecord]], int]) -> None:
        self._write = write
        self._changed = threading.Condition()
        self._pending: list[RecallRecord] = []
        self._writing = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, records: Sequence[RecallRecord]) -> None:
        """Queue ``records`` for the next batch; returns at once (written synchronously once closed)."""
        if not records:
            return
        with self._changed:
            if not self._closed:
                self._pending.extend(records)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="recall-writer", daemon=True)
                    self._thread.start()
                self._changed.notify_all()
                return
        self._write_batch(list(records))

    def flush(self) -> None:
        """Return once every record submitted before the call is written (or its write failed)."""
        if threading.current_thread() is self._thread:
            return
        with self._changed:
            self._changed.wait_for(lambda: not self._pending and not self._writing)

    def close(self) -> None:
        """Write what is pending and stop the thread; later submissions are written on the caller's thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    self._thread = None
                    self._changed.notify_all()
                    return
                batch, self._pending, self._writing = self._pending, [], True
            try:
                self._write_batch(batch)
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _write_batch(self, batch: list[RecallRecord]) -> None:
        latest = list({r.id: r for r in batch}.values())  # a turn re-told in the batch: its last text
        try:
            self._write(latest)
        except (LorekeeperError, OSError) as exc:
            # the story is committed; the index catches up at scene end or at start-up (recall_sync)
            log.warning("recall_index_failed", what="turns", records=len(latest), error=str(exc))
        except Exception as exc:  # noqa: BLE001 - the thread must outlive one bad batch; logged
            log.error("recall_index_failed", what="turns", records=len(latest), error=repr(exc))
