"""The ingest pipeline's Ray Data stages: callable classes over batches.

Heavy state (models, store clients) opens in ``__init__``, which runs once per actor on the worker;
``__call__`` does the work for one batch. Each stage declares its ``map_batches`` options beside it
(:meth:`map_options`), sized by a :class:`jobs.plan.StagePlan`.

Rows flowing between stages are one per chunk, typed by :mod:`jobs.rows` (each stage decodes its
batch into row models and encodes its output rows; no stage reads or builds a column by hand). A
file that yields no chunks (skipped as unchanged, or failed) yields one *status row* instead
(``chunk_uid == ""``) so the driver hears about every file as soon as it is done; later stages pass
status rows through untouched.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
import structlog
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from jobs import events, metrics
from jobs.chunk import chunk_document
from jobs.concepts import assign_bold_terms, build_concept_extractor, collect_concepts
from jobs.document import ExtractedDocument, StructureFigures, TextChunk
from jobs.extract import extract_document
from jobs.index_records import embedding_text, index_records
from jobs.plan import IngestOptions, StagePlan, fit_chunking
from jobs.rows import ChunkRow, EmbeddedRow, RowStatus, SourceRow, WrittenRow, chunk_uid
from jobs.rule_facts import FACT_FILE_TYPES, RULE_FACTS_READ, FactsRead, read_facts, rule_tables
from jobs.sources import fetch_events
from jobs.tokens import TokenCounter
from models.embedding import SentenceTransformerEmbedder
from schemas.common import JobStatus, content_id, sha256_hex, utc_now
from schemas.errors import LorekeeperError, Unavailable
from schemas.knowledge import (
    Chunk,
    Concept,
    FileType,
    ImageAsset,
    IngestJob,
    IngestProgress,
    IngestSource,
    IngestStage,
    Item,
    ItemStatus,
    Library,
)
from schemas.settings import Settings
from stores.blob.layout import chunk_key, image_key, original_key
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store, open_text_index, open_vector_index
from stores.source_facts import SourceFactStore
from stores.text.base import TextDocument
from stores.vector.base import VectorPoint, VectorSpace

log = structlog.get_logger(__name__)

T = TypeVar("T")


def store_retry(operation: str) -> Retrying:
    """Bounded exponential backoff for transient store errors; permanent errors are not retried."""
    return Retrying(
        retry=retry_if_exception_type(Unavailable),
        stop=stop_after_attempt(5),
        wait=wait_exponential(multiplier=0.5, max=8),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "store_retry",
            operation=operation,
            attempt=state.attempt_number,
            error=str(state.outcome.exception()) if state.outcome else None,
        ),
    )


def retrying(operation: str, fn: Callable[[], T]) -> T:
    """``fn()`` under :func:`store_retry`: every store call of the job is idempotent, so a store that
    is restarting (a crashed embedded graph comes back within a second) costs a retry, not a file."""
    for attempt in store_retry(operation):
        with attempt:
            return fn()
    raise AssertionError("unreachable: store_retry re-raises the last error")


def node_id() -> str:
    """The Ray node this stage runs on (for the job's stage report); "" outside Ray."""
    ray = sys.modules.get("ray")  # never imported here: the in-process run would pay seconds for ""
    return ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""


def _actors(size: int) -> Any:
    import ray.data

    return ray.data.ActorPoolStrategy(size=size)


class NodeSpread:
    """Remote args that place each new actor of a stage on the next alive node in turn (soft affinity).

    Ray Data's default (``SPREAD``) is a preference: with room on the driver's node, a two-node
    cluster can run a whole job there while the other node idles. Given as ``ray_remote_args_fn``,
    this is called each time the stage starts an actor, so a pool of n actors lands on n nodes in turn
    (a replacement for a dead one goes to the next alive node), the driver's own node last: it also
    runs the driver (and, on a head node, Ray's control plane), so a one-actor stage goes elsewhere.
    Soft: a node without room, or gone, falls back to anywhere that has room. On one node it asks for
    nothing.
    """

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> dict[str, Any]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)
        if len(nodes) < 2:
            return {}
        here = ray.get_runtime_context().get_node_id()
        nodes = [n for n in nodes if n != here] + [n for n in nodes if n == here]
        node = nodes[self._next % len(nodes)]
        self._next += 1
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)}


