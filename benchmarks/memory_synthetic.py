"""Synthetic long conversations with planted facts and questions whose evidence is known, for
``benchmarks/memory_recall.py``: the same scoring on conversations that are not in the corpus, so a
recall lever that only fits LoCoMo's five files shows as a drop here.

A conversation is two friends talking over many dated sessions. Most turns are small talk drawn from
a pool; planted among them, each speaker tells facts of a few families, and questions are asked about
some of them (the others stay as distractors):

- **trip** (single-hop, temporal, adversarial): "We finally made it to Lisbon last weekend, surfing
  all day!" -> "Where did Ava go surfing?", "When did Ava visit Lisbon?", and the same question about
  the other speaker (adversarial, as LoCoMo's category 5: the evidence is the turn that looks right).
- **exchange** (single-hop): the friend asks ("What have you been reading lately?") and the answer
  does not repeat the question's words ("'The Salt Road' by Mira Calder. Couldn't put it down.") ->
  "What book has Ava been reading?"; the evidence is the answer.
- **collection** (multi-hop): two turns sessions apart ("I adopted a beagle named Pixel!", "We
  brought home a parrot yesterday, Mango.") -> "What pets does Ava have?"; the evidence is both.
- **preference** (open-domain): a habit told in its own words ("Nothing beats a morning on the
  trails with my boots on.") -> an inference question in others ("Would Ava enjoy a walking holiday
  in the mountains?").
- **dated** (single-hop with a calendar date): a thing done on the session's day ("Today I ran my
  first half marathon!") -> "What did Ava do on 12 March 2023?", the date written in another format
  than the session's.

Session times use one of three formats per conversation ("8 May 2023, evening", "May 8, 2023",
"2023-05-08"). Everything is drawn from ``random.Random(seed)``: the same seed gives the same
conversations and questions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

FIRST_NAMES = [
    "Ava", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonah", "Keiko", "Liam",
    "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sami", "Tess",
]  # fmt: skip

PLACES = [
    "Lisbon", "Kyoto", "the Grand Canyon", "Yellowstone", "Cape Town", "Reykjavik", "the Dolomites", "Vancouver",
    "Marrakech", "Patagonia", "the Scottish Highlands", "Bali", "Crete", "Banff", "Hanoi", "the Outer Banks",
]  # fmt: skip
ACTIVITIES = [
    ("surfing", "surf"), ("kayaking", "kayak"), ("hiking", "hike"), ("skiing", "ski"), ("snorkeling", "snorkel"),
    ("rock climbing", "climb"), ("birdwatching", "watch birds"), ("sailing", "sail"), ("camping", "camp"),
    ("cycling", "cycle"), ("fishing", "fish"), ("stargazing", "stargaze"),
]  # fmt: skip
RELATIVE = ["last weekend", "yesterday", "last Tuesday", "a few days ago", "over the long weekend", "last week"]

EXCHANGES = [
    (
        "What have you been reading lately?",
        "'{title}' by {author}. Couldn't put it down.",
        "What book has {owner} been reading?",
        ["The Salt Road", "Glass Orchard", "A Winter of Foxes", "The Cartographer's Daughter", "Low Tide"],
    ),
    (
        "Did you end up picking a name for the bakery?",
        "Yep, it's going to be called {title}! The sign goes up next month.",
        "What is the name of {owner}'s bakery?",
        ["Rise & Shine", "The Crumb Club", "Golden Loaf", "Flour Child", "Morning Knead"],
    ),
    (
        "So what did the doctor say about your knee?",
        "Torn meniscus, {title}. Physio twice a week for now.",
        "What injury does {owner} have?",
        ["nothing too serious", "annoyingly", "of all things", "apparently", "just my luck"],
    ),
    (
        "Who won the quiz night in the end?",
        "{author}'s team, by a single point! I still can't believe it.",
        "Who won the quiz night {owner} went to?",
        ["Marta", "Old Pete", "Jules", "the librarian", "my cousin Theo"],
    ),
    (
        "What are you cooking for the party?",
        "A huge pot of {title}, my grandmother's recipe.",
        "What dish is {owner} making for the party?",
        ["lamb tagine", "seafood paella", "mushroom risotto", "chicken mole", "beef rendang"],
    ),
    (
        "Where are you two going for the anniversary?",
        "{title}, a little place by the harbour. Booked it months ago!",
        "Where is {owner} celebrating the anniversary?",
        ["Casa Lumi", "The Anchor", "Bellweather", "Osteria Nona", "Blue Heron"],
    ),
]
AUTHORS = ["Mira Calder", "Tom Hale", "Anika Rowe", "Leo Brandt", "Sofia Marr"]

COLLECTIONS = [
    (
        "pets",
        "What pets does {owner} have?",
        ["I adopted a {item} named {name}!", "We brought home a {item} yesterday, we're calling it {name}."],
        ["beagle", "parrot", "tabby cat", "rabbit", "tortoise", "golden retriever"],
    ),
    (
        "instruments",
        "Which instruments does {owner} play?",
        ["I signed up for {item} lessons, {name} is my teacher.", "Guess what, I've started on the {item} too!"],
        ["cello", "ukulele", "trumpet", "piano", "drums", "violin"],
    ),
    (
        "languages",
        "Which languages has {owner} been learning?",
        ["I've been doing {item} on my lunch breaks with {name}.", "Started an evening class in {item} this week."],
        ["Portuguese", "Japanese", "Swahili", "Italian", "Korean", "Greek"],
    ),
]
PET_NAMES = ["Pixel", "Mango", "Biscuit", "Juniper", "Waffles", "Comet", "Pepper", "Noodle"]

PREFERENCES = [
    (
        "Nothing beats a morning on the trails with my boots on.",
        "Would {owner} enjoy a walking holiday in the mountains?",
    ),
    (
        "I spent the whole afternoon at the gallery staring at the Turners again.",
        "Is {owner} likely to visit an art museum on a trip?",
    ),
    (
        "Honestly, give me a quiet night in with a stack of novels any day.",
        "Would {owner} rather stay home than go to a loud club?",
    ),
    (
        "I've been growing tomatoes and basil on the balcony, it's so satisfying.",
        "Would {owner} like a gift of seeds for a vegetable garden?",
    ),
    ("Every Sunday I volunteer at the animal shelter, walking the dogs.", "Does {owner} care about animal welfare?"),
    (
        "I can't start the day without my pour-over, I'm picky about the beans.",
        "Would {owner} appreciate a specialty coffee subscription?",
    ),
    ("The sea calms me down, I try to swim a few lengths every morning.", "Would {owner} enjoy a beach holiday?"),
    ("I've been sketching the old buildings downtown in my notebook.", "Is {owner} artistic?"),
]

DATED = [
    ("Today I ran my first half marathon! My legs are jelly.", "What did {owner} do on {day}?"),
    ("We signed the lease on the new flat this morning!", "What did {owner} sign on {day}?"),
    ("I finally handed in my thesis today, what a relief.", "What did {owner} hand in on {day}?"),
    ("Got my driving licence today, passed first time!", "What did {owner} get on {day}?"),
    (
        "Today was my last day at the old job, they threw me a little party.",
        "What happened at {owner}'s work on {day}?",
    ),
]

# near misses: the vocabulary of the facts, in turns that answer no question
DISTRACTORS = [
    "Have you ever been to {place}? I've always wanted to go.",
    "My sister keeps sending me photos of {place}, so jealous.",
    "Do you like {activity}? I've never tried it.",
    "A colleague of mine is obsessed with {activity}.",
    "My cousin just got a {pet}, it's adorable.",
    "I used to play the {instrument} as a kid, I was terrible.",
    "Someone at work is learning {language}, it sounds so hard.",
    "I saw a documentary about {place} last night.",
    "There's a new book club at the library, they're reading '{book}'.",
    "The new restaurant downtown does a decent {dish}.",
]

SMALL_TALK = [
    "Hey {other}! Long time no talk, how have you been?",
    "Pretty good, busy as always. You?",
    "Same here, work has been a lot lately.",
    "That sounds exhausting, make sure you take some time off.",
    "Ha, I'll try. What's new with you?",
    "Not much, just the usual routine.",
    "Oh nice, that sounds fun!",
    "I know, right? I'm still smiling about it.",
    "That's amazing, I'm so happy for you.",
    "Thanks, it means a lot that you say that.",
    "How's the family doing?",
    "Everyone's well, thanks for asking.",
    "The weather has been so strange this week.",
    "Tell me about it, sunshine one minute and rain the next.",
    "We should catch up properly soon.",
    "Definitely, let's plan something.",
    "Anyway, I should get going. Talk soon!",
    "Take care, {other}! Bye!",
    "Wow, really? Tell me more.",
    "It was a bit chaotic, but worth it.",
    "I totally get that.",
    "You always know what to say.",
    "That reminds me, I need to call my mom back.",
    "Haha, classic.",
    "I've been sleeping badly, too much on my mind.",
    "Hope things calm down for you soon.",
    "Did you see the game on Sunday?",
    "Missed it, was it any good?",
    "I've been trying to cook more at home.",
    "Good for you, I keep ordering takeout.",
    "My neighbour's been renovating, the drilling never stops.",
    "Oh no, that would drive me mad.",
    "I'm thinking about redecorating the living room.",
    "Ooh, send me pictures when it's done!",
    "Work threw another deadline at me.",
    "Ugh, deadlines. You'll crush it though.",
    "Thanks for listening, really.",
    "Always, that's what friends are for.",
    "It's been a while since we talked about anything but work!",
    "So true, we need more fun stuff in our lives.",
]

TIME_FORMATS = ("dmy", "mdy", "iso")
MONTH_NAMES = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
]  # fmt: skip


def format_day(day: date, style: str, *, part: str = "") -> str:
    """A day as a session time or a question writes it."""
    if style == "dmy":
        text = f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"
    elif style == "mdy":
        text = f"{MONTH_NAMES[day.month - 1]} {day.day}, {day.year}"
    else:
        text = day.isoformat()
    return f"{text}, {part}" if part else text


@dataclass
class SyntheticQuestion:
    id: str
    query: str
    category: int
    evidence: list[str]
    family: str


@dataclass
class SyntheticConversation:
    name: str
    speakers: tuple[str, str]
    lines: list[dict[str, Any]] = field(default_factory=list)  # JSON lines of the transcript format
    questions: list[SyntheticQuestion] = field(default_factory=list)


@dataclass
class _Plant:
    """Turns to place in one session, consecutive, the first spoken by ``first_speaker``."""

    session: int
    first_speaker: int
    texts: list[str]
    key: str  # the question's key; the refs of the planted turns are filled in when placed


def generate(
    seed: int, *, index: int = 0, sessions: int = 16, turns_per_session: tuple[int, int] = (16, 26)
) -> SyntheticConversation:
    """One conversation with its questions (see the module docstring)."""
    rng = random.Random(seed * 1000 + index)
    a, b = rng.sample(FIRST_NAMES, 2)
    speakers = (a, b)
    style = rng.choice(TIME_FORMATS)
    start = date(2022, 1, 1) + timedelta(days=rng.randrange(0, 500))
    days = [start]
    for _ in range(sessions - 1):
        days.append(days[-1] + timedelta(days=rng.randrange(4, 26)))
    plants: list[_Plant] = []
    asks: list[tuple[str, str, int, str]] = []  # (key, query, category, family)

    places = rng.sample(PLACES, 6)
    activities = rng.sample(ACTIVITIES, 6)
    for i in range(6):
        owner = i % 2
        s = rng.randrange(sessions)
        act_ing, act = activities[i]
        text = rng.choice(
            [
                f"We finally made it to {places[i]} {rng.choice(RELATIVE)}, {act_ing} all day!",
                f"Just got back from {places[i]}. We went {act_ing} every single morning.",
                f"{places[i]} was incredible {rng.choice(RELATIVE)}, I learned to {act} properly.",
            ]
        )
        key = f"trip{i}"
        plants.append(_Plant(s, owner, [text], key))
        if rng.random() < 0.7:
            asks.append((key, f"Where did {speakers[owner]} go {act_ing}?", 4, "trip"))
        if rng.random() < 0.6:
            asks.append((key, f"When did {speakers[owner]} visit {places[i]}?", 2, "trip"))
        if rng.random() < 0.35:
            asks.append((key, f"Where did {speakers[1 - owner]} go {act_ing}?", 5, "trip"))

    for i, (prompt, answer, question, fills) in enumerate(rng.sample(EXCHANGES, 4)):
        owner = i % 2
        text = answer.format(title=rng.choice(fills), author=rng.choice(fills if "{author}'s" in answer else AUTHORS))
        key = f"exchange{i}"
        plants.append(_Plant(rng.randrange(sessions), 1 - owner, [prompt, text], key + ":answer"))
        asks.append((key + ":answer", question.format(owner=speakers[owner]), 4, "exchange"))

    for i, (_, question, templates, items) in enumerate(rng.sample(COLLECTIONS, 2)):
        owner = i % 2
        first, second = rng.sample(items, 2)
        s1 = rng.randrange(sessions // 2)
        s2 = rng.randrange(sessions // 2 + 1, sessions)
        key = f"collection{i}"
        plants.append(_Plant(s1, owner, [templates[0].format(item=first, name=rng.choice(PET_NAMES))], key))
        plants.append(_Plant(s2, owner, [templates[1].format(item=second, name=rng.choice(PET_NAMES))], key))
        asks.append((key, question.format(owner=speakers[owner]), 1, "collection"))

    for i, (statement, question) in enumerate(rng.sample(PREFERENCES, 4)):
        owner = i % 2
        key = f"preference{i}"
        plants.append(_Plant(rng.randrange(sessions), owner, [statement], key))
        asks.append((key, question.format(owner=speakers[owner]), 3, "preference"))

    for i, (statement, question) in enumerate(rng.sample(DATED, 3)):
        owner = i % 2
        s = rng.randrange(sessions)
        key = f"dated{i}"
        plants.append(_Plant(s, owner, [statement], key))
        other_style = rng.choice([x for x in TIME_FORMATS if x != style])
        asks.append((key, question.format(owner=speakers[owner], day=format_day(days[s], other_style)), 4, "dated"))

    conversation = SyntheticConversation(name=f"synthetic-{seed}-{index}", speakers=speakers)
    evidence: dict[str, list[str]] = {}
    parts = ["morning", "afternoon", "evening"]
    for s in range(sessions):
        when = format_day(days[s], style, part=rng.choice(parts) if style != "iso" else "")
        here = [p for p in plants if p.session == s]
        rng.shuffle(here)
        n = rng.randrange(*turns_per_session)
        # small talk, alternating speakers, with the plants put in at places whose speaker fits
        slots: list[tuple[int, str, str | None]] = []  # (speaker, text, key of the turn or None)
        for t in range(n):
            slots.append((t % 2, rng.choice(SMALL_TALK), None))
        for t in rng.sample(range(n), min(n, rng.randrange(2, 5))):
            slots[t] = (slots[t][0], _distractor(rng), None)
        for plant in here:
            positions = [p for p in range(1, len(slots) + 1) if p % 2 == plant.first_speaker]
            at = rng.choice(positions) if positions else len(slots)
            block = [
                ((plant.first_speaker + j) % 2, text, plant.key if (j == len(plant.texts) - 1) else None)
                for j, text in enumerate(plant.texts)
            ]
            if len(block) % 2:  # keep the alternation after the block: a short reply
                block.append(((plant.first_speaker + len(block)) % 2, rng.choice(SMALL_TALK[6:12]), None))
            slots[at:at] = block
        for t, (speaker, said, planted) in enumerate(slots, start=1):
            ref = f"S{s + 1}:{t}"
            conversation.lines.append(
                {
                    "session": str(s + 1),
                    "time": when,
                    "speaker": speakers[speaker],
                    "text": said.format(other=speakers[1 - speaker]),
                    "ref": ref,
                }
            )
            if planted is not None:
                evidence.setdefault(planted, []).append(ref)
    for n, (key, query, category, family) in enumerate(asks):
        conversation.questions.append(
            SyntheticQuestion(
                id=f"{conversation.name}:q{n}", query=query, category=category, evidence=evidence[key], family=family
            )
        )
    return conversation


def _distractor(rng: random.Random) -> str:
    collections = {name: items for name, _, _, items in COLLECTIONS}
    return rng.choice(DISTRACTORS).format(
        place=rng.choice(PLACES),
        activity=rng.choice(ACTIVITIES)[0],
        pet=rng.choice(collections["pets"]),
        instrument=rng.choice(collections["instruments"]),
        language=rng.choice(collections["languages"]),
        book=rng.choice(EXCHANGES[0][3]),
        dish=rng.choice(EXCHANGES[4][3]),
    )


def generate_many(seed: int, count: int, **options: Any) -> list[SyntheticConversation]:
    return [generate(seed, index=i, **options) for i in range(count)]
