"""The deterministic, model-free :class:`RuleConceptExtractor`.

Its cue patterns (headings, glossary lines, bold terms, definitions, abbreviations, capitalised
names), their salience weights, the per-chunk scan and the document-level passes (accepted
capitalised words, redirects, the mention index and count, final names).
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from jobs.concepts.collect import relate_concepts
from jobs.concepts.names import (
    _ACRONYM_RE,
    _COMMON_WORDS,
    _CONNECTORS,
    _DEFINITION_KINDS,
    _SPACE_RE,
    _STOP_START,
    _clean_candidate,
    _dedupe_aliases,
    _guess_kind,
    _pick_name,
    _plural_word,
    _strip_markup,
    concept_display_name,
)
from jobs.concepts.results import ChunkConcepts, ConceptMention, ConceptRelation, _check_bold, _mention_order
from jobs.document import TextChunk
from schemas.knowledge import ConceptKind, normalize_name

# Salience weights of the cues; a chunk's score is 1 - exp(-(sum of cue weights + log1p(mentions)) / 3).
_W_HEADING = 3.0  # the chunk's own section heading
_W_PARENT_HEADING = 0.75  # an enclosing section's heading
_W_HEADING_LINE = 2.0
_W_BOLD = 2.5
_W_GLOSSARY = 2.5
_W_DEFINITION = 2.0
_W_CALLED = 2.0
_W_ACRONYM = 2.0
_W_CAPITALIZED = 1.0
_SCORE_SCALE = 3.0

_TAG_RE = re.compile(r"<[^<>\n]{0,300}>")
_LINK_RE = re.compile(r"\[([^\[\]\n]{0,200})\]\([^()\s]{0,500}\)")
_PAGE_LINE_RE = re.compile(
    r"^[ \t]*(?:(?:page|p\.)[ \t]*\d{1,4}|[-–—]?[ \t]*\d{1,4}[ \t]*[-–—]?|\d{1,4}[ \t]*[|•·][^\n]{0,60}"
    r"|[^\n]{0,60}[|•·][ \t]*\d{1,4})[ \t]*$",
    re.M | re.I,
)
_MD_HEADING_RE = re.compile(r"^[ \t]*#{1,6}[ \t]*>?[ \t]*([^\n]{1,120}?)[ \t#]*$", re.M)
_TITLE_LINE_RE = re.compile(
    r"^[ \t]*([A-Z][\w'’-]*(?:[ \t]+(?:[A-Z][\w'’-]*|of|the|and|a|an|or|with|vs\.?|&)){0,5})[ \t]*$",
    re.M,
)
# "Term: definition" / "Term — definition" at a line start, the term in Title Case
_GLOSSARY_RE = re.compile(
    r"^[ \t]*(?:[-•][ \t]+)?([A-Z][\w'’-]*(?:[ \t]+(?:[A-Z][\w'’-]*|of|the|an?|and|or)){0,3})"
    r"[ \t]*(?:\([^()\n]{0,40}\))?[ \t]*(?::|[ \t]?[—–][ \t]?|[ \t]-[ \t])[ \t]*\S",
    re.M,
)
# "<Subject> is a <noun>": the regex finds the verb and article; the subject is read backwards to the
# sentence start in Python (a regex that starts at every sentence is several times slower)
_DEFINITION_RE = re.compile(r"[ \t](?:is|are)[ \t]+(?:an?|the)[ \t]+([a-z]+)(?:[ \t]+([a-z]+))?")
_SENTENCE_BREAK_RE = re.compile(r"[.!?:;\n]")
_CALLED_RE = re.compile(
    r"\b(?:called|known as|referred to as|termed|dubbed)[ \t]+(?:(?:an?|the)[ \t]+)?"
    r"(?:[“\"']([^”\"'\n]{2,40})[”\"']"
    r"|([A-Z][\w'’-]*(?:[ \t]+[A-Z][\w'’-]*){0,3})"
    r"|([a-z][\w'’-]*(?:[ \t]+[a-z][\w'’-]*)?)"
    r"(?=[ \t]*(?:[.,;:!?)\n]|$)|[ \t]+(?:and|or|which|that|when|because|for|in|to|if|from)\b))"
)
# "(GM)": the long form is looked for in the words before it (a lookbehind regex would be slow)
_ABBREVIATION_RE = re.compile(r"\(([A-Z]{2,5})s?\)")
_CLAUSE_BREAK_RE = re.compile(r"[.!?;:,\n—–()\[\]]")
_CAP_RUN_RE = re.compile(
    r"\b[A-Z][a-z][\w'’-]*(?:(?:[ \t]+(?:of|the|of[ \t]+the|de|du|la|le|von|van|der))?[ \t]+[A-Z][a-z][\w'’-]*)+"
)
# a capitalised word after a lowercase letter (or , ;) and not followed by another capital; the word
# before is checked to be lowercase in Python ("Fate Condensed" must not yield "Condensed")
_CAP_WORD_RE = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}[\w'’-]*\b(?![ \t]+(?:of[ \t]+)?[A-Z])")
_CALLED_CUES = ("called", "known as", "referred to as", "termed", "dubbed")
# lowercase words ending in s: a capitalised name ending in s ("Fred Hicks") is only made singular
# when the document also writes that word in lowercase ("fate points")
_LOWER_PLURAL_RE = re.compile(r"\b[a-z][a-z'’-]*s\b")
_TOKEN_RE = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_HEADING_SPLIT_RE = re.compile(r"[ \t]*(?:,|;|:|&|\(|\)|\band\b|\bor\b|/|[ \t][—–-][ \t])[ \t]*", re.I)
_HEADING_NUMBER_RE = re.compile(
    r"^[ \t]*(?:(?i:chapter|part|section|appendix|book|vol(?:ume)?)\.?[ \t]+\w+[ \t]*[:.\-–—]?[ \t]*"
    r"|\d+(?:\.\d+)*[.:)\-–—]?[ \t]+|[IVXL]+[.:)][ \t]+)"
)


@dataclass(slots=True)
class _Hit:
    """What one chunk's cues say about one concept key."""

    weights: dict[str, float] = field(default_factory=dict)  # cue -> strongest weight
    count: int = 0

    def add(self, cue: str, weight: float) -> None:
        if weight > self.weights.get(cue, -1.0):
            self.weights[cue] = weight