class ExtractStage:
    """Fetch a file, extract it, chunk it, find its concepts, and record the item in the graph."""

    @staticmethod
    def map_options(plan: StagePlan) -> dict[str, Any]:
        return {
            "batch_size": 1,
            "compute": _actors(plan.extract_concurrency),
            "num_cpus": plan.extract_cpus,
            "ray_remote_args_fn": NodeSpread(),
        }

    def __init__(self, settings: Settings, options: IngestOptions, library: Library, max_model_tokens: int) -> None:
        self.settings = settings
        self.options = options
        self.library = library
        self.blob = open_blob_store(settings)
        self.catalog = Catalog(open_graph_store(settings))
        self.facts = SourceFactStore(self.catalog.graph)
        self.counter = TokenCounter()
        self.concepts = build_concept_extractor(options.concepts_llm)
        self.chunking = fit_chunking(library.effective_chunking(), max_model_tokens)

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the stage's stores (idempotent; the in-process run closes them as it ends)."""
        for target in (getattr(self, "catalog", None), getattr(self, "blob", None)):
            target = getattr(target, "graph", target)
            if target is not None:
                with contextlib.suppress(Exception):
                    target.close()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        rows: list[ChunkRow] = []
        for source in SourceRow.decode(batch):
            with events.for_file(source.job_id):  # every event of the file carries its job (and item)
                rows.extend(self.process(source))
        here = node_id()
        for row in rows:
            row.extract_node = here
        return ChunkRow.encode(rows)

    def _update_job(self, job: IngestJob, **changes: Any) -> IngestJob:
        job = job.validated_copy(**changes)
        retrying("save_job", partial(self.catalog.save_job, job))
        return job

    def _fetch(self, source: SourceRow, job: IngestJob) -> bytes:
        if source.source is IngestSource.PATH:
            with open(source.ref, "rb") as handle:
                return handle.read()
        with fetch_events(job, source.key or "", source.bucket or self.blob.default_bucket) as fetched:
            data = retrying("fetch", lambda: self.blob.get(source.key or "", bucket=source.bucket))
            fetched["file_size"] = len(data)
        return data

    def process(self, source: SourceRow) -> list[ChunkRow]:
        """Rows for one file; never raises (a bad file becomes a failed job and a status row)."""
        job = retrying("get_job", partial(self.catalog.get_job, source.job_id))
        name = source.name
        started = time.perf_counter()
        events.task_started(job.id, job.item_uid, job.retry_count, job.source_ref, node_id())
        job = self._update_job(
            job,
            status=JobStatus.PROCESSING,
            started_at=job.started_at or utc_now(),  # set already when the runner copied the file in
            embedding_model=self.options.embedding.name,
            completed_at=None,
            error=None,
            progress=IngestProgress(fraction=0.05, stage=IngestStage.FETCHING),
        )
        item_uid = ""
        try:
            data = self._fetch(source, job)
            digest = sha256_hex(data)
            item_uid = content_id("item", f"{self.library.uid}:{digest}")
            events.bind_item(item_uid)
            versions = retrying(
                "item_versions", partial(self.catalog.items_for_source, self.library.uid, job.source_ref)
            )
            current = next((v for v in versions if v.status is ItemStatus.READY), None)
            if current is not None and current.content_hash == digest:
                read = self._facts_of_unchanged(job, current, name, data)
                self._update_job(
                    job,
                    item_uid=current.uid,
                    status=JobStatus.COMPLETED,
                    completed_at=utc_now(),
                    facts_extracted=len(read.facts),
                    facts_by_kind=read.by_kind,
                    progress=IngestProgress(fraction=1.0, stage=IngestStage.WRITING, message="unchanged; skipped"),
                )
                log.info("ingest_item_unchanged", job_id=job.id, item_uid=current.uid)
                return [ChunkRow.status_row(job.id, current.uid, RowStatus.SKIPPED)]
            return self._ingest(job, name, data, digest, item_uid, versions, started)
        except Exception as exc:  # noqa: BLE001 - one bad file must never stop the others
            reason = str(exc) if isinstance(exc, LorekeeperError) else f"{type(exc).__name__}: {exc}"
            events.job_failed(job.id, item_uid or None, type(exc).__name__, str(exc), exc)
            self._update_job(
                job, status=JobStatus.FAILED, error=reason, completed_at=utc_now(), item_uid=item_uid or None
            )
            if item_uid:
                # the item may never have been written: then the job alone carries the reason
                with contextlib.suppress(LorekeeperError):
                    retrying(
                        "item_failed", partial(self.catalog.set_item_status, item_uid, ItemStatus.FAILED, error=reason)
                    )
            return [ChunkRow.status_row(job.id, item_uid, RowStatus.FAILED, reason)]

    def _new_item(
        self, job: IngestJob, name: str, data: bytes, digest: str, item_uid: str, versions: list[Item]
    ) -> Item:
        """The item of a new file (a new version of its source's item), saved as processing with its original."""
        file_type = FileType.from_filename(name)
        raw_key = original_key(item_uid, name)
        if raw_key != job.raw_key:  # else the runner copied it there from the source bucket
            retrying("put_original", partial(self.blob.put, raw_key, data))
        latest = versions[0] if versions else None
        supersedes = next((v.uid for v in versions if v.status is ItemStatus.READY and v.uid != item_uid), None)
        item = Item(
            uid=item_uid,
            library_uid=self.library.uid,
            collection_uid=job.collection_uid,
            title=job.title or (name.rsplit(".", 1)[0] if "." in name else name),
            file_type=file_type,
            size_bytes=len(data),
            content_hash=digest,
            classification=self.options.classification,
            source_ref=job.source_ref,
            source=job.source,
            raw_key=raw_key,
            status=ItemStatus.PROCESSING,
            version=(latest.version + 1) if latest and latest.uid != item_uid else (latest.version if latest else 1),
            supersedes_uid=supersedes,
        )
        retrying("save_item", partial(self.catalog.save_item, item))
        return item

    def _ingest(
        self, job: IngestJob, name: str, data: bytes, digest: str, item_uid: str, versions: list[Item], started: float
    ) -> list[ChunkRow]:
        item = self._new_item(job, name, data, digest, item_uid, versions)
        log.info(
            "ingest_item_created",
            job_id=job.id,
            item_uid=item_uid,
            title=item.title,
            library_uid=item.library_uid,
            collection_uid=item.collection_uid,
            version=item.version,
        )
        job = self._update_job(
            job, item_uid=item_uid, progress=IngestProgress(fraction=0.15, stage=IngestStage.EXTRACTING)
        )

        doc, chunks, images = self._chunked(name, data, item_uid)
        bold = assign_bold_terms(chunks, doc.blocks)
        with events.concepts(events.extractor_name(self.concepts)) as concept_names:
            mentions = self.concepts.extract(chunks, bold_terms_by_chunk=bold)
            concepts = collect_concepts(mentions)
            concept_names.extend(concept.name for concept in concepts)
        metrics.CONCEPTS_EXTRACTED.inc(len(concepts))
        if doc.title and not job.title:  # a title the caller gave wins over the document's
            item = item.validated_copy(title=doc.title[:200])
        # the item saved from here on (its facts' mark too) carries the reader's warnings
        item = item.validated_copy(page_count=doc.page_count or None, warnings=list(doc.warnings))
        retrying(
            "save_item",
            partial(
                self.catalog.save_item,
                item,
                chunk_count=len(chunks),
                ocr_pages=doc.ocr_pages,
                ocr_pages_skipped=doc.ocr_pages_skipped,
                concept_count=len(concepts),
            ),
        )
        retrying("save_images", partial(self.catalog.save_images, images))
        read = self._rule_facts(job, item, doc, chunks)
        self._update_job(
            job,
            concepts_extracted=len(concepts),
            facts_extracted=len(read.facts),
            facts_by_kind=read.by_kind,
            warnings=list(doc.warnings),
            progress=IngestProgress(
                fraction=0.4, stage=IngestStage.EMBEDDING, message=f"{len(chunks)} chunks from {doc.page_count} pages"
            ),
        )
        structure = StructureFigures.of(doc).to_dict()
        rows = ChunkRow.of_chunks(job.id, item_uid, chunks, mentions, doc.page_count, structure)
        log.debug("extract_stage_done", job_id=job.id, seconds=round(time.perf_counter() - started, 3))
        return rows

    def _chunked(
        self, name: str, data: bytes, item_uid: str
    ) -> tuple[ExtractedDocument, list[TextChunk], list[ImageAsset]]:
        """The file's text extracted and chunked (``embed_chunking_start`` … ``_complete`` or ``_failed``),
        its images saved as the reader finds them."""
        file_type = FileType.from_filename(name).value
        events.chunking_start(self.library.type.value, self.chunking, file_type)
        started = time.perf_counter()

        def save_image(image_name: str, payload: bytes, mime: str) -> str:
            key = image_key(item_uid, image_name)
            retrying("put_image", partial(self.blob.put, key, payload, content_type=mime))
            return key

        try:
            password = self.options.password.get_secret_value() if self.options.password else None
            doc = extract_document(
                data, name, password=password, image_sink=save_image, max_bytes=self.options.max_file_bytes
            )
            chunks = chunk_document(doc, self.chunking, self.counter)
            if not chunks:
                raise LorekeeperError(f"{name}: no text could be extracted ({'; '.join(doc.warnings) or 'empty'})")
        except Exception as exc:
            events.chunking_failed(file_type, exc)
            raise
        events.chunking_complete([c.text for c in chunks], doc.page_count, time.perf_counter() - started)
        images = [
            ImageAsset(
                uid=content_id("image", image.blob_key),
                item_uid=item_uid,
                page=image.page,
                blob_key=image.blob_key,
                width=image.width,
                height=image.height,
                mime=image.mime,
            )
            for image in doc.images
        ]
        return doc, chunks, images

    def _rule_facts(self, job: IngestJob, item: Item, doc: ExtractedDocument, chunks: list[TextChunk]) -> FactsRead:
        """Read and save the item's rulebook facts; a failure here costs the facts, never the file.

        Saved while the item is still processing: readers see an item's facts only once it is ready,
        and ``save`` replaces the item's facts, so a retried extract leaves no duplicates.
        """
        if not self.settings.rule_facts or item.file_type not in FACT_FILE_TYPES:
            return FactsRead()
        try:
            tables = rule_tables(self.settings)
            read = read_facts(doc, chunks, item.uid, tables, order_by_document=not self.settings.rule_families)
            retrying("save_facts", partial(self.facts.save, item.uid, item.library_uid, read.facts))
            retrying("item_facts_read", partial(self.catalog.save_item, item, **{RULE_FACTS_READ: True}))
        except Exception as exc:  # noqa: BLE001 - facts are an addition to the file, not a condition of it
            events.facts_failed(job.id, item.uid, exc)
            return FactsRead()
        events.facts_extracted(job.id, item.uid, read)
        return read

    def _facts_of_unchanged(self, job: IngestJob, current: Item, name: str, data: bytes) -> FactsRead:
        """The facts of an unchanged, ready item that were never read (ingested before rule facts, or
        with them off): read now, without re-embedding anything, and linked to the item's chunks.

        The file is chunked again as it was; a fact whose chunk no longer has the same text (the
        chunking changed since) keeps no chunk id rather than pointing at another passage.
        """
        if not self.settings.rule_facts or current.file_type not in FACT_FILE_TYPES:
            return FactsRead()
        if retrying("item_props", partial(self.catalog.item_props, current.uid)).get(RULE_FACTS_READ):
            return FactsRead()
        try:
            password = self.options.password.get_secret_value() if self.options.password else None
            doc = extract_document(data, name, password=password, max_bytes=self.options.max_file_bytes)
            chunks = chunk_document(doc, self.chunking, self.counter)
            stored = retrying(
                "get_chunks", partial(self.catalog.get_chunks, [chunk_uid(current.uid, c.sequence) for c in chunks])
            )
            same = {
                uid
                for c in chunks
                if (uid := chunk_uid(current.uid, c.sequence)) in stored
                and stored[uid].content_hash == sha256_hex(c.text)
            }
            read = read_facts(
                doc,
                chunks,
                current.uid,
                rule_tables(self.settings),
                order_by_document=not self.settings.rule_families,
            )
            read.facts = [f if f.chunk_id in same else f.model_copy(update={"chunk_id": None}) for f in read.facts]
            retrying("save_facts", partial(self.facts.save, current.uid, current.library_uid, read.facts))
            retrying("item_facts_read", partial(self.catalog.save_item, current, **{RULE_FACTS_READ: True}))
        except Exception as exc:  # noqa: BLE001 - the item stays as it was; the next run tries again
            events.facts_failed(job.id, current.uid, exc)
            return FactsRead()
        events.facts_extracted(job.id, current.uid, read, unchanged=True)
        return read


