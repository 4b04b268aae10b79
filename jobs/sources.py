"""Where ingestion reads from: local files and folders, an S3 prefix in the configured object store, or
an object of the source bucket, copied into the product's layout before the stages run.

The source bucket (``LOREKEEPER_SOURCE_BLOB_URL``) is another system's, reached with its own endpoint
and read-only credentials: :func:`copy_from_source_bucket` reads the job's object from it, checks it
against what the caller declared, and copies it to ``items/{item_uid}/original/{filename}`` of the
product's bucket, so the stages read the copy as they read any object of ours. Each read and copy is
logged (``embed_s3_fetch_*``, ``s3_cross_bucket_copy_*``) with its duration and size.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from schemas.common import content_id
from schemas.errors import InvalidRequest, LorekeeperError, Unavailable
from schemas.ingest import declared_file_type, name_for
from schemas.knowledge import IngestJob, IngestSource
from stores.blob.layout import original_key

if TYPE_CHECKING:
    from stores.blob.base import BlobStore

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to ingest.

    Attributes:
        ref: the stable source reference: an absolute path, or ``s3://bucket/key``. Re-ingesting the
            same ref with new content replaces the old version.
        name: the file name (for titles, file types and the blob layout).
        size: bytes, as listed (checked against the size limit before reading).
        source: how the workers read it (a path, or an object-store key).
        bucket: the bucket for S3 sources.
        key: the object key for S3 sources.
    """

    ref: str
    name: str
    size: int
    source: IngestSource
    bucket: str | None = None
    key: str | None = None


def resolve_within(raw: str, roots: Sequence[Path]) -> Path | None:
    """``raw`` as an absolute path (``~``, ``..`` and links resolved), or None when no root holds it.

    The one check of which local files ingestion may read: the API applies it to each request and the
    runner again to each job it runs, because a job can reach the graph by other ways than the API
    (an older version, a restored backup) and runs unattended after a restart. ``roots`` are already
    resolved (both callers resolve them once).
    """
    try:
        path = Path(raw).expanduser().resolve()
        return path if any(path.is_relative_to(root) for root in roots) else None
    except (OSError, ValueError, RuntimeError):  # a NUL byte, an unknown ~user, a symlink loop
        return None


def _is_hidden(path: Path) -> bool:
    return any(part.startswith(".") for part in path.parts if part not in (".", ".."))


def discover(inputs: Iterable[str], *, blob_store: object | None = None) -> Iterator[SourceFile]:
    """Every file under the given paths and ``s3://bucket/prefix`` URLs, in a stable order.

    Folders are walked recursively; hidden files and folders are skipped. Unsupported file types are
    *not* filtered here: they become failed jobs with a clear reason, so a user sees what was left out.

    Raises:
        InvalidRequest: a path that does not exist, or an S3 URL without a configured S3 store.
    """
    for raw in inputs:
        if raw.startswith("s3://"):
            yield from _discover_s3(raw, blob_store)
            continue
        path = Path(raw).expanduser()
        if not path.exists():
            raise InvalidRequest("ingest", f"no such file or folder: {raw}")
        if path.is_file():
            yield _local(path)
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                file = Path(root) / name
                if not name.startswith(".") and not _is_hidden(file.relative_to(path)):
                    yield _local(file)


def _local(path: Path) -> SourceFile:
    resolved = path.resolve()
    return SourceFile(ref=str(resolved), name=resolved.name, size=resolved.stat().st_size, source=IngestSource.PATH)


def _discover_s3(url: str, blob_store: object | None) -> Iterator[SourceFile]:
    from stores.blob.base import BlobStore

    parts = urlsplit(url)
    bucket, prefix = parts.netloc, parts.path.lstrip("/")
    if not bucket:
        raise InvalidRequest("ingest", f"an S3 source needs a bucket: {url}")
    if not isinstance(blob_store, BlobStore) or type(blob_store).__name__ != "S3BlobStore":
        raise InvalidRequest("ingest", f"{url}: S3 sources need LOREKEEPER_BLOB_URL to point at S3/MinIO")
    for info in blob_store.list(prefix, bucket=bucket):
        name = info.key.rsplit("/", 1)[-1]
        if not name or name.startswith("."):
            continue
        yield SourceFile(
            ref=f"s3://{bucket}/{info.key}",
            name=name,
            size=info.size,
            source=IngestSource.S3,
            bucket=bucket,
            key=info.key,
        )


# -- the source bucket ---------------------------------------------------------------------------

_SPOOL_BYTES = 16 << 20
"""A copied object up to this size is held in memory on its way; a larger one in a temporary file."""


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _transient(operation: str, fn: Callable[[], T]) -> T:
    """``fn()`` with three tries and exponential backoff on ``Unavailable`` (a refused or missing object
    is permanent: it fails at once)."""
    for attempt in Retrying(
        retry=retry_if_exception_type(Unavailable),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=4),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "store_retry",
            operation=operation,
            attempt=state.attempt_number,
            error=str(state.outcome.exception()) if state.outcome else None,
        ),
    ):
        with attempt:
            return fn()
    raise AssertionError("unreachable: Retrying re-raises the last error")


