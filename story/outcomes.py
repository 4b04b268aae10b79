"""Canon in words, for the table and for recall: entities named by their names, each outcome with the canon ids
it made, so a retcon can take it out of recall and put its replacement in.

- :func:`outcomes_in_words`: a scene end's accepted proposals in words ("Harrowgate ruler Lady Vesna", not
  "ent_… ruler Lady Vesna") with the canon record ids each made (a fact's id, a happening's…); the scene node
  keeps those ids beside its outcomes (:data:`OUTCOME_CANON`).
- :func:`record_words`: a canon record (fact, happening, entity, relationship) in words, as the state folds it.
- :func:`canon_marks`: what the graph says of a campaign's canon nodes for recall: the ids retconned, and the
  records a retcon wrote in place of what it retconned (:func:`retcon_records`), each a recall record
  anchored where the retcon was committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.events import BaseStateEvent
from schemas.recall import RecallKind, RecallRecord
from schemas.retcons import RecordKind
from schemas.story import ProposalDecision, ProposalStatus, ProposedChange, Turn
from stores.graph.base import GraphStore
from story.cypher import Statement
from story.state import WorldState

OUTCOME_CANON = "outcome_canon_json"
"""The scene node's property that lists, beside each of its canonical outcomes, the canon ids it made."""

CANON_LABELS = ("Fact", "Happening", "Entity", "Relationship")
"""The labels of canon nodes a retcon marks."""

# the id field of the canon record each kind of event establishes (story.gate.CANON_NODES, without threads)
_CANON_ID = {
    "entity_created": "entity_id",
    "fact_added": "fact_id",
    "relationship_added": "relationship_id",
    "event_recorded": "happening_id",
}


def _name(entities: Mapping[str, Mapping[str, Any]], entity_id: Any) -> str:
    ent = entities.get(str(entity_id))
    return str(ent["name"]) if ent else str(entity_id)


def fact_words(fact: Mapping[str, Any], entities: Mapping[str, Mapping[str, Any]]) -> str:
    """A fact in words ("Lady Vesna ruler_of Harrowgate"): ``fact`` as the state folds it, or a fact node."""
    subject = fact.get("subject", fact.get("subject_entity_id"))
    obj = fact.get("object", fact.get("object_entity_id"))
    what = _name(entities, obj) if obj is not None else fact.get("value")
    return f"{_name(entities, subject)} {fact['predicate']} {what}"


def happening_words(happening: Mapping[str, Any]) -> str:
    return str(happening["title"]) + (f": {happening['description']}" if happening.get("description") else "")


def _content_words(data: dict[str, Any], entities: Mapping[str, Mapping[str, Any]]) -> str:
    kind = data.pop("type")
    if kind == "event":
        return happening_words(data)
    if kind == "entity":
        return f"{data['name']} ({data['kind']})" + (" enters the story" if not data.get("entity_id") else " changes")
    if kind == "fact":
        return fact_words(data, entities)
    if kind == "relationship":
        return f"{_name(entities, data['source_entity_id'])} {data['kind']} {_name(entities, data['target_entity_id'])}"
    return ", ".join(e["kind"] for e in data["events"])


def record_words(state: WorldState, kind: RecordKind, record_id: str) -> str:
    """A record in words, entities named by their names."""
    ents = state.entities
    if kind is RecordKind.FACT:
        return fact_words(state.facts[record_id], ents)
    if kind is RecordKind.HAPPENING:
        return happening_words(state.happenings[record_id])
    if kind is RecordKind.ENTITY:
        e = ents[record_id]
        return f"{e['name']} ({e['kind']})"
    r = state.relationships[record_id]
    name = {k: ents.get(r[k], {}).get("name", r[k]) for k in ("source", "target")}
    return f"{name['source']} {r['kind']} {name['target']}"


