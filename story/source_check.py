"""The gate's check of proposals against the rulebook: what a book the campaign draws on says, field by field.

A player's claim that a goblin has 30 hit points used to become canon because no campaign fact said
otherwise; the rulebook said 7, but only as text. Rulebook entries are now typed source facts
(:mod:`stores.source_facts`), and the gate holds every claim a proposal makes about an entry against
them:

* **Claims.** A fact with a literal value (``FactAdded``), and every attribute an event sets on an
  entity (a new entity's attributes, ``set_entity_attribute``), is a claim about the entity's entry.
  The entity is matched to entries by its name, its aliases and a ``source_entry`` attribute ("Grik"
  the goblin: ``source_entry: "Goblin"``), each read by :func:`schemas.rulefacts.entry_key`; the
  predicate is read as a field of the family tables (``"hp"``, ``"Hit Points"`` and ``"hit_points"``
  are all ``hit_points``: a field's name or any of its printed labels, :func:`predicate_field`).
* **Individuals and play.** An entity matched only through ``source_entry`` is an individual of the
  entry's kind: a player's claim about it is held to the book, but a GM's different value is that one
  individual (a tougher goblin chief), noted, never a house rule for every goblin. An attribute set on
  an entity that already exists is a change in play (a wounded goblin's hit points), noted when it
  departs from the book, never refused by it.
* **Which book.** Only the items and libraries the campaign pins (none: every ready item), and not
  those it pins for another use than canon (reference, inspiration): the gate's law is the edition the
  table plays. All source facts for a whole batch are read in one graph read (:func:`read_source_facts`).
* **The rule in force.** A GM's ruling on the same entry and field that is canon on this line of the
  story (a house rule: :mod:`story.house_rules`) is the rule; otherwise the book's facts.
* **Comparison.** :func:`schemas.rulefacts.compare_values`, units and dice normalised. SAME: the claim
  agrees, and its canon is SUPPORTED_BY the source fact. DIFFERENT: a GM's claim is accepted and kept as
  a house rule; anyone else's is rejected, or accepted disputed, as
  :attr:`story.policy.GatePolicy.source_contradiction` says, with the rule cited (entry, field, printed
  value, item, page, chunk). UNCOMPARABLE (free text that does not read as the field's type): not a
  contradiction, and the rationale says it was not checked.

Pure over what :func:`read_source_facts` returned and the world state: the gate (:mod:`story.gate`)
runs it per proposal after the contradiction check against campaign canon.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.campaign import LibraryPin
from schemas.common import Authority, FactStatus
from schemas.events import (
    BaseStateEvent,
    EntityAttributeSet,
    EntityCreated,
    FactAdded,
    FactInvalidated,
    FactInvalidation,
)
from schemas.knowledge import Classification
from schemas.rulefacts import (
    Comparison,
    FlagValue,
    ListValue,
    NumberValue,
    RuleValue,
    RuleValueError,
    StoredSourceFact,
    TextValue,
    compare_values,
    entry_key,
    parse_value,
)
from schemas.story import ProposedChange
from stores.graph.base import GraphStore
from stores.source_facts import SourceFactStore
from story.policy import ContradictionPolicy, GatePolicy, proposal_events
from story.predicates import field_labels, predicate_field
from story.state import WorldState

#: The attribute naming the rulebook entry an entity is an instance of ("Grik" → "Goblin").
SOURCE_ENTRY = "source_entry"

#: How many contradicting source facts a rationale cites (two books may print the same entry).
_CITED = 2


# -- predicates as fields of the family tables --------------------------------------------------------


def _unlabelled(text: str, field_name: str) -> str | None:
    """The text without the field's label before or after the value ("AC 15", "7 hit points"), or None."""
    for label in field_labels(field_name):
        words = r"\s+".join(map(re.escape, label.split()))
        for pattern in (rf"^\s*(?:{words})\b\s*[:=]?\s*(.+)$", rf"^(.+?)\s*\b(?:{words})\s*\.?$"):
            m = re.match(pattern, text, re.I)
            if m and m.group(1).strip():
                return m.group(1).strip()
    return None


