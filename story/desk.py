"""The GM's desk: the tools a GM keeps beside the story, one chapter each.

- :attr:`Desk.notes`: notes, ideas and TODOs on a scene, never canon, GM-only unless shared, recalled by
  those who may see them (:mod:`story.notes`);
- :attr:`Desk.spans`: sessions and arcs, and their summaries (:mod:`story.spans`);
- :attr:`Desk.pruning`: take and version dispositions, archiving takes, pruning what is disposable once the
  story moved on (:mod:`story.pruning`);
- :meth:`Desk.between`: what happened on a line between two turns, for a seat (:mod:`story.happened`);
  what rests on a record is :meth:`story.service.StoryService.record_dependents`.

The desk is reached as ``StoryService.desk``; the API's operations are :mod:`serve.operations.desk`.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas.desk import Happenings
from schemas.story import Summary, WorldStateView
from story.campaigns import Campaigns
from story.core import StoryCore
from story.formation import SceneMemoryFormer
from story.happened import happened_between
from story.notes import Notes
from story.pruning import Pruning
from story.recall_index import RecallIndex
from story.spans import Spans
from story.viewer import Viewer


class Desk:
    """The GM's desk over one story service.

    Args:
        index: the recall index notes are written to (None: recall is off).
        campaigns: deletes branches for a prune.
        state: the world as of a position (:meth:`story.timeline.Timeline.state`).
        add_summary: writes and indexes a summary (:meth:`story.service.StoryService.add_summary`).
        former: the story's memory former now (None: summaries are the GM's to write).
    """

    def __init__(
        self,
        core: StoryCore,
        index: RecallIndex | None,
        *,
        campaigns: Campaigns,
        state: Callable[..., WorldStateView],
        add_summary: Callable[[Summary], Summary],
        former: Callable[[], SceneMemoryFormer | None],
    ) -> None:
        self.core = core
        self.state = state
        self.notes = Notes(core, index)
        """Notes, ideas and TODOs on scenes: :mod:`story.notes`."""
        self.spans = Spans(core, add_summary, former)
        """Sessions, arcs and their summaries: :mod:`story.spans`."""
        self.pruning = Pruning(core, campaigns)
        """Take and version dispositions, archiving and pruning: :mod:`story.pruning`."""

    def between(
        self, campaign_id: str, from_turn_id: str, to_turn_id: str | None = None, *, viewer: Viewer | None = None
    ) -> Happenings:
        """What happened after one turn up to another (the head) on its line, as ``viewer`` (the GM) sees it."""
        seat = viewer or Viewer(gm=True)
        return happened_between(self.core, campaign_id, from_turn_id, to_turn_id, state=self.state, viewer=seat)
