"""What a player key may see of an answer: the secrets filter behind :func:`serve.operations.access.visible`.

The GM of a campaign (and an admin) sees everything. A player key sees what is public and what names the
character it plays; the rule is :class:`story.viewer.Viewer` (the same one the narrator's context for a
player's turn is cut by), applied here to every answer that carries the story's records:

* the state: its entities, facts, relationships and threads (each with its visibility; a retconned fact
  keeps its own), and of a hidden entity nothing at all (its facts, relationships, whereabouts, holdings,
  places in threads);
* memories and subjective claims (unset: known to their observer — an NPC's are the GM's);
* summaries; proposals of a secret fact, entity or relationship (or a state change with a secret event, or a
  GM's edit that is one), or naming a hidden entity;
* house rules: those whose ruling (a fact) the player sees in the state as of the same position;
* recall hits (memories, facts, summaries and the GM's notes looked up by id; a hit whose record cannot be found is left
  out: the filter fails closed);
* a turn's provenance: the prompt snapshot and the exact prompt text are the GM's (the narrator of a GM's
  turn may have been told what the players may not see), and so are the records recall put into it and the
  GM's reviews; the book passages (the shared knowledge) stay;
* media records: as their visibility says, and none showing a hidden entity (one asked for by id answers like
  a missing one); a turn's presentation without the blocks whose media, or whose speaker, the player may not see;
* a decided proposal's rationale, where it names a fact or entity the player may not see (the gate quotes
  the canon a proposal contradicts): the status stays, the why is withheld.

A scene's outcomes in words are written for the table (public canon only: :mod:`story.scenes`), so a scene
passes as it is. An answer no rule names passes as it is: the other answers carry no secret record.
"""

from __future__ import annotations

from typing import Any

from schemas.canon import WorldStateView
from schemas.errors import NotFound
from schemas.media import MediaAsset
from schemas.narration import Memory, RetrievalSource, Summary, TurnProvenance
from schemas.presentation import TurnPresentation
from schemas.proposals import ProposedChange
from schemas.recall import RecallResponse
from serve.operations.base import Call
from story.house_rules import HouseRule
from story.viewer import TABLE, Viewer


def viewer_of(call: Call[Any]) -> Viewer:
    """The caller as the secrets rule sees them: the GM of the campaign (or an admin), or the player of one
    character (or of none)."""
    campaign_id = call.campaign_id or ""
    gm = call.caller.admin or call.caller.runs(campaign_id)
    return Viewer(gm=gm, character_id=None if gm else call.caller.character_entity_id)


def narrator_viewer(call: Call[Any]) -> Viewer:
    """The seat every turn over the API is narrated from: the table's (public records only), whoever plays it.

    A turn's narration is read by the whole table (the turn's answer, the listed turns and takes, recall, the
    prompts of the turns after it), so a record only some may see — GM-only, or known to a character, even
    the player's own — would reach the others through it. Such records inform what their audience reads
    (state, memories, recall), never the narration."""
    del call  # the same seat for every caller: the narration's audience is the table, not the caller
    return TABLE


async def redact(call: Call[Any], result: Any) -> Any:
    """``result`` as the caller may see it (the GM's answers unchanged)."""
    viewer = viewer_of(call)
    if viewer.gm or call.campaign_id is None:
        return result
    if isinstance(result, WorldStateView):
        return viewer.state(result)
    if isinstance(result, TurnProvenance):
        return _provenance(result)
    if isinstance(result, RecallResponse):
        return await _recall(call, viewer, result)
    if isinstance(result, MediaAsset | TurnPresentation):
        return await _media(call, viewer, result)
    if isinstance(result, list):
        return await _items(call, viewer, result)
    return result


