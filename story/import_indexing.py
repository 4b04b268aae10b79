"""The recall side of a transcript import: its records embedded and indexed while the graph is written.

:class:`_Indexing` is what :class:`story.importing.TranscriptImporter` hands each written batch of records
to; see its docstring for the two threads and their order.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from models.embedding import Embedder
from schemas.recall import RecallRecord
from story.recall_index import RecallIndex

#: ``on_progress(stage, n)``: ``n`` more turns written (stage ``"turns"``) or records indexed (``"records"``).
Progress = Callable[[str, int], None]


class _Indexing:
    """Embeds and indexes an import's records while its sessions are written to the graph.

    Two threads. The embedding thread starts on the turns' texts before the first graph write (:meth:`prefetch`,
    one job per planned batch, a batch or two ahead of the index writes so a long transcript's vectors are not
    all held at once): the model embeds (torch releases the GIL) while the main thread writes turns. Each batch
    of whole sessions, once written (:meth:`add`), queues the texts the prediction did not hold (the session
    summaries, known only once a session is written) before the next batch's prefetch job if that has not begun
    (:class:`_EmbeddingQueue`), so the batch's vectors are written while the next batch is embedded, and the
    embedding thread never waits. The writing thread writes a batch's full text once its turns' vectors are
    ready (:meth:`RecallIndex.write_text`, while the rest is embedded), then its vectors
    (:meth:`RecallIndex.write_vectors`). What is embedded is what the index itself would embed for the records
    (:meth:`RecallIndex.indexed_texts`, looked up by exact text; a text no job held, a turn predicted wrong, is
    embedded then), so a rebuild writes the same vectors. A failed batch stops the import: :meth:`finish` raises
    it once the graph writes have ended (they are the record of truth and stay).
    """

    #: Prefetch jobs queued ahead of the batch being written.
    AHEAD = 2

    def __init__(self, index: RecallIndex | None, on_progress: Progress | None) -> None:
        self.index = index
        self.on_progress = on_progress
        self.model_seconds = 0.0
        self._embedding: _EmbeddingQueue | None = None
        self._writing: ThreadPoolExecutor | None = None
        self._planned: list[list[str]] = []
        self._prefetched: list[Future[_Embedded]] = []
        self._lock = threading.Lock()
        self._writes: list[Future[float]] = []

    def prefetch(self, texts: list[list[str]]) -> None:
        """Load the model and start embedding the predicted texts, one job per planned batch."""
        index = self.index
        if index is None:
            return
        began = time.perf_counter()
        index.embedder.embed_documents(["warm-up"])  # loads the model (a lazy embedder's first call)
        self.model_seconds = time.perf_counter() - began
        self._embedding = _EmbeddingQueue(index.embedder)
        self._writing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-index")
        self._planned = texts
        self._ahead(self.AHEAD - 1)

    def _ahead(self, last: int) -> None:
        """Queue the prefetch jobs of the planned batches up to ``last``."""
        with self._lock:
            while len(self._prefetched) <= min(last, len(self._planned) - 1):
                number = len(self._prefetched)
                assert self._embedding is not None
                self._prefetched.append(self._embedding.submit((number, 0), self._planned[number]))

    def add(self, records: Sequence[RecallRecord]) -> None:
        """Queue the next planned batch's records (whole sessions) for the index, and the embedding of
        its texts the prediction did not hold (its session summaries) before the later batches' prefetch."""
        index, embedding, writing = self.index, self._embedding, self._writing
        if index is None or embedding is None or writing is None:
            return
        number = len(self._writes)
        self._ahead(number + self.AHEAD - 1)  # the graph writes ran ahead of the writing thread
        extra: Future[_Embedded] | None = None
        texts: list[str] | None = None
        if not index.config.context_in_vector:  # else a record's text waits for its indexed neighbours
            texts = index.indexed_texts(records)
            planned = set(self._planned[number]) if number < len(self._planned) else set()
            if unplanned := [t for t in texts if t not in planned]:
                extra = embedding.submit((number, 1), unplanned)
        self._writes.append(writing.submit(self._write, number, list(records), extra, texts))

    def _write(
        self, number: int, batch: list[RecallRecord], extra: Future[_Embedded] | None, texts: list[str] | None
    ) -> float:
        """Write a batch once its vectors are ready. ``texts``: what the index embeds for ``batch``, when
        :meth:`add` knew them already (without ``context_in_vector``)."""
        index, embedding = self.index, self._embedding
        assert index is not None and embedding is not None
        self._ahead(number + self.AHEAD)
        prefetched = self._prefetched[number].result() if number < len(self._prefetched) else _Embedded({}, 0.0)
        began = time.perf_counter()
        index.write_text(batch)  # needs no vectors: written while the summaries are embedded
        writing = time.perf_counter() - began
        vectors, seconds = prefetched.vectors, prefetched.seconds
        if extra is not None:
            summaries = extra.result()
            vectors = {**vectors, **summaries.vectors}
            seconds += summaries.seconds
        if texts is None:
            texts = index.indexed_texts(batch)
        if missing := [t for t in texts if t not in vectors]:  # any text neither job held
            rest = embedding.submit((number, 1), missing).result()
            vectors = {**vectors, **rest.vectors}
            seconds += rest.seconds
        began = time.perf_counter()
        if batch:
            index.write_vectors(batch, np.stack([vectors[t] for t in texts]))
        if self.on_progress:
            self.on_progress("records", len(batch))
        return seconds + writing + time.perf_counter() - began  # embedding and writing, not waiting

    def abandon(self) -> None:
        """The graph writes failed: drop what is queued (what is running finishes)."""
        if self._writing is not None:
            self._writing.shutdown(wait=True, cancel_futures=True)
        if self._embedding is not None:
            self._embedding.shutdown()

    def finish(self) -> tuple[float, float]:
        """Wait for every batch.

        Returns:
            Seconds spent loading the model, and embedding and writing the records.

        Raises:
            The first error of a batch.
        """
        try:
            return self.model_seconds, sum(write.result() for write in self._writes)
        finally:
            self.abandon()


