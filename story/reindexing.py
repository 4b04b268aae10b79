"""Rebuild every campaign's recall index from the graph, skipping and reporting what cannot be read.

``lorekeeper reindex`` runs :func:`rebuild_every_recall`. A campaign whose graph holds a record that cannot be
read (a node a bug or a hand edit left invalid) used to stop the whole rebuild with a traceback, and no
campaign after it was rebuilt. Now that campaign is rebuilt without the records that cannot be read (and what
hangs on them: a broken turn's memories), each named in a log event (``recall_record_unreadable``: label, id,
field and problem) and counted in the report, and every other campaign is rebuilt. A campaign whose rebuild
fails otherwise on what it reads is skipped whole (its index left as it was). A store that is down still
stops the rebuild: skipping would only hide it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError

from schemas.story import Campaign, Memory, Scene, Summary, Turn
from stores.catalog import from_props
from story.service import StoryService

log = structlog.get_logger(__name__)

# what a campaign's recall is built from, by graph label
_RECORD_MODELS: dict[str, type[BaseModel]] = {
    "Campaign": Campaign,
    "Turn": Turn,
    "Scene": Scene,
    "Memory": Memory,
    "Summary": Summary,
}
# what reading a broken record raises (a ValidationError is a ValueError; a JSON property that is not JSON too)
_UNREADABLE = (ValueError, KeyError, TypeError)


@dataclass(frozen=True)
class UnreadableRecord:
    """A graph record a rebuild could not read: its label, id and what is wrong with it."""

    campaign_id: str
    label: str
    record_id: str
    problem: str


@dataclass
class RecallRebuild:
    """What a rebuild of every campaign's recall did."""

    campaigns: int = 0
    records: int = 0
    skipped_campaigns: list[str] = field(default_factory=list)
    partial_campaigns: list[str] = field(default_factory=list)
    """Rebuilt without the records that cannot be read (named in ``unreadable``)."""
    unreadable: list[UnreadableRecord] = field(default_factory=list)


def rebuild_every_recall(
    story: StoryService, *, on_campaign: Callable[[str], None] | None = None, total: Callable[[int], None] | None = None
) -> RecallRebuild:
    """Rebuild the recall index of every campaign of the graph; skip (and report) those it cannot read.

    Args:
        on_campaign: called with each campaign's id once it is done (rebuilt or skipped), for progress.
        total: called once with the number of campaigns, before the first.
    """
    ids = [str(row["id"]) for row in story.graph.run("MATCH (n:Campaign) RETURN n.uid AS id ORDER BY n.uid")]
    if total is not None:
        total(len(ids))
    report = RecallRebuild()
    for campaign_id in ids:
        found: list[UnreadableRecord] = []
        unreadable = functools.partial(_note_unreadable, found, campaign_id)
        try:
            report.records += story.rebuild_recall(campaign_id, unreadable=unreadable)
            report.campaigns += 1
            if found:
                report.partial_campaigns.append(campaign_id)
        except _UNREADABLE as exc:  # not one record: the rebuild of the campaign itself failed
            found = unreadable_records(story, campaign_id) or [UnreadableRecord(campaign_id, "?", "?", _problem(exc))]
            log.warning("recall_rebuild_skipped", campaign_id=campaign_id, unreadable=len(found))
            report.skipped_campaigns.append(campaign_id)
        for record in found:
            log.warning(
                "recall_record_unreadable",
                campaign_id=campaign_id,
                label=record.label,
                record_id=record.record_id,
                problem=record.problem,
            )
        report.unreadable.extend(found)
        if on_campaign is not None:
            on_campaign(campaign_id)
    log.info(
        "recall_rebuild_completed",
        campaigns=report.campaigns,
        records=report.records,
        skipped_campaigns=len(report.skipped_campaigns),
        partial_campaigns=len(report.partial_campaigns),
        unreadable_records=len(report.unreadable),
    )
    return report


def _note_unreadable(
    found: list[UnreadableRecord], campaign_id: str, label: str, record_id: str, exc: Exception
) -> None:
    found.append(UnreadableRecord(campaign_id, label, record_id, _problem(exc)))


def unreadable_records(story: StoryService, campaign_id: str) -> list[UnreadableRecord]:
    """The campaign's records (campaign, turns, scenes, memories, summaries) that cannot be read, each named."""
    found = []
    rows = story.graph.run(
        "MATCH (n) WHERE n.uid = $c OR n.campaign_id = $c RETURN labels(n) AS labels, n", {"c": campaign_id}
    )
    for row in rows:
        label = next((name for name in row["labels"] if name in _RECORD_MODELS), None)
        if label is None:
            continue
        props: dict[str, Any] = row["n"]
        try:
            from_props(_RECORD_MODELS[label], props, key="id")
        except _UNREADABLE as exc:
            found.append(UnreadableRecord(campaign_id, label, str(props.get("uid", "?")), _problem(exc)))
    return sorted(found, key=lambda r: (r.label, r.record_id))


def _problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(record)'}: {e['msg']}" for e in exc.errors()[:5])
    return f"{type(exc).__name__}: {exc}"