# -- claims ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """One value a proposal states about an entity: the fact it adds, or an attribute it sets."""

    event_id: str
    entity_id: str
    keys: tuple[str, ...]
    predicate: str
    value: Any
    fact_id: str | None = None  # for a FactAdded: the fact (a house rule, or disputed)
    instance: bool = False  # the entity is one of the entry's kind ("Grik", source_entry Goblin), not the entry
    change: bool = False  # an attribute set on an entity that exists: a change in play (a wound), not a claim


def is_instance(entity: Mapping[str, Any]) -> bool:
    """Whether the entity is an individual of an entry's kind ("Grik" with ``source_entry: Goblin``) rather
    than the entry itself (an entity named "Goblin" or aliased so)."""
    attrs = entity.get("attributes") or {}
    entry = attrs.get(SOURCE_ENTRY)
    if not isinstance(entry, str) or not (key := entry_key(entry)):
        return False
    own = [entity.get("name"), *(entity.get("aliases") or [])]
    return key not in {entry_key(n) for n in own if isinstance(n, str)}


def entity_keys(entity: Mapping[str, Any]) -> tuple[str, ...]:
    """The entry keys an entity (a state record, or a new entity's event fields) is matched by."""
    attrs = entity.get("attributes") or {}
    names = [attrs.get(SOURCE_ENTRY), entity.get("name"), *(entity.get("aliases") or [])]
    return tuple(dict.fromkeys(k for n in names if isinstance(n, str) and (k := entry_key(n))))


def _new_entities(events: Iterable[BaseStateEvent]) -> dict[str, dict[str, Any]]:
    return {
        e.entity_id: {"name": e.name, "aliases": e.aliases, "attributes": e.attributes}
        for e in events
        if isinstance(e, EntityCreated)
    }


def claims_of(events: Sequence[BaseStateEvent], state: WorldState) -> list[Claim]:
    """The claims ``events`` make about entities the state knows or the events create."""
    created = _new_entities(events)

    def entity(entity_id: str) -> Mapping[str, Any] | None:
        return created.get(entity_id) or state.entities.get(entity_id)

    def claim(event_id: str, entity_id: str, predicate: str, value: Any, **extra: Any) -> Claim:
        found = entity(entity_id)
        keys = entity_keys(found) if found is not None else ()
        return Claim(event_id, entity_id, keys, predicate, value, instance=bool(found and is_instance(found)), **extra)

    out: list[Claim] = []
    for event in events:
        if isinstance(event, FactAdded) and event.value is not None:
            fact_id = event.fact_id
            out.append(claim(event.event_id, event.subject_entity_id, event.predicate, event.value, fact_id=fact_id))
        elif isinstance(event, EntityCreated):
            for name, value in sorted(event.attributes.items()):
                if name != SOURCE_ENTRY and value is not None:
                    out.append(claim(event.event_id, event.entity_id, name, value))
        elif isinstance(event, EntityAttributeSet) and _sets_value(event):
            change = event.entity_id not in created
            out.append(claim(event.event_id, event.entity_id, event.attribute, event.value, change=change))
    return [c for c in out if c.keys]


def _sets_value(event: EntityAttributeSet) -> bool:
    """Whether the event states an attribute's value (an increment is a change, not a claim)."""
    return event.op.value == "set" and event.value is not None and event.attribute != SOURCE_ENTRY


# -- the batch read -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """The source facts a batch of proposals may be held against, by subject key."""

    by_key: Mapping[str, Sequence[StoredSourceFact]] = field(default_factory=dict)

    def cite(self, fact: StoredSourceFact) -> str:
        """:func:`cite` with the fact's entry at hand."""
        return cite(fact, self.by_key.get(fact.subject.key, ()))

    def covering(self, claim: Claim) -> list[StoredSourceFact]:
        """The facts of the claim's entries whose field is the claim's predicate."""
        out: list[StoredSourceFact] = []
        seen: set[str] = set()
        for key in claim.keys:
            for fact in self.by_key.get(key, ()):
                if fact.uid not in seen and fact.predicate == predicate_field(claim.predicate, fact.subject.kind):
                    seen.add(fact.uid)
                    out.append(fact)
        return out


