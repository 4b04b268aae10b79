"""What a turn reads before the model runs, in one call: the same values as the separate reads, in
fewer graph round trips."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from schemas.errors import NotFound
from schemas.story import Memory, Summary, Turn
from story.context import TurnContext
from story.service import StoryService
from tests.unit.test_story_campaign import _tavern, new_campaign, play

pytestmark = pytest.mark.servers


class CountingGraph:
    """A graph store that counts the statements sent to it (a transaction's statements each count)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        self.calls += 1
        return self.inner.run(query, params)

    def stream(self, query: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        self.calls += 1
        yield from self.inner.stream(query, params)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        outer = self

        class Counted:
            def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
                outer.calls += 1
                return tx.run(query, params)

        with self.inner.transaction() as tx:
            yield Counted()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def separately(story: StoryService, campaign_id: str, turn: Turn, recent: int) -> TurnContext:
    """What the turn flow read before :meth:`StoryService.turn_context`: six calls."""
    campaign = story.get_campaign(campaign_id)
    parent = turn.parent_turn_id
    return TurnContext(
        campaign=campaign,
        axioms=[a.text for a in story.axioms(campaign.world_id)],
        state=story.state(campaign_id),
        # recent=0: no turn verbatim (history's last=0 would mean all of them)
        recent=story.history(campaign_id, turn_id=parent, last=recent) if parent and recent else [],
        memories=story.memories(campaign_id),
        summaries=story.summaries(campaign_id),
    )


def remember(story: StoryService, campaign_id: str, observer: str, text: str, turn_id: str) -> None:
    story.add_memory(Memory(campaign_id=campaign_id, observer_entity_id=observer, text=text, anchor_turn_id=turn_id))


def summarise(story: StoryService, campaign_id: str, text: str, turn_id: str) -> None:
    story.add_summary(Summary(campaign_id=campaign_id, scope="session", anchor_turn_id=turn_id, text=text))


def assert_same(story: StoryService, campaign_id: str, turn_id: str, *recents: int) -> None:
    turn = story.get_turn(turn_id)
    for recent in recents:
        together = story.turn_context(campaign_id, turn=turn, recent=recent)
        assert together == separately(story, campaign_id, turn, recent), (turn_id, recent)


@pytest.fixture
def counted(story: StoryService) -> tuple[StoryService, CountingGraph]:
    graph = CountingGraph(story.graph)
    return StoryService(graph, story.blobs, snapshot_interval=8), graph  # type: ignore[arg-type]


def test_the_turn_context_is_what_the_separate_reads_return(counted: tuple[StoryService, CountingGraph]) -> None:
    story, _ = counted
    campaign, ids, (t1, t2, t3) = _tavern(story)
    story.add_axiom(campaign.world_id, "The dead stay dead.")
    remember(story, campaign.id, ids["bren"], "Ayla smiled.", t2)
    remember(story, campaign.id, ids["ayla"], "Bren lied.", t3)
    summarise(story, campaign.id, "The ring is found.", t3)
    more = play(story, campaign.id, "four", "five", "six")
    head = story.story.context(campaign.id).lineage()
    assert story.story.snapshots_on(campaign.id, head)  # the state starts from a snapshot
    assert_same(story, campaign.id, more[-1], 0, 1, 3, 50)
    assert_same(story, campaign.id, t1, 0, 2)  # a first turn: nothing before it

    # behind the tip: the head moved back, and a turn read from there
    story.undo(campaign.id)
    story.undo(campaign.id)
    assert_same(story, campaign.id, more[0], 2)
    assert_same(story, campaign.id, more[1], 2)  # the turn after the head (its parent is the head)

    # a branch from t2: t3's memory and summary are no longer on the line, the branch's own are
    story.create_branch(campaign.id, t2, name="no crypt")
    (b1, b2) = play(story, campaign.id, "stay", "drink")
    remember(story, campaign.id, ids["ayla"], "Warm ale.", b1)
    summarise(story, campaign.id, "A quiet night.", b2)
    assert_same(story, campaign.id, b2, 1, 2, 3, 0)
    assert_same(story, campaign.id, t3, 2)  # a turn of the branch left behind

    # back on main, and a write behind its tip forks a third branch
    main = next(b for b in story.branches(campaign.id) if b.name == "main")
    story.switch_branch(campaign.id, main.id)
    story.undo(campaign.id)
    (forked,) = play(story, campaign.id, "a new way")
    assert len(story.branches(campaign.id)) == 3
    assert_same(story, campaign.id, forked, 1, 4, 0)


def test_a_first_turn_and_an_unknown_campaign(story: StoryService) -> None:
    campaign = new_campaign(story)
    (first,) = play(story, campaign.id, "hello")
    context = story.turn_context(campaign.id, turn=story.get_turn(first), recent=8)
    assert context == separately(story, campaign.id, story.get_turn(first), 8)
    assert context.recent == [] and context.axioms == ["Magic needs a spoken word."]
    with pytest.raises(NotFound, match="no campaign 'camp_nope'") as missing:
        story.turn_context("camp_nope", turn=story.get_turn(first), recent=8)
    with pytest.raises(NotFound) as separate:
        story.get_campaign("camp_nope")
    assert missing.value.client_message == separate.value.client_message
    with pytest.raises(NotFound):  # a parent the campaign does not hold
        orphan = story.get_turn(first).validated_copy(parent_turn_id="turn_nope", depth=1)
        story.turn_context(campaign.id, turn=orphan, recent=8)


def test_no_recent_turns_means_none_not_all(story: StoryService) -> None:
    """recent_turns=0 (the setting allows it) puts no turn in the prompt verbatim; history's last=0 means all."""
    campaign = new_campaign(story)
    turns = play(story, campaign.id, "one", "two", "three")
    context = story.turn_context(campaign.id, turn=story.get_turn(turns[-1]), recent=0)
    assert context.recent == []
    assert [t.id for t in story.turn_context(campaign.id, turn=story.get_turn(turns[-1]), recent=1).recent] == [
        turns[-2]
    ]
    assert context.state == separately(story, campaign.id, story.get_turn(turns[-1]), 8).state


def test_the_turn_context_takes_a_few_round_trips(counted: tuple[StoryService, CountingGraph]) -> None:
    story, graph = counted
    campaign, ids, (t1, t2, t3) = _tavern(story)
    remember(story, campaign.id, ids["bren"], "Ayla smiled.", t2)
    summarise(story, campaign.id, "The ring is found.", t3)
    story.create_branch(campaign.id, t2, name="no crypt")
    (turn_id,) = play(story, campaign.id, "I stay at the inn")
    turn = story.get_turn(turn_id)

    graph.calls = 0
    separate = separately(story, campaign.id, turn, 8)
    separate_calls = graph.calls
    graph.calls = 0
    together = story.turn_context(campaign.id, turn=turn, recent=8)
    together_calls = graph.calls
    print(f"graph round trips: six separate calls {separate_calls}, turn_context {together_calls}")
    assert together == separate
    assert together_calls <= 3 < separate_calls
