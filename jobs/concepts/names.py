"""Concept names: the vocabulary and the normalisation shared by the extractors.

Stop-lists and kind words, cleaning a raw candidate (a heading, a bold term, a run of capitals)
into a name, singular and plural forms (:func:`concept_display_name`), kinds guessed from a
name's words, and the choice of one name and alias set per concept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from schemas.knowledge import ConceptKind, normalize_name


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _phrases(text: str) -> frozenset[str]:
    return frozenset(" ".join(p.split()) for p in text.split(",") if p.strip())


# Words that cannot start a concept name (pronouns, determiners, conjunctions, adverbs…). Sentence
# starts and "If you …" constructions fall out here.
_STOP_START = _words("""
    a an the this that these those some any each every all both either neither no not nor none
    i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
    one's oneself yourself yourselves themselves himself herself itself ourselves
    and or but so yet for if when whenever while once unless until since because although though
    as at by in on to of off out up down over under into onto from with without within about above
    below after before between during through throughout against among around per via than then
    what who whom whose which where why how whatever whoever however
    is are was were be been being am do does did done doing have has had having can could will would
    shall should may might must let lets let's
    also just only even still again here there now never always often sometimes usually ever
    very really quite rather too much many more most less least few several such same other another
    own else instead otherwise therefore thus hence meanwhile finally first second third next last
    lastly maybe perhaps yes okay ok please thank thanks note notes see eg e.g ie i.e etc vs
    one two three four five six seven eight nine ten hundred thousand
    """)
_STOP_END = _words("""
    a an the and or but nor of to in on at by for from with into onto as than then that which who
    what when where why how if while whom whose
    is are was were be been being am do does did have has had can could will would should may might
    must etc vs
    """)
# Inside a name these mark a phrase or clause, not a name ("Success at a Cost", "Aspects Are True").
_INNER_REJECT = _words("""
    and or but nor if when whenever while because although though unless until since than
    to from for in on at by into onto about over under without between through during against
    is are was were be been being am do does did have has had can could will would shall should
    may might must not no that
    what who whom whose which where why how
    i me my we us our you your he him his she her it its they them their
    """)
# Imperatives that open instructions ("Make the Character", "Run scenes"), not names.
_VERB_START = _words("""
    make get take use give go come see find keep put try tell ask show play read write modify start
    begin pick choose decide add remove hate love owe need want know think look happen happens sell
    stop wander run gotta learn describe explain remember consider imagine
    """)
# Connectors allowed inside a capitalised name: "Deck of Fate", "Create an Advantage".
_CONNECTORS = _words("of the a an de du la le von van der")
# Pronouns anywhere in a phrase make it a sentence, not a name ("Define Your Setting").
_PRONOUNS = _words("i me my mine we us our ours you your yours they them their theirs")
# Leading words dropped before judging (articles and possessives in front of a real name).
_LEADING_DROP = _words("the a an your our their his her its my")
# Structural words: "Chapter 3", "Part II", "Table 4", "page XX" are never concepts.
_CHAPTER_WORDS = _words(
    "chapter chapters part section sections page pages table tables figure fig appendix appendices "
    "book volume vol contents index sidebar"
)
# Headings and labels that are front/back matter, not concepts.
_BOILERPLATE = _phrases(
    """
    introduction, credits, credit, contents, index, glossary, appendix, foreword, preface, license,
    licence, legal, acknowledgments, acknowledgements, about, overview, summary, example, examples,
    sidebar, note, notes, copyright, conclusion, afterword, epilogue, prologue, dedication,
    bibliography, references, errata, the end, what's next, quick start, quickstart, how to play,
    table of contents, open game license, system reference document, creative commons
    """
)
# Everyday words that are never concepts on their own (but fine inside a name: "Big Bad").
_COMMON_WORDS = _words("""
    thing things stuff way ways time times people person folks everyone everybody someone somebody
    anyone anybody something anything everything nothing nobody example examples choice choices
    option idea ideas lot lots kind kinds sort sorts type types part parts case cases fact facts
    point-of-view reason reasons answer answers question questions word words name names number numbers
    good bad great better best worse worst new old big small little large high low long short easy hard
    different important possible true false sure able certain whole full real simple special basic
    general common usual normal right left wrong free main major minor final
    use uses used using make makes made making get gets got take takes took give gives gave go goes went
    come comes came say says said know knows knew think thinks thought look looks looked want wants
    need needs try tries tried tell tells told ask asks call calls called keep keeps put puts set sets
    mean means meant find finds found let see seen show shows shown work works read write play plays
    day days year years week weeks hour hours minute minutes moment moments today tomorrow yesterday
    man men woman women child children friend friends group groups side sides end ends start begin
    yes no okay ok hey oh well sir madam mr mrs ms dr
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    english internet web online website email news
    """)
# Last words that make a name a rule / mechanic; checked on the singular, lowercase last word.
_MECHANIC_WORDS = _words("""
    roll check test throw save point bonus penalty modifier action attack defense defence defend damage
    initiative advantage disadvantage stress consequence track box rating level score difficulty dc class
    skill stunt invoke invocation compel refresh ladder shift boost overcome challenge contest conflict
    round turn milestone hit opposition success failure tie spell slot proficiency ability feat
    condition aspect die dice rule mechanic move maneuver manoeuvre reaction approach
    """)
_LOCATION_WORDS = _words("""
    city town village hamlet castle keep fortress citadel tower temple shrine forest wood woods mountain
    mountains hill hills river lake sea ocean bay island isle isles valley vale plain plains desert
    swamp marsh kingdom empire realm province duchy county land lands road street district quarter
    cave caves cavern dungeon ruin ruins palace manor inn tavern harbor harbour port gate pass peak
    coast shore world plane continent
    """)
_ORGANIZATION_WORDS = _words("""
    guild church company council brotherhood sisterhood society clan cult academy league alliance
    legion army navy consortium syndicate cabal circle covenant college university house dynasty
    tribe faction party productions press publishing inc llc ltd corporation
    """)
_CREATURE_WORDS = _words("""
    dragon goblin orc troll ogre giant wolf zombie skeleton vampire ghoul ghost wraith demon devil
    elemental golem beast spider rat bat serpent snake wyrm drake hound kobold gnoll lich undead
    monster creature
    """)
_ITEM_WORDS = _words("""
    sword blade axe bow dagger spear staff wand rod ring amulet necklace cloak boots gauntlet gauntlets
    helm shield armor armour potion scroll tome gem crown orb relic artifact artefact
    """)
_EVENT_WORDS = _words("war battle siege festival rebellion revolution uprising cataclysm coronation")
_HONORIFICS = _words(
    "lord lady king queen prince princess sir dame captain duke duchess baron baroness count countess "
    "emperor empress saint father mother brother sister master mistress doctor professor general"
)
# Nouns after "X is a …" that say what X is.
_DEFINITION_KINDS: dict[str, ConceptKind] = {
    **{w: ConceptKind.MECHANIC for w in _words("roll action rule mechanic bonus penalty modifier check test")},
    **{w: ConceptKind.MECHANIC for w in _words("measure number value score rating track way")},
    **{w: ConceptKind.LOCATION for w in _words("place city town region land kingdom realm country village")},
    **{w: ConceptKind.CHARACTER for w in _words("person man woman wizard king queen hero villain god goddess")},
    **{w: ConceptKind.CREATURE for w in _words("creature monster beast race species animal")},
    **{w: ConceptKind.ORGANIZATION for w in _words("group faction guild order organization organisation")},
    **{w: ConceptKind.ITEM for w in _words("weapon item artifact artefact tool object device")},
    **{w: ConceptKind.EVENT for w in _words("event battle war festival")},
}
_MECHANIC_TERMS = frozenset({"turn order", "high concept", "free invoke", "taken out", "zone"})

# Plurals that simple suffix rules get wrong, and words that only look plural.
_IRREGULAR_SINGULAR = {
    "children": "child",
    "people": "people",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "wolves": "wolf",
    "elves": "elf",
    "dwarves": "dwarf",
    "halves": "half",
    "knives": "knife",
    "lives": "life",
    "thieves": "thief",
    "leaves": "leaf",
    "selves": "self",
    "staves": "staff",
    "heroes": "hero",
    "echoes": "echo",
    "potatoes": "potato",
    "tomatoes": "tomato",
    "vetoes": "veto",
    "criteria": "criterion",
    "phenomena": "phenomenon",
    "dice": "dice",
    "indices": "index",
    "matrices": "matrix",
}
_INVARIANT = _words("""
    series species news lens gas bias atlas chaos ethos kudos pathos status bonus always perhaps various
    across less unless yes this thus was has does its his hers ours yours theirs christmas dice
    mathematics physics athletics tactics ethics politics economics logistics aesthetics acoustics
    """)
_US_PLURALS = _words("bonus status virus campus census chorus nexus apparatus syllabus bus focus")
_GERUND_EXCEPTIONS = _words(
    "evening morning string spring sling sting swing thing nothing something anything everything "
    "ceiling wedding clothing king ring wing"
)

_POSSESSIVE_ENDINGS = ("'s", "’s", "s'", "s’")
_ROMAN_RE = re.compile(r"[IVXL]+")
_ROMAN_VALID_RE = re.compile(r"(?=[IVXL])L?X{0,3}(?:IX|IV|V?I{0,3})")
_ACRONYM_RE = re.compile(r"[A-Z]{2,4}s?")
_HAS_LETTER_RE = re.compile(r"[^\W\d_]")
_STRIP_CHARS = " \t\n\r.,;:!?\"'“”‘’()[]{}<>*_`#|/\\~=+-–—•·…"
_MARKUP_CHARS = (("*", " "), ("_", " "), ("`", " "), ("™", ""), ("®", ""), ("©", ""), ("\u00ad", ""))


def _strip_markup(text: str) -> str:
    """Emphasis markers and trademark signs out (chained replaces: far faster than str.translate)."""
    for char, replacement in _MARKUP_CHARS:
        if char in text:
            text = text.replace(char, replacement)
    return text


_SPACE_RE = re.compile(r"[ \t]+")


@lru_cache(maxsize=65536)
def _singular_word(word: str) -> str:
    """The singular of one word for simple English plurals, keeping the word's case."""
    if _ACRONYM_RE.fullmatch(word) and word.endswith("s"):
        return word[:-1]  # NPCs -> NPC, PCs -> PC
    if len(word) <= 3:
        return word
    lower = word.lower()
    if lower in _IRREGULAR_SINGULAR:
        single = _IRREGULAR_SINGULAR[lower]
        return single.capitalize() if word[0].isupper() else single
    if lower in _INVARIANT or lower.endswith(("ss", "us", "is", "ics", "ous", "'s", "’s")):
        return word
    if not lower.endswith("s"):
        return word
    if lower.endswith("ies"):
        return word[:-3] + ("Y" if word[-3].isupper() else "y") if len(lower) > 4 else word[:-1]
    if lower.endswith("uses") and lower[:-2] in _US_PLURALS:
        return word[:-2]  # bonuses -> bonus
    if lower.endswith(("sses", "xes", "zzes", "shes")):
        return word[:-2]
    if lower.endswith("ches"):
        # matches -> match, beaches -> beach, approaches -> approach; headaches / caches -> ache / cache
        keep_e = lower.endswith("aches") and not lower.endswith(("eaches", "oaches"))
        return word[:-1] if keep_e else word[:-2]
    return word[:-1]