def _drawn_on(pins: Sequence[LibraryPin]) -> tuple[list[str], list[str]]:
    """The libraries and items whose facts are law for the campaign: pinned, for canon or as classified."""
    law = [p for p in pins if p.use is None or p.use is Classification.CANON]
    return (
        [p.library_id for p in law if p.library_id is not None],
        [p.item_id for p in law if p.item_id is not None],
    )


def subject_keys(proposals: Sequence[ProposedChange], state: WorldState) -> list[str]:
    """Every entry key the proposals' claims could be about (entities of the state and of the batch)."""
    events = [e for p in proposals for e in proposal_events(p, turn_id=None, scene_id="scene")]
    created = _new_entities(events)
    out: dict[str, None] = {}
    for event in events:
        if isinstance(event, EntityCreated):
            ids = [event.entity_id]
        elif isinstance(event, FactAdded):
            ids = [event.subject_entity_id]
        elif isinstance(event, EntityAttributeSet):
            ids = [event.entity_id]
        else:
            continue
        for entity_id in ids:
            entity = created.get(entity_id) or state.entities.get(entity_id)
            if entity is not None:
                out.update(dict.fromkeys(entity_keys(entity)))
    return list(out)


def read_source_facts(
    graph: GraphStore, proposals: Sequence[ProposedChange], state: WorldState, pins: Sequence[LibraryPin] = ()
) -> SourceFacts:
    """The source facts about every entry the proposals touch, in one graph read (none when they touch none).

    A campaign with pins reads its pinned items (whatever their status: an older edition it still plays)
    and the ready items of its pinned libraries; one without reads every ready item.
    """
    keys = subject_keys(proposals, state)
    if not keys:
        return SourceFacts()
    store = SourceFactStore(graph)
    if pins:
        libraries, items = _drawn_on(pins)
        if not libraries and not items:
            return SourceFacts()
        facts = store.lookup(keys, item_uids=items or None, library_uids=libraries or None)
    else:
        facts = store.lookup(keys)
    by_key: dict[str, list[StoredSourceFact]] = {}
    for fact in facts:
        by_key.setdefault(fact.subject.key, []).append(fact)
    return SourceFacts(by_key)


# -- comparing ------------------------------------------------------------------------------------------


def as_rule_value(value: Any, like: RuleValue | None = None, field_name: str | None = None) -> RuleValue | None:
    """A proposal's value (an attribute value) as a typed value, read as ``like``'s type where it is text.

    A text that holds the field's label as well ("30 hit points", "AC 15") is read without it.
    """
    if isinstance(value, bool):
        return FlagValue(value=value)
    if isinstance(value, int | float):
        return NumberValue(value=float(value))
    if isinstance(value, list):
        return ListValue(items=[str(v) for v in value])
    if isinstance(value, str) and value.strip():
        if like is not None:
            bare = _unlabelled(value, field_name) if field_name else None
            for text in (value, *([bare] if bare else [])):
                try:
                    return parse_value(like.type, text)
                except RuleValueError:
                    continue
        return TextValue(text=value.strip())
    return None


def _list_readings(text: str) -> list[ListValue]:
    """A spoken list read three ways: at commas and semicolons (as a book prints one), at semicolons and
    line breaks only (items that hold commas: a condition's effects), and at "and"/"or" too ("Common and
    Goblin")."""
    readings = [
        re.split(r"\s*[;\n]\s*", text),
        re.split(r"\s*(?:[,;]|\band\b|\bor\b)\s*", text),
    ]
    return [ListValue(items=[i.strip(" .") for i in r if i.strip(" .")]) for r in readings]


def compare_claim(value: Any, fact_value: RuleValue, field_name: str | None = None) -> Comparison:
    """The claim's value against a typed value (UNCOMPARABLE when it is none that can be compared).

    A list said as text agrees when any of its readings holds the book's items: a reading can only find
    the same set of items, never make a dropped or an added one disappear.
    """
    claimed = as_rule_value(value, fact_value, field_name)
    if claimed is None:
        return Comparison.UNCOMPARABLE
    outcome = compare_values(claimed, fact_value)
    spoken = isinstance(fact_value, ListValue) and isinstance(value, str)
    if outcome is Comparison.DIFFERENT and spoken:
        readings = _list_readings(value)
        return next((Comparison.SAME for r in readings if compare_values(r, fact_value) is Comparison.SAME), outcome)
    return outcome