class _EmbeddingQueue:
    """One thread that embeds the queued jobs, the lowest ``(batch, rank)`` first (submission order among
    equals): a batch's summaries (rank 1), queued once its sessions are written, go before a later batch's
    prefetched turns (rank 0) that have not begun, which a first-in-first-out pool would embed first,
    leaving the batch's vectors to wait for them."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._jobs: list[tuple[tuple[int, int], int, list[str], Future[_Embedded]]] = []
        self._seq = 0
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="import-embed", daemon=True)
        self._thread.start()

    def submit(self, priority: tuple[int, int], texts: Sequence[str]) -> Future[_Embedded]:
        """Queue ``texts``; the future holds their vectors."""
        future: Future[_Embedded] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the import's embedding has stopped")
            heapq.heappush(self._jobs, (priority, self._seq, list(texts), future))
            self._seq += 1
            self._ready.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if not self._jobs:
                    return
                *_, texts, future = heapq.heappop(self._jobs)
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(_embed(self.embedder, texts))
                except BaseException as exc:  # the waiting writer raises it
                    future.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not begun and wait for what has."""
        with self._ready:
            self._closed = True
            for *_, future in self._jobs:
                future.cancel()
            self._jobs.clear()
            self._ready.notify()
        self._thread.join()


@dataclasses.dataclass(frozen=True, slots=True)
class _Embedded:
    """Vectors by the exact text embedded, and the seconds the embedding took."""

    vectors: dict[str, np.ndarray]
    seconds: float


def _embed(embedder: Embedder, texts: Sequence[str]) -> _Embedded:
    began = time.perf_counter()
    unique = list(dict.fromkeys(texts))
    vectors = embedder.embed_documents(unique) if unique else np.zeros((0, embedder.dim), dtype=np.float32)
    return _Embedded(dict(zip(unique, vectors, strict=True)), time.perf_counter() - began)
