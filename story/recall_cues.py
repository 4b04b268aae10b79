"""Cues a recall query carries besides its words: a calendar time it names, and people it names.

A query such as "what did Maria donate in December 2023?" names a time; the records told then (or
shortly after: people tell of a thing in the days that follow it) are the likely answers, and a
ranking can favour them (:class:`story.recall_index.RecallConfig` ``time_boost``). Only explicit
calendar dates in English are read ("8 May 2023", "May 8, 2023", "2023-05-08", "May 2023",
"in 2023"); an in-world calendar ("the third day of Frostfall") or a relative expression ("last
week") yields nothing, so a campaign whose story times are not calendar dates is ranked as before.
Both sides use the same reader: :func:`time_range` for a query, :func:`story_date` for a record's
``story_time``.

People: a record's speakers are named in a query when their name, or a first name of three letters
or more, occurs in it as a word (:func:`named_speakers`).

Inference: a question that asks what someone would, might or likely do (:func:`inferential`) is
answered by turns told in other words than its own; a ranking leans on the dense leg for it, and its
full-text leg searches the question without the speakers' names (:func:`without_names`), which
otherwise match every turn they spoke.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache

from models.stemming import stem
from story.words import FUNCTION_WORDS

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.IGNORECASE)
_YEAR_ALONE = re.compile(r"\b(?:in|during|of|throughout)\s+(\d{4})\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A span of calendar days a query names: ``start`` included, ``end`` excluded."""

    start: date
    end: date
    text: str  # the words that named it

    def holds(self, day: date, *, after_days: int = 0) -> bool:
        """Whether ``day`` lies in the span or up to ``after_days`` after it."""
        return self.start <= day < self.end + timedelta(days=after_days)


def _date(year: str, month: int, day: str | int) -> date | None:
    try:
        return date(int(year), month, int(day))
    except ValueError:  # "31 February 2023" names no day
        return None


def _next_month(day: date) -> date:
    return date(day.year + 1, 1, 1) if day.month == 12 else date(day.year, day.month + 1, 1)


def time_range(query: str) -> TimeRange | None:
    """The first calendar time ``query`` names, most precise first (a day, then a month, then a year)."""
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        if m := pattern.search(query):
            d, mo, y = (m[1], m[2], m[3]) if order == "dmy" else (m[2], m[1], m[3])
            if (day := _date(y, MONTHS[mo.lower()], d)) is not None:
                return TimeRange(day, day + timedelta(days=1), m[0])
    if (m := _ISO.search(query)) and (day := _date(m[1], int(m[2]), m[3])) is not None:
        return TimeRange(day, day + timedelta(days=1), m[0])
    if m := _MONTH_YEAR.search(query):
        first = date(int(m[2]), MONTHS[m[1].lower()], 1)
        return TimeRange(first, _next_month(first), m[0])
    if m := _YEAR_ALONE.search(query):
        year = int(m[1])
        return TimeRange(date(year, 1, 1), date(year + 1, 1, 1), m[0])
    return None


@lru_cache(maxsize=65536)
def story_date(story_time: str | None) -> date | None:
    """The calendar day a record's ``story_time`` names ("1:56 pm on 8 May, 2023"), or None."""
    if not story_time:
        return None
    found = time_range(story_time)
    if found is None or found.end - found.start != timedelta(days=1):
        return None  # a month or a year is not a day
    return found.start


def name_forms(name: str) -> list[str]:
    """How a speaker may be named in a query: the whole name, and its first word when it is a name."""
    name = name.strip()
    forms = [name] if name else []
    first = name.split()[0] if " " in name else ""
    if len(first) >= 3:
        forms.append(first)
    return forms


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """Which of ``speakers`` the query names (whole words, case-insensitive; see :func:`_mentions`)."""
    return {speaker for speaker in speakers if any(_mentions(query, form) for form in name_forms(speaker))}


# where a sentence begins: the text's start, or after an end mark (and any closing quote or bracket), then
# spaces and opening quotes or brackets
_SENTENCE_END = re.compile(r"(?:^|[.!?:;]['\"’”)\]]*)[\s'\"‘“(\[]*$")


def _mentions(query: str, form: str) -> list[tuple[int, int]]:
    """Where ``query`` names ``form`` (whole words, any case), as (start, end) spans.

    A name that is also a function word (a transcript's "ALL" for the whole table, a character called
    Will or May) names its speaker only where it is capitalised inside a sentence: "What did ALL
    say?", not "All right, ..." or "what will happen".
    """
    pattern = rf"(?<!\w){re.escape(form)}(?!\w)"
    spans = [m.span() for m in re.finditer(pattern, query, flags=re.IGNORECASE)]
    if form.lower() not in FUNCTION_WORDS:
        return spans
    return [(a, b) for a, b in spans if query[a].isupper() and not _SENTENCE_END.search(query[:a])]