@contextmanager
def fetch_events(job: IngestJob, key: str, bucket: str | None) -> Iterator[dict[str, Any]]:
    """Log the read of a job's object: ``embed_s3_fetch_start``, then ``_complete`` (with the
    ``file_size`` the caller puts in the yielded dict, and ``duration_ms``) or ``_failed`` (the error,
    re-raised)."""
    fields = {"job_id": job.id, "s3_key": key, "source_bucket": bucket, "retry_count": job.retry_count}
    log.debug("embed_s3_fetch_start", **fields)
    started = time.perf_counter()
    done: dict[str, Any] = {"file_size": None}
    try:
        yield done
    except Exception as exc:
        log.error("embed_s3_fetch_failed", **fields, error=str(exc), duration_ms=_ms(started))
        raise
    log.debug("embed_s3_fetch_complete", **fields, file_size=done["file_size"], duration_ms=_ms(started))


def _read_checked(job: IngestJob, source: BlobStore, max_bytes: int) -> tuple[Any, int, str]:
    """The job's object read from the source bucket into a spool: (spool at 0, size, sha256 hex).

    Raises:
        NotFound: no such object (or bucket).
        InvalidRequest: a size that disagrees with the declared ``file_size`` or is over ``max_bytes``,
            or a read the source refused (its credentials or policy).
        Unavailable: the source cannot be reached, after three tries.
    """
    key, bucket = job.s3_key or "", job.source_bucket
    info = _transient("source_stat", lambda: source.stat(key, bucket=bucket))
    where = f"{bucket}/{key}"
    if job.file_size is not None and info.size != job.file_size:
        raise InvalidRequest("ingest", f"{where} is {info.size} bytes but file_size says {job.file_size}; not copied")
    if info.size > max_bytes:
        raise InvalidRequest("ingest", f"{where}: {info.size} bytes is over the limit of {max_bytes} bytes")

    def read() -> tuple[Any, int, str]:
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 - handed to the caller
        digest, size = hashlib.sha256(), 0
        try:
            for block in source.stream(key, bucket=bucket):
                digest.update(block)
                size += len(block)
                spool.write(block)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool, size, digest.hexdigest()

    spool, size, digest = _transient("source_get", read)
    if size != info.size:  # replaced between the stat and the read
        spool.close()
        raise InvalidRequest("ingest", f"{where} changed while read ({info.size} then {size} bytes); not copied")
    return spool, size, digest


def copy_from_source_bucket(job: IngestJob, source: BlobStore, product: BlobStore, *, max_bytes: int) -> IngestJob:
    """Copy a job's object from the source bucket into the product's layout and return the job with its
    ``item_uid`` and ``raw_key`` (where the copy is) set; the caller saves it.

    The item id derives from the library and the bytes (as the extract stage derives it), so a retried
    job copies to the same key: a copy again, never a second one. Nothing is written to the product's
    bucket unless the whole object was read and matched the declared size.

    Raises:
        InvalidRequest: a job without a library, a size or type that disagrees with what the caller
            declared, an object over ``max_bytes``, a read the source refused.
        NotFound: no such object in the source bucket.
        Unavailable: a bucket that cannot be reached, after three tries.
    """
    if not job.library_uid or not job.s3_key:
        raise InvalidRequest("ingest", f"job {job.id} names no library or no s3_key")
    try:
        name = name_for(job.s3_key, declared_file_type(job.file_type))
    except ValueError as exc:
        raise InvalidRequest("ingest", str(exc)) from None
    with fetch_events(job, job.s3_key, job.source_bucket) as fetched:
        spool, size, digest = _read_checked(job, source, max_bytes)
        fetched["file_size"] = size
    with spool:
        item_uid = content_id("item", f"{job.library_uid}:{digest}")  # the extract stage's item id
        dest_key = original_key(item_uid, name)
        fields = {"job_id": job.id, "source_bucket": job.source_bucket, "source_key": job.s3_key}
        log.debug(
            "s3_cross_bucket_copy_start",
            **fields,
            dest_bucket=product.default_bucket,
            dest_key=dest_key,
            file_size=size,
        )
        started = time.perf_counter()
        try:

            def put() -> object:
                spool.seek(0)
                return product.put(dest_key, spool, length=size)

            _transient("copy_put", put)
        except LorekeeperError as exc:
            log.error("s3_cross_bucket_copy_failed", **fields, dest_key=dest_key, error=str(exc))
            raise
        log.debug(
            "s3_cross_bucket_copy_complete",
            **fields,
            dest_bucket=product.default_bucket,
            dest_key=dest_key,
            file_size=size,
            duration_ms=_ms(started),
        )
    return job.validated_copy(item_uid=item_uid, raw_key=dest_key)