def _printed_with(fact: StoredSourceFact, entry: Sequence[StoredSourceFact]) -> str | None:
    """The parenthetical printed right after the fact's value, read as a field of its own ("7 (2d6)")."""
    if fact.offset is None or fact.label is None:
        return None
    end = fact.offset + len(fact.raw)
    for other in entry:
        if (
            other.uid != fact.uid
            and other.item_uid == fact.item_uid
            and other.label == fact.label
            and other.offset is not None
            and 0 < other.offset - end <= 3
        ):
            return " ".join(other.raw.split())
    return None


def cite(fact: StoredSourceFact, entry: Sequence[StoredSourceFact] = ()) -> str:
    """A source fact as a rationale cites it: 'Goblin — Hit Points 7 (2d6) (item X, p. 12, chunk Y)'.

    Args:
        entry: the facts of the fact's entry, to print the value's parenthetical with it ("(2d6)").
    """
    printed = " ".join((fact.raw or fact.value.canonical()).split())
    label = fact.label or fact.predicate.replace("_", " ")
    if not printed.casefold().startswith(label.casefold()):
        printed = f"{label} {printed}"
    if (paren := _printed_with(fact, entry)) is not None:
        printed = f"{printed} ({paren})"
    where = [f"item {fact.item_uid}"]
    if fact.page is not None:
        where.append(f"p. {fact.page}")
    if fact.chunk_id:
        where.append(f"chunk {fact.chunk_id}")
    return f"{fact.subject.name} — {printed} ({', '.join(where)})"


@dataclass(frozen=True, slots=True)
class HouseRuleDraft:
    """A GM's fact that overrides the book for the campaign (written on the fact by :mod:`story.gate`)."""

    fact_id: str
    event_id: str
    field: str
    book: tuple[StoredSourceFact, ...]
    canon: tuple[tuple[str, str, Any], ...] = ()
    """Or, a ruling against the campaign's own canon of source authority: (fact id, entry name, value) each."""

    def marks(self, ruled_by: str, at: str) -> dict[str, Any]:
        """What the ruling's fact node records of what it departs from (:func:`story.house_rules.house_rules`)."""
        marks: dict[str, Any] = {"house_rule": True, "ruled_by": ruled_by, "ruled_at": at, "book_field": self.field}
        if not self.book:
            fact_id, entry, value = self.canon[0]
            return {**marks, "book_entry": entry, "book_value": str(value), "book_fact": fact_id}
        book = self.book[0]
        marks.update(book_entry=book.subject.name, book_value=book.value.canonical(), book_raw=book.raw)
        marks["book_item"] = book.item_uid
        if book.page is not None:
            marks["book_page"] = book.page
        if book.chunk_id:
            marks["book_chunk"] = book.chunk_id
        return marks


@dataclass(slots=True)
class SourceVerdict:
    """What the rulebook says about one proposal: a refusal, or notes, links and extra events."""

    refusal: str | None = None
    notes: list[str] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)  # every source fact held against it
    supports: dict[str, list[str]] = field(default_factory=dict)  # event id → agreeing source facts
    disputes: dict[str, list[str]] = field(default_factory=dict)  # event id → contradicted source facts
    house_rules: list[HouseRuleDraft] = field(default_factory=list)
    events: list[BaseStateEvent] = field(default_factory=list)  # added (a disputed fact's marking)

    def cite_all(self, facts: Iterable[StoredSourceFact]) -> None:
        self.cited.extend(f.uid for f in facts if f.uid not in self.cited)


@dataclass(frozen=True, slots=True)
class _Ruling:
    """A house rule in force: a GM's canon fact on an entry's field."""

    fact_id: str
    value: Any
    turn_id: str | None


