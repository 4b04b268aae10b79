"""The GM's desk: the tools a GM keeps beside the story, one chapter each.

- :attr:`Desk.notes`: notes, ideas and TODOs on a scene, never canon, GM-only unless shared, recalled by
  those who may see them (:mod:`story.notes`).

The desk is reached as ``StoryService.desk``; the API's operations are :mod:`serve.operations.desk`.
"""

from __future__ import annotations

from story.core import StoryCore
from story.notes import Notes
from story.recall_index import RecallIndex


class Desk:
    """The GM's desk over one story service's stores (``index``: its recall index, None when recall is off)."""

    def __init__(self, core: StoryCore, index: RecallIndex | None) -> None:
        self.notes = Notes(core, index)
        """Notes, ideas and TODOs on scenes: :mod:`story.notes`."""