@dataclass(slots=True)
class _Entry:
    """What the whole document says about one concept key."""

    surfaces: Counter[str] = field(default_factory=Counter)
    cues: set[str] = field(default_factory=set)
    kind_votes: Counter[ConceptKind] = field(default_factory=Counter)
    aliases: set[str] = field(default_factory=set)
    lowercase_ok: bool = False  # look for it in lowercase text too (not for capitalised-only words)


class RuleConceptExtractor:
    """Deterministic, model-free concept extraction for rulebooks and setting books.

    Args:
        max_concepts_per_chunk: most concepts kept per chunk (by salience).
        min_capitalized_count: a single capitalised word in mid-sentence ("roll Athletics") becomes
            a concept when the document capitalises it at least this often.
        glossary: known terms (say, the library's existing concepts) to look for in every chunk.
        relation_concepts_per_chunk: concepts per chunk that take part in relations.
        min_relation_chunks: a relation needs this many chunks in common.
    """

    def __init__(
        self,
        *,
        max_concepts_per_chunk: int = 20,
        min_capitalized_count: int = 3,
        glossary: Iterable[str] = (),
        relation_concepts_per_chunk: int = 12,
        min_relation_chunks: int = 1,
    ) -> None:
        if max_concepts_per_chunk < 1:
            raise ValueError(f"max_concepts_per_chunk must be at least 1, got {max_concepts_per_chunk}")
        self.max_concepts_per_chunk = max_concepts_per_chunk
        self.min_capitalized_count = min_capitalized_count
        self.glossary = tuple(sorted({g.strip() for g in glossary if g.strip()}))
        self.relation_concepts_per_chunk = relation_concepts_per_chunk
        self.min_relation_chunks = min_relation_chunks

    # -- protocol ------------------------------------------------------------------------------------

    def extract(
        self,
        chunks: Sequence[TextChunk],
        *,
        bold_terms_by_chunk: Sequence[Sequence[str]] | None = None,
    ) -> list[ChunkConcepts]:
        """Return the concepts each chunk mentions (see :meth:`ConceptExtractor.extract`).

        Raises:
            ValueError: if ``bold_terms_by_chunk`` is not one entry per chunk.
        """
        _check_bold(chunks, bold_terms_by_chunk)
        if not chunks:
            return []
        entries: dict[str, _Entry] = defaultdict(_Entry)
        texts = self._prepare_texts(chunks)
        plural_words: set[str] = set()
        for text in texts:
            plural_words.update(_LOWER_PLURAL_RE.findall(text))
        hits_by_chunk: list[dict[str, _Hit]] = []
        caps_by_chunk: list[Counter[str]] = []
        cap_totals: Counter[str] = Counter()
        for i, (chunk, text) in enumerate(zip(chunks, texts, strict=True)):
            bold = bold_terms_by_chunk[i] if bold_terms_by_chunk is not None else ()
            hits, caps = self._scan(chunk, text, bold, entries, plural_words)
            hits_by_chunk.append(hits)
            caps_by_chunk.append(caps)
            cap_totals.update(caps)
        for term in self.glossary:
            self._note(entries, term, "glossary", lowercase_ok=True)
        accepted_caps = self._accept_capitalized(cap_totals, entries, plural_words)
        redirect = self._redirects(entries)
        index, first_tokens = self._mention_index(entries, redirect)
        for text, hits, caps in zip(texts, hits_by_chunk, caps_by_chunk, strict=True):
            self._count_mentions(text, index, first_tokens, hits, entries)
            for surface, n in caps.items():
                key = accepted_caps.get(surface)
                if key is not None:
                    hit = hits.setdefault(key, _Hit())
                    hit.add("capitalized", _W_CAPITALIZED)
                    if not entries[key].lowercase_ok:
                        hit.count += n
        # names last: the mention pass adds the plural forms it met as aliases
        names = self._finalise_names(entries, redirect)
        return [
            ChunkConcepts(chunk.sequence, self._mentions(hits, redirect, names))
            for chunk, hits in zip(chunks, hits_by_chunk, strict=True)
        ]

    def relate(self, mentions: Sequence[ChunkConcepts]) -> list[ConceptRelation]:
        """RELATED_TO edges between co-mentioned concepts (see :func:`relate_concepts`)."""
        return relate_concepts(
            mentions,
            max_concepts_per_chunk=self.relation_concepts_per_chunk,
            min_chunk_count=self.min_relation_chunks,
        )

    # -- text preparation -------------------------------------------------------------------------

    def _prepare_texts(self, chunks: Sequence[TextChunk]) -> list[str]:
        """Strip markup, page numbers and lines repeated on many chunks (running heads and feet)."""
        texts = []
        for chunk in chunks:
            text = _strip_markup(chunk.text)  # before NFKC, which would turn "™" into "TM"
            if not unicodedata.is_normalized("NFKC", text):
                text = unicodedata.normalize("NFKC", text)  # PDF ligatures ("ﬁ") and odd spaces
            if "&" in text:
                text = html.unescape(text)  # "&amp;", "&trade;" from HTML-ish sources
            if "<" in text:
                text = _TAG_RE.sub(" ", text)
            if "](" in text:
                text = _LINK_RE.sub(r"\1", text)
            text = _PAGE_LINE_RE.sub("", text)
            texts.append(text)
        if len(texts) < 5:
            return texts
        # A short line on a fifth of the chunks (at least 3) is a running head or foot, not content.
        seen: Counter[str] = Counter()
        for text in texts:
            seen.update({_norm_line(line) for line in text.splitlines() if 0 < len(line) <= 80})
        floor = max(3, math.ceil(len(texts) * 0.2))
        repeated = {line for line, n in seen.items() if n >= floor and line}
        if not repeated:
            return texts
        return ["\n".join(line for line in text.splitlines() if _norm_line(line) not in repeated) for text in texts]

    # -- per-chunk scan ---------------------------------------------------------------------------

    def _scan(
        self,
        chunk: TextChunk,
        text: str,
        bold: Sequence[str],
        entries: dict[str, _Entry],
        plural_words: set[str],
    ) -> tuple[dict[str, _Hit], Counter[str]]:
        """One chunk's cues (headings, bold, glossary, definitions, names) and its capitalised words."""
        hits: dict[str, _Hit] = {}

        def note(surface: str | None, cue: str, weight: float, kind: ConceptKind | None = None) -> str | None:
            if surface is None:
                return None
            keep = cue == "capitalized" and _keeps_plural(surface, plural_words)
            key = self._note(entries, surface, cue, lowercase_ok=True, kind=kind, keep_plural=keep)
            if key is not None:
                hits.setdefault(key, _Hit()).add(cue, weight)
            return key

        path = chunk.heading_path
        for depth, heading in enumerate(path):
            weight = _W_HEADING if depth == len(path) - 1 else _W_PARENT_HEADING
            for part in _heading_parts(heading, structural=True):
                note(part, "heading", weight)
        for match in _MD_HEADING_RE.finditer(text):
            for part in _heading_parts(match.group(1), structural=True):
                note(part, "heading", _W_HEADING_LINE)
        for match in _TITLE_LINE_RE.finditer(text):
            for part in _heading_parts(match.group(1), structural=False):
                note(part, "heading", _W_HEADING_LINE)
        for term in bold:
            note(_clean_candidate(term), "bold", _W_BOLD)
        for match in _GLOSSARY_RE.finditer(text):
            note(_clean_candidate(match.group(1), max_words=4, strict_first=True), "glossary", _W_GLOSSARY)
        for match in _DEFINITION_RE.finditer(text):
            subject = _definition_subject(text, match.start())
            if subject is not None:
                # "X is a <noun>" / "X is a <adjective> <noun>": the noun may say what kind X is
                kind = _DEFINITION_KINDS.get(match.group(1)) or _DEFINITION_KINDS.get(match.group(2) or "")
                note(_clean_candidate(subject, max_words=3, strict_first=True), "definition", _W_DEFINITION, kind)
        if any(cue in text for cue in _CALLED_CUES):
            for match in _CALLED_RE.finditer(text):
                raw = match.group(1) or match.group(2) or match.group(3)
                note(_clean_candidate(raw, max_words=4), "definition", _W_CALLED)
        if "(" in text:
            for match in _ABBREVIATION_RE.finditer(text):
                before = text[max(0, match.start() - 80) : match.start()]
                self._note_abbreviation(before, match.group(1), entries, hits)
        for match in _CAP_RUN_RE.finditer(text):
            words = match.group(0).split()
            if _at_sentence_start(text, match.start()) and words[0].lower() in _COMMON_WORDS:
                words.pop(0)  # an everyday word capitalised only by its position ("Keep Fate Points…")
            while words and (words[0].lower() in _STOP_START or words[0].lower() in _CONNECTORS):
                words.pop(0)
            if len(words) >= 2:
                note(_clean_candidate(" ".join(words)), "capitalized", _W_CAPITALIZED)
        caps: Counter[str] = Counter()
        for match in _CAP_WORD_RE.finditer(text):
            preceding = text[max(0, match.start() - 40) : match.start()].split()
            if preceding and preceding[-1][:1].islower():
                caps[match.group(0)] += 1
        return hits, caps

    @staticmethod
    def _note(
        entries: dict[str, _Entry],
        surface: str,
        cue: str,
        *,
        lowercase_ok: bool,
        kind: ConceptKind | None = None,
        keep_plural: bool = False,
    ) -> str | None:
        display = " ".join(surface.split()) if keep_plural else concept_display_name(surface)
        key = normalize_name(display)
        if not key:
            return None
        entry = entries[key]
        entry.surfaces[display] += 1
        entry.cues.add(cue)
        entry.lowercase_ok |= lowercase_ok
        if surface != display:
            entry.aliases.add(surface)
        if kind is not None:
            entry.kind_votes[kind] += 1
        return key

    def _note_abbreviation(self, phrase: str, acronym: str, entries: dict[str, _Entry], hits: dict[str, _Hit]) -> None:
        """``Game Master (GM)``: the long form is a concept and the acronym its alias.

        Args:
            phrase: the text just before the parenthesis.
            acronym: the letters inside it.
        """
        words = _CLAUSE_BREAK_RE.split(phrase)[-1].split()  # the long form stays inside its clause
        for size in range(min(len(words), 6), 1, -1):
            tail = words[-size:]
            letters = "".join(p[0] for w in tail if w.lower() not in _CONNECTORS for p in w.split("-") if p)
            if letters.lower() == acronym.lower():
                surface = _clean_candidate(" ".join(tail), max_words=6)
                if surface is None:
                    return
                key = self._note(entries, surface, "acronym", lowercase_ok=True)
                if key is not None:
                    entries[key].aliases.add(acronym)
                    hits.setdefault(key, _Hit()).add("acronym", _W_ACRONYM)
                return

    # -- document-level passes --------------------------------------------------------------------

    def _accept_capitalized(
        self, totals: Counter[str], entries: dict[str, _Entry], plural_words: set[str]
    ) -> dict[str, str]:
        """Capitalised single words seen often enough become concepts; returns surface -> key."""
        accepted: dict[str, str] = {}
        for surface, n in sorted(totals.items()):
            if n < self.min_capitalized_count:
                continue
            cleaned = _clean_candidate(surface, max_words=1)
            if cleaned is None:
                continue
            keep = _keeps_plural(cleaned, plural_words)
            key = self._note(entries, cleaned, "capitalized", lowercase_ok=False, keep_plural=keep)
            if key is not None:
                entries[key].surfaces[cleaned if keep else concept_display_name(cleaned)] += n - 1
                accepted[surface] = key
        return accepted

    @staticmethod
    def _redirects(entries: dict[str, _Entry]) -> dict[str, str]:
        """Keys that are another concept under a second name.

        An acronym of another concept ("npc" → "non-player character"), and a capitalised name kept
        plural that is also known in the singular ("big bads" → "big bad").
        """
        redirect: dict[str, str] = {}
        for key in sorted(entries):
            for alias in sorted(entries[key].aliases):
                if _ACRONYM_RE.fullmatch(alias):
                    short = normalize_name(concept_display_name(alias))
                    if short != key and short in entries and short not in redirect:
                        redirect[short] = key
        for key in sorted(entries):
            single = normalize_name(concept_display_name(key))
            if single != key and single in entries and key not in redirect:
                redirect[key] = redirect.get(single, single)
        for short in list(redirect):
            target, hops = redirect[short], 0
            while target in redirect and hops < 8:  # follow chains ("npcs" → "npc" → long form)
                target, hops = redirect[target], hops + 1
            redirect[short] = target
        for short, long in redirect.items():
            entries[long].aliases.update(entries[short].surfaces)
            entries[long].cues |= entries[short].cues
        return redirect

    @staticmethod
    def _mention_index(entries: dict[str, _Entry], redirect: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
        """Lowercase forms (singular, plural, aliases) → key, and first token → longest form."""
        index: dict[str, str] = {}
        for key in sorted(entries):
            entry = entries[key]
            if not entry.lowercase_ok:
                continue
            target = redirect.get(key, key)
            words = key.split()
            forms = {key, " ".join([*words[:-1], _plural_word(words[-1])])}
            forms.update(normalize_name(a) for a in entry.aliases)
            forms.update(normalize_name(s) for s in entry.surfaces)
            for form in sorted(forms):
                tokens = _TOKEN_RE.findall(form)
                if not tokens:
                    continue
                joined = " ".join(tokens)
                # a form that is itself some concept's key stays with that concept
                if joined not in index or joined == target:
                    index[joined] = target
        first_tokens: dict[str, int] = {}
        for form in index:
            tokens = form.split(" ")
            if len(tokens) > 1:
                first_tokens[tokens[0]] = max(first_tokens.get(tokens[0], 0), len(tokens))
        return index, first_tokens

    @staticmethod
    def _finalise_names(
        entries: dict[str, _Entry], redirect: dict[str, str]
    ) -> dict[str, tuple[str, ConceptKind, tuple[str, ...]]]:
        """Per key: display name, kind and aliases, the same for every chunk of the document."""
        names: dict[str, tuple[str, ConceptKind, tuple[str, ...]]] = {}
        for key, entry in entries.items():
            if key in redirect:
                continue
            name = _pick_name(entry.surfaces)
            kind = _guess_kind(name, entry.kind_votes)
            if kind is ConceptKind.TERM and entry.cues == {"capitalized"}:
                kind = ConceptKind.OTHER  # a proper name nobody defined: a person, a book, a product
            names[key] = (name, kind, tuple(_dedupe_aliases(entry.aliases, key)))
        return names

    @staticmethod
    def _count_mentions(
        text: str,
        index: dict[str, str],
        first_tokens: dict[str, int],
        hits: dict[str, _Hit],
        entries: dict[str, _Entry],
    ) -> None:
        """Count the document's vocabulary in one chunk: greedy longest match over word tokens."""
        tokens = _TOKEN_RE.findall(text.casefold())
        n_tokens = len(tokens)
        i = 0
        while i < n_tokens:
            token = tokens[i]
            step = 1
            key = None
            longest = first_tokens.get(token)
            if longest is not None:  # some multi-word form starts here: try the longest first
                for n in range(min(longest, n_tokens - i), 1, -1):
                    form = " ".join(tokens[i : i + n])
                    key = index.get(form)
                    if key is not None:
                        step = n
                        break
            if key is None:
                form = token
                key = index.get(token)
            if key is not None:
                hit = hits.get(key)
                if hit is None:
                    hit = hits[key] = _Hit()
                hit.count += 1
                hit.weights.setdefault("mention", 0.0)
                if form != key:
                    entries[key].aliases.add(form)  # plural and other forms seen: aliases
            i += step

    def _mentions(
        self,
        hits: dict[str, _Hit],
        redirect: dict[str, str],
        names: dict[str, tuple[str, ConceptKind, tuple[str, ...]]],
    ) -> list[ConceptMention]:
        merged: dict[str, _Hit] = {}
        for key, hit in hits.items():
            target = redirect.get(key, key)
            if target not in names:
                continue
            into = merged.setdefault(target, _Hit())
            into.count += hit.count
            for cue, weight in hit.weights.items():
                into.add(cue, weight)
        mentions = []
        for key, hit in merged.items():
            raw = sum(hit.weights.values()) + math.log1p(hit.count)
            name, kind, aliases = names[key]
            mentions.append(
                ConceptMention(
                    name=name,
                    normalized_name=key,
                    kind=kind,
                    aliases=aliases,
                    score=round(1.0 - math.exp(-raw / _SCORE_SCALE), 4),
                    count=hit.count,
                    evidence=tuple(sorted(hit.weights)),
                )
            )
        mentions.sort(key=_mention_order)
        return mentions[: self.max_concepts_per_chunk]


def _definition_subject(text: str, verb_at: int) -> str | None:
    """The subject of "<Subject> is a …" when it opens its sentence and has at most three words."""
    window = text[max(0, verb_at - 60) : verb_at]
    pieces = _SENTENCE_BREAK_RE.split(window)
    if len(pieces) == 1 and verb_at > 60:
        return None  # no sentence start within reach: a long subject, not a term
    words = pieces[-1].split()
    if not words or not words[0][:1].isupper():  # the sentence starts here, with a capital
        return None
    if words[0] in ("A", "An", "The"):
        words.pop(0)
    if not 1 <= len(words) <= 3:
        return None
    return " ".join(words)


def _keeps_plural(surface: str, plural_words: set[str]) -> bool:
    """Whether a capitalised name keeps a final "s" (a surname) rather than being made singular."""
    last = surface.rsplit(None, 1)[-1]
    return not _ACRONYM_RE.fullmatch(last) and last.lower() not in plural_words


def _norm_line(line: str) -> str:
    return re.sub(r"\d+", "#", _SPACE_RE.sub(" ", line.strip().lower()))


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[max(0, start - 12) : start].rstrip(" \t\"'“‘([-•>")
    return not before or before[-1] in ".!?:;\n"


@lru_cache(maxsize=16384)  # every chunk of a section repeats its heading path
def _heading_parts(heading: str, *, structural: bool) -> tuple[str, ...]:
    """Candidate names in a heading: numbering stripped, split at "and", commas and colons.

    ``"Stress and Consequences"`` → ``["Stress", "Consequences"]``. Headings from the heading path
    (``structural``) that are in all caps are title-cased: they are layout, not shouting.
    """
    text = html.unescape(heading) if "&" in heading else heading
    text = _TAG_RE.sub("", text) if "<" in text else text
    text = _HEADING_NUMBER_RE.sub("", _strip_markup(text)).strip()
    if not text or "?" in text or "!" in text:
        return ()
    if structural and text.isupper() and len(text) > 4:
        text = text.title()
    parts = []
    for piece in _HEADING_SPLIT_RE.split(text):
        cleaned = _clean_candidate(piece, max_words=4)
        if cleaned is not None:
            parts.append(cleaned)
    return tuple(parts)
