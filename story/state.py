"""The world state: a projection of typed state events, folded in commit order.

State as of a position in the story tree = the nearest snapshot on its lineage + the events after
it (:mod:`story.snapshots`). This module is the fold: pure, deterministic and cheap, so a replay
of a few dozen events costs well under a millisecond. The state is kept as plain dicts (what a
snapshot's JSON decodes to, with no per-record model validation on the hot path); typed views
are built on demand by :meth:`WorldState.view`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schemas.canon import Happening, ThreadAdvance
from schemas.common import (
    Authority,
    CanonLevel,
    EntityKind,
    EntityStatus,
    FactStatus,
    sha256_hex,
    utc_now,
)
from schemas.events import FactInvalidation
from schemas.story import (
    Entity,
    Evidence,
    Fact,
    Relationship,
    RelationshipStatus,
    StoryThread,
    ThreadStatus,
    WorldStateView,
)
from schemas.visibility import Visibility

#: Bumped when the snapshot layout changes; older snapshots are ignored and rebuilt from events.
STATE_FORMAT = 1

#: Event kinds folded into an entity, and into a fact (the others: :meth:`WorldState._apply_story`).
_ENTITY_EVENTS = frozenset(
    {"entity_created", "set_entity_status", "set_entity_attribute", "current_location_set", "possession_set"}
)
_FACT_EVENTS = frozenset({"fact_added", "fact_invalidated"})

#: The events that close a thread, and the status each leaves it in.
_THREAD_CLOSED = {"thread_resolved": ThreadStatus.RESOLVED.value, "thread_abandoned": ThreadStatus.ABANDONED.value}

#: Statuses in which an entity can no longer act.
INERT_STATUSES = frozenset({EntityStatus.DEAD.value, EntityStatus.DESTROYED.value})


@dataclass(slots=True)
class WorldState:
    """Entities, facts, relationships, threads, happenings and the scene, as plain dicts by id."""

    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    relationships: dict[str, dict[str, Any]] = field(default_factory=dict)
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)
    happenings: dict[str, dict[str, Any]] = field(default_factory=dict)
    scene: dict[str, Any] | None = None
    event_count: int = 0
    last_seq: int = 0

    # -- serialization --------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace): equal states give equal bytes and hashes."""
        doc = {
            "format": STATE_FORMAT,
            "entities": self.entities,
            "facts": self.facts,
            "relationships": self.relationships,
            "threads": self.threads,
            "happenings": self.happenings,
            "scene": self.scene,
            "event_count": self.event_count,
            "last_seq": self.last_seq,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> WorldState:
        doc = json.loads(data)
        if doc.get("format") != STATE_FORMAT:
            raise ValueError(f"state format {doc.get('format')!r} is not {STATE_FORMAT}")
        return cls(
            entities=doc["entities"],
            facts=doc["facts"],
            relationships=doc["relationships"],
            threads=doc["threads"],
            happenings=doc["happenings"],
            scene=doc["scene"],
            event_count=doc["event_count"],
            last_seq=doc["last_seq"],
        )

    @property
    def state_hash(self) -> str:
        """sha256 of the canonical JSON, *without* the counters: the same world gives the same hash
        however many events (or which snapshots) it took to get there."""
        doc = {
            "entities": self.entities,
            "facts": self.facts,
            "relationships": self.relationships,
            "threads": self.threads,
            "happenings": self.happenings,
            "scene": self.scene,
        }
        return sha256_hex(json.dumps(doc, sort_keys=True, separators=(",", ":")))

    def copy(self) -> WorldState:
        """A copy that is safe to fold into: the tables are copied, the records shared until changed.

        :meth:`apply` never changes a record in place (it replaces it with a changed copy), so a
        cached snapshot is never altered by a replay over its copy, and copying costs one pass of
        pointer copies instead of a deep copy of the world.
        """
        return WorldState(
            entities=dict(self.entities),
            facts=dict(self.facts),
            relationships=dict(self.relationships),
            threads=dict(self.threads),
            happenings=dict(self.happenings),
            scene=self.scene,
            event_count=self.event_count,
            last_seq=self.last_seq,
        )

    # -- the fold -------------------------------------------------------------------------------

    def apply(self, event: dict[str, Any], *, seq: int = 0, authority: str | None = None) -> None:
        """Fold one event (its JSON dict, as stored) into the state.

        The event was validated before it was committed (:mod:`story.rules`); the fold is still
        total: an event about an unknown id changes nothing rather than raising, so a replay
        never fails half-way.
        """
        kind = event["kind"]
        if kind in _ENTITY_EVENTS:
            self._apply_entity(kind, event)
        elif kind in _FACT_EVENTS:
            self._apply_fact(kind, event, seq=seq, authority=authority)
        else:
            self._apply_story(kind, event, seq=seq)
        self.event_count += 1
        self.last_seq = max(self.last_seq, seq)

    def _apply_entity(self, kind: str, event: dict[str, Any]) -> None:
        """An entity: created, its status or an attribute set, where it is or who holds it."""
        ents = self.entities
        if kind == "entity_created":
            ents[event["entity_id"]] = {
                "kind": event["entity_kind"],
                "name": event["name"],
                "aliases": list(event.get("aliases") or []),
                "description": event.get("description"),
                "status": event.get("status") or EntityStatus.ACTIVE.value,
                "attributes": dict(event.get("attributes") or {}),
                "location_id": None,
                "holder_id": None,
                "created_turn_id": event.get("turn_id"),
            }
            if event.get("visibility"):  # only when set: a public entity's state (and hash) is as before
                ents[event["entity_id"]]["visibility"] = event["visibility"]
        elif kind == "set_entity_status":
            if (ent := _own(ents, event["entity_id"])) is not None:
                ent["status"] = event["status"]
        elif kind == "set_entity_attribute":
            if (ent := _own(ents, event["entity_id"])) is not None:
                attrs = ent["attributes"] = dict(ent["attributes"])
                name = event["attribute"]
                if event.get("op") == "increment":
                    attrs[name] = (attrs.get(name) or 0) + event["amount"]
                elif event.get("value") is None:
                    attrs.pop(name, None)
                else:
                    attrs[name] = event["value"]
        elif kind == "current_location_set":
            if (ent := _own(ents, event["entity_id"])) is not None:
                ent["location_id"] = event["location_entity_id"]
        elif kind == "possession_set" and (ent := _own(ents, event["item_entity_id"])) is not None:
            ent["holder_id"] = event.get("holder_entity_id")
            if event.get("holder_entity_id") is None and event.get("location_entity_id"):
                ent["location_id"] = event["location_entity_id"]

    def _apply_fact(self, kind: str, event: dict[str, Any], *, seq: int, authority: str | None) -> None:
        """A fact added (superseding the one it replaces), or invalidated."""
        if kind == "fact_added":
            fid = event["fact_id"]
            self.facts[fid] = {
                "subject": event["subject_entity_id"],
                "predicate": event["predicate"],
                "object": event.get("object_entity_id"),
                "value": event.get("value"),
                "authority": event.get("authority") or authority or Authority.SYSTEM.value,
                "canon_level": event.get("canon_level") or CanonLevel.CANON.value,
                "confidence": event.get("confidence", 1.0),
                "status": FactStatus.ACTIVE.value,
                "replaces": event.get("replaces"),
                "superseded_by": None,
                "depends_on": list(event.get("depends_on") or []),
                "turn_id": event.get("turn_id"),
                "seq": seq,
            }
            if event.get("visibility"):  # only when set: a public fact's state (and hash) is as before
                self.facts[fid]["visibility"] = event["visibility"]
            if (old := _own(self.facts, event.get("replaces"))) is not None and old["status"] != "superseded":
                old["status"] = FactStatus.SUPERSEDED.value
                old["superseded_by"] = fid
        elif (fact := _own(self.facts, event["fact_id"])) is not None:
            how = event.get("invalidation") or FactInvalidation.SUPERSEDED.value
            if how == FactInvalidation.DISPUTED.value:
                fact["status"] = FactStatus.DISPUTED.value
            else:
                fact["status"] = FactStatus.SUPERSEDED.value
                if how == FactInvalidation.RETCONNED.value:
                    fact["canon_level"] = CanonLevel.RETCONNED.value
            if event.get("superseded_by"):
                fact["superseded_by"] = event["superseded_by"]

    def _apply_story(self, kind: str, event: dict[str, Any], *, seq: int) -> None:
        """Relationships, threads, the scene and happenings (any other kind changes nothing)."""
        turn = event.get("turn_id")
        if kind == "relationship_added":
            self.relationships[event["relationship_id"]] = {
                "source": event["source_entity_id"],
                "target": event["target_entity_id"],
                "kind": event["relationship_kind"],
                "description": event.get("description"),
                "status": RelationshipStatus.ACTIVE.value,
                "since_turn_id": turn,
                "until_turn_id": None,
            }
            if event.get("visibility"):  # only when set: a public relationship's state (and hash) is as before
                self.relationships[event["relationship_id"]]["visibility"] = event["visibility"]
        elif kind == "relationship_ended":
            if (rel := _own(self.relationships, event["relationship_id"])) is not None:
                rel["status"] = RelationshipStatus.ENDED.value
                rel["until_turn_id"] = turn or rel["since_turn_id"] or "unknown"
        elif kind == "thread_opened":
            self.threads[event["thread_id"]] = {
                "title": event["title"],
                "description": event.get("description"),
                "status": ThreadStatus.OPEN.value,
                "involved": list(event.get("involved_entity_ids") or []),
                "opened_turn_id": turn,
                "resolved_turn_id": None,
                "resolution": None,
            }
            if event.get("visibility"):  # only when set: a public thread's state (and hash) is as before
                self.threads[event["thread_id"]]["visibility"] = event["visibility"]
        elif kind in _THREAD_CLOSED:
            if (thread := _own(self.threads, event["thread_id"])) is not None:
                thread["status"] = _THREAD_CLOSED[kind]
                thread["resolved_turn_id"] = turn or thread["opened_turn_id"] or "unknown"
                thread["resolution"] = event.get("resolution") or event.get("reason")
        elif kind == "thread_advanced":
            if (thread := _own(self.threads, event["thread_id"])) is not None:
                step = {"turn_id": turn, "progress": event["progress"]}
                more = [e for e in event.get("involved_entity_ids") or [] if e not in thread["involved"]]
                step["involved"] = more
                # only when advanced: an open thread's state (and hash) is as before
                thread["advances"] = [*thread.get("advances", []), step]
                thread["involved"] = [*thread["involved"], *more]
                thread["status"] = ThreadStatus.ADVANCED.value
        elif kind == "scene_set":
            self.scene = {
                "scene_id": event["active_scene_id"],
                "location_id": event.get("location_entity_id"),
                "present": list(event.get("present_entity_ids") or []),
            }
        elif kind == "scene_ended":
            if self.scene is not None and self.scene["scene_id"] == event["ended_scene_id"]:
                self.scene = None
        elif kind == "event_recorded":
            self.happenings[event["happening_id"]] = {
                "title": event["title"],
                "description": event.get("description"),
                "participants": list(event.get("participant_entity_ids") or []),
                "location_id": event.get("location_entity_id"),
                "turn_id": turn,
                "seq": seq,
            }
        elif kind == "record_retconned":
            self._apply_retcon(event)

    def _apply_retcon(self, event: dict[str, Any]) -> None:
        """A happening, entity or relationship never was (schemas.retcons.RecordRetconned): it stays, marked
        retconned (a happening superseded, pointing at its retelling, which points back)."""
        table = {"happening": self.happenings, "entity": self.entities, "relationship": self.relationships}
        record = _own(table[event["record"]], event["record_id"])
        if record is None:
            return
        record["canon_level"] = CanonLevel.RETCONNED.value
        if event["record"] == "happening":
            record["status"] = FactStatus.SUPERSEDED.value
            if (new := event.get("superseded_by")) is not None:
                record["superseded_by"] = new
                if (retold := _own(self.happenings, new)) is not None:
                    retold["replaces"] = event["record_id"]

    # -- reads ----------------------------------------------------------------------------------

    def active_facts(self, subject: str, predicate: str) -> list[tuple[str, dict[str, Any]]]:
        """Current facts (active or disputed) about ``subject`` with ``predicate``."""
        return [
            (fid, f)
            for fid, f in self.facts.items()
            if f["subject"] == subject and f["predicate"] == predicate and f["status"] != FactStatus.SUPERSEDED.value
        ]

    def view(self, *, world_id: str, campaign_id: str, branch_id: str, turn_id: str | None) -> WorldStateView:
        """Typed view of the state (what the API and the narrator's scene state read).

        The records come from validated events, so the models are constructed without validating
        them again (``model_construct``, with enums converted by hand): ~10x cheaper on a world of
        thousands of entities, which is what keeps "the state as of any turn" fast. Every field is
        passed, defaults included: a default factory costs pydantic a signature inspection per call.
        """
        now = utc_now()
        entities = self._entity_models(world_id, campaign_id, now)
        facts = self._fact_models(campaign_id, now)
        relationships = [
            Relationship.model_construct(
                id=rid,
                source_entity_id=r["source"],
                target_entity_id=r["target"],
                kind=r["kind"],
                description=r["description"],
                status=RelationshipStatus(r["status"]),
                since_turn_id=r["since_turn_id"],
                until_turn_id=r["until_turn_id"],
                visibility=Visibility.model_validate(r["visibility"]) if r.get("visibility") else None,
                canon_level=CanonLevel(r.get("canon_level", CanonLevel.CANON.value)),
            )
            for rid, r in sorted(self.relationships.items())
        ]
        threads = [
            StoryThread.model_construct(
                id=tid,
                campaign_id=campaign_id,
                title=t["title"],
                description=t["description"],
                status=ThreadStatus(t["status"]),
                involved_entity_ids=t["involved"],
                opened_turn_id=t["opened_turn_id"],
                resolved_turn_id=t["resolved_turn_id"],
                resolution=t["resolution"],
                advances=[
                    ThreadAdvance.model_construct(
                        turn_id=a["turn_id"], progress=a["progress"], involved_entity_ids=a["involved"]
                    )
                    for a in t.get("advances", ())
                ],
                visibility=Visibility.model_validate(t["visibility"]) if t.get("visibility") else None,
            )
            for tid, t in sorted(self.threads.items())
        ]
        return WorldStateView.model_construct(
            campaign_id=campaign_id,
            branch_id=branch_id,
            turn_id=turn_id,
            entities=entities,
            facts=facts,
            relationships=relationships,
            threads=threads,
            happenings=self._happening_models(),
            locations={eid: e["location_id"] for eid, e in sorted(self.entities.items()) if e["location_id"]},
            holders={eid: e["holder_id"] for eid, e in sorted(self.entities.items()) if e["holder_id"]},
            active_scene_id=(self.scene or {}).get("scene_id"),
            event_count=self.event_count,
            state_hash=self.state_hash,
        )

    def _entity_models(self, world_id: str, campaign_id: str, now: datetime) -> list[Entity]:
        return [
            Entity.model_construct(
                id=eid,
                world_id=world_id,
                campaign_id=campaign_id,
                kind=EntityKind(e["kind"]),
                name=e["name"],
                aliases=e["aliases"],
                description=e["description"],
                status=EntityStatus(e["status"]),
                attributes=e["attributes"],
                created_turn_id=e["created_turn_id"],
                created_at=now,
                visibility=Visibility.model_validate(e["visibility"]) if e.get("visibility") else None,
                canon_level=CanonLevel(e.get("canon_level", CanonLevel.CANON.value)),
            )
            for eid, e in sorted(self.entities.items())
        ]

    def _happening_models(self) -> list[Happening]:
        """The happenings, oldest first (a retold one and its retelling both: see their status)."""
        return [
            Happening.model_construct(
                id=hid,
                title=h["title"],
                description=h["description"],
                participant_entity_ids=h["participants"],
                location_entity_id=h["location_id"],
                turn_id=h["turn_id"],
                status=FactStatus(h.get("status", FactStatus.ACTIVE.value)),
                canon_level=CanonLevel(h.get("canon_level", CanonLevel.CANON.value)),
                replaces=h.get("replaces"),
                superseded_by=h.get("superseded_by"),
            )
            for hid, h in sorted(self.happenings.items(), key=lambda kv: (kv[1]["seq"], kv[0]))
        ]

    def _fact_models(self, campaign_id: str, now: datetime) -> list[Fact]:
        return [
            Fact.model_construct(
                id=fid,
                campaign_id=campaign_id,
                subject_entity_id=f["subject"],
                predicate=f["predicate"],
                object_entity_id=f["object"],
                value=f["value"],
                authority=Authority(f["authority"]),
                status=FactStatus(f["status"]),
                canon_level=CanonLevel(f["canon_level"]),
                confidence=f["confidence"],
                replaces=f["replaces"],
                evidence=Evidence.model_construct(turn_ids=[], chunk_ids=[], quote=None),
                created_turn_id=f["turn_id"],
                created_at=now,
                visibility=Visibility.model_validate(f["visibility"]) if f.get("visibility") else None,
            )
            for fid, f in sorted(self.facts.items())
        ]


def _own(table: dict[str, dict[str, Any]], key: str | None) -> dict[str, Any] | None:
    """Replace ``table[key]`` with a shallow copy and return it (None when absent): copy on write."""
    if key is None:
        return None
    record = table.get(key)
    if record is None:
        return None
    record = dict(record)
    table[key] = record
    return record
