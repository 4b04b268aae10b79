"""Building blocks shared by every part of the data model: ids, timestamps, base config, enums.

Ids are plain strings. Generated ids are ``<prefix>_<uuid4 hex>`` (:func:`new_id`); ids derived
from content are ``<prefix>_<first 32 hex of sha256>`` (:func:`content_id`), so re-ingesting the
same bytes yields the same id.

Timestamps are timezone-aware UTC datetimes (:data:`UtcDatetime`). A *naive* datetime (no
timezone) is **rejected**, because guessing its zone would silently reorder events recorded on
different machines; an aware datetime in another zone is **converted** to UTC.
"""

import hashlib
import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
)

from schemas.text import TEXT_MAX, check_text

# free text lives in schemas.text; Name and Text are re-exported here, where the model modules import them
from schemas.text import Name as Name
from schemas.text import Text as Text

__all__ = [
    "ID_MAX_LENGTH",
    "AttributeValue",
    "Authority",
    "BlobKey",
    "CanonLevel",
    "Confidence",
    "EntityKind",
    "EntityStatus",
    "FactStatus",
    "Id",
    "JobStatus",
    "LorekeeperModel",
    "MimeType",
    "Name",
    "ScalarValue",
    "Sha256Hex",
    "Text",
    "UtcDatetime",
    "check_job_timeline",
    "content_id",
    "find_hidden_increment",
    "new_id",
    "sha256_hex",
    "utc_now",
]

# --------------------------------------------------------------------------------------------
# ids

ID_MAX_LENGTH = 200
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]*")
_ID_JSON_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": ID_MAX_LENGTH,
    "pattern": f"^{_ID_RE.pattern}$",
}


def new_id(prefix: str) -> str:
    """Return a fresh random id such as ``turn_3f2a…`` (prefix + ``_`` + uuid4 hex).

    Raises:
        ValueError: if ``prefix`` is not lowercase letters and digits starting with a letter.
    """
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"id prefix {prefix!r} must be lowercase letters and digits, starting with a letter")
    return f"{prefix}_{uuid.uuid4().hex}"


