"""The blob store on a local folder: one subfolder per bucket, one file per blob.

Decisions (see also the module docstring of :mod:`stores.blob.layout`):

- **Atomic writes.** A blob is written to a temporary file in its final folder, fsynced, then moved
  over the key with ``os.replace``; a crash leaves either the old blob or the new one, never half of
  one, and concurrent writers to the same key never tear it: the last rename wins. Temporary files
  start with :data:`TEMP_PREFIX`, are skipped by listings, and no key segment may start with it.
- **ETag** is the hex MD5 of the content, as S3 gives for a single-part upload, computed while writing.
- **Content type** is the one given at ``put`` (else guessed from the key's extension with
  :mod:`mimetypes`). Both are kept in extended attributes of the file (``user.lorekeeper.*``), which
  are set on the temporary file and so arrive atomically with the data. On a filesystem without user
  xattrs the content type is guessed again at ``stat`` and the ETag is ``None``.
- A key cannot be both a blob and a folder of other blobs (``a`` and ``a/b``): the second write raises
  ``Conflict``. S3 allows it; the product's layout never needs it.
- Listings walk the folders lazily in S3 key order (UTF-8 byte order), without loading them whole.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mimetypes
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from stat import S_ISREG
from typing import BinaryIO

from schemas.errors import Conflict, InvalidRequest, NotFound, NotSupported, StoreError, Unavailable
from schemas.settings import BlobLocation
from stores.blob.base import BlobInfo
from stores.blob.layout import DEFAULT_CAS_PREFIX, content_key, validate_bucket, validate_key, validate_prefix

TEMP_PREFIX = ".lk-tmp-"
"""Names of in-flight temporary files; listings skip them and keys may not use them."""

_XATTR_TYPE = "user.lorekeeper.content_type"
_XATTR_MD5 = "user.lorekeeper.md5"
_COPY_BLOCK = 1 << 20
_DEFAULT_TYPE = "application/octet-stream"
_STORE = "LocalBlobStore"


class _SourceError(Exception):
    """Carries an OSError raised by the caller's stream past the translation of our own OSErrors."""


def guess_content_type(key: str) -> str:
    """The content type of ``key`` guessed from its extension, ``application/octet-stream`` if unknown."""
    return mimetypes.guess_type(key, strict=False)[0] or _DEFAULT_TYPE


def _set_xattr(fd: int, name: str, value: str) -> None:
    # Not every filesystem (or OS) supports user xattrs; then stat falls back (see module docstring).
    setter = getattr(os, "setxattr", None)
    if setter is not None:
        with contextlib.suppress(OSError):
            setter(fd, name, value.encode("utf-8"))


