"""The recall index caught up with the graph: what the graph holds is indexed, what it no longer holds is not.

The graph is the record and the memory index (:mod:`story.recall_index`) is derived from it. Index writes
follow the graph's commits, so a crash (or an index that was down) between the two leaves the index
behind: a memory formed at a scene's end that never reached it, a retracted memory still recalled.

- :func:`reconcile` compares one campaign's index with its graph by record id: the records the graph
  holds (:meth:`story.recall.Recollection.records_of`, every branch) that the index misses, or holds with
  another text (a turn re-told), are written; the records the index holds and the graph does not (or
  holds retracted) are removed. The server runs it for every campaign at start-up
  (:meth:`story.service.StoryService.catch_up`). Event ``recall_reconciled``.
- :func:`sync_scene` writes the records of one ended scene the index misses (its turns, canon outcomes,
  summary and memories) in one batch, right after its end is committed (:mod:`story.scene_end`).

The index is read before the graph, so a record committed and indexed by another writer while this runs
is never taken for one the graph does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from schemas.errors import LorekeeperError
from schemas.recall import RecallRecord
from story.recall import Recollection
from story.recall_index import RecallIndex

log = structlog.get_logger(__name__)

BATCH = 256
"""Records embedded and written per index call."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What reconciling one campaign's recall index with its graph did."""

    campaign_id: str
    records: int = 0
    """Records the graph holds (what the index holds afterwards)."""
    added: int = 0
    """Records the index missed."""
    rewritten: int = 0
    """Records the index held with another text."""
    removed: int = 0
    """Records the index held that the graph does not (gone, or retracted)."""
    failed: str | None = None
    """Why the index could not be caught up (it was down): nothing else is changed then."""


def _write(index: RecallIndex, records: Sequence[RecallRecord]) -> None:
    for start in range(0, len(records), BATCH):
        index.write(records[start : start + BATCH])


def reconcile(recollection: Recollection, campaign_id: str) -> Reconciled:
    """Bring one campaign's recall index in line with its graph (see the module's doc).

    Never raises for the index's sake: an index that fails is logged (``recall_index_failed``) and
    reported in :attr:`Reconciled.failed`; the next reconciliation tries again.
    """
    index = recollection.index
    if index is None:
        return Reconciled(campaign_id)
    try:
        stored = index.stored_texts(campaign_id)  # first: see the module's doc
        expected = {r.id: r for r in recollection.records_of(campaign_id)}
        missing = [r for i, r in expected.items() if i not in stored]
        stale = [r for i, r in expected.items() if i in stored and stored[i] != r.text]
        extra = sorted(set(stored) - set(expected))
        index.delete(extra)
        _write(index, [*missing, *stale])
    except (LorekeeperError, OSError) as exc:
        log.warning("recall_index_failed", what="reconcile", campaign_id=campaign_id, error=str(exc))
        return Reconciled(campaign_id, failed=str(exc))
    done = Reconciled(campaign_id, len(expected), len(missing), len(stale), len(extra))
    log.info(
        "recall_reconciled",
        campaign_id=campaign_id,
        records=done.records,
        added=done.added,
        rewritten=done.rewritten,
        removed=done.removed,
    )
    return done


def sync_scene(recollection: Recollection, campaign_id: str, scene_id: str) -> int:
    """Index the records of an ended scene the index misses: its turns, canon outcomes, summary and
    memories. Returns how many were written (0 when the index is down: logged, caught up later)."""
    index = recollection.index
    if index is None:
        return 0
    try:
        records = [r for r in recollection.records_of(campaign_id) if r.scene_id == scene_id]
        present = index.present([r.id for r in records])
        missing = [r for r in records if r.id not in present]
        _write(index, missing)
    except (LorekeeperError, OSError) as exc:
        log.warning("recall_index_failed", what="scene", scene_id=scene_id, error=str(exc))
        return 0
    return len(missing)