def sha256_hex(content: bytes | str) -> str:
    """Return the lowercase hex sha256 of ``content`` (a str is hashed as UTF-8)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    return hashlib.sha256(data).hexdigest()


def content_id(prefix: str, content: bytes | str) -> str:
    """Return an id derived from ``content``: ``<prefix>_<first 32 hex of its sha256>``.

    The same content always yields the same id, which makes re-ingest and re-runs idempotent.
    """
    new_id(prefix)  # validates the prefix with the same rule and message
    return f"{prefix}_{sha256_hex(content)[:32]}"


def _check_id(value: str) -> str:
    if not value or len(value) > ID_MAX_LENGTH or not _ID_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid id: use 1-{ID_MAX_LENGTH} characters of letters, digits, "
            "'_', '.', ':' or '-', starting with a letter or digit (e.g. from new_id('turn'))"
        )
    return value


Id = Annotated[str, AfterValidator(_check_id), WithJsonSchema(_ID_JSON_SCHEMA)]
"""A graph id: generated (``new_id``) or content-derived (``content_id``)."""

# --------------------------------------------------------------------------------------------
# timestamps


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"timestamp {value.isoformat()} has no timezone; send an aware UTC time such as '2024-05-01T12:00:00Z'"
        )
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_to_utc)]
"""An aware datetime, normalized to UTC. Naive datetimes are rejected, not guessed."""


def check_job_timeline(created_at: datetime, started_at: datetime | None, completed_at: datetime | None) -> None:
    """Check that a job's timestamps are in order: created <= started <= completed.

    Raises:
        ValueError: naming the two timestamps that are out of order.
    """
    if started_at is not None and started_at < created_at:
        raise ValueError(f"started_at ({started_at.isoformat()}) is before created_at ({created_at.isoformat()})")
    if completed_at is not None:
        if started_at is None:
            raise ValueError("completed_at is set but started_at is not; a job starts before it ends")
        if completed_at < started_at:
            raise ValueError(
                f"completed_at ({completed_at.isoformat()}) is before started_at ({started_at.isoformat()})"
            )


# --------------------------------------------------------------------------------------------
# small constrained types


Confidence = Annotated[float, Field(ge=0.0, le=1.0)]
"""A probability-like confidence between 0 and 1 inclusive."""

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _check_sha256(value: str) -> str:
    lowered = value.lower()
    if not _SHA256_RE.fullmatch(lowered):
        raise ValueError(f"{value!r} is not a sha256 digest: expected 64 hexadecimal characters")
    return lowered


Sha256Hex = Annotated[
    str,
    AfterValidator(_check_sha256),
    WithJsonSchema({"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}),
]
"""A sha256 digest as hex; normalized to lowercase."""

_BLOB_SEGMENT_RE = re.compile(r"[A-Za-z0-9_.=\-]+")


def _check_blob_key(value: str) -> str:
    segments = value.split("/")
    if not value or len(value) > 1024 or any(not _BLOB_SEGMENT_RE.fullmatch(s) or s in {".", ".."} for s in segments):
        raise ValueError(
            f"{value!r} is not a valid object-store key: use '/'-separated segments of letters, "
            "digits, '_', '.', '=' or '-', with no leading '/', no empty, '.' or '..' segments, "
            "at most 1024 characters (e.g. 'chunks/ab/abcdef….txt')"
        )
    return value


BlobKey = Annotated[
    str,
    AfterValidator(_check_blob_key),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 1024}),
]
"""A key in the object store (relative, '/'-separated). Never a backend-private URL."""

_MIME_RE = re.compile(r"[a-z]+/[a-z0-9][a-z0-9.+\-]*")


def _check_mime(value: str) -> str:
    lowered = value.lower()
    if not _MIME_RE.fullmatch(lowered):
        raise ValueError(f"{value!r} is not a MIME type such as 'image/png'")
    return lowered


MimeType = Annotated[
    str,
    AfterValidator(_check_mime),
    WithJsonSchema({"type": "string", "pattern": "^[a-zA-Z]+/[a-zA-Z0-9][a-zA-Z0-9.+\\-]*$"}),
]
"""A MIME type (``type/subtype``), normalized to lowercase."""

# --------------------------------------------------------------------------------------------
# absolute values (no hidden increments)

_NUMBER = r"\d+(?:\.\d+)?"
# "+2", "-1", "+= 2", "-=3"
_SIGNED_NUMBER_RE = re.compile(rf"\s*([+-])=?\s*({_NUMBER})\s*")
# "hp+3", "hp += 3", "gold - 5"
_NAMED_DELTA_RE = re.compile(rf"\s*[A-Za-z_][A-Za-z0-9_]*\s*([+-])=?\s*({_NUMBER})\s*")
# "+= anything", "hp++", "x--"
_COMPOUND_RE = re.compile(r"(?:[+-]=)|(?:\w\s*(?:\+\+|--)\s*$)")


def find_hidden_increment(value: str) -> str | None:
    """Return the signed amount (e.g. ``'+2'``) if ``value`` hides a relative change, else None.

    Values in state events are absolute. Strings such as ``"+2"``, ``"-1"``, ``"hp+3"`` or
    ``"+= 2"`` are deltas dressed up as assignments; the caller should reject them and ask for an
    explicit ``op="increment"``. ``"?"`` is returned when the string is a delta whose amount
    cannot be read (``"hp++"``, ``"+= a lot"``).
    """
    for pattern in (_SIGNED_NUMBER_RE, _NAMED_DELTA_RE):
        match = pattern.fullmatch(value)
        if match:
            sign, amount = match.groups()
            return f"{sign}{amount}"
    if _COMPOUND_RE.search(value):
        return "?"
    return None


def _reject_hidden_increment(value: Any, info: ValidationInfo) -> Any:
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    stored = bool(info.context and info.context.get("stored"))
    for item in items:
        if isinstance(item, str) and not stored:
            check_text(item, max_length=TEXT_MAX, blank=True)
        if isinstance(item, str) and (amount := find_hidden_increment(item)) is not None:
            if amount == "?":
                hint = 'op="increment" with a numeric amount'
            else:
                number = amount.lstrip("+")
                hint = f'op="increment" with amount={number}'
            raise ValueError(
                f"value {item!r} looks like a relative change, but state values are absolute. "
                f"To change a number by an amount, use set_entity_attribute with {hint}; "
                "to assign a value, send the absolute value itself (a number, not a signed string)"
            )
    return value


ScalarValue = str | bool | int | float
"""A JSON scalar stored as an attribute or fact value."""

AttributeValue = Annotated[ScalarValue | list[ScalarValue] | None, AfterValidator(_reject_hidden_increment)]
"""An absolute attribute/fact value. Strings that hide an increment ("+2", "hp+3") are rejected, and a string is
free text (:func:`schemas.text.check_text`: at most 20,000 characters, no NUL, no lone surrogate)."""

# --------------------------------------------------------------------------------------------
# base model


class LorekeeperModel(BaseModel):
    """Base of every model: unknown fields are errors, assignments are validated.

    Because assignments are validated field by field (and model rules re-run), change several
    related fields at once with :meth:`validated_copy`, not with ``model_copy`` (which skips
    validation) or a sequence of assignments.
    """

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
    )

    def validated_copy(self, **changes: Any) -> Self:
        """Return a copy with ``changes`` applied and the whole model validated again.

        Raises:
            pydantic.ValidationError: if the changed model breaks a rule.
        """
        data = self.model_dump(mode="python", round_trip=True)
        data.update(changes)
        return type(self).model_validate(data)


# --------------------------------------------------------------------------------------------
# enums shared by several modules


class Authority(StrEnum):
    """Who vouches for a piece of canon; decides the gate's acceptance policy."""

    SOURCE = "source"  # a rulebook/lore chunk: accepted automatically
    GM = "gm"  # the game master: always accepted
    PLAYER = "player"  # a player: accepted only through a resolution (e.g. a dice roll)
    SYSTEM = "system"  # the narrator/extractor: review or confidence threshold


class CanonLevel(StrEnum):
    """How canonical a fact is. Nothing canonical is deleted: a retcon supersedes it."""

    PROPOSED = "proposed"
    CANON = "canon"
    RETCONNED = "retconned"


class FactStatus(StrEnum):
    """Lifecycle of a fact in the world graph."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"
    DISPUTED = "disputed"


class EntityKind(StrEnum):
    """Genre-neutral kinds of things in a world."""

    CHARACTER = "character"
    LOCATION = "location"
    ORGANIZATION = "organization"
    ITEM = "item"
    VEHICLE = "vehicle"
    CREATURE = "creature"
    STRUCTURE = "structure"
    CONCEPT = "concept"
    OTHER = "other"


class EntityStatus(StrEnum):
    """Genre-neutral state of an entity's existence in the story."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    MISSING = "missing"
    DEAD = "dead"
    DESTROYED = "destroyed"
    UNKNOWN = "unknown"


class JobStatus(StrEnum):
    """Lifecycle of a background job (ingest, media generation)."""

    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