def _house_rule(claim: Claim, state: WorldState, field_name: str) -> _Ruling | None:
    """The GM's current canon on the claim's field on this line of the story, if any: a house rule on the
    claim's entry, or the GM's word on the claim's own entity (an individual the GM made different)."""
    wanted = set(claim.keys)
    found: _Ruling | None = None
    best = -1
    for fid, fact in state.facts.items():
        if fact["authority"] != Authority.GM.value or fact["value"] is None:
            continue
        if fact["status"] == FactStatus.SUPERSEDED.value or predicate_field(fact["predicate"]) != field_name:
            continue
        subject = state.entities.get(fact["subject"])
        if subject is None:
            continue
        # the entry's rule, or the GM's word on this very individual; another individual's is its own
        if fact["subject"] != claim.entity_id and (is_instance(subject) or not wanted & set(entity_keys(subject))):
            continue
        if fact["seq"] > best:  # the latest ruling stands
            best, found = fact["seq"], _Ruling(fid, fact["value"], fact["turn_id"])
    return found


def check_proposal(
    proposal: ProposedChange,
    events: Sequence[BaseStateEvent],
    state: WorldState,
    facts: SourceFacts,
    policy: GatePolicy,
) -> SourceVerdict:
    """Hold each claim of a proposal's events against the rule in force (house rule, else the book).

    Args:
        events: the proposal's events as the contradiction check settled them.
        state: the world before the proposal (with the proposals accepted before it in the batch).
        facts: what :func:`read_source_facts` read for the batch.
    """
    verdict = SourceVerdict()
    gm = proposal.authority is Authority.GM
    for claim in claims_of(events, state):
        book = facts.covering(claim)
        if not book:
            continue
        verdict.cite_all(book)
        ruling = _house_rule(claim, state, book[0].predicate)
        if ruling is not None:
            refusal = _against_house_rule(claim, ruling, book, gm, events, verdict, facts)
        else:
            refusal = _against_book(claim, book, gm, policy, events, verdict, facts)
        if refusal is not None:
            verdict.refusal = refusal
            return verdict
    return verdict


def _against_book(
    claim: Claim,
    book: list[StoredSourceFact],
    gm: bool,
    policy: GatePolicy,
    events: Sequence[BaseStateEvent],
    verdict: SourceVerdict,
    facts: SourceFacts,
) -> str | None:
    """Hold a claim against the book's facts; the refusal, or None (notes and links added to ``verdict``)."""
    outcomes = [(f, compare_claim(claim.value, f.value, f.predicate)) for f in book]
    same = [f for f, c in outcomes if c is Comparison.SAME]
    different = [f for f, c in outcomes if c is Comparison.DIFFERENT]
    if same:  # two books (or two printings of one entry) may differ: agreeing with one is agreeing
        verdict.supports.setdefault(claim.event_id, []).extend(f.uid for f in same)
        verdict.notes.append(f"agrees with the rulebook: {facts.cite(same[0])}")
        return None
    if not different:
        verdict.notes.append(f"not checked against the rulebook: {claim.value!r} does not read as the value of "
                             f"{facts.cite(book[0])}")  # fmt: skip
        return None
    shown = "; ".join(facts.cite(f) for f in different[:_CITED])
    said = f"{claim.predicate} = {claim.value!r}"
    if claim.change:  # a wounded goblin has fewer hit points than its stat block: play, not a claim on the rule
        verdict.notes.append(f"{said} changes the entity in play; the rulebook prints {shown}")
        return None
    if claim.instance and gm:  # a GM's tougher goblin chief is that one goblin, not a rule for every goblin
        verdict.notes.append(f"a GM's individual ({said}) departs from its entry in the rulebook: {shown}")
        return None
    if gm:  # an attribute ruling is kept as a fact of the ruling beside it: a house rule like a fact's
        _rule(claim, book[0].predicate, different, events, verdict)
        verdict.notes.append(f"a GM ruling ({said}) overrides the rulebook for this campaign, kept as a house rule: "
                             f"{shown}")  # fmt: skip
    elif policy.source_contradiction is ContradictionPolicy.DISPUTE and claim.fact_id is not None:
        verdict.disputes.setdefault(claim.event_id, []).extend(f.uid for f in different)
        first = events[0] if events else None
        verdict.events.append(
            FactInvalidated(
                turn_id=first.turn_id if first else None,
                scene_id=first.scene_id if first else None,
                fact_id=claim.fact_id,
                invalidation=FactInvalidation.DISPUTED,
                reason=f"{said} contradicts the rulebook: {shown}",
            )
        )
        verdict.notes.append(f"disputed: {said} contradicts the rulebook: {shown}")
    else:
        return f"{said} contradicts the rulebook: {shown}"
    return None


