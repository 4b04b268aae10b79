"""The product's bucket layout: where each kind of blob lives, and what a valid key or bucket is.

Every key the product writes is built here, so the layout has one definition::

    items/{item_uid}/original/{filename}   the file as it was ingested
    items/{item_uid}/chunks/chunk_000.txt  chunk text, numbered from 0
    images/{item_uid}/{filename}           images extracted from an item
    uploads/{job_id}/{filename}            a file uploaded to the ingest API, before its job runs
    prompts/{sha256}                       a turn's prompt text          (content-addressed:
    retrievals/{sha256}                    a turn's retrieval record      the same bytes are
    presentations/{sha256}                 a turn's presentation          one blob, written once)
    snapshots/{sha256}                     a world-state snapshot

Campaign exports are zip files handed to the caller, never blobs.

Keys follow the S3 rules plus what keeps a key safe as a relative path on a local disk: they are
validated by :func:`validate_key`, which every backend calls, so a key that works on one backend works
on all of them.

Filenames from users are sanitised by :func:`sanitize_filename`: Unicode letters, marks and digits are
kept (so "Grimoire des Ombres — Règles.pdf" stays readable), NFC-normalised (the same name typed on macOS
and Linux gives the same key), and everything else, whitespace included, becomes ``_``; spaces are
replaced because keys end up in URLs, shells and presigned links, where they must otherwise be escaped.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from schemas.errors import InvalidRequest

MAX_KEY_BYTES = 1024
"""S3's limit on a key, in UTF-8 bytes."""

MAX_FILENAME_BYTES = 200
"""Sanitised filenames are cut to this many UTF-8 bytes: a local folder allows 255 per path segment."""

DEFAULT_CAS_PREFIX = "cas"
"""Where :func:`content_key` puts a content-addressed blob when the caller names no prefix."""
PROMPTS = "prompts"
RETRIEVALS = "retrievals"
PRESENTATIONS = "presentations"
SNAPSHOTS = "snapshots"

_STORE = "blob store"
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK_NAME_RE = re.compile(r"^chunk_(\d{3,})\.txt$")


def _shown(value: str) -> str:
    # Keys are not secrets, but a 1 KiB key would drown the message.
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _has_control(value: str) -> bool:
    # C0 and C1 control characters (NUL included) break HTTP headers, XML listings and terminals.
    return any(unicodedata.category(ch) == "Cc" for ch in value)


def validate_key(key: str) -> str:
    """Check that ``key`` is a valid blob key and return it unchanged.

    A key is non-empty, at most 1024 bytes of UTF-8, holds no control characters (NUL included), does
    not start with ``/``, and has no empty, ``.`` or ``..`` segment (so it can never climb out of its
    bucket on a local disk, and ``a//b`` and ``a/`` are refused rather than meaning different things
    on different backends).

    Raises:
        InvalidRequest: naming the key and the rule it breaks.
    """
    if not isinstance(key, str):
        raise InvalidRequest(_STORE, f"a key must be a string, not {type(key).__name__}")
    if not key:
        raise InvalidRequest(_STORE, "a key must not be empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidRequest(_STORE, f"key {_shown(key)} is longer than {MAX_KEY_BYTES} bytes of UTF-8")
    if _has_control(key):
        raise InvalidRequest(_STORE, f"key {_shown(key)} contains a control character")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in key):
        raise InvalidRequest(_STORE, f"key {_shown(key)} is not valid Unicode (lone surrogate)")
    if key.startswith("/"):
        raise InvalidRequest(_STORE, f"key {_shown(key)} must be relative (no leading '/')")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidRequest(
                _STORE,
                f"key {_shown(key)} has an empty, '.' or '..' segment; use 'a/b', not 'a//b' or 'a/../b'",
            )
    return key


