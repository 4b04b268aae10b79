"""What a retcon amends beside canon: the words of the summaries and memories that tell what it retconned.

A scene's end forms a summary ("… What became true: Harrowgate ruler Lady Vesna; The bridge burns.") and the
memories of those present ("… Afterwards: Harrowgate ruler Lady Vesna.") from the outcomes it made
(:mod:`story.scene_end`). The outcomes' own recall records follow a retcon (:func:`story.outcomes.canon_marks`),
but these texts would still tell the old version, and recall would return it. So a retcon queues, in its own
transaction, an amendment of every summary and live memory of the campaign whose text tells a record it retcons:

- **retold** (a fact with a new value or object, a happening with a retelling): the record's words are replaced by
  its replacement's ("Harrowgate ruler Lord Bram"), in words as :mod:`story.outcomes` writes them;
- **retconned with nothing in its place**: its words leave the list they stand in ("What became true: A; B."
  becomes "What became true: B.", a list left empty goes); words standing elsewhere (a GM's own sentence) are
  kept and the text says the record never was.

A record's words are the scene outcome that made it (``outcome_canon_json``) and its words in the state before
the retcon, so a retelling retold again is found by the words the first amendment wrote. A scene summary of the
end that made a retold record but never quoted its words (a GM's summary, a model's paraphrase) is told the
retelling ("Since retold: …"). Nothing is deleted: each amended node keeps the texts it had, oldest first, with
the retcon that amended them (``text_history_json``: text, record ids, event, branch, commit sequence, time).
The recall index follows (the story service reconciles it after a retcon: :mod:`story.recall_sync`). An end formed
after a retcon of what it made (its formation left pending) is amended the same way as it is written
(:func:`retold_since`, from the retcon marks in the graph).

Like recall's outcome records, the amendment is not per branch: a branch forked before the retcon reads the
new words too (docs/story.md, "Not done yet").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.common import utc_now
from schemas.events import BaseStateEvent, EventRecorded, FactAdded, FactInvalidated, FactInvalidation
from schemas.retcons import RecordKind, RecordRetconned
from story import cypher
from story.graph import CampaignContext, StoryGraph, Writes
from story.outcomes import (
    CANON_LABELS,
    OUTCOME_CANON,
    entity_names,
    fact_words,
    happening_words,
    outcome_canon,
    record_words,
    retconned_nodes,
)
from story.recall import ENDS
from story.state import WorldState

RETCONNED = "retconned"
"""The canon level a retcon marks a record with (:data:`story.retcons.RETCONNED`)."""

HISTORY = "text_history_json"
"""The property of an amended summary or memory that keeps the texts it had (a JSON list, oldest first)."""

_LISTS = ("What became true: ", "Afterwards: ")
"""The lists of outcomes a former writes (:class:`story.formation.ExtractiveFormer`): "<label><a>; <b>."."""


@dataclass(slots=True)
class Retold:
    """One record a retcon retconned: the words that told it, and what replaces them (None: nothing)."""

    record_id: str
    words: list[str]
    replacement: str | None
    outcomes: set[tuple[str, int]] = field(default_factory=set)
    """The scene outcomes (scene id, index) that made the record."""


def _record_words(state: WorldState, kind: RecordKind, record_id: str) -> str | None:
    try:
        return record_words(state, kind, record_id)
    except KeyError:  # not on this line: nothing of it to find
        return None


def _new_words(events: Sequence[BaseStateEvent], new_id: str | None, state: WorldState) -> str | None:
    """The words of the record a retcon wrote in place of the one it retconned (``new_id``), None without one."""
    for event in events:
        if isinstance(event, FactAdded) and event.fact_id == new_id:
            return fact_words(event.model_dump(mode="json"), state.entities)
        if isinstance(event, EventRecorded) and event.happening_id == new_id:
            return happening_words(event.model_dump(mode="json"))
    return None


def retold_records(
    story: StoryGraph, campaign_id: str, state: WorldState, events: Sequence[BaseStateEvent]
) -> list[Retold]:
    """What a retcon's ``events`` retcon, each with its words (in ``state``, the world before the retcon, and in the
    scene outcomes that made it) and its replacement's words."""
    retold: list[Retold] = []
    for event in events:
        if isinstance(event, FactInvalidated) and event.invalidation is FactInvalidation.RETCONNED:
            kind, record_id, new_id = RecordKind.FACT, event.fact_id, event.superseded_by
        elif isinstance(event, RecordRetconned):
            kind, record_id, new_id = event.record, event.record_id, event.superseded_by
        else:
            continue
        words = _record_words(state, kind, record_id)
        retold.append(Retold(record_id, [words] if words else [], _new_words(events, new_id, state)))
    if retold:
        by_id = {r.record_id: r for r in retold}
        for scene in story.nodes(cypher.scenes_of(campaign_id)):
            if not scene.get(OUTCOME_CANON):
                continue
            outcomes = list(scene.get("canonical_outcomes") or [])
            for i, ids in enumerate(outcome_canon(scene, len(outcomes))):
                for record_id in ids:
                    if record_id in by_id:
                        by_id[record_id].words.append(outcomes[i])
                        by_id[record_id].outcomes.add((str(scene["id"]), i))
    for r in retold:  # the longest first: an outcome ("Bob (npc) enters the story") before its record's words
        r.words = sorted(set(filter(None, r.words)), key=len, reverse=True)
    return retold


