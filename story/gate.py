"""The scene-end canonization gate: judge every pending proposal, write the accepted ones as canon.

For each pending proposal, in the order they were made: whether its evidence holds
(:mod:`story.citations`: the chunks and turns it cites exist, are the campaign's and drawn on), the
authority policy (:func:`story.policy.authority_verdict`), then the contradiction check against
current canon on this branch (:func:`story.policy.resolve_contradictions`), then the rulebook: the
source facts of the books the campaign draws on, or a house rule in force
(:mod:`story.source_check`), then the world's axioms where a judge checked them
(:mod:`story.axioms`), then the semantic rules against the world as it stands after the proposals
accepted before it (:func:`story.rules.check_events`). A proposal is accepted whole or rejected
whole, with its rationale. All accepted proposals become canon in the one transaction of the commit
(:meth:`story.graph.StoryGraph.commit`): the state events, the canon nodes they establish with canon
level, authority and confidence, SUPPORTED_BY edges to the scene, the evidence turns, the resolution,
the source chunks and the source facts they agree with (a house rule OVERRIDES the facts it departs
from, a disputed fact DISPUTES them), and the decisions themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.common import Authority, utc_now
from schemas.events import BaseStateEvent, FactAdded
from schemas.story import (
    Axiom,
    Evidence,
    ProposalDecision,
    ProposalReview,
    ProposalStatus,
    ProposedChange,
    Resolution,
    ReviewAction,
    Scene,
)
from stores.catalog import from_props
from stores.graph.base import GraphStore
from story import cypher
from story.axioms import AxiomJudge, AxiomRulings, rule_on_axioms
from story.citations import Citations, read_citations
from story.graph import CampaignContext, Writes, commit_uid
from story.policy import GatePolicy, authority_verdict, awaits_review, proposal_events, resolve_contradictions
from story.rules import check_events
from story.source_check import (
    HouseRuleDraft,
    SourceFacts,
    SourceVerdict,
    canon_rulings,
    check_proposal,
    read_source_facts,
)
from story.state import WorldState

#: Canon node label per event kind, and the event field holding the node's id.
CANON_NODES: dict[str, tuple[str, str]] = {
    "entity_created": ("Entity", "entity_id"),
    "fact_added": ("Fact", "fact_id"),
    "relationship_added": ("Relationship", "relationship_id"),
    "thread_opened": ("StoryThread", "thread_id"),
    "event_recorded": ("Happening", "happening_id"),
}


@dataclass(slots=True)
class CanonBatch:
    """Events to commit, each with what justifies it."""

    events: list[BaseStateEvent] = field(default_factory=list)
    meta: list[dict[str, Any]] = field(default_factory=list)  # authority, confidence, proposal, evidence

    def add(
        self,
        events: Sequence[BaseStateEvent],
        *,
        authority: str,
        confidence: float,
        proposal_id: str | None = None,
        evidence: Evidence | None = None,
        resolution_id: str | None = None,
        source: SourceVerdict | None = None,
        ruled_by: str | None = None,
        depth: int | None = None,
        review: ProposalReview | None = None,
    ) -> None:
        """Add ``events`` with what justifies them; ``depth`` anchors them at a turn's depth instead of the
        batch's (a mid-scene commit anchors a proposal at the turn it names: :func:`write_canon`)."""
        rules = {r.event_id: r for r in source.house_rules} if source else {}
        for event in events:
            self.events.append(event)
            self.meta.append(
                {
                    "authority": authority,
                    "confidence": confidence,
                    "proposal_id": proposal_id,
                    "evidence": evidence or Evidence(),
                    "resolution_id": resolution_id,
                    "supports": source.supports.get(event.event_id, []) if source else [],
                    "disputes": source.disputes.get(event.event_id, []) if source else [],
                    "house_rule": rules.get(event.event_id),
                    "ruled_by": ruled_by,
                    "depth": depth,
                    "review": review,
                }
            )