def validate_prefix(prefix: str) -> str:
    """Check a listing prefix and return it unchanged.

    A prefix may be empty and need not end at a ``/`` (``items/it`` matches ``items/item-1/…``), but its
    complete segments (those followed by ``/``) obey the key rules.

    Raises:
        InvalidRequest: naming the prefix and the rule it breaks.
    """
    if not isinstance(prefix, str):
        raise InvalidRequest(_STORE, f"a prefix must be a string, not {type(prefix).__name__}")
    if not prefix:
        return prefix
    if len(prefix.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidRequest(_STORE, f"prefix {_shown(prefix)} is longer than {MAX_KEY_BYTES} bytes of UTF-8")
    if _has_control(prefix) or any(0xD800 <= ord(ch) <= 0xDFFF for ch in prefix):
        raise InvalidRequest(_STORE, f"prefix {_shown(prefix)} contains a control character or a lone surrogate")
    if prefix.startswith("/"):
        raise InvalidRequest(_STORE, f"prefix {_shown(prefix)} must be relative (no leading '/')")
    for segment in prefix.split("/")[:-1]:
        if segment in ("", ".", ".."):
            raise InvalidRequest(_STORE, f"prefix {_shown(prefix)} has an empty, '.' or '..' segment")
    return prefix


def validate_bucket(name: str) -> str:
    """Check a bucket name against the S3 naming rules (which the local folder follows too) and return it.

    Raises:
        InvalidRequest: naming the bucket and the rule it breaks.
    """
    if not isinstance(name, str) or not _BUCKET_RE.match(name):
        raise InvalidRequest(
            _STORE,
            f"bucket {name!r} is not a valid name: 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit",
        )
    if ".." in name or ".-" in name or "-." in name:
        raise InvalidRequest(_STORE, f"bucket {name!r} is not a valid name: no '..', '.-' or '-.'")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return name
    raise InvalidRequest(_STORE, f"bucket {name!r} is not a valid name: it looks like an IP address")


def _segment(value: str, what: str) -> str:
    """An id used as one key segment: checked, never rewritten (ids come from the graph, not from users)."""
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise InvalidRequest(_STORE, f"{what} {value!r} cannot be a key segment (empty, '.', '..' or has '/')")
    if _has_control(value):
        raise InvalidRequest(_STORE, f"{what} {_shown(value)} contains a control character")
    return value


def _clean(text: str) -> str:
    kept = "".join(ch if unicodedata.category(ch)[0] in "LMN" or ch in "._-" else "_" for ch in text)
    return re.sub(r"_+", "_", kept).strip("._")


def _cut(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    # Cut on a character boundary, then drop a combining mark left without its base character.
    cut = encoded[:max_bytes].decode("utf-8", "ignore")
    while cut and unicodedata.combining(cut[-1]):
        cut = cut[:-1]
    return cut


def sanitize_filename(filename: str, *, max_bytes: int = MAX_FILENAME_BYTES) -> str:
    """A user's filename made safe as one key segment, readable and stable.

    Only the last path component is kept (``C:\\books\\x.pdf`` → ``x.pdf``); the name is NFC-normalised;
    Unicode letters, marks, digits, ``.``, ``-`` and ``_`` are kept; any other run of characters
    (whitespace, punctuation, control characters) becomes one ``_``; leading and trailing dots and
    underscores are dropped (no hidden files, no ``..``); the stem is cut so the name fits ``max_bytes``
    of UTF-8 while the extension is kept. A name with nothing left becomes ``file`` (plus its extension).

    Examples: ``"Player's Handbook (5e).PDF"`` → ``"Player_s_Handbook_5e.PDF"``,
    ``"Règles du jeu.md"`` → ``"Règles_du_jeu.md"``, ``"../../etc/passwd"`` → ``"passwd"``.

    Raises:
        InvalidRequest: if ``filename`` is not a string.
    """
    if not isinstance(filename, str):
        raise InvalidRequest(_STORE, f"a filename must be a string, not {type(filename).__name__}")
    name = unicodedata.normalize("NFC", filename)
    name = re.split(r"[/\\]", name)[-1]
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem.strip("."):
        # No extension (or a dot file such as ".bashrc"): the whole name is the stem.
        stem, extension = name, ""
    stem, extension = _clean(stem), _clean(extension)
    extension = _cut(extension, 16).strip("._")  # a cut may end on the "_" a run became: drop it, as _clean does
    suffix = f".{extension}" if extension else ""
    stem = _cut(stem, max(1, max_bytes - len(suffix.encode("utf-8")))).rstrip("._") or "file"
    return stem + suffix


def original_key(item_uid: str, filename: str) -> str:
    """Key of an item's original file: ``items/{uid}/original/{sanitised filename}``."""
    return validate_key(f"items/{_segment(item_uid, 'item uid')}/original/{sanitize_filename(filename)}")


def chunk_key(item_uid: str, sequence: int) -> str:
    """Key of an item's chunk text: ``items/{uid}/chunks/chunk_{sequence:03d}.txt``.

    The number is zero-padded to three digits and grows past them (``chunk_1000.txt``), so key order
    equals chunk order only below 1000 chunks: sort by :func:`chunk_sequence` when it matters.

    Raises:
        InvalidRequest: if ``sequence`` is not an integer ≥ 0.
    """
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise InvalidRequest(_STORE, f"chunk sequence must be an integer >= 0, not {sequence!r}")
    return validate_key(f"items/{_segment(item_uid, 'item uid')}/chunks/chunk_{sequence:03d}.txt")


def chunk_sequence(key: str) -> int:
    """The chunk number in a :func:`chunk_key` (``…/chunk_042.txt`` → 42), to sort chunks numerically.

    Raises:
        InvalidRequest: if ``key`` is not a chunk key.
    """
    parts = key.split("/")
    match = _CHUNK_NAME_RE.match(parts[-1]) if len(parts) == 4 and parts[2] == "chunks" else None
    if parts[0] != "items" or match is None:
        raise InvalidRequest(_STORE, f"{_shown(key)} is not a chunk key (items/{{uid}}/chunks/chunk_NNN.txt)")
    return int(match.group(1))


def image_key(item_uid: str, filename: str) -> str:
    """Key of an image extracted from an item: ``images/{uid}/{sanitised filename}``."""
    return validate_key(f"images/{_segment(item_uid, 'item uid')}/{sanitize_filename(filename)}")


def upload_key(job_id: str, filename: str) -> str:
    """Key of a file uploaded to the ingest API: ``uploads/{job_id}/{sanitised filename}``."""
    return validate_key(f"uploads/{_segment(job_id, 'job id')}/{sanitize_filename(filename)}")


def content_key(sha256: str, prefix: str = DEFAULT_CAS_PREFIX) -> str:
    """Key of a content-addressed blob: ``{prefix}/{sha256}`` with the digest in lower-case hex.

    Raises:
        InvalidRequest: if ``sha256`` is not 64 hex digits or ``prefix`` is not a valid key.
    """
    digest = sha256.lower() if isinstance(sha256, str) else ""
    if not _SHA256_RE.match(digest):
        raise InvalidRequest(_STORE, f"{sha256!r} is not a SHA-256 hex digest (64 hex digits)")
    validate_key(prefix)
    return validate_key(f"{prefix}/{digest}")