def _node_words(label: str, node: Mapping[str, Any], names: Mapping[str, Mapping[str, Any]]) -> str | None:
    if label == "Fact":
        return fact_words(node, names)
    return happening_words(node) if label == "Happening" else None


def retold_since(story: StoryGraph, campaign_id: str, scene: Mapping[str, Any], seq: Any = None) -> list[Retold]:
    """The records the outcomes of a scene's end (``seq``: the end's commit sequence number; every end without it)
    made that a retcon has retconned since, as the graph marks them (:func:`story.outcomes.mark_retconned`), each
    with the words of what stands in its place now (a retelling retold again: the last). What an end forms after
    a retcon (a formation left pending: :mod:`story.scene_end`) is amended with them as the retcon amends what was
    formed before it."""
    outcomes = list(scene.get("canonical_outcomes") or [])
    made = outcome_canon(scene, len(outcomes))
    ends = [e for e in _listed_ends(scene) if seq is not None and e.get("seq") == seq]
    first, last = (int(ends[0]["outcomes"][0]), int(ends[0]["outcomes"][1])) if ends else (0, len(outcomes))
    wanted = {record_id for ids in made[first:last] for record_id in ids}
    if not wanted:
        return []
    nodes = {
        str(row["n"]["uid"]): (label, row["n"])
        for label in CANON_LABELS
        for row in story.graph.run(*retconned_nodes(label, campaign_id))
    }
    if not wanted & {uid for uid, (_, n) in nodes.items() if n.get("canon_level") == RETCONNED}:
        return []
    names = {r["uid"]: {"name": r["name"]} for r in story.graph.run(*entity_names(campaign_id))}
    retold: dict[str, Retold] = {}
    for i in range(first, last):
        for record_id in made[i]:
            label, node = nodes.get(record_id, ("", {}))
            if node.get("canon_level") != RETCONNED:
                continue
            while node.get("canon_level") == RETCONNED and node.get("superseded_by") in nodes:
                label, node = nodes[str(node["superseded_by"])]  # retold again: what stands now
            replacement = None if node.get("canon_level") == RETCONNED else _node_words(label, node, names)
            entry = retold.setdefault(record_id, Retold(record_id, [], replacement))
            entry.words.append(outcomes[i])
            entry.outcomes.add((str(scene["id"]), i))
    return list(retold.values())