def judge(
    proposals: Sequence[ProposedChange],
    state: WorldState,
    policy: GatePolicy,
    *,
    head_turn_id: str | None,
    scene_id: str,
    first_seq: int,
    citations: Citations,
    source_facts: SourceFacts | None = None,
    axiom_violations: Mapping[str, Sequence[str]] | None = None,
    anchors: Mapping[str, int] | None = None,
) -> tuple[list[ProposalDecision], CanonBatch, WorldState]:
    """Decide each proposal in order against a state that grows with the accepted ones.

    Args:
        citations: what the proposals cite, read once for the batch (:func:`story.citations.read_citations`);
            a proposal whose evidence does not hold is rejected before its authority is weighed.
        source_facts: the rulebook's facts about the entries the proposals touch, read once for the
            batch (:func:`story.source_check.read_source_facts`); None checks nothing against books.
        axiom_violations: by proposal id, the world's axioms a judge found it breaks, each with why
            (:mod:`story.axioms`); a GM's proposal breaking one is accepted, with a note.
        anchors: by proposal id, the depth of the turn it names, where its canon is anchored (the others'
            at the batch's position, the head).

    Returns:
        The decisions, the accepted events with their justification, and the state after them.
    """
    decisions: list[ProposalDecision] = []
    batch = CanonBatch()
    seq = first_seq
    for proposal in proposals:
        early = _before_canon_checks(proposal, citations, policy)
        if early is not None:
            decisions.append(early)
            continue
        events = proposal_events(proposal, turn_id=head_turn_id, scene_id=scene_id)
        settled = resolve_contradictions(events, state, proposal.authority, policy)
        if not settled.accepted:
            decisions.append(_rejected(proposal, settled.rationale))
            continue
        source = SourceVerdict()
        if source_facts is not None:
            source = check_proposal(proposal, settled.events, state, source_facts, policy)
        source.house_rules.extend(canon_rulings(settled.overrides, state))  # a GM's word over source canon
        if source.refusal is not None:
            decisions.append(_rejected(proposal, source.refusal, source.cited))
            continue
        notes = [*([settled.rationale] if settled.rationale else []), *source.notes]
        broken = list((axiom_violations or {}).get(proposal.id, ()))
        if broken and proposal.authority is not Authority.GM:
            decisions.append(_rejected(proposal, "it breaks the world's axioms: " + "; ".join(broken), source.cited))
            continue
        notes += [f"a GM ruling against the world's axioms: {'; '.join(broken)}"] if broken else []
        events = [*settled.events, *source.events]
        checked = check_events(state, events, first_seq=seq, authority=proposal.authority.value)
        if checked.issues:
            why = "; ".join(f"[{i.code}] {i.message}" for i in checked.issues)
            decisions.append(_rejected(proposal, f"validation failed: {why}", source.cited))
            continue
        state = checked.state
        seq += len(events)
        resolution_id = resolution_uid(proposal.id) if proposal.resolution is not None else None
        batch.add(
            events,
            authority=proposal.authority.value,
            confidence=proposal.confidence,
            proposal_id=proposal.id,
            evidence=proposal.evidence,
            resolution_id=resolution_id,
            source=source,
            ruled_by=_ruler(proposal),
            depth=(anchors or {}).get(proposal.id),
            review=proposal.review,
        )
        decisions.append(_accepted(proposal, events, notes, source))
    return decisions, batch, state


def _accepted(
    proposal: ProposedChange, events: Sequence[BaseStateEvent], notes: Sequence[str], source: SourceVerdict
) -> ProposalDecision:
    why = f"accepted on {proposal.authority.value} authority"
    if proposal.review is not None:
        why += f" ({proposal.review.action.value}ed on review by {proposal.review.reviewer})"
    return ProposalDecision(
        proposal_id=proposal.id,
        status=ProposalStatus.ACCEPTED,
        authority=proposal.authority,
        rationale="; ".join([why, *notes]),
        event_ids=[e.event_id for e in events],
        source_fact_ids=source.cited,
        house_rule=bool(source.house_rules),
    )


def judge_pending(
    graph: GraphStore,
    ctx: CampaignContext,
    state: WorldState,
    scene_id: str,
    pending: list[ProposedChange],
    *,
    policy: GatePolicy,
    axioms: Sequence[Axiom],
    axiom_judge: AxiomJudge | None,
    anchors: Mapping[str, int] | None,
) -> tuple[list[ProposalDecision], CanonBatch, WorldState, AxiomRulings]:
    """:func:`judge` the scene's ``pending`` proposals (in order, reviews applied) against ``state``, the world
    at the head of ``ctx``, with what they cite, the rulebook's facts and the axiom judge's rulings read for
    them: what a commit or a scene's end writes, and what the review queue's dry run shows. Writes nothing."""
    citations = read_citations(graph, ctx.id, pending, ctx.campaign.library_pins)
    source_facts = read_source_facts(graph, pending, state, ctx.campaign.library_pins)
    rulings = rule_on_axioms(axiom_judge, axioms, pending, state)
    decisions, batch, after = judge(
        pending,
        state,
        policy,
        head_turn_id=ctx.head.id if ctx.head else None,
        scene_id=scene_id,
        first_seq=ctx.event_seq + 1,
        citations=citations,
        source_facts=source_facts,
        axiom_violations=rulings.violations,
        anchors=anchors,
    )
    return decisions, batch, after, rulings


