"""The blob store on S3 or MinIO, through the ``minio`` SDK.

Decisions:

- **Bounded time.** The SDK's own HTTP client waits five minutes per attempt and retries five times;
  ours gives each attempt ``timeout_s`` to connect and ``timeout_s`` between bytes read, retries a
  refused or reset connection once and a 5xx answer twice with short backoff, and never honours a
  server's ``Retry-After``. A server that is down fails at once, one that accepts and never answers
  fails after ``timeout_s``; either raises :class:`~schemas.errors.Unavailable`.
- **Errors** are translated at this edge: ``NoSuchKey``/``NoSuchBucket`` → ``NotFound``; refused
  credentials (``AccessDenied``, ``SignatureDoesNotMatch``, ``InvalidAccessKeyId``…) → ``InvalidRequest``
  with a message naming the settings to check (the error tree has no permission error yet); throttling
  and 5xx → ``Unavailable``; anything unreachable → ``Unavailable``. Messages name the store and the
  endpoint, never a credential.
- **Uploads** of bytes or a stream of known length send that length; a stream of unknown length goes up
  in parts of ``part_size`` bytes (multipart when it is larger than one part), so memory stays bounded.
- The content type defaults to the one guessed from the key's extension, as on the local folder.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, BinaryIO

import certifi
import urllib3
from minio import Minio
from minio.commonconfig import CopySource
from minio.error import InvalidResponseError, S3Error, ServerError
from pydantic import SecretStr
from urllib3.util import Retry, Timeout

from schemas.errors import Conflict, InvalidRequest, NotFound, StoreError, Unavailable
from schemas.settings import BlobLocation
from stores.blob.base import BlobInfo
from stores.blob.layout import DEFAULT_CAS_PREFIX, content_key, validate_bucket, validate_key, validate_prefix
from stores.blob.local import guess_content_type
from stores.lazy import LazyClient
from stores.metrics import S3_OPERATIONS

DEFAULT_PART_SIZE = 8 << 20
"""Part size for streams of unknown length (S3 requires at least 5 MiB)."""

_MIN_PART_SIZE = 5 << 20
_MAX_PART_SIZE = 5 << 30
_MAX_PRESIGN = timedelta(days=7)
_STORE = "S3BlobStore"

_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "NoSuchUpload", "ResourceNotFound", "NoSuchVersion"})
_REFUSED = frozenset(
    {
        "AccessDenied",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "MissingAuthenticationToken",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "AllAccessDisabled",
        "AccountProblem",
        "RequestTimeTooSkewed",
    }
)
_TRANSIENT = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "OperationAborted",
        "XMinioServerNotInitialized",
    }
)
_CONFLICT = frozenset({"PreconditionFailed", "BucketAlreadyExists", "BucketNotEmpty", "InvalidObjectState"})


def _secret(value: SecretStr | str | None) -> SecretStr | None:
    if value is None or isinstance(value, SecretStr):
        return value
    return SecretStr(value)


class _CountingReader(io.RawIOBase):
    """Wraps a caller's stream to count the bytes the SDK reads from it (for the returned size)."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner = inner
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        block = self._inner.read(size)
        if block:
            if not isinstance(block, bytes):
                block = bytes(block)
            self.count += len(block)
        return block or b""