async def _items(call: Call[Any], viewer: Viewer, items: list[Any]) -> list[Any]:
    """The records of a listing the player may see (proposals and house rules checked against the state)."""
    story, campaign_id = call.ctx.story, call.campaign_id
    hidden: set[str] = set()
    if any(isinstance(r, ProposedChange) for r in items):
        state = await call.run(story.state, campaign_id)
        hidden = viewer.hidden(state)
        # a decision's rationale may quote the canon it was held against ("it contradicts fact … (plan = …)")
        items = [_told(viewer, r, state) if isinstance(r, ProposedChange) else r for r in items]
    if any(isinstance(r, MediaAsset) for r in items):
        shown = viewer.hidden(await call.run(story.state, campaign_id))
        items = [r for r in items if not isinstance(r, MediaAsset) or viewer.sees_media(r, shown)]
    if any(isinstance(r, HouseRule) for r in items):
        state = await call.run(story.state, campaign_id, turn_id=getattr(call.body, "turn_id", None))
        seen_facts = {f.id for f in viewer.state(state).facts}
        items = [r for r in items if not isinstance(r, HouseRule) or r.fact_id in seen_facts]

    def seen(item: Any) -> bool:
        if isinstance(item, Memory):
            return viewer.sees_memory(item)
        if isinstance(item, Summary):
            return viewer.sees_summary(item)
        if isinstance(item, ProposedChange):
            return viewer.sees_proposal(item, hidden)
        return True

    return [r for r in items if seen(r)]


def _told(viewer: Viewer, proposal: ProposedChange, state: WorldStateView) -> ProposedChange:
    """A decided proposal whose rationale names a record the player may not see keeps its status, not its why."""
    if viewer.names_only_seen(proposal.rationale, state):
        return proposal
    why = f"{proposal.status.value} by the gate, against canon this key may not see"
    return proposal.model_copy(update={"rationale": why})


def _provenance(provenance: TurnProvenance) -> TurnProvenance:
    """A player's view of a turn's provenance: no prompt, no recalled records, no GM's reviews (their
    rationales are the GM's notes, as in the review queue); the book passages stay."""
    retrievals = [
        r.model_copy(update={"recalled": []}) for r in provenance.retrievals if r.source is RetrievalSource.KNOWLEDGE
    ]
    update: dict[str, Any] = {"prompt": None, "prompt_text": None, "retrievals": retrievals}
    if getattr(provenance, "reviews", None):
        update["reviews"] = []
    return provenance.model_copy(update=update)


async def _recall(call: Call[Any], viewer: Viewer, response: RecallResponse) -> RecallResponse:
    """The hits the player may see (each secret-bearing record looked up), best first, at most the asked limit."""
    story, campaign_id, turn_id = call.ctx.story, response.campaign_id, response.as_of_turn_id
    kinds = {h.kind for h in response.hits}
    memories = await call.run(story.memories, campaign_id, turn_id=turn_id) if "memory" in kinds else []
    state = await call.run(story.state, campaign_id, turn_id=turn_id) if "fact" in kinds else None
    summaries = await call.run(story.summaries, campaign_id, turn_id=turn_id) if "summary" in kinds else []
    notes = await call.run(story.desk.notes.of_campaign, campaign_id) if "note" in kinds else []
    hits = viewer.hits(response.hits, memories=memories, state=state, summaries=summaries, notes=notes)
    return response.model_copy(update={"hits": hits[: call.extra.get("recall_limit")]})


async def _media(call: Call[Any], viewer: Viewer, result: MediaAsset | TurnPresentation) -> Any:
    """A media record the player may not see answers like a missing one; a presentation keeps only the blocks
    whose media record and speaker (or actor, or roller) the player may see."""
    story, campaign_id = call.ctx.story, call.campaign_id or ""
    hidden = viewer.hidden(await call.run(story.state, campaign_id))
    if isinstance(result, MediaAsset):
        if not viewer.sees_media(result, hidden):
            raise NotFound("story", f"no media {result.id!r} in campaign {campaign_id!r}")
        return result
    records = {m.id: m for m in await call.run(story.media.records, campaign_id)}

    def shown(block: Any) -> bool:
        people = [getattr(block, role, None) for role in ("speaker", "actor", "roller")]
        if any(p is not None and p.entity_id in hidden for p in people):
            return False
        media_id = getattr(block, "media_asset_id", None)
        return media_id is None or (media_id in records and viewer.sees_media(records[media_id], hidden))

    return result.model_copy(update={"blocks": [b for b in result.blocks if shown(b)]})