def _before_canon_checks(proposal: ProposedChange, citations: Citations, policy: GatePolicy) -> ProposalDecision | None:
    """The decision on ``proposal`` before canon is consulted, if that settles it: the GM rejected it on review,
    its evidence does not hold, it waits for the GM's review (left pending), or its authority is not enough."""
    review = proposal.review
    if review is not None and review.action is ReviewAction.REJECT:
        return _rejected(proposal, f"rejected on review by {review.reviewer}: {review.rationale}")
    refusal = citations.verdict(proposal)
    if refusal is None:
        waiting = awaits_review(proposal, policy)
        if waiting is not None:
            return ProposalDecision(
                proposal_id=proposal.id, status=ProposalStatus.PENDING, rationale=waiting, authority=proposal.authority
            )
        refusal = authority_verdict(proposal, policy)
    return None if refusal is None else _rejected(proposal, refusal)


def _ruler(proposal: ProposedChange) -> str:
    """Who a ruling is: the GM who reviewed the proposal (an extractor's claim the GM accepted), else who
    proposed it."""
    return (proposal.review.reviewer if proposal.review else None) or proposal.proposed_by or proposal.authority.value


def _rejected(proposal: ProposedChange, why: str, source_fact_ids: Sequence[str] = ()) -> ProposalDecision:
    return ProposalDecision(
        proposal_id=proposal.id,
        status=ProposalStatus.REJECTED,
        rationale=why,
        authority=proposal.authority,
        source_fact_ids=list(source_fact_ids),
    )


def resolution_uid(proposal_id: str) -> str:
    return f"res_{proposal_id.split('_', 1)[-1]}"


@dataclass(slots=True)
class _CanonRows:
    """The nodes and links a batch of canon writes, gathered event by event."""

    events: list[dict[str, Any]] = field(default_factory=list)
    canon: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> node rows
    established: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # label -> (node, event)
    supports: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)  # (label, target label)
    replaces: list[tuple[str, str]] = field(default_factory=list)
    depends: list[tuple[str, str]] = field(default_factory=list)
    from_proposal: list[tuple[str, str]] = field(default_factory=list)
    from_review: list[tuple[str, str]] = field(default_factory=list)
    source_links: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)  # (label, rel)


def write_canon(
    ctx: CampaignContext,
    writes: Writes,
    batch: CanonBatch,
    *,
    branch_id: str,
    depth: int,
    first_seq: int,
    scene_id: str | None,
    version: int,
) -> None:
    """Queue the statements that make ``batch`` canon at position ``(branch_id, depth)``; an event added with
    a depth of its own (:meth:`CanonBatch.add`) is anchored there, on the same branch."""
    if not batch.events:
        return
    now = utc_now().isoformat()
    commit = commit_uid(ctx.id, version)
    rows = _CanonRows()
    for offset, (event, meta) in enumerate(zip(batch.events, batch.meta, strict=True)):
        seq = first_seq + offset
        at = depth if meta.get("depth") is None else meta["depth"]
        payload = event.model_dump(mode="json")
        row = {
            "uid": event.event_id,
            "campaign_id": ctx.id,
            "seq": seq,
            "branch_id": branch_id,
            "depth": at,
            "kind": payload["kind"],
            "payload_json": _json(payload),
            "authority": meta["authority"],
            "confidence": meta["confidence"],
            "commit_uid": commit,
            "created_at": now,
        }
        for key, value in (("turn_uid", event.turn_id), ("scene_uid", scene_id), ("proposal_uid", meta["proposal_id"])):
            if value is not None:
                row[key] = value
        rows.events.append(row)
        if meta["proposal_id"]:
            rows.from_proposal.append((event.event_id, meta["proposal_id"]))
        review: ProposalReview | None = meta.get("review")
        if review is not None:  # canon a GM's review let through (or edited) names the review
            row.update(review_uid=review.id, reviewed_by=review.reviewer)
            rows.from_review.append((event.event_id, review.id))
        if payload["kind"] in CANON_NODES:
            node = _canon_node(ctx, payload, meta, branch_id=branch_id, depth=at, seq=seq, at=now)
            node["established_by"] = event.event_id
            node.update(_source_props(meta, now))
            if review is not None:
                node.update(proposal_uid=meta["proposal_id"], review_uid=review.id, reviewed_by=review.reviewer)
            _gather_canon(rows, CANON_NODES[payload["kind"]][0], event, meta, node, scene_id)
    _queue_canon(writes, rows, commit, branch_id)


