"""Memories that form themselves: at a scene's end, what each character present witnessed or was told,
and a summary of the scene.

A :class:`SceneMemoryFormer` reads an ended scene (its turns, who was present, who else the world
knows) and drafts a scene summary and observer-scoped :class:`~schemas.story.Memory` records, every
one anchored at the scene's end turn, so a memory is recalled only on the lineage where the scene
happened. :mod:`story.scene_end` runs a former when a scene ends and writes the drafts, all in one
transaction that also marks the scene's end finished, then indexes them for recall; it writes nothing
that is already there, so forming a scene twice adds nothing.

Two formers: :class:`ExtractiveFormer` here (deterministic, no model: what runs without an LLM, and
what tests pin down), and ``narrator.formation.LLMFormer`` (structured extraction of claims,
memories and emotions, and an abstractive summary), which falls back to this one when its model
fails.

How the extractive former reads a scene:

- **Summary**: centroid-based extractive summarisation (Radev et al., 2004). Each sentence of the
  scene is a TF-IDF vector over the scene's own sentences; its score is its cosine similarity to the
  scene's centroid (the mean vector: what the scene is mostly about), damped for sentences of fewer
  than four content words (a "Yes." says nothing alone). The best sentences are kept in their order
  in the scene, up to ``summary_sentences`` and ``summary_chars``; the canon outcomes follow.
- **A memory per character present**: the scene's most central sentence (what everyone there
  witnessed), then the best by the same scores with a bonus for the sentences the character speaks
  or is named in: the scene from their side.
- **Claims**: what someone said in quotes (``"...," Brenna says``), as ``Name: ...``, reported
  (``Brenna told us that ...``) or in a dialogue turn becomes a CLAIM memory of each character it
  was said to: the one addressed by name, else everyone present but the speaker. A claim is what the
  observer was told, which may be false; questions are not claims.
- No emotions: telling them needs a model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from schemas.story import InputMode, Memory, Scene, SubjectiveKind, Turn
from story.recall import speaker_name
from story.words import FUNCTION_WORDS


@dataclass(frozen=True, slots=True)
class NamedEntity:
    """An entity as a reader of the scene knows it: by name and aliases."""

    entity_id: str
    name: str
    kind: str = "character"
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the entity goes by in text; a character also by its first name."""
        names = [self.name, *self.aliases]
        first = self.name.split()[0] if " " in self.name else ""
        if self.kind == "character" and len(first) > 2 and first.lower() not in _STOP:
            names.append(first)
        return tuple(dict.fromkeys(n.strip() for n in names if n and n.strip()))


@dataclass(frozen=True, slots=True)
class FormedScene:
    """What a former drafted for one scene: its summary and the memories of those present."""

    summary: str | None
    memories: list[Memory] = field(default_factory=list)
    former: str = "extractive"
    notes: list[str] = field(default_factory=list)


class SceneMemoryFormer(Protocol):
    """Drafts a scene's summary and the memories of the characters present, at its end."""

    def form(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        present: Sequence[NamedEntity],
        *,
        entities: Sequence[NamedEntity] = (),
    ) -> FormedScene:
        """The drafts for ``scene``.

        Args:
            scene: the ended scene (``end_turn_id`` set: every memory is anchored there).
            turns: the scene's turns on the end turn's line, oldest first.
            present: the characters present; only they get memories.
            entities: every entity of the world at the end turn (to name who or what a memory is about).
        """
        ...


# -- sentences and their scores -------------------------------------------------------------------