def _plural_word(word: str) -> str:
    """A plural of a lowercase word, for finding plural mentions of a singular concept."""
    if word in _INVARIANT or word.endswith(("ss", "us", "is", "ics", "ous")):
        return word + "es" if word.endswith(("ss", "us")) else word
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("x", "z", "ch", "sh")):
        return word + "es"
    return word + "s"


def concept_display_name(surface: str) -> str:
    """The display name for a surface form: whitespace collapsed, last word made singular.

    ``"Fate  Points"`` → ``"Fate Point"``; ``"Stress"`` → ``"Stress"``. Its
    ``normalize_name`` is the concept's key.
    """
    words = surface.split()
    if not words:
        return ""
    last = words[-1]
    if "-" in last:  # "non-player characters": only the last part of a hyphenated word is plural
        head, _, tail = last.rpartition("-")
        words[-1] = f"{head}-{_singular_word(tail)}"
    else:
        words[-1] = _singular_word(last)
    return " ".join(words)


def _is_roman(word: str) -> bool:
    return bool(_ROMAN_RE.fullmatch(word) and _ROMAN_VALID_RE.fullmatch(word))


@lru_cache(maxsize=65536)  # the same headings and names recur in chunk after chunk
def _clean_candidate(raw: str, *, max_words: int = 5, strict_first: bool = False) -> str | None:
    """Turn a raw candidate (a heading, a bold term, a run of capitals) into a name, or None if junk.

    Args:
        raw: the text as found.
        max_words: longest name accepted.
        strict_first: also refuse a first word that is an everyday word (for sentence subjects,
            where "Good news is…" must not make "good news" a concept).

    Returns:
        The cleaned surface form (original case, plural kept), or None.
    """
    if "?" in raw or "!" in raw:
        return None  # questions and exclamations are sentences ("Who Are You?")
    # "Repercussion (leave them)": the parenthesis qualifies the name, it is not part of it
    text = _strip_markup(raw.split("(", 1)[0]).strip(_STRIP_CHARS)
    if not text or len(text) > 80:
        return None
    words = text.split()
    while words and words[0].lower() in _LEADING_DROP:
        words.pop(0)
    if words and words[-1].lower().endswith(("'s", "’s")):
        words[-1] = words[-1][:-2]
    words = [w.strip(_STRIP_CHARS) for w in words]
    words = [w for w in words if w]
    if not words or len(words) > max_words:
        return None
    lowers = [w.lower() for w in words]
    first, last = lowers[0], lowers[-1]
    if first in _STOP_START or last in _STOP_END or first in _CHAPTER_WORDS or first in _BOILERPLATE:
        return None
    if first in _VERB_START or (strict_first and first in _COMMON_WORDS):
        return None
    content = [w for w in words if w.lower() not in _CONNECTORS]
    if len(content) >= 3 and content[0][:1].isupper() and all(w[:1].islower() for w in content[1:]):
        return None  # "Determine the costs of failure": sentence case over three words is a phrase
    if any(w.endswith(_POSSESSIVE_ENDINGS) for w in lowers[:-1]):
        return None  # "the GM's character", "the PCs' lives": a phrase about a name, not a name
    if any(w in _PRONOUNS for w in lowers) or any(w in _INNER_REJECT for w in lowers[1:-1]):
        return None
    if any(not _HAS_LETTER_RE.search(w) for w in words):
        return None  # "[3]", "+2", "page 12"
    if all(_is_roman(w) for w in words):
        return None
    # all caps: acronyms of up to four letters pass ("GM", "NPCs"); shouting does not
    shouting = len(words) > 1 or not _ACRONYM_RE.fullmatch(words[0])
    if shouting and all(w.isupper() for w in words if _HAS_LETTER_RE.search(w)):
        return None
    if first.endswith("ing") and len(first) > 4 and first not in _GERUND_EXCEPTIONS:
        return None  # "Getting Started", "Invoking Aspects": section titles about doing something
    joined = " ".join(lowers)
    if joined in _BOILERPLATE or all(w in _COMMON_WORDS or w in _STOP_START for w in lowers):
        return None
    if len(words) == 1:
        single = _singular_word(lowers[0])
        if len(words[0]) < 2 or single in _COMMON_WORDS or single in _BOILERPLATE:
            return None
        if len(words[0]) < 3 and not words[0].isupper():
            return None
    return " ".join(words)