def _canon_node(
    ctx: CampaignContext,
    payload: dict[str, Any],
    meta: dict[str, Any],
    *,
    branch_id: str,
    depth: int,
    seq: int,
    at: str,
) -> dict[str, Any]:
    """The node an event establishes (an entity, a fact…), with its position and canon level."""
    uid = payload[CANON_NODES[payload["kind"]][1]]
    node = {k: v for k, v in payload.items() if v is not None and not isinstance(v, dict | list)}
    node.update(
        {
            "uid": uid,
            "id": uid,
            "campaign_id": ctx.id,
            "world_uid": ctx.campaign.world_id,
            "branch_id": branch_id,
            "depth": depth,
            "seq": seq,
            "authority": meta["authority"],
            "confidence": meta["confidence"],
            "canon_level": payload.get("canon_level", "canon"),
            "created_at": at,
        }
    )
    for key, value in payload.items():
        if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
            node[key] = value
        elif isinstance(value, dict):
            node[key + "_json"] = _json(value)
    if "name" in node:
        node["normalized_name"] = " ".join(str(node["name"]).casefold().split())
    return node


def _gather_canon(
    rows: _CanonRows,
    label: str,
    event: BaseStateEvent,
    meta: dict[str, Any],
    node: dict[str, Any],
    scene_id: str | None,
) -> None:
    """Add a canon node and what supports it, replaces it or it depends on."""
    uid = node["uid"]
    rows.canon.setdefault(label, []).append(node)
    rows.established.setdefault(label, []).append((uid, event.event_id))
    evidence: Evidence = meta["evidence"]
    targets: list[tuple[str, str]] = []
    if scene_id is not None:
        targets.append(("Scene", scene_id))
    targets += [("Turn", t) for t in dict.fromkeys([*evidence.turn_ids, *([event.turn_id] if event.turn_id else [])])]
    targets += [("Chunk", chunk) for chunk in evidence.chunk_ids]
    if meta["resolution_id"]:
        targets.append(("Resolution", meta["resolution_id"]))
    for target_label, target in targets:
        rows.supports.setdefault((label, target_label), []).append((uid, target))
    if isinstance(event, FactAdded):
        if event.replaces:
            rows.replaces.append((uid, event.replaces))
        rows.depends.extend((uid, dep) for dep in event.depends_on)
    rule: HouseRuleDraft | None = meta.get("house_rule")
    for rel, uids in (
        ("SUPPORTED_BY", meta.get("supports") or []),
        ("DISPUTES", meta.get("disputes") or []),
        ("OVERRIDES", [f.uid for f in rule.book] if rule is not None else []),
    ):
        rows.source_links.setdefault((label, rel), []).extend((uid, target) for target in uids)


def _source_props(meta: dict[str, Any], at: str) -> dict[str, Any]:
    """What a canon node records of the rulebook: the source facts it agrees with, disputes or overrides.

    Kept as properties as well as edges: a campaign bundle carries its own records, not the library's
    facts, so after an import the node still says which facts of which book it was held against and
    what a house rule departs from.
    """
    rule: HouseRuleDraft | None = meta.get("house_rule")
    uids = [*(meta.get("supports") or []), *(meta.get("disputes") or []), *([f.uid for f in rule.book] if rule else [])]
    props: dict[str, Any] = {"source_fact_ids": list(dict.fromkeys(uids))} if uids else {}
    if rule is not None:
        props.update(rule.marks(meta.get("ruled_by") or "gm", at))
        if rule.canon:  # a ruling against the campaign's source canon: the facts it departs from
            props["source_fact_ids"] = list(
                dict.fromkeys([*props.get("source_fact_ids", []), *(c[0] for c in rule.canon)])
            )
    return props


