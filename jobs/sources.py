"""Where ingestion reads from: local files and folders, or an S3 prefix in the configured object store."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from schemas.errors import InvalidRequest
from schemas.knowledge import IngestSource


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
