"""How a memory record is shaped for the indexes under a :class:`~story.recall_config.RecallConfig`: its
head (when, who), the text it is embedded as, the window of earlier turns it is indexed with, its
full-text document and its vector payload, with the lineage keys both engines filter on
(:func:`story.lineage.lineage_keys`).
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.recall import RecallKind, RecallRecord
from stores.text.base import TextDocument
from story.lineage import lineage_keys
from story.recall_config import RecallConfig


def index_head(config: RecallConfig, record: RecallRecord) -> str:
    """What the record is prefixed with where it is indexed as one text: ``(time) speakers:``."""
    parts = []
    if config.time_in_text and record.story_time:
        parts.append(f"({record.story_time})")
    if config.speakers_in_text and record.speakers:
        parts.append(", ".join(record.speakers) + ":")
    return " ".join(parts)


def indexed_text(config: RecallConfig, record: RecallRecord, context: str | None = None) -> str:
    """The text a record is embedded as: when, who, then the record itself, after its context when
    ``context_in_vector`` (``context`` if given, else the record's own)."""
    head = index_head(config, record)
    body = f"{head} {record.text}" if head else record.text
    context = record.context if context is None else context
    if config.context_in_vector and context:
        return f"{context}\n{body}"
    return body


def windows(config: RecallConfig, records: Sequence[RecallRecord]) -> dict[str, str]:
    """The context of each turn record from its neighbours in ``records``: the turns of the same
    scene and branch at the ``window_before`` depths just before it (its ancestors: never a later
    turn, which may be undone or on another line), as ``speakers: text`` lines in story order.
    Records without a neighbour in the batch are left out (they keep their own ``context``)."""
    cfg = config
    if cfg.window_before == 0:
        return {}
    by_place: dict[tuple[str, str, str, int], RecallRecord] = {}
    for record in records:
        if record.kind is RecallKind.TURN and record.scene_id is not None:
            by_place[(record.campaign_id, record.branch_id, record.scene_id, record.depth)] = record
    out: dict[str, str] = {}
    for (campaign, branch, scene, depth), record in by_place.items():
        lines = []
        for offset in range(-cfg.window_before, 0):
            other = by_place.get((campaign, branch, scene, depth + offset))
            if other is not None:
                who = ", ".join(other.speakers)
                lines.append((offset, f"{who}: {other.text}" if who else other.text))
        if lines:
            out[record.id] = "\n".join(line for _, line in sorted(lines))
    return out


def index_fields(record: RecallRecord) -> dict[str, str | list[str]]:
    fields: dict[str, str | list[str]] = {
        "campaign": record.campaign_id,
        "kind": record.kind.value,
        "lineage": lineage_keys(record.branch_id, record.depth),
    }
    if record.observers:
        fields["observer"] = list(record.observers)
    return fields


def text_document(config: RecallConfig, record: RecallRecord, window: str | None = None) -> TextDocument:
    context = window if window is not None else record.context
    if config.text_layout == "joined":
        head = index_head(config, record)
        body = f"{head} {record.text}" if head else record.text
        title = heading = ""
    else:
        body = record.text
        title = ", ".join(record.speakers) if config.speakers_in_text else ""
        heading = (record.story_time or "") if config.time_in_text else ""
    return TextDocument(
        id=record.id,
        text=f"{context}\n{body}" if context else body,
        title=title,
        heading=heading,
        fields=index_fields(record),
        data={"record": record.model_dump(mode="json", exclude={"context"})},
    )


def vector_payload(record: RecallRecord) -> dict[str, object]:
    # the record as one JSON string, not a nested object: qdrant-edge converts a payload's every string
    # value trying number types first, so 5,000 records upserted in 0.44 s against 0.62 s, and a search's
    # 100 payloads came back in 2.5 ms against 3.3 ms (stored_record reads both forms)
    return {**index_fields(record), "record": record.model_dump_json(exclude={"context"})}


def window_holds(config: RecallConfig, record: RecallRecord, written: Sequence[RecallRecord]) -> bool:
    """Whether ``record``'s window reaches one of the ``written`` turns (same branch and scene)."""
    place = (RecallKind.TURN, record.branch_id, record.scene_id)
    return any(
        (other.kind, other.branch_id, other.scene_id) == place
        and other.id != record.id
        and -config.window_before <= other.depth - record.depth < 0
        for other in written
    )