def _queue_canon(writes: Writes, rows: _CanonRows, commit: str, branch_id: str) -> None:
    writes.add(*cypher.merge_nodes("StateEvent", rows.events))
    writes.add(*cypher.link_nodes("StateEvent", "COMMITTED_IN", "Commit", [(r["uid"], commit) for r in rows.events]))
    if rows.from_proposal:
        writes.add(*cypher.link_nodes("StateEvent", "FROM_PROPOSAL", "ProposedChange", rows.from_proposal))
    if rows.from_review:
        writes.add(*cypher.link_nodes("StateEvent", "FROM_REVIEW", "ProposalReview", rows.from_review))
    for label, nodes in rows.canon.items():
        writes.add(*cypher.merge_nodes(label, nodes))
        writes.add(*cypher.link_nodes(label, "ESTABLISHED_BY", "StateEvent", rows.established[label]))
    for (label, target_label), pairs in _supports_in_order(rows.supports):
        writes.add(*cypher.link_nodes(label, "SUPPORTED_BY", target_label, pairs))
    if rows.replaces:
        writes.add(*cypher.link_nodes("Fact", "REPLACES", "Fact", rows.replaces, branch_id=branch_id))
    if rows.depends:
        writes.add(*cypher.link_nodes("Fact", "DEPENDS_ON", "Fact", rows.depends))
    for (label, rel), pairs in rows.source_links.items():
        if pairs:
            writes.add(*cypher.link_nodes(label, rel, "SourceFact", pairs))


def _supports_in_order(
    supports: dict[tuple[str, str], list[tuple[str, str]]],
) -> list[tuple[tuple[str, str], list[tuple[str, str]]]]:
    """SUPPORTED_BY links grouped by target label first (scenes, turns, chunks, resolutions as first met)."""
    targets = list(dict.fromkeys(target for _, target in supports))
    return sorted(supports.items(), key=lambda item: targets.index(item[0][1]))


def decision_writes(
    campaign_id: str,
    writes: Writes,
    proposals: Sequence[ProposedChange],
    decisions: Sequence[ProposalDecision],
) -> None:
    """Queue the proposals' new status, rationale and resolution nodes."""
    now = utc_now().isoformat()
    by_id = {p.id: p for p in proposals}
    rows = [
        {"uid": d.proposal_id, "props": {"status": d.status.value, "rationale": d.rationale, "decided_at": now}}
        for d in decisions
        if d.status is not ProposalStatus.PENDING  # left pending for the GM's review: nothing decided
    ]
    if rows:
        writes.add(*cypher.decide_proposals(rows))
    resolutions = [
        _resolution_row(by_id[d.proposal_id].resolution, d.proposal_id, by_id[d.proposal_id].scene_id, campaign_id)
        for d in decisions
        if d.status is ProposalStatus.ACCEPTED and by_id[d.proposal_id].resolution is not None
    ]
    if resolutions:
        writes.add(*cypher.create_nodes("Resolution", resolutions))
        pairs = [(r["uid"], r["proposal_uid"]) for r in resolutions]
        writes.add(*cypher.link_nodes("Resolution", "RESOLVES", "ProposedChange", pairs))


def _resolution_row(resolution: Resolution | None, proposal_id: str, scene_id: str, campaign_id: str) -> dict[str, Any]:
    assert resolution is not None
    data = resolution.model_dump(mode="json")
    row: dict[str, Any] = {
        "uid": resolution_uid(proposal_id),
        "proposal_uid": proposal_id,
        "scene_uid": scene_id,
        "campaign_id": campaign_id,
        "method": data["method"],
        "outcome": data["outcome"],
        "resolved_at": data["resolved_at"],
    }
    if data.get("roll"):
        row["roll_json"] = _json(data["roll"])
    if data.get("note"):
        row["note"] = data["note"]
    return row


def scene_outcomes(proposals: Sequence[ProposedChange], decisions: Sequence[ProposalDecision]) -> list[str]:
    """The accepted proposals, in words, for the scene's canonical outcomes."""
    by_id = {p.id: p for p in proposals}
    out = []
    for d in decisions:
        if d.status is not ProposalStatus.ACCEPTED:
            continue
        c = by_id[d.proposal_id].content
        data = c.model_dump(mode="json", exclude_none=True)
        kind = data.pop("type")
        if kind == "event":
            out.append(f"{data['title']}" + (f": {data['description']}" if data.get("description") else ""))
        elif kind == "entity":
            out.append(
                f"{data['name']} ({data['kind']})" + (" enters the story" if not data.get("entity_id") else " changes")
            )
        elif kind == "fact":
            obj = data.get("object_entity_id", data.get("value"))
            out.append(f"{data['subject_entity_id']} {data['predicate']} {obj}")
        elif kind == "relationship":
            out.append(f"{data['source_entity_id']} {data['kind']} {data['target_entity_id']}")
        else:
            out.append(", ".join(e["kind"] for e in data["events"]))
    return out


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scene_of(props: dict[str, Any]) -> Scene:
    return from_props(Scene, props, key="id")