class EmbedStage:
    """Embed chunk texts in large batches; one actor per GPU, or one CPU actor using every core."""

    @staticmethod
    def map_options(plan: StagePlan) -> dict[str, Any]:
        options: dict[str, Any] = {
            "batch_size": plan.embed_batch_size,
            "compute": _actors(plan.embed_concurrency),
            "num_cpus": plan.embed_cpus,
            "ray_remote_args_fn": NodeSpread(),
        }
        if plan.embed_gpus:
            options["num_gpus"] = plan.embed_gpus
        return options

    def __init__(self, options: IngestOptions) -> None:
        # Bulk batches run on torch; the ONNX copy that serves queries (EmbeddingConfig.small_batch_runtime)
        # would only cost each actor its export or load for the few small tails of a job.
        bulk = options.embedding.model_copy(update={"small_batch_runtime": "torch"})
        self.embedder = SentenceTransformerEmbedder(bulk)
        # Load the model and run one tiny pass now, while extraction starts, not on the first batch.
        self.embedder.load()
        self.dim = self.embedder.dim
        self.embedder.embed_documents(["warm-up"])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        rows = ChunkRow.decode(batch)
        chunk_rows = [i for i, row in enumerate(rows) if row.chunk_uid]
        vectors = np.zeros((len(rows), self.dim), dtype=np.float32)
        started = time.perf_counter()
        if chunk_rows:
            texts = [embedding_text(rows[i].heading_path, rows[i].text) for i in chunk_rows]
            by_item: dict[tuple[str, str], list[ChunkRow]] = defaultdict(list)
            for i in chunk_rows:
                by_item[(rows[i].job_id, rows[i].item_uid)].append(rows[i])
            vectors[chunk_rows] = events.embed_batch(
                self.embedder.name, self.dim, by_item, partial(self.embedder.embed_documents, texts)
            )
        seconds = (time.perf_counter() - started) / max(len(chunk_rows), 1)
        if chunk_rows:
            metrics.EMBEDDINGS_GENERATED.labels(model=self.embedder.name).inc(len(chunk_rows))
            metrics.EMBEDDING_DURATION.labels(model=self.embedder.name).observe(seconds)
        here = node_id()
        return EmbeddedRow.encode([EmbeddedRow.of(row, vectors[i], seconds, here) for i, row in enumerate(rows)])