_STOP = FUNCTION_WORDS  # words that say nothing of what a sentence is about
_WORD = re.compile(r"[a-z0-9][a-z0-9'’-]*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"”’'])\s+|\s*\n+\s*")
_SHORT = 4  # content words under which a sentence's score is damped


@dataclass(frozen=True, slots=True)
class Line:
    """A sentence of the scene, and who says it (None: the narration)."""

    index: int
    turn_index: int
    text: str
    speaker: str | None
    speaker_id: str | None

    def render(self) -> str:
        """The sentence as a summary shows it: the player's or character's words with their name."""
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (at ., ! or ? before a space, and at line breaks)."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text or "") if s and s.strip()]


@lru_cache(maxsize=65536)  # a scene repeats its words; a cached word costs a dict look-up, not five string tests
def stem(word: str) -> str:
    """A plural or possessive folded onto its word ("caravans", "caravan's" → "caravan"): just enough
    for a scene's sentences to share their words."""
    word = word.removesuffix("'s").removesuffix("’s")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def content_words(text: str) -> list[str]:
    """The words of ``text`` that say what it is about: lower-cased, stemmed, function words out."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]


def centrality(texts: Sequence[str], anchors: Sequence[str] = ()) -> list[float]:
    """Each text's cosine similarity to the TF-IDF centroid of all of them (0 for an empty text).

    ``anchors`` (a scene's title and canon outcomes: what the scene established) are not scored but
    weigh as much in the centroid as all the texts together, so that the sentences that say what
    became of the scene outrank those that merely repeat its names. A question, which asks rather
    than tells, scores half.
    """
    bags = [Counter(content_words(t)) for t in texts]
    anchor_bags = [Counter(content_words(t)) for t in anchors]
    df = Counter(w for bag in [*bags, *anchor_bags] for w in bag)
    n = len(texts) + len(anchors)
    idf = {w: math.log((1 + n) / (1 + d)) + 1.0 for w, d in df.items()}
    vectors = [{w: c * idf[w] for w, c in bag.items()} for bag in bags]
    centroid = _unit(vectors)
    if anchor_bags:
        anchored = _unit([{w: c * idf[w] for w, c in bag.items()} for bag in anchor_bags])
        centroid = {w: centroid.get(w, 0.0) + anchored.get(w, 0.0) for w in centroid.keys() | anchored.keys()}
    centroid_norm = math.sqrt(sum(v * v for v in centroid.values())) or 1.0
    scores = []
    for text, vector, bag in zip(texts, vectors, bags, strict=True):
        norm = math.sqrt(sum(v * v for v in vector.values()))
        if not norm:
            scores.append(0.0)
            continue
        cosine = sum(v * centroid.get(w, 0.0) for w, v in vector.items()) / (norm * centroid_norm)
        damping = min(1.0, sum(bag.values()) / _SHORT) * (0.5 if text.rstrip("\"”’' ").endswith("?") else 1.0)
        scores.append(cosine * damping)
    return scores


def _unit(vectors: Sequence[dict[str, float]]) -> dict[str, float]:
    """The sum of ``vectors``, scaled to length 1 (empty when they are)."""
    total: Counter[str] = Counter()
    for vector in vectors:
        total.update(vector)
    norm = math.sqrt(sum(v * v for v in total.values()))
    return {w: v / norm for w, v in total.items()} if norm else {}


def pick(
    lines: Sequence[Line], scores: Sequence[float], *, most: int, chars: int, first: int | None = None
) -> list[Line]:
    """The best-scored lines, at most ``most`` and about ``chars`` characters, in scene order
    (``first``: the index of a line to take before the others)."""
    chosen: list[Line] = []
    used = 0
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if first is not None:
        order = [first, *(i for i in order if i != first)]
    for i in order:
        if len(chosen) >= most or scores[i] <= 0:
            break
        size = len(lines[i].render()) + 1
        if chosen and used + size > chars:
            continue
        chosen.append(lines[i])
        used += size
    return sorted(chosen, key=lambda line: line.index)


def clip(text: str, chars: int) -> str:
    """``text`` cut at a word boundary to at most ``chars`` characters (with an ellipsis when cut)."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    return text[: chars - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


# -- who said what to whom ------------------------------------------------------------------------

_VERBS = (
    "says|said|tells|told|warns|warned|explains|explained|claims|claimed|insists|insisted|reports|reported|"
    "mentions|mentioned|admits|admitted|swears|swore|whispers|whispered|replies|replied|answers|answered|"
    "adds|added|shouts|shouted|mutters|muttered|confides|confided|reveals|revealed"
)
_GENERIC_WHO = r"[Tt]he\s+(?:old\s+|young\s+)?[a-z]+"
_PARTY = {"us", "you", "them", "him", "her", "everyone", "the party", "the group", "all of us"}
_QUOTE = re.compile(r"[\"“](?P<what>[^\"“”]{3,}?)[\"”]")


@dataclass(frozen=True, slots=True)
class Said:
    """One thing someone said in the scene: to one character (``to``), or to everyone present (None)."""

    who: str
    who_id: str | None
    what: str
    to: str | None
    reported: bool


class Cast:
    """The world's names as patterns: who is named in a sentence, and who says what in it."""

    def __init__(self, entities: Iterable[NamedEntity]) -> None:
        self.entities = {e.entity_id: e for e in entities}
        self.by_name: dict[str, str] = {}
        for entity in self.entities.values():
            for name in entity.names:
                self.by_name.setdefault(name.lower(), entity.entity_id)
        names = sorted(self.by_name, key=len, reverse=True)
        alternation = "|".join(re.escape(n) for n in names)
        self._named = re.compile(rf"(?<![\w'])(?:{alternation})(?![\w'])", re.IGNORECASE) if names else None
        anyone = rf"{alternation}|{_GENERIC_WHO}" if names else _GENERIC_WHO
        who = rf"(?P<who>{anyone})"
        party = r"all of us|us|you|them|him|her|me|everyone|the party|the group"
        to = rf"(?P<to>{party}|{alternation})" if names else rf"(?P<to>{party})"
        self._before_quote = re.compile(
            rf"{who}\b[^.!?\"“”]{{0,40}}?\b(?:{_VERBS})\b[^\"“”.!?]{{0,30}}$", re.IGNORECASE
        )
        self._after_quote = re.compile(
            rf"^[\s,]*(?:{who}\s+(?:\w+ly\s+)?(?:{_VERBS})\b|(?:{_VERBS})\s+(?P<who_after>{anyone})\b)", re.IGNORECASE
        )
        self._reported = re.compile(
            rf"(?:^|[\s,;])(?:{who})\s+(?:\w+ly\s+)?(?:{_VERBS})\s+(?:{to}\s+)?(?:that\s+)?(?P<what>[^\"“”]+)$",
            re.IGNORECASE,
        )
        self._colon = re.compile(rf"^(?:{who})\s*:\s*(?P<what>.+)$", re.IGNORECASE)

    def named(self, text: str) -> list[str]:
        """The ids of the entities ``text`` names, in order of first mention."""
        if self._named is None:
            return []
        found = (self.by_name.get(m.group(0).lower()) for m in self._named.finditer(text))
        return list(dict.fromkeys(i for i in found if i))

    def _who(self, name: str) -> tuple[str, str | None]:
        entity_id = self.by_name.get(name.lower())
        shown = self.entities[entity_id].name if entity_id else name[0].upper() + name[1:]
        return shown, entity_id

    def addressee(self, to: str | None, what: str, speaker_of_line: str | None) -> str | None:
        """Who a line is said to: a character named as addressee, the line's speaker ("me"), or all (None)."""
        if to:
            lowered = to.lower()
            if lowered == "me":
                return speaker_of_line
            if lowered not in _PARTY:
                return self.by_name.get(lowered)
            return None
        vocative = re.match(r"^\s*([A-Z][\w'-]+),\s", what) or re.search(r",\s*([A-Z][\w'-]+)[.!]?$", what)
        return self.by_name.get(vocative.group(1).lower()) if vocative else None

    def quoted(self, text: str, speaker_id: str | None, speaker: str | None) -> list[Said]:
        """Quoted speech in ``text``, attributed by a speech verb around the quote (else to the text's speaker)."""
        said: list[Said] = []
        for match in _QUOTE.finditer(text):
            what = match.group("what").strip().rstrip(",")
            before = re.split(r"[.!?][\"”]?\s+", text[: match.start()])[-1]
            after = text[match.end() : match.end() + 60]
            attributed = self._before_quote.search(before) or self._after_quote.search(after)
            if attributed:
                who, who_id = self._who(attributed.group("who") or attributed.group("who_after"))
            elif speaker is not None:
                who, who_id = speaker, speaker_id
            else:
                continue
            said.append(Said(who, who_id, what, self.addressee(None, what, speaker_id), reported=False))
        return said

    def reported(self, sentence: str, speaker_id: str | None, subject: str | None = None) -> Said | None:
        """Reported speech in one sentence without quotes: "Brenna told us (that) the caravan ...".

        ``subject`` (an entity id: whom the sentences before were about) is who a leading "She" or
        "He" is.
        """
        if _QUOTE.search(sentence):
            return None
        pronoun = re.match(r"^(?:she|he)\b", sentence, re.IGNORECASE)
        if pronoun and subject in self.entities:
            sentence = self.entities[subject].name + sentence[pronoun.end() :]
        match = self._colon.match(sentence)
        if match:
            who, who_id = self._who(match.group("who"))
            what = match.group("what").strip()
            return Said(who, who_id, what, self.addressee(None, what, speaker_id), reported=False)
        match = self._reported.search(sentence)
        if match is None:
            return None
        who, who_id = self._who(match.group("who"))
        what = match.group("what").strip()
        return Said(who, who_id, what, self.addressee(match.group("to"), what, speaker_id), reported=True)


def is_claim(what: str) -> bool:
    """Whether a line states something: three content words or more, not a question, not "nothing"."""
    what = what.strip().strip("\"“”'")
    if what.endswith("?") or what.lower().startswith(("nothing", "no more")):
        return False
    return len(_WORD.findall(what.lower())) >= 3


# -- the extractive former -----------------------------------------------------------------------


class ExtractiveFormer:
    """A deterministic former, no model: extractive summary, a memory per character present, and claims.

    Args:
        summary_sentences: most sentences in the scene summary.
        summary_chars: about how long the summary's sentences may be (the outcomes come on top).
        memory_sentences: most sentences in a character's memory of the scene.
        memory_chars: about how long that memory may be.
        involvement_bonus: added to the score of a sentence the character speaks or is named in.
        max_claims: most claims one character keeps from one scene (the best-scored ones).
    """

    name = "extractive"

    def __init__(
        self,
        *,
        summary_sentences: int = 5,
        summary_chars: int = 700,
        memory_sentences: int = 3,
        memory_chars: int = 450,
        involvement_bonus: float = 0.25,
        max_claims: int = 12,
    ) -> None:
        if min(summary_sentences, summary_chars, memory_sentences, memory_chars, max_claims) < 1:
            raise ValueError("the extractive former's sizes must be at least 1")
        self.summary_sentences = summary_sentences
        self.summary_chars = summary_chars
        self.memory_sentences = memory_sentences
        self.memory_chars = memory_chars
        self.involvement_bonus = involvement_bonus
        self.max_claims = max_claims

    def form(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        present: Sequence[NamedEntity],
        *,
        entities: Sequence[NamedEntity] = (),
    ) -> FormedScene:
        if scene.end_turn_id is None:
            return FormedScene(summary=None, former=self.name, notes=["the scene has no end turn"])
        cast = Cast([*entities, *(p for p in present if p.entity_id not in {e.entity_id for e in entities})])
        lines = self.lines(turns, cast)
        if not lines:
            return FormedScene(summary=None, former=self.name, notes=["the scene has no words"])
        scores = centrality([line.text for line in lines], [*filter(None, [scene.title]), *scene.canonical_outcomes])
        outcomes = [self._named_ids(o, cast) for o in scene.canonical_outcomes]
        summary = self.summary(scene, lines, scores, outcomes)
        memories: list[Memory] = []
        for character in present:
            memories.append(self.scene_memory(scene, character, lines, scores, outcomes, cast))
        memories.extend(self.claims(scene, turns, lines, scores, present, cast))
        return FormedScene(summary=summary, memories=memories, former=self.name)

    # -- reading the scene --------------------------------------------------------------------------

    @staticmethod
    def lines(turns: Sequence[Turn], cast: Cast) -> list[Line]:
        """Every sentence of the scene in order: each turn's input (with its speaker), then its narration."""
        out: list[Line] = []
        for t, turn in enumerate(turns):
            speaker_id = turn.speaker.entity_id
            speaker = cast.entities[speaker_id].name if speaker_id in cast.entities else speaker_name(turn)
            if turn.input_mode is not InputMode.CONTINUE:
                for sentence in sentences(turn.text):
                    out.append(Line(len(out), t, sentence, speaker, speaker_id))
            for sentence in sentences(turn.narration or ""):
                out.append(Line(len(out), t, sentence, None, None))
        return out

    @staticmethod
    def _named_ids(text: str, cast: Cast) -> str:
        """An outcome with the entity ids in it replaced by their names (the gate writes facts with ids)."""
        return re.sub(
            r"\b(?:ent|entity)_[\w-]+",
            lambda m: cast.entities[m.group(0)].name if m.group(0) in cast.entities else m.group(0),
            text,
        )

    def summary(self, scene: Scene, lines: Sequence[Line], scores: Sequence[float], outcomes: Sequence[str]) -> str:
        chosen = pick(lines, scores, most=self.summary_sentences, chars=self.summary_chars)
        parts = [line.render() for line in chosen] or [lines[0].render()]
        text = " ".join(parts)
        if scene.title:
            text = f"{scene.title}: {text}"
        if outcomes:
            text += " What became true: " + "; ".join(outcomes) + "."
        return text

    def scene_memory(
        self,
        scene: Scene,
        character: NamedEntity,
        lines: Sequence[Line],
        scores: Sequence[float],
        outcomes: Sequence[str],
        cast: Cast,
    ) -> Memory:
        """What ``character`` remembers of the scene: its central sentences, their own part first."""
        involved = [
            line.speaker_id == character.entity_id or character.entity_id in cast.named(line.text) for line in lines
        ]
        mine = [s + (self.involvement_bonus if inv else 0.0) for s, inv in zip(scores, involved, strict=True)]
        # the scene's most central sentence first (what everyone there witnessed), then their own part
        central = max(range(len(lines)), key=lambda i: (scores[i], -i))
        chosen = pick(lines, mine, most=self.memory_sentences, chars=self.memory_chars, first=central) or [lines[0]]
        where = f"the scene {scene.title!r}" if scene.title else "the scene"
        text = f"{character.name} remembers {where}: " + " ".join(line.render() for line in chosen)
        theirs = [o for o in outcomes if character.entity_id in cast.named(o)]
        if theirs:
            text += " Afterwards: " + "; ".join(theirs) + "."
        about = [i for line in chosen for i in [line.speaker_id, *cast.named(line.text)] if i]
        took_part = any(involved)
        return Memory(
            campaign_id=scene.campaign_id,
            observer_entity_id=character.entity_id,
            kind=SubjectiveKind.MEMORY,
            text=clip(text, self.memory_chars + 200),
            subject_entity_ids=_others(about, character.entity_id),
            anchor_turn_id=scene.end_turn_id or "",
            salience=round(min(1.0, 0.5 + (0.2 if took_part else 0.0) + (0.1 if outcomes else 0.0)), 3),
        )

    def claims(
        self,
        scene: Scene,
        turns: Sequence[Turn],
        lines: Sequence[Line],
        scores: Sequence[float],
        present: Sequence[NamedEntity],
        cast: Cast,
    ) -> list[Memory]:
        """A CLAIM memory per character for each thing said to them (by someone else) in the scene."""
        if not present:  # nobody to remember a claim (an imported transcript's sessions): no need to find them
            return []
        said = self._said(turns, lines, cast)
        by_turn_score: dict[int, float] = {}
        for line, score in zip(lines, scores, strict=True):
            by_turn_score[line.turn_index] = max(by_turn_score.get(line.turn_index, 0.0), score)
        out: list[Memory] = []
        for character in present:
            mine: list[tuple[float, int, Memory]] = []
            seen: set[str] = set()
            for order, (turn_index, item) in enumerate(said):
                if item.who_id == character.entity_id or (item.to is not None and item.to != character.entity_id):
                    continue
                what = item.what.strip().strip('"“”').strip()
                text = (
                    f"{item.who} told {character.name} that {what}"
                    if item.reported
                    else f'{item.who} told {character.name}: "{what}"'
                )
                text = clip(text, 600)
                if text in seen:
                    continue
                seen.add(text)
                about = _others([*([item.who_id] if item.who_id else []), *cast.named(what)], character.entity_id)
                salience = 0.7 if item.to == character.entity_id else 0.6
                memory = Memory(
                    campaign_id=scene.campaign_id,
                    observer_entity_id=character.entity_id,
                    kind=SubjectiveKind.CLAIM,
                    text=text,
                    subject_entity_ids=about,
                    anchor_turn_id=scene.end_turn_id or "",
                    salience=salience,
                )
                mine.append((by_turn_score.get(turn_index, 0.0) + salience, order, memory))
            best = sorted(mine, key=lambda m: (-m[0], m[1]))[: self.max_claims]
            out.extend(m for _, _, m in sorted(best, key=lambda m: m[1]))
        return out

    @staticmethod
    def _said(turns: Sequence[Turn], lines: Sequence[Line], cast: Cast) -> list[tuple[int, Said]]:
        """Everything said in the scene, with the index of its turn, in scene order."""
        said: list[tuple[int, Said]] = []
        for t, turn in enumerate(turns):
            speaker_id = turn.speaker.entity_id
            speaker = cast.entities[speaker_id].name if speaker_id in cast.entities else None
            if turn.input_mode is InputMode.DIALOGUE and speaker_id and speaker and not _QUOTE.search(turn.text):
                what = turn.text.strip()
                said.append((t, Said(speaker, speaker_id, what, cast.addressee(None, what, speaker_id), False)))
            elif turn.input_mode is not InputMode.CONTINUE:
                said.extend((t, s) for s in cast.quoted(turn.text, speaker_id, speaker))
            said.extend((t, s) for s in cast.quoted(turn.narration or "", None, None))
        subject: str | None = None  # whom the narration is about, for a "She says ..."
        for i, line in enumerate(lines):
            if i and lines[i - 1].turn_index != line.turn_index:
                subject = None
            if (item := cast.reported(line.text, line.speaker_id, subject)) is not None:
                said.append((line.turn_index, item))
            if line.speaker_id is None and (named := cast.named(line.text)):
                subject = named[0]
        said.sort(key=lambda pair: pair[0])  # stable: within a turn, quotes before reported speech
        return [(t, s) for t, s in said if is_claim(s.what)]


def _others(ids: Iterable[str], observer: str) -> list[str]:
    return [i for i in dict.fromkeys(ids) if i != observer]