def outcomes_in_words(
    proposals: Sequence[ProposedChange],
    decisions: Sequence[ProposalDecision],
    events: Sequence[BaseStateEvent],
    entities: Mapping[str, Mapping[str, Any]],
) -> tuple[list[str], list[list[str]]]:
    """The accepted proposals in words, and beside each the ids of the canon records its events made.

    Args:
        events: the events the gate committed (the decisions name theirs).
        entities: the state's entities after the gate (names of the entities the words name).
    """
    by_id = {p.id: p for p in proposals}
    made = {e.event_id: getattr(e, _CANON_ID[e.kind]) for e in events if getattr(e, "kind", "") in _CANON_ID}  # type: ignore[attr-defined]
    words: list[str] = []
    canon: list[list[str]] = []
    for d in decisions:
        if d.status is not ProposalStatus.ACCEPTED:
            continue
        words.append(_content_words(by_id[d.proposal_id].content.model_dump(mode="json", exclude_none=True), entities))
        canon.append([made[e] for e in d.event_ids if e in made])
    return words, canon


def outcome_canon(props: Mapping[str, Any], outcomes: int) -> list[list[str]]:
    """The canon ids beside each of a scene node's ``outcomes`` outcomes ([] where none were kept)."""
    listed = props.get(OUTCOME_CANON)
    kept = list(json.loads(listed) if isinstance(listed, str) else listed or [])
    return [list(ids) for ids in kept[:outcomes]] + [[] for _ in range(outcomes - len(kept))]


# -- what the graph says of canon, for recall ------------------------------------------------------------------


def retconned_nodes(label: str, campaign_id: str) -> Statement:
    """The campaign's canon nodes of ``label`` a retcon marked, and those it wrote in place of one."""
    return (
        f"MATCH (n:{label}) WHERE n.campaign_id = $c AND (n.canon_level = 'retconned' OR n.retcon_of IS NOT NULL) "
        "RETURN n",
        {"c": campaign_id},
    )


def entity_names(campaign_id: str) -> Statement:
    return "MATCH (n:Entity) WHERE n.campaign_id = $c RETURN n.uid AS uid, n.name AS name", {"c": campaign_id}


def mark_retconned(label: str, campaign_id: str, uid: str, props: Mapping[str, Any]) -> Statement:
    """What a retcon sets on the node it retcons (its canon level, who retconned it, where and why): the stored
    node and every export say so. The fold stays the truth per branch: a branch forked before the retcon
    still holds the record (its state says so)."""
    assert label in CANON_LABELS, label
    return (
        f"MATCH (n:{label} {{uid: $uid}}) WHERE n.campaign_id = $c SET n += $props",
        {"uid": uid, "c": campaign_id, "props": dict(props)},
    )


@dataclass(slots=True)
class CanonMarks:
    """The campaign's retconned canon ids, and the recall records of what retcons wrote in their place."""

    retconned: set[str] = field(default_factory=set)
    records: list[RecallRecord] = field(default_factory=list)


def canon_marks(graph: GraphStore, campaign_id: str, turns: Mapping[str, Turn]) -> CanonMarks:
    """What :func:`retconned_nodes` finds: the ids retconned, and a record (kind fact, id the new record's) for
    each fact or happening a retcon wrote, anchored at its turn on the retcon's branch and commit sequence."""
    marks = CanonMarks()
    rows = [(label, row["n"]) for label in CANON_LABELS for row in graph.run(*retconned_nodes(label, campaign_id))]
    if not rows:
        return marks
    names = {r["uid"]: {"name": r["name"]} for r in graph.run(*entity_names(campaign_id))}
    for label, node in rows:
        labels = {label}
        if node.get("canon_level") == "retconned":
            marks.retconned.add(str(node["uid"]))
        turn = turns.get(str(node.get("turn_id")))
        if node.get("retcon_of") is None or turn is None or not ({"Fact", "Happening"} & labels):
            continue
        text = fact_words(node, names) if "Fact" in labels else happening_words(node)
        marks.records.append(
            RecallRecord(
                id=str(node["uid"]),
                kind=RecallKind.FACT,
                campaign_id=campaign_id,
                anchor_turn_id=turn.id,
                branch_id=str(node["branch_id"]),
                depth=turn.depth,
                seq=int(node["seq"]),
                scene_id=None,
                ref=str(node["uid"]),
                text=text,
                salience=0.8,
            )
        )
    # a retelling retconned in its turn is out of recall too
    marks.records = [r for r in marks.records if r.id not in marks.retconned]
    return marks