def _get_xattr(path: Path | int, name: str) -> str | None:
    getter = getattr(os, "getxattr", None)
    if getter is None:
        return None
    try:
        if isinstance(path, int):
            return getter(path, name).decode("utf-8")
        return getter(path, name, follow_symlinks=False).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; not possible on every platform, hence best effort.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalBlobStore:
    """Blobs as files under ``root/<bucket>/<key>``. See the module docstring for the guarantees.

    Args:
        root: the folder holding one subfolder per bucket; created on first write.
        default_bucket: the bucket used when a method gets ``bucket=None``.
        fsync: flush every write to disk before it becomes visible (turn off only for throwaway data).
    """

    name = "local"

    def __init__(self, root: Path | str, *, default_bucket: str = "lorekeeper", fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.default_bucket = validate_bucket(default_bucket)
        self.fsync = fsync

    @classmethod
    def from_location(cls, location: BlobLocation, *, timeout_s: float = 5.0) -> LocalBlobStore:
        """Build the store from a resolved settings location (``timeout_s`` does not apply to a folder)."""
        if location.root is None:
            raise InvalidRequest(_STORE, "a local blob location needs a root folder")
        return cls(location.root, default_bucket=location.bucket)

    def __repr__(self) -> str:
        return f"LocalBlobStore(root={str(self.root)!r}, default_bucket={self.default_bucket!r})"

    # -- paths ------------------------------------------------------------------------------------

    def _error(self, cls: type[StoreError], message: str) -> StoreError:
        return cls(_STORE, message, url=f"file://{self.root}")

    def _bucket_dir(self, bucket: str | None) -> Path:
        return self.root / validate_bucket(bucket or self.default_bucket)

    def _existing_bucket_dir(self, bucket: str | None) -> Path:
        path = self._bucket_dir(bucket)
        if not path.is_dir():
            raise self._error(NotFound, f"bucket {path.name!r} does not exist (create it with ensure_bucket)")
        return path

    def _path(self, bucket_dir: Path, key: str) -> Path:
        """The file of ``key``, proven to lie inside ``bucket_dir`` even through symlinks."""
        segments = validate_key(key).split("/")
        if any(segment.startswith(TEMP_PREFIX) for segment in segments):
            raise self._error(InvalidRequest, f"key {key!r}: segments starting with {TEMP_PREFIX!r} are reserved")
        path = bucket_dir.joinpath(*segments)
        # validate_key already refuses '..'; the resolve check also defeats a symlink planted in the tree.
        base = os.path.realpath(bucket_dir)
        if os.path.commonpath([base, os.path.realpath(path)]) != base:
            raise self._error(InvalidRequest, f"key {key!r} resolves outside its bucket")
        return path

    def _os_error(self, exc: OSError, key: str, action: str) -> StoreError:
        if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
            return self._error(
                Conflict,
                f"cannot {action} {key!r}: a key cannot be both a blob and a folder of blobs on a local "
                "folder (for example 'a' and 'a/b')",
            )
        if exc.errno == errno.ENAMETOOLONG:
            return self._error(
                InvalidRequest, f"cannot {action} {key!r}: a segment is longer than the filesystem allows"
            )
        return self._error(Unavailable, f"cannot {action} {key!r}: {exc.strerror or exc}")

    def _info(self, path: Path, key: str, bucket: str) -> BlobInfo:
        """Stat one blob through one open file, so size, ETag and type describe the same version."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            content_type = _get_xattr(fd, _XATTR_TYPE)
            etag = _get_xattr(fd, _XATTR_MD5)
        finally:
            os.close(fd)
        return BlobInfo(
            key=key,
            bucket=bucket,
            size=st.st_size,
            etag=etag,
            content_type=content_type or guess_content_type(key),
            last_modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC),
        )

    # -- writing ----------------------------------------------------------------------------------

    def _open_temp(self, folder: Path, key: str) -> tuple[int, Path]:
        # A concurrent delete may prune the (empty) folder between mkdir and mkstemp: recreate and retry.
        for attempt in range(5):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
                return fd, Path(name)
            except FileNotFoundError:
                if attempt == 4:
                    raise
            except FileExistsError as exc:
                # mkdir met a file where a folder must be: the key's parent is itself a blob.
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, path: Path, key: str, chunks: Iterator[bytes], content_type: str) -> tuple[int, str, float]:
        """Write ``chunks`` atomically to ``path``; return (size, md5 hex, mtime)."""
        fd, tmp = self._open_temp(path.parent, key)
        try:
            md5 = hashlib.md5(usedforsecurity=False)
            size = 0
            with open(fd, "wb", closefd=False) as out:
                for chunk in chunks:
                    out.write(chunk)
                    md5.update(chunk)
                    size += len(chunk)
                out.flush()
                if self.fsync:
                    os.fsync(fd)
            _set_xattr(fd, _XATTR_TYPE, content_type)
            _set_xattr(fd, _XATTR_MD5, md5.hexdigest())
            mtime = os.fstat(fd).st_mtime_ns / 1e9
            os.close(fd)
            fd = -1
            os.replace(tmp, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        if self.fsync:
            _fsync_dir(path.parent)
        return size, md5.hexdigest(), mtime

    def _chunks(self, data: bytes | BinaryIO, length: int | None, key: str) -> Iterator[bytes]:
        if isinstance(data, bytes | bytearray | memoryview):
            view = memoryview(data).cast("B")
            if length is not None and length != len(view):
                raise self._error(InvalidRequest, f"put {key!r}: length={length} but {len(view)} bytes were given")
            for start in range(0, len(view), _COPY_BLOCK):
                yield bytes(view[start : start + _COPY_BLOCK])
            return
        if not callable(getattr(data, "read", None)):
            raise self._error(InvalidRequest, f"put {key!r}: data must be bytes or a readable binary stream")
        remaining = length
        while remaining is None or remaining > 0:
            try:
                block = data.read(_COPY_BLOCK if remaining is None else min(_COPY_BLOCK, remaining))
            except OSError as exc:
                # The caller's stream failed, not the folder: keep it apart from our own OSErrors.
                raise _SourceError() from exc
            if not block:
                break
            if not isinstance(block, bytes | bytearray):
                raise self._error(
                    InvalidRequest, f"put {key!r}: the stream must yield bytes, not {type(block).__name__}"
                )
            if remaining is not None:
                remaining -= len(block)
            yield bytes(block)
        if remaining:
            raise self._error(
                InvalidRequest, f"put {key!r}: the stream ended {remaining} bytes short of length={length}"
            )

    def put(
        self,
        key: str,
        data: bytes | BinaryIO,
        *,
        bucket: str | None = None,
        content_type: str | None = None,
        length: int | None = None,
    ) -> BlobInfo:
        """Store ``data`` under ``key`` atomically, replacing what was there.

        Args:
            key: the blob's key (see :func:`stores.blob.layout.validate_key`).
            data: bytes, or a binary stream read to its end (or to ``length`` bytes).
            bucket: the bucket; the default one when ``None``.
            content_type: stored with the blob; guessed from the key's extension when ``None``.
            length: the number of bytes to read from a stream; a shorter stream is an error.

        Raises:
            NotFound: the bucket does not exist.
            InvalidRequest: a bad key, or a stream shorter than ``length``.
            Conflict: the key or one of its parents is a folder of other blobs, or a blob.
        """
        bucket_dir = self._existing_bucket_dir(bucket)
        path = self._path(bucket_dir, key)
        if length is not None and length < 0:
            raise self._error(InvalidRequest, f"put {key!r}: length must be >= 0")
        content_type = content_type or guess_content_type(key)
        try:
            size, md5, mtime = self._write(path, key, self._chunks(data, length, key), content_type)
        except OSError as exc:
            raise self._os_error(exc, key, "write") from exc
        except _SourceError as exc:
            cause = exc.__cause__
            assert cause is not None
            raise cause from None
        return BlobInfo(
            key=key,
            bucket=bucket_dir.name,
            size=size,
            etag=md5,
            content_type=content_type,
            last_modified=datetime.fromtimestamp(mtime, UTC),
        )

    def put_content_addressed(
        self,
        data: bytes,
        *,
        prefix: str = DEFAULT_CAS_PREFIX,
        bucket: str | None = None,
        content_type: str | None = None,
    ) -> BlobInfo:
        """Store ``data`` under ``{prefix}/{sha256}``; when that key exists the file is not rewritten."""
        key = content_key(hashlib.sha256(data).hexdigest(), prefix)
        bucket_dir = self._existing_bucket_dir(bucket)
        path = self._path(bucket_dir, key)
        # Writes are atomic, so an existing file under this name holds exactly these bytes.
        if path.is_file() and not path.is_symlink():
            return self._info(path, key, bucket_dir.name)
        return self.put(key, data, bucket=bucket_dir.name, content_type=content_type)

    # -- reading ----------------------------------------------------------------------------------

    def _open_blob(self, key: str, bucket: str | None) -> BinaryIO:
        bucket_dir = self._existing_bucket_dir(bucket)
        path = self._path(bucket_dir, key)
        try:
            # O_NOFOLLOW: a symlink planted at the key is not a blob, whatever it points to.
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._error(NotFound, f"no blob {key!r} in bucket {bucket_dir.name!r}") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._error(NotFound, f"no blob {key!r} in bucket {bucket_dir.name!r}") from None
            raise self._os_error(exc, key, "read") from exc
        if not S_ISREG(os.fstat(fd).st_mode):
            # A folder (the key is a prefix of other blobs) opens fine on POSIX but is not a blob.
            os.close(fd)
            raise self._error(NotFound, f"no blob {key!r} in bucket {bucket_dir.name!r}")
        return open(fd, "rb")  # noqa: SIM115 - the caller closes it

    def get(self, key: str, *, bucket: str | None = None) -> bytes:
        """The whole blob. Use :meth:`stream` for large ones.

        Raises:
            NotFound: no such key or bucket.
        """
        handle = self._open_blob(key, bucket)
        with handle:
            return handle.read()

    def stream(self, key: str, *, bucket: str | None = None, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The blob in chunks of at most ``chunk_size`` bytes, read as they are consumed.

        The file is opened here, so a missing key raises ``NotFound`` at the call, not at the first chunk.
        """
        if chunk_size < 1:
            raise self._error(InvalidRequest, "chunk_size must be >= 1")
        handle = self._open_blob(key, bucket)

        def chunks() -> Iterator[bytes]:
            with handle:
                while block := handle.read(chunk_size):
                    yield block

        return chunks()

    def exists(self, key: str, *, bucket: str | None = None) -> bool:
        """Whether ``key`` holds a blob (``False`` when the bucket itself does not exist)."""
        path = self._path(self._bucket_dir(bucket), key)
        return path.is_file() and not path.is_symlink()

    def stat(self, key: str, *, bucket: str | None = None) -> BlobInfo:
        """Size, ETag, content type and modification time of a blob.

        Raises:
            NotFound: no such key or bucket.
        """
        bucket_dir = self._existing_bucket_dir(bucket)
        path = self._path(bucket_dir, key)
        if not path.is_file() or path.is_symlink():
            raise self._error(NotFound, f"no blob {key!r} in bucket {bucket_dir.name!r}")
        try:
            return self._info(path, key, bucket_dir.name)
        except FileNotFoundError:
            raise self._error(NotFound, f"no blob {key!r} in bucket {bucket_dir.name!r}") from None

    def list(self, prefix: str = "", *, bucket: str | None = None) -> Iterator[BlobInfo]:
        """Blobs whose key starts with ``prefix``, in key order, walked lazily.

        ``content_type`` is filled in as for :meth:`stat`. The bucket is checked at the call.

        Raises:
            NotFound: the bucket does not exist.
            InvalidRequest: a malformed prefix.
        """
        bucket_dir = self._existing_bucket_dir(bucket)
        validate_prefix(prefix)
        folder_part, _, _ = prefix.rpartition("/")
        start = bucket_dir.joinpath(*folder_part.split("/")) if folder_part else bucket_dir
        base = os.path.realpath(bucket_dir)
        if os.path.commonpath([base, os.path.realpath(start)]) != base:
            raise self._error(InvalidRequest, f"prefix {prefix!r} resolves outside its bucket")
        return self._walk(start, f"{folder_part}/" if folder_part else "", prefix, bucket_dir.name)

    def _walk(self, folder: Path, rel: str, prefix: str, bucket: str) -> Iterator[BlobInfo]:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        # Sorting a folder as name + "/" puts its subtree exactly where S3's byte order puts its keys:
        # "a-c" < "a/b" because "-" < "/". Python compares code points, which is UTF-8 byte order.
        ordered = sorted(((e.name + "/" if e.is_dir(follow_symlinks=False) else e.name), e) for e in entries)
        for sort_name, entry in ordered:
            if entry.name.startswith(TEMP_PREFIX):
                continue
            key = rel + sort_name
            if sort_name.endswith("/"):
                # Descend only where the subtree can hold matches.
                if key.startswith(prefix) or prefix.startswith(key):
                    yield from self._walk(Path(entry.path), key, prefix, bucket)
            elif key.startswith(prefix) and entry.is_file(follow_symlinks=False):
                try:
                    yield self._info(Path(entry.path), key, bucket)
                except FileNotFoundError:
                    continue  # deleted while we walked

    # -- copy and delete --------------------------------------------------------------------------

    def copy(
        self, src_key: str, dst_key: str, *, src_bucket: str | None = None, dst_bucket: str | None = None
    ) -> BlobInfo:
        """Copy a blob within a bucket or across buckets, atomically at the destination.

        Raises:
            NotFound: the source blob or either bucket does not exist.
        """
        # Check the destination first, so a bad destination key is refused whatever the source.
        dst_dir = self._existing_bucket_dir(dst_bucket)
        dst_path = self._path(dst_dir, dst_key)
        handle = self._open_blob(src_key, src_bucket)
        with handle:
            # Read from the open file, not the path: a concurrent overwrite of the source cannot mix in.
            content_type = _get_xattr(handle.fileno(), _XATTR_TYPE) or guess_content_type(src_key)

            def blocks() -> Iterator[bytes]:
                while block := handle.read(_COPY_BLOCK):
                    yield block

            try:
                size, md5, mtime = self._write(dst_path, dst_key, blocks(), content_type)
            except OSError as exc:
                raise self._os_error(exc, dst_key, "copy to") from exc
        return BlobInfo(
            key=dst_key,
            bucket=dst_dir.name,
            size=size,
            etag=md5,
            content_type=content_type,
            last_modified=datetime.fromtimestamp(mtime, UTC),
        )

    def delete(self, key: str, *, bucket: str | None = None) -> None:
        """Delete a blob; a missing key is not an error. Empty parent folders are removed too.

        Raises:
            NotFound: the bucket does not exist (as on S3).
        """
        bucket_dir = self._existing_bucket_dir(bucket)
        path = self._path(bucket_dir, key)
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._os_error(exc, key, "delete") from exc
        # Prune now-empty folders up to the bucket; rmdir refuses a non-empty folder, so a concurrent
        # writer that just created a temp file keeps its folder.
        folder = path.parent
        while folder != bucket_dir:
            try:
                folder.rmdir()
            except OSError:
                break
            folder = folder.parent

    # -- the rest of the protocol -----------------------------------------------------------------

    def presigned_url(
        self,
        key: str,
        *,
        bucket: str | None = None,
        method: str = "GET",
        expires: timedelta = timedelta(hours=1),
    ) -> str:
        """Always raises ``NotSupported``: a local folder has no URL a client could use."""
        raise self._error(
            NotSupported,
            "presigned URLs need an S3 server; a local folder cannot hand one out "
            "(serve the blob through the API, or set LOREKEEPER_BLOB_URL=s3://…)",
        )

    def ensure_bucket(self, bucket: str | None = None) -> None:
        """Create the bucket's folder (and the root) if missing; idempotent and safe under races."""
        path = self._bucket_dir(bucket)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(Unavailable, f"cannot create bucket {path.name!r}: {exc.strerror or exc}") from exc

    def health(self) -> None:
        """Return if the root folder exists or can be created and is writable; else raise ``Unavailable``."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(Unavailable, f"cannot create the root folder: {exc.strerror or exc}") from exc
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise self._error(Unavailable, "the root folder is not writable")

    def close(self) -> None:
        """Nothing to release: every operation opens and closes its own files."""

    def __enter__(self) -> LocalBlobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