# A question asking for an inference ("Would Ava enjoy a walking holiday?", "What might John's status
# be?", "Is Maya likely to ...?"): its answer is told in other words than the question's.
_INFERENTIAL = re.compile(r"\b(would|might|likely|could)\b", re.IGNORECASE)


def inferential(query: str) -> bool:
    """Whether ``query`` asks for an inference (it says "would", "might", "likely" or "could")."""
    return _INFERENTIAL.search(query) is not None


# "What pets does ...", "Which instruments has ...", "What kinds of books did ...": a plural noun asked after
_LISTING = re.compile(
    r"^\W*(?:what|which)\s+(?:(?:kinds?|sorts?|types?)\s+of\s+)?([a-z]+s)\s+(?:do|does|did|has|have|had)\b",
    re.IGNORECASE,
)
# words in -s that name one thing ("What status does ...", "What bus did ...")
_SINGULAR_S = frozenset(["news", "series", "species", "lens", "gas", "chaos", "canvas", "means", "whereabouts"])


def listing(query: str) -> bool:
    """Whether ``query`` asks for the members of a kind ("What pets does Ava have?", "Which instruments does
    Rosa play?"): it names the kind, the answers name its members (a beagle, a cello), so its words match
    other lines that name the kind rather than the lines that answer it."""
    match = _LISTING.search(query)
    if match is None:
        return False
    noun = match[1].lower()
    return not (noun.endswith(("ss", "us", "is")) or noun in _SINGULAR_S)


def without_names(query: str, speakers: set[str]) -> str:
    """``query`` with every mention of the ``speakers``' names (:func:`_mentions`; and a possessive
    ``'s`` after one) taken out."""
    forms = sorted({form for speaker in speakers for form in name_forms(speaker)}, key=len, reverse=True)
    for form in forms:
        for start, end in reversed(_mentions(query, form)):
            possessive = re.match(r"['’]s(?!\w)", query[end:], flags=re.IGNORECASE)
            end += possessive.end() if possessive else 0
            query = f"{query[:start]} {query[end:]}"
    return " ".join(query.split())


# function words, and the small talk of a conversation, say nothing of what a record is about
_SMALL_TALK = (
    "yeah yes oh wow really thanks thank great good glad got get like know think lot much going gonna well "
    "sure way one things thing something been being totally definitely awesome amazing"
)
_STOPWORDS = FUNCTION_WORDS | frozenset(_SMALL_TALK.split())
_WORD = re.compile(r"[a-z][a-z'’]+")


def _content_words(text: str) -> list[str]:
    """The text's content words, each once, in the order met."""
    words = (w.rstrip("'’") for w in _WORD.findall(text.lower()))
    return list(dict.fromkeys(w for w in words if len(w) > 2 and w not in _STOPWORDS))


def feedback_terms(query: str, feedback: list[str], pool: list[str], count: int) -> list[str]:
    """The ``count`` words most distinctive of the ``feedback`` texts (a first round's best records)
    against the ``pool`` (every candidate's text), leaving out the query's own words and function words:
    a word scores the number of feedback texts holding it times ``log((1 + pool size) / (0.5 + its
    pool texts))``; only words in at least two feedback texts count (one text's words are its topic,
    not the query's), and only those at least twice as common among them as in the pool. Ties go to
    the word met first."""
    asked = set(_content_words(query))
    held: dict[str, int] = {}
    for text in feedback:
        for word in _content_words(text):
            if word not in asked:
                held[word] = held.get(word, 0) + 1
    shared = {w: n for w, n in held.items() if n >= 2}
    if not shared:
        return []
    seen: dict[str, int] = dict.fromkeys(shared, 0)
    for text in pool:
        for word in _content_words(text):
            if word in seen:
                seen[word] += 1
    size = len(pool)
    # distinctive: at least twice as common among the feedback texts as in the pool (where the feedback is
    # most of the pool, a small campaign's, no word is)
    enriched = [w for w in shared if shared[w] * size >= 2 * seen[w] * len(feedback)]
    scored = sorted(enriched, key=lambda w: -shared[w] * math.log((1 + size) / (0.5 + seen[w])))
    return scored[:count]


def content_stems(text: str) -> set[str]:
    """The stems (:func:`models.stemming.stem`) of ``text``'s content words: function words and small
    talk left out."""
    return {stem(w) for w in _content_words(text)}
