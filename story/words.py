"""English function words: the words that say nothing of what a text is about.

Shared by the extractive memory former (:mod:`story.formation`, which scores a scene's sentences by
their content words) and the recall cues (:mod:`story.recall_cues`, whose feedback adds a first
round's distinctive words to a search).
"""

from __future__ import annotations

_FUNCTION_WORD_TEXT = (
    "a about after again all also am an and any are as at be because been before being but by can could "
    "did do does doing down for from had has have having he her here hers him his how i if in into is it "
    "its just me more most my no nor not now of off on once only or other our ours out over own same she "
    "should so some such than that the their theirs them then there these they this those through to too "
    "under until up us very was we were what when where which while who whom why will with would you "
    "your yours"
)
FUNCTION_WORDS = frozenset(_FUNCTION_WORD_TEXT.split())