def _guess_kind(name: str, votes: Counter[ConceptKind]) -> ConceptKind:
    """A cheap kind from the name's words, else from how the text defined it, else TERM."""
    words = name.lower().split()
    last = words[-1]
    key = " ".join(words)
    if last in _MECHANIC_WORDS or key in _MECHANIC_TERMS:
        return ConceptKind.MECHANIC
    if words[0] in _HONORIFICS and len(words) > 1:
        return ConceptKind.CHARACTER
    if last in _LOCATION_WORDS and len(words) > 1:
        return ConceptKind.LOCATION
    if last in _ORGANIZATION_WORDS or (words[0] == "order" and len(words) > 2):
        return ConceptKind.ORGANIZATION
    if last in _CREATURE_WORDS:
        return ConceptKind.CREATURE
    if last in _ITEM_WORDS and len(words) > 1:
        return ConceptKind.ITEM
    if last in _EVENT_WORDS and len(words) > 1:
        return ConceptKind.EVENT
    if votes:
        return min(votes.items(), key=lambda kv: (-kv[1], kv[0].value))[0]
    return ConceptKind.TERM


def _dedupe_aliases(aliases: Iterable[str], key: str) -> list[str]:
    """Aliases with one surface per normalized form, none equal to the key, sorted."""
    chosen: dict[str, str] = {}
    for alias in sorted(aliases, key=lambda a: (not a[:1].isupper(), a)):
        norm = normalize_name(alias)
        if norm and norm != key and norm not in chosen:
            chosen[norm] = alias
    return sorted(chosen.values())


def _pick_name(surfaces: Counter[str]) -> str:
    """Most frequent surface; ties prefer a capitalised one, then alphabetical."""
    return min(surfaces.items(), key=lambda kv: (-kv[1], not kv[0][:1].isupper(), kv[0]))[0]