def _drop(text: str, words: str) -> str:
    """``text`` without ``words`` where they stand in a list of outcomes (an emptied list goes); elsewhere kept,
    said never to have been."""
    dropped = text.replace(f"; {words};", ";").replace(f"; {words}.", ".")
    for label in _LISTS:
        dropped = dropped.replace(f"{label}{words}; ", label)
        dropped = re.sub(rf"\s*{re.escape(label + words)}\.", "", dropped)
    if words in dropped:
        dropped += f" Retconned: {words} never was."
    return dropped


def amended(text: str, retold: Iterable[Retold], *, told_by_end: bool = False) -> tuple[str, list[str]]:
    """``text`` with the words of each retold record replaced by its replacement's (or dropped), and the records
    it told. ``told_by_end``: the text is the summary of the scene end that made a record (see the module's doc).
    """
    records: list[str] = []
    for r in retold:
        found = next((w for w in r.words if w in text), None)
        if found is not None:
            text = text.replace(found, r.replacement) if r.replacement else _drop(text, found)
            records.append(r.record_id)
        elif told_by_end and r.replacement:
            text = text.rstrip() + f" Since retold: {r.replacement}."
            records.append(r.record_id)
    return text, records


def _listed_ends(scene: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = scene.get(ENDS)
    return list(json.loads(listed) if isinstance(listed, str) else listed or [])


def _end_outcomes(scenes: Mapping[str, Mapping[str, Any]], row: Mapping[str, Any]) -> set[tuple[str, int]]:
    """The scene outcomes (scene id, index) made by the end a scene summary was formed at (all of the scene's when
    the summary or the scene does not say which end)."""
    scene = scenes.get(str(row.get("scene_id")))
    if scene is None or row.get("scope", "scene") != "scene":
        return set()
    ends = _listed_ends(scene)
    span = next((e["outcomes"] for e in ends if row.get("seq") is not None and e.get("seq") == row.get("seq")), None)
    first, last = (int(span[0]), int(span[1])) if span else (0, len(scene.get("canonical_outcomes") or []))
    return {(str(scene["id"]), i) for i in range(first, last)}


def queue_amendments(
    story: StoryGraph,
    ctx: CampaignContext,
    writes: Writes,
    retold: Sequence[Retold],
    *,
    events: Sequence[BaseStateEvent],
    branch_id: str,
) -> int:
    """Queue, in the retcon's transaction, the amendment of every summary and live memory of the campaign that
    tells a record in ``retold``, each keeping its old text (:data:`HISTORY`). Returns how many are amended."""
    if not retold:
        return 0
    scenes = {str(s["id"]): s for s in story.nodes(cypher.scenes_of(ctx.id))}
    where = {
        "retconned_by": events[-1].event_id if events else None,
        "branch_id": branch_id,
        "seq": ctx.event_seq + len(events),
        "at": utc_now().isoformat(),
    }
    count = 0
    for label in ("Summary", "Memory"):
        for row in story.nodes(cypher.anchored_of_campaign(label, ctx.id)):
            if row.get("retracted_at"):
                continue  # a withdrawn memory stays as it was withdrawn
            text = str(row.get("text") or "")
            made = _end_outcomes(scenes, row) if label == "Summary" else set()
            told_by_end = [r for r in retold if r.outcomes & made]
            new, records = amended(text, retold, told_by_end=False)
            if told_by_end:
                new, more = amended(new, [r for r in told_by_end if r.record_id not in records], told_by_end=True)
                records += more
            if new == text:
                continue
            history = list(json.loads(row[HISTORY]) if row.get(HISTORY) else [])
            history.append({"text": text, "record_ids": records, **where})
            writes.add(*_amend(label, str(row["uid"]), ctx.id, {"text": new, HISTORY: json.dumps(history)}))
            count += 1
    return count


def _amend(label: str, uid: str, campaign_id: str, props: dict[str, Any]) -> cypher.Statement:
    assert label in ("Summary", "Memory"), label
    return (
        f"MATCH (n:{label} {{uid: $uid}}) WHERE n.campaign_id = $c SET n += $props",
        {"uid": uid, "c": campaign_id, "props": props},
    )
