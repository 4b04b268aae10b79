"""The blob store protocol: raw files, chunk text, images, snapshots, exports.

Keys are ``/``-separated relative paths. Layout of the product (see :mod:`stores.blob.layout`):
``items/{uid}/original/{filename}``, ``items/{uid}/chunks/chunk_000.txt``, ``images/{uid}/{filename}``,
and ``cas/{sha256}`` for content-addressed blobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import BinaryIO, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """What a store knows about one blob."""

    key: str
    bucket: str
    size: int
    etag: str | None = None
    content_type: str | None = None
    last_modified: datetime | None = None


@runtime_checkable
class BlobStore(Protocol):
    """Put, get, list, copy and delete blobs in buckets; one default bucket from the settings.

    Every method takes ``bucket=None`` meaning the default bucket. Errors are ``schemas.errors``
    types: ``NotFound`` for a missing key or bucket, ``InvalidRequest`` for a bad key,
    ``Unavailable`` when the server cannot be reached, ``NotSupported`` for what a backend cannot do.
    """

    name: str
    default_bucket: str

    def ensure_bucket(self, bucket: str | None = None) -> None:
        """Create the bucket if it does not exist (idempotent)."""
        ...

    def put(
        self,
        key: str,
        data: bytes | BinaryIO,
        *,
        bucket: str | None = None,
        content_type: str | None = None,
        length: int | None = None,
    ) -> BlobInfo:
        """Store ``data`` under ``key``, replacing what was there. A stream is read to its end."""
        ...

    def put_content_addressed(
        self, data: bytes, *, prefix: str = "cas", bucket: str | None = None, content_type: str | None = None
    ) -> BlobInfo:
        """Store ``data`` under ``{prefix}/{sha256}``; writing the same bytes again is a no-op."""
        ...

    def get(self, key: str, *, bucket: str | None = None) -> bytes:
        """The whole blob. Use :meth:`stream` for large ones."""
        ...

    def stream(self, key: str, *, bucket: str | None = None, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The blob in chunks of at most ``chunk_size`` bytes, without loading it whole."""
        ...

    def exists(self, key: str, *, bucket: str | None = None) -> bool: ...

    def stat(self, key: str, *, bucket: str | None = None) -> BlobInfo: ...

    def list(self, prefix: str = "", *, bucket: str | None = None) -> Iterator[BlobInfo]:
        """Blobs whose key starts with ``prefix``, in key order."""
        ...

    def copy(
        self, src_key: str, dst_key: str, *, src_bucket: str | None = None, dst_bucket: str | None = None
    ) -> BlobInfo:
        """Copy a blob, within a bucket or across buckets."""
        ...

    def delete(self, key: str, *, bucket: str | None = None) -> None:
        """Delete a blob; deleting a missing key is not an error (deletes are idempotent)."""
        ...

    def presigned_url(
        self, key: str, *, bucket: str | None = None, method: str = "GET", expires: timedelta = timedelta(hours=1)
    ) -> str:
        """A time-limited URL for GET or PUT without credentials (``NotSupported`` on a local folder)."""
        ...

    def health(self) -> None:
        """Return if the store answers; raise ``Unavailable`` (within the configured timeout) if not."""
        ...

    def close(self) -> None: ...
