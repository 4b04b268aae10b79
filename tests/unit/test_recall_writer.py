"""A turn's record is written to the memory index behind the turn, many turns to a commit (issue 30)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from schemas.recall import RecallRecord
from story.recall_index import RecallIndex
from story.recall_sync import reconcile
from story.service import StoryService
from tests.unit.test_story_campaign import new_campaign

pytestmark = pytest.mark.servers


def _held(index: RecallIndex) -> tuple[threading.Event, list[int]]:
    """Make the index's writer wait on an event before each batch; the batch sizes are listed."""
    go, sizes = threading.Event(), []
    write = index.write_now

    def held(records: Sequence[RecallRecord]) -> int:
        go.wait(30)
        sizes.append(len(records))
        return write(records)

    index._writer._write = held
    return go, sizes


def test_turns_recorded_while_a_write_runs_share_the_next_commit(recalling_story: StoryService) -> None:
    story = recalling_story
    index = story.recall_index
    assert isinstance(index, RecallIndex)
    campaign = new_campaign(story)
    go, sizes = _held(index)
    turns = [story.add_turn(campaign.id, f"I count coin {i}", narration=f"Coin {i} rings true.") for i in range(5)]
    # add_turn returned while the index had written none of them: the turn does not wait for the commit
    assert index._writer.pending + len(sizes) >= 4 and not sizes
    go.set()
    assert story.recall(campaign.id, "coins ringing", limit=10)  # a recall waits for the submitted turns
    assert index.present([t.id for t in turns]) == {t.id for t in turns}
    assert sum(sizes) == 5 and len(sizes) <= 2  # one write at most for the first turn, one for the rest


def test_the_turn_flow_recall_does_not_wait_but_others_do(recalling_story: StoryService) -> None:
    story = recalling_story
    index = story.recall_index
    assert isinstance(index, RecallIndex)
    campaign = new_campaign(story)
    go, _ = _held(index)
    turn = story.add_turn(campaign.id, "I light the brazier", narration="Blue flames leap up.")
    assert story.recall(campaign.id, "blue fire", limit=5, wait_for_turns=False) == []
    go.set()
    assert story.recall(campaign.id, "blue fire", limit=5)[0].turn_id == turn.id


def test_turns_whose_batch_never_reached_the_index_are_reconciled(recalling_story: StoryService) -> None:
    """A process that dies before its batch is written: the graph holds the turns, the index does not;
    the reconciliation at start-up writes them (the write is text first, vectors last)."""
    story = recalling_story
    index = story.recall_index
    assert isinstance(index, RecallIndex)
    campaign = new_campaign(story)
    lost = threading.Event()
    index._writer._write = lambda records: lost.set() or 0  # the batch dies with the process
    turns = [story.add_turn(campaign.id, f"I climb pitch {i}", narration=f"Pitch {i} is slick.") for i in range(3)]
    index.flush()
    assert lost.is_set() and index.present([t.id for t in turns]) == set()
    index._writer._write = index.write_now
    done = reconcile(story._recall, campaign.id)
    assert done.added == 3 and index.present([t.id for t in turns]) == {t.id for t in turns}