class WriteStage:
    """Write chunk text, graph records, full-text documents and vectors, batched and idempotent."""

    @staticmethod
    def map_options(plan: StagePlan) -> dict[str, Any]:
        return {
            "batch_size": plan.write_batch_size,
            "compute": _actors(plan.write_concurrency),
            "num_cpus": plan.write_cpus,
        }

    def __init__(self, settings: Settings, options: IngestOptions, library: Library, model: str, dim: int) -> None:
        self.options = options
        self.library = library
        self.model = model
        self.blob = open_blob_store(settings)
        self.catalog = Catalog(open_graph_store(settings))
        self.text = open_text_index(settings)
        self.vectors = open_vector_index(settings)
        space = VectorSpace(name="dense", dim=dim)
        retrying("text_ensure", self.text.ensure)
        retrying("vector_ensure", lambda: self.vectors.ensure_collection(options.vector_collection, space))
        self._items: dict[str, Item] = {}

    def __del__(self) -> None:
        # Ray Data deletes the UDF when it shuts the actor down gracefully: flush and close the stores
        # here, in order, so an embedded index is complete on disk before its folder lock is released.
        self.close()

    def close(self) -> None:
        """Close the stage's stores in order (idempotent; the in-process run closes them as it ends)."""
        for store in ("vectors", "text", "catalog", "blob"):
            target = getattr(self, store, None)
            target = getattr(target, "graph", target)
            if target is not None:
                with contextlib.suppress(Exception):
                    target.close()

    def _item(self, uid: str) -> Item:
        if uid not in self._items:
            self._items[uid] = retrying("get_item", partial(self.catalog.get_item, uid))
        return self._items[uid]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        rows = EmbeddedRow.decode(batch)
        errors: dict[str, str] = {}
        by_item: dict[str, list[EmbeddedRow]] = defaultdict(list)
        for row in rows:
            if row.chunk_uid:
                by_item[row.item_uid].append(row)
        for item_uid, item_rows in by_item.items():
            first = item_rows[0]
            try:
                with events.graph_write(first.job_id, item_uid, len(item_rows), first.sequence) as counts:
                    counts["concepts_linked"] = self._write_item_rows(self._item(item_uid), item_rows)
            except Exception as exc:  # noqa: BLE001 - recorded per item; the driver fails its job
                errors[item_uid] = str(exc) if isinstance(exc, LorekeeperError) else f"{type(exc).__name__}: {exc}"
        here = node_id()
        out = []
        for row in rows:
            failed = row.item_uid in errors and bool(row.chunk_uid)
            out.append(
                WrittenRow(
                    job_id=row.job_id,
                    item_uid=row.item_uid,
                    chunk_uid=row.chunk_uid,
                    item_chunks=row.item_chunks,
                    item_pages=row.item_pages,
                    structure=row.structure,
                    status=RowStatus.FAILED if failed else row.status,
                    error=errors[row.item_uid] if failed else row.error,
                    embed_seconds=row.embed_seconds,
                    extract_node=row.extract_node,
                    embed_node=row.embed_node,
                    write_node=here,
                )
            )
        return WrittenRow.encode(out)

    def _write_item_rows(self, item: Item, rows: list[EmbeddedRow]) -> int:
        """Write one item's chunks of a batch to every store; returns the concepts they mention."""
        chunks: list[Chunk] = []
        texts: list[TextDocument] = []
        points: list[VectorPoint] = []
        concepts: dict[str, Concept] = {}
        mentions: list[tuple[str, str]] = []
        for row in rows:
            key = chunk_key(item.uid, row.sequence)
            retrying("put_chunk", partial(self.blob.put, key, row.text.encode("utf-8")))
            chunk = Chunk(
                uid=row.chunk_uid,
                item_uid=item.uid,
                sequence=row.sequence,
                text_key=key,
                heading_path=[h[:200] for h in row.heading_path if h.strip()],
                page_start=row.page_start,
                page_end=row.page_end,
                token_count=max(1, row.token_count),
                content_hash=sha256_hex(row.text),
            )
            chunks.append(chunk)
            document, point = index_records(self.library, item, chunk, row.text, row.vector, self.model)
            texts.append(document)
            points.append(point)
            for concept in row.concepts:
                if concept.uid not in concepts:
                    concepts[concept.uid] = Concept(
                        uid=concept.uid,
                        name=concept.name[:200],
                        normalized_name=concept.normalized_name,
                        kind=concept.kind,
                        aliases=[a[:200] for a in concept.aliases],
                    )
                mentions.append((chunk.uid, concept.uid))
        retrying("graph_chunks", lambda: self.catalog.save_chunks(chunks))
        retrying("graph_concepts", lambda: self.catalog.save_mentions(list(concepts.values()), mentions))
        retrying("text_upsert", lambda: self.text.upsert(texts))
        retrying("vector_upsert", lambda: self.vectors.upsert(self.options.vector_collection, points))
        metrics.CHUNKS_CREATED.labels(library_type=self.library.type.value).inc(len(chunks))
        return len(concepts)