def _against_house_rule(
    claim: Claim,
    ruling: _Ruling,
    book: list[StoredSourceFact],
    gm: bool,
    events: Sequence[BaseStateEvent],
    verdict: SourceVerdict,
    facts: SourceFacts,
) -> str | None:
    """Hold a claim against a house rule in force; the refusal, or None (notes added to ``verdict``)."""
    like = book[0].value
    field_name = book[0].predicate
    ruled = as_rule_value(ruling.value, like, field_name)
    claimed = as_rule_value(claim.value, like, field_name)
    what = (
        f"the house rule {field_name} = {ruling.value!r} (fact {ruling.fact_id}, a GM ruling; "
        f"the book: {facts.cite(book[0])})"
    )
    comparison = Comparison.UNCOMPARABLE if ruled is None or claimed is None else compare_values(claimed, ruled)
    if comparison is Comparison.SAME:
        verdict.notes.append(f"agrees with {what}")
        return None
    if comparison is Comparison.DIFFERENT:
        said = f"{claim.predicate} = {claim.value!r}"
        if claim.change:
            verdict.notes.append(f"{said} changes the entity in play; the rule in force is {what}")
            return None
        if gm and claim.instance:
            verdict.notes.append(f"a GM's individual ({said}) departs from {what}")
            return None
        if gm:
            verdict.notes.append(f"a GM ruling ({said}) changes {what}")
            different = [f for f in book if compare_claim(claim.value, f.value, f.predicate) is Comparison.DIFFERENT]
            if different:
                _rule(claim, field_name, different, events, verdict)
            return None
        return f"{said} contradicts {what}"
    verdict.notes.append(f"not checked: {claim.value!r} does not read as the value of {what}")
    return None


def _rule(
    claim: Claim,
    field_name: str,
    book: Sequence[StoredSourceFact],
    events: Sequence[BaseStateEvent],
    verdict: SourceVerdict,
) -> None:
    """Keep a GM's ruling against the book as a house rule: its fact, or for an attribute (a new entity's, or one
    set on it) a GM fact of the same field and value added beside it, so the ruling is listed and held as the rule
    in force (:func:`_house_rule`) like a fact ruling."""
    fact_id, event_id = claim.fact_id, claim.event_id
    if fact_id is None:
        first = events[0] if events else None
        ruling = FactAdded(
            turn_id=first.turn_id if first else None,
            scene_id=first.scene_id if first else None,
            subject_entity_id=claim.entity_id,
            predicate=field_name,
            value=claim.value,
            authority=Authority.GM,
        )
        verdict.events.append(ruling)
        fact_id, event_id = ruling.fact_id, ruling.event_id
    verdict.house_rules.append(HouseRuleDraft(fact_id, event_id, field_name, tuple(book)))


def canon_rulings(overrides: Mapping[str, tuple[str, list[str]]], state: WorldState) -> list[HouseRuleDraft]:
    """A GM's facts that override the campaign's own canon of source authority (:class:`story.policy.Judgement`)
    as house rules: what each departs from is that canon (its entity's name and value), not a library's fact."""
    out = []
    for event_id, (fact_id, overridden) in overrides.items():
        canon = []
        for fid in overridden:
            fact = state.facts[fid]
            entry = (state.entities.get(fact["subject"]) or {}).get("name") or fact["subject"]
            canon.append((fid, str(entry), fact["value"] if fact["value"] is not None else fact["object"]))
        out.append(
            HouseRuleDraft(
                fact_id, event_id, predicate_field(state.facts[overridden[0]]["predicate"]), (), tuple(canon)
            )
        )
    return out