class S3BlobStore(LazyClient):
    """Blobs in S3 buckets; the minio client opens lazily, in the process that uses it.

    Args:
        endpoint: ``host:port`` of the server (no scheme; ``secure`` picks https).
        bucket: the default bucket.
        secure: use https.
        region: the buckets' region; ``None`` asks the server once per bucket.
        access_key: the access key (``None`` for anonymous access).
        secret_key: the secret key; kept as a ``SecretStr`` and never put in a message or repr.
        timeout_s: connect and read timeout of each HTTP attempt (see the module docstring).
        part_size: part size for streams of unknown length, at least 5 MiB.
        credential_vars: the settings a refused request tells the operator to check (the source
            bucket's store names its own).
    """

    name = "s3"

    def __init__(
        self,
        endpoint: str,
        *,
        bucket: str,
        secure: bool = True,
        region: str | None = None,
        access_key: SecretStr | str | None = None,
        secret_key: SecretStr | str | None = None,
        timeout_s: float = 5.0,
        part_size: int = DEFAULT_PART_SIZE,
        credential_vars: str = "LOREKEEPER_BLOB_ACCESS_KEY / LOREKEEPER_BLOB_SECRET_KEY",
    ) -> None:
        if "://" in endpoint or "/" in endpoint or not endpoint:
            raise InvalidRequest(_STORE, f"endpoint must be host:port without scheme or path, not {endpoint!r}")
        if (access_key is None) != (secret_key is None):
            raise InvalidRequest(_STORE, "set both the access key and the secret key, or neither")
        if timeout_s <= 0:
            raise InvalidRequest(_STORE, "timeout_s must be > 0")
        if not _MIN_PART_SIZE <= part_size <= _MAX_PART_SIZE:
            raise InvalidRequest(_STORE, "part_size must be between 5 MiB and 5 GiB (an S3 rule)")
        self.endpoint = endpoint
        self.default_bucket = validate_bucket(bucket)
        self.secure = secure
        self.region = region
        self.timeout_s = float(timeout_s)
        self.part_size = part_size
        self.credential_vars = credential_vars
        self._access_key = _secret(access_key)
        self._secret_key = _secret(secret_key)

    @classmethod
    def from_location(cls, location: BlobLocation, *, timeout_s: float = 5.0, **options: Any) -> S3BlobStore:
        """Build the store from a resolved settings location (``options``: further constructor arguments)."""
        if not location.endpoint:
            raise InvalidRequest(_STORE, "an S3 blob location needs an endpoint")
        return cls(
            location.endpoint,
            bucket=location.bucket,
            secure=location.secure,
            region=location.region,
            access_key=location.access_key,
            secret_key=location.secret_key,
            timeout_s=timeout_s,
            **options,
        )

    @property
    def url(self) -> str:
        """The endpoint as a URL, safe for messages (it never holds credentials)."""
        return f"{'https' if self.secure else 'http'}://{self.endpoint}"

    def __repr__(self) -> str:
        return f"S3BlobStore(url={self.url!r}, default_bucket={self.default_bucket!r})"

    # -- client -----------------------------------------------------------------------------------

    def _open(self) -> Minio:
        pool = urllib3.PoolManager(
            timeout=Timeout(connect=self.timeout_s, read=self.timeout_s),
            maxsize=10,
            cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
            retries=Retry(
                total=3,
                connect=1,
                read=0,
                status=2,
                other=0,
                backoff_factor=0.2,
                backoff_max=1.0,
                status_forcelist=(500, 502, 503, 504),
                # The SDK always sends bodies as bytes, so resending any method is safe.
                allowed_methods=None,
                raise_on_status=False,
                respect_retry_after_header=False,
            ),
        )
        # Kept beside the client so close() can drop its sockets; __getstate__ leaves it behind.
        self.__dict__["_pool"] = pool
        return Minio(
            self.endpoint,
            access_key=self._access_key.get_secret_value() if self._access_key else None,
            secret_key=self._secret_key.get_secret_value() if self._secret_key else None,
            secure=self.secure,
            region=self.region,
            http_client=pool,
        )

    def close(self) -> None:
        """Drop the client and its pooled connections; the store reopens on next use."""
        pool = self.__dict__.pop("_pool", None)
        self._client = None
        if pool is not None:
            pool.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_pool", None)
        return state

    def _bucket(self, bucket: str | None) -> str:
        return validate_bucket(bucket or self.default_bucket)

    # -- error translation ------------------------------------------------------------------------

    def _error(self, cls: type[StoreError], message: str) -> StoreError:
        return cls(_STORE, message, url=self.url)

    def _from_s3_error(self, exc: S3Error, what: str) -> StoreError:
        code = exc.code or "UnknownError"
        status = getattr(exc.response, "status", 0) or 0
        if code in _NOT_FOUND:
            detail = "bucket does not exist (create it with ensure_bucket)" if code == "NoSuchBucket" else "not found"
            return self._error(NotFound, f"{what}: {detail} ({code})")
        if code in _REFUSED or status == 403:
            return self._error(
                InvalidRequest,
                f"{what}: the server refused the credentials or the permission ({code}); check "
                f"{self.credential_vars}, the bucket policy and the clock",
            )
        if code in _TRANSIENT or status >= 500:
            return self._error(Unavailable, f"{what}: the server failed ({code}); retry later")
        if code in _CONFLICT:
            return self._error(Conflict, f"{what}: {code}")
        return self._error(InvalidRequest, f"{what}: the server refused the request ({code}: {exc.message})")

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate everything the SDK and urllib3 raise into our error tree, and count the operation."""
        operation = what.split(" ", 1)[0]  # "put", "get", "stat", … : a label of low cardinality
        try:
            with self._translated(what):
                yield
        except StoreError:
            S3_OPERATIONS.labels(operation=operation, status="error").inc()
            raise
        S3_OPERATIONS.labels(operation=operation, status="ok").inc()

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except S3Error as exc:
            raise self._from_s3_error(exc, what) from exc
        except ServerError as exc:
            raise self._error(Unavailable, f"{what}: the server failed (HTTP {exc.status_code})") from exc
        except InvalidResponseError as exc:
            # Not S3 XML: a proxy, a load balancer or something else answered at this endpoint.
            raise self._error(Unavailable, f"{what}: the endpoint did not answer like an S3 server") from exc
        except urllib3.exceptions.HTTPError as exc:
            # MaxRetryError wraps the last failure; name it, since "refused" and "silent" need
            # different fixes. NewConnectionError subclasses the timeout error, so it is tested first.
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, urllib3.exceptions.NameResolutionError):
                problem = "cannot resolve the host name"
            elif isinstance(reason, urllib3.exceptions.NewConnectionError):
                problem = "cannot connect (is the server running?)"
            elif isinstance(reason, urllib3.exceptions.TimeoutError):
                problem = f"no answer within {self.timeout_s:g}s"
            elif isinstance(reason, urllib3.exceptions.SSLError):
                problem = "TLS failed (check the endpoint's scheme and certificate)"
            else:
                problem = "the connection failed"
            raise self._error(Unavailable, f"{what}: {problem} ({type(reason).__name__})") from exc
        except (ConnectionError, TimeoutError) as exc:
            raise self._error(Unavailable, f"{what}: connection failed ({type(exc).__name__})") from exc
        except OSError as exc:
            # The SDK raises a bare IOError when a stream is shorter than the length it was promised.
            if "not enough data" in str(exc):
                raise self._error(InvalidRequest, f"{what}: the stream is shorter than the given length") from exc
            raise
        except ValueError as exc:
            # The SDK's own argument checks (names, expiry, part sizes); none of them carry a secret.
            raise self._error(InvalidRequest, f"{what}: {exc}") from exc

    # -- writing ----------------------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: bytes | BinaryIO,
        *,
        bucket: str | None = None,
        content_type: str | None = None,
        length: int | None = None,
    ) -> BlobInfo:
        """Store ``data`` under ``key``, replacing what was there.

        Args:
            key: the blob's key (see :func:`stores.blob.layout.validate_key`).
            data: bytes, or a binary stream read to its end (or to ``length`` bytes).
            bucket: the bucket; the default one when ``None``.
            content_type: stored with the blob; guessed from the key's extension when ``None``.
            length: the number of bytes to read from a stream; unknown lengths go up in parts.

        Returns:
            The blob's info; ``last_modified`` is ``None`` (the server does not return it on PUT).

        Raises:
            NotFound: the bucket does not exist.
            InvalidRequest: a bad key, refused credentials, or a stream shorter than ``length``.
            Unavailable: the server cannot be reached or failed.
        """
        name = self._bucket(bucket)
        validate_key(key)
        content_type = content_type or guess_content_type(key)
        if length is not None and length < 0:
            raise self._error(InvalidRequest, f"put {key!r}: length must be >= 0")
        size: int | None
        if isinstance(data, bytes | bytearray | memoryview):
            payload = bytes(data)
            if length is not None and length != len(payload):
                raise self._error(InvalidRequest, f"put {key!r}: length={length} but {len(payload)} bytes were given")
            reader, size = _CountingReader(io.BytesIO(payload)), len(payload)
        elif callable(getattr(data, "read", None)):
            reader, size = _CountingReader(data), length
        else:
            raise self._error(InvalidRequest, f"put {key!r}: data must be bytes or a readable binary stream")
        with self._errors(f"put {name}/{key}"):
            result = self.client.put_object(
                name,
                key,
                reader,
                -1 if size is None else size,
                content_type=content_type,
                # Our part size, unless a huge known length would need more than S3's 10,000 parts.
                part_size=0 if size is not None and size > self.part_size * 10_000 else self.part_size,
            )
        return BlobInfo(
            key=key,
            bucket=name,
            size=reader.count if size is None else size,
            etag=(result.etag or "").strip('"') or None,
            content_type=content_type,
            last_modified=result.last_modified,
        )

    def put_content_addressed(
        self,
        data: bytes,
        *,
        prefix: str = DEFAULT_CAS_PREFIX,
        bucket: str | None = None,
        content_type: str | None = None,
    ) -> BlobInfo:
        """Store ``data`` under ``{prefix}/{sha256}``; when that key exists nothing is uploaded."""
        key = content_key(hashlib.sha256(data).hexdigest(), prefix)
        try:
            return self.stat(key, bucket=bucket)
        except NotFound:
            pass
        return self.put(key, data, bucket=bucket, content_type=content_type)

    # -- reading ----------------------------------------------------------------------------------

    def get(self, key: str, *, bucket: str | None = None) -> bytes:
        """The whole blob. Use :meth:`stream` for large ones.

        Raises:
            NotFound: no such key or bucket.
            Unavailable: the server cannot be reached or failed.
        """
        return b"".join(self.stream(key, bucket=bucket))

    def stream(self, key: str, *, bucket: str | None = None, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The blob in chunks of at most ``chunk_size`` bytes, read from the socket as they are consumed.

        The request is made here, so a missing key raises ``NotFound`` at the call; the connection goes
        back to the pool when the iterator is exhausted or closed.
        """
        name = self._bucket(bucket)
        validate_key(key)
        if chunk_size < 1:
            raise self._error(InvalidRequest, "chunk_size must be >= 1")
        what = f"get {name}/{key}"
        with self._errors(what):
            response = self.client.get_object(name, key)

        def chunks() -> Iterator[bytes]:
            try:
                with self._errors(what):
                    yield from response.stream(chunk_size)
            finally:
                response.close()
                response.release_conn()

        return chunks()

    def exists(self, key: str, *, bucket: str | None = None) -> bool:
        """Whether ``key`` holds a blob (``False`` when the bucket itself does not exist)."""
        try:
            self.stat(key, bucket=bucket)
        except NotFound:
            return False
        return True

    def stat(self, key: str, *, bucket: str | None = None) -> BlobInfo:
        """Size, ETag, content type and modification time of a blob.

        Raises:
            NotFound: no such key or bucket.
        """
        name = self._bucket(bucket)
        validate_key(key)
        with self._errors(f"stat {name}/{key}"):
            obj = self.client.stat_object(name, key)
        return BlobInfo(
            key=key,
            bucket=name,
            size=int(obj.size or 0),
            etag=obj.etag or None,
            content_type=obj.content_type,
            last_modified=obj.last_modified,
        )

    def list(self, prefix: str = "", *, bucket: str | None = None) -> Iterator[BlobInfo]:
        """Blobs whose key starts with ``prefix``, in key order, fetched page by page as consumed.

        ``content_type`` is ``None``: S3 listings do not carry it (use :meth:`stat`).

        Raises:
            NotFound: the bucket does not exist (at the first item).
            InvalidRequest: a malformed prefix.
        """
        name = self._bucket(bucket)
        validate_prefix(prefix)
        what = f"list {name}/{prefix}"

        def items() -> Iterator[BlobInfo]:
            with self._errors(what):
                for obj in self.client.list_objects(name, prefix=prefix or None, recursive=True):
                    if obj.is_dir:  # not returned by a recursive listing; kept as a guard
                        continue
                    yield BlobInfo(
                        key=obj.object_name,
                        bucket=name,
                        size=int(obj.size or 0),
                        etag=(obj.etag or "").strip('"') or None,
                        content_type=None,
                        last_modified=obj.last_modified,
                    )

        return items()

    # -- copy and delete --------------------------------------------------------------------------

    def copy(
        self, src_key: str, dst_key: str, *, src_bucket: str | None = None, dst_bucket: str | None = None
    ) -> BlobInfo:
        """Copy a blob on the server (no bytes pass through this process), within or across buckets.

        Raises:
            NotFound: the source blob or either bucket does not exist.
        """
        src, dst = self._bucket(src_bucket), self._bucket(dst_bucket)
        validate_key(src_key)
        validate_key(dst_key)
        with self._errors(f"copy {src}/{src_key} to {dst}/{dst_key}"):
            self.client.copy_object(dst, dst_key, CopySource(src, src_key))
        return self.stat(dst_key, bucket=dst)

    def delete(self, key: str, *, bucket: str | None = None) -> None:
        """Delete a blob; a missing key is not an error.

        Raises:
            NotFound: the bucket does not exist.
        """
        name = self._bucket(bucket)
        validate_key(key)
        with self._errors(f"delete {name}/{key}"):
            self.client.remove_object(name, key)

    # -- the rest of the protocol -----------------------------------------------------------------

    def presigned_url(
        self,
        key: str,
        *,
        bucket: str | None = None,
        method: str = "GET",
        expires: timedelta = timedelta(hours=1),
    ) -> str:
        """A URL that lets anyone GET (download) or PUT (upload) this key until it expires.

        A PUT through the URL must send the body with its ``Content-Length``.

        Raises:
            InvalidRequest: a method other than GET/PUT, or ``expires`` outside 1 s – 7 days.
        """
        name = self._bucket(bucket)
        validate_key(key)
        verb = method.upper()
        if verb not in ("GET", "PUT"):
            raise self._error(InvalidRequest, f"presigned URLs are for GET or PUT, not {method!r}")
        if not timedelta(seconds=1) <= expires <= _MAX_PRESIGN:
            raise self._error(InvalidRequest, "a presigned URL must expire within 1 second to 7 days")
        with self._errors(f"presign {verb} {name}/{key}"):
            return str(self.client.get_presigned_url(verb, name, key, expires=expires))

    def ensure_bucket(self, bucket: str | None = None) -> None:
        """Create the bucket if it does not exist; idempotent, and safe when two processes race.

        Raises:
            Conflict: the name is taken by another account.
        """
        name = self._bucket(bucket)
        with self._errors(f"ensure bucket {name}"):
            if self.client.bucket_exists(name):
                return
            try:
                self.client.make_bucket(name)
            except S3Error as exc:
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
                # Someone created it between our check and our create: fine if we can use it.
                if not self.client.bucket_exists(name):
                    raise self._error(Conflict, f"bucket {name!r} exists but belongs to someone else") from exc

    def health(self) -> None:
        """Return if the server answers an authenticated request; raise ``Unavailable`` if it cannot be
        reached within the timeout, ``InvalidRequest`` if it refuses the credentials."""
        with self._errors("health check"):
            self.client.bucket_exists(self.default_bucket)
