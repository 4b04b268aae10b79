"""Sessions and arcs: named spans of a line of the story, and their summaries.

A :class:`~schemas.desk.StorySpan` covers the turns after ``after_turn_id`` up to ``to_turn_id`` on the line of
its last turn. A **session** is what was played in one sitting: started at the head (:meth:`Spans.start_session`)
and ended there later (:meth:`Spans.end_session`), or given as a range of turns. An **arc** is a named run of
ended scenes on one line (:meth:`Spans.create`): from the turn its first scene started at to the turn its last
one ended at.

A span's summary is a :class:`~schemas.story.Summary` of scope ``session`` or ``arc`` anchored at the span's last
turn (so it is read, and recalled, from that turn's future only), written by the GM or formed by the story's
memory former as a scene's is (:mod:`story.formation`: extractive without a model, ``narrator.formation`` when
one is bound) from the span's turns and the outcomes of the scenes that ended in it. Spans are listed per line
(:meth:`Spans.at`): a branch forked before a span ended does not list it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from schemas.common import utc_now
from schemas.desk import SpanKind, StorySpan
from schemas.story import Scene, SceneStatus, Summary, SummaryScope, Turn
from schemas.visibility import Visibility
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryInvalid, StoryNotFound
from story.formation import SceneMemoryFormer
from story.graph import anchored_on, node_props

log = structlog.get_logger(__name__)

LABEL = "StorySpan"


def _of_campaign(campaign_id: str) -> Statement:
    return f"MATCH (n:{LABEL}) WHERE n.campaign_id = $c RETURN n ORDER BY n.started_at", {"c": campaign_id}


def _set(span_id: str, props: dict[str, Any]) -> Statement:
    return f"MATCH (n:{LABEL} {{uid: $u}}) SET n += $p RETURN n", {"u": span_id, "p": props}


class Spans:
    """Sessions and arcs of a campaign and their summaries.

    Args:
        add_summary: writes a summary and indexes it for recall (:meth:`story.service.StoryService.add_summary`).
        former: the story's memory former now (None: summaries are the GM's to write).
    """

    def __init__(
        self,
        core: StoryCore,
        add_summary: Callable[[Summary], Summary],
        former: Callable[[], SceneMemoryFormer | None],
    ) -> None:
        self.core = core
        self.story = core.story
        self.add_summary = add_summary
        self.former = former

    # -- sessions -------------------------------------------------------------------------------------

    def start_session(self, campaign_id: str, name: str | None = None) -> StorySpan:
        """A session starts after the head. Raises StoryInvalid: one is being played (end it first)."""
        ctx = self.story.context(campaign_id)
        spans = self._all(campaign_id)
        if any(s.kind is SpanKind.SESSION and s.to_turn_id is None for s in spans):
            raise StoryInvalid(f"a session of campaign {campaign_id!r} is being played: end it first")
        count = sum(1 for s in spans if s.kind is SpanKind.SESSION)
        span = StorySpan(
            campaign_id=campaign_id,
            kind=SpanKind.SESSION,
            name=name or f"Session {count + 1}",
            branch_id=ctx.campaign.active_branch_id,
            after_turn_id=ctx.head.id if ctx.head else None,
        )
        self._write(span, depth=ctx.head_depth)
        log.info("session_started", campaign_id=campaign_id, span_id=span.id, after_turn_id=span.after_turn_id)
        return span

    def end_session(self, campaign_id: str, span_id: str, turn_id: str | None = None) -> StorySpan:
        """End a session at the head (or a turn of its line after its start).

        Raises:
            StoryNotFound: no such span. StoryInvalid: not an open session, or no turn was played in it.
        """
        span = self.get(campaign_id, span_id)
        if span.kind is not SpanKind.SESSION or span.to_turn_id is not None:
            raise StoryInvalid(f"span {span_id!r} is not a session being played")
        last = self._last(campaign_id, turn_id, "turn_id")
        if last.id == span.after_turn_id:
            raise StoryInvalid(f"no turn was played in session {span_id!r} yet")
        self._first(campaign_id, span.after_turn_id, last)
        ended = span.validated_copy(to_turn_id=last.id, branch_id=last.branch_id, ended_at=utc_now())
        self._update(ended, depth=last.depth)
        log.info("session_ended", campaign_id=campaign_id, span_id=span_id, to_turn_id=last.id)
        return ended

    # -- arcs and ranges ------------------------------------------------------------------------------

    def create(
        self,
        campaign_id: str,
        name: str,
        *,
        kind: SpanKind = SpanKind.ARC,
        scene_ids: Sequence[str] = (),
        from_turn_id: str | None = None,
        to_turn_id: str | None = None,
    ) -> StorySpan:
        """An arc of ended scenes on one line, or a span (session or arc) given as a range of turns.

        Raises:
            InvalidReference: a scene or turn that is not the campaign's, a scene not ended, scenes or turns not
                on one line. StoryInvalid: neither scenes nor a range given, or both.
        """
        if bool(scene_ids) == (from_turn_id is not None or to_turn_id is not None):
            raise StoryInvalid("give an arc's scene_ids, or a range (from_turn_id, to_turn_id), not both")
        if scene_ids:
            after, last = self._scenes_span(campaign_id, scene_ids)
        else:
            last = self._last(campaign_id, to_turn_id)
            first = self._turn(campaign_id, from_turn_id, "from_turn_id") if from_turn_id else None
            after = first.parent_turn_id if first else None
            self._first(campaign_id, after, last)
        now = utc_now()
        span = StorySpan(
            campaign_id=campaign_id,
            kind=kind,
            name=name,
            branch_id=last.branch_id,
            after_turn_id=after,
            to_turn_id=last.id,
            scene_ids=list(scene_ids),
            ended_at=now,
            started_at=now,
        )
        self._write(span, depth=last.depth)
        log.info("span_created", campaign_id=campaign_id, span_id=span.id, kind=kind.value, to_turn_id=last.id)
        return span

    def _scenes_span(self, campaign_id: str, scene_ids: Sequence[str]) -> tuple[str | None, Turn]:
        scenes = []
        for scene_id in scene_ids:
            rows = self.core.graph.run(*cypher.node("Scene", scene_id))
            if not rows or rows[0]["n"].get("campaign_id") != campaign_id:
                raise InvalidReference("scene_ids", f"no scene {scene_id!r} in campaign {campaign_id!r}")
            scene = from_props(Scene, rows[0]["n"], key="id")
            if scene.status is not SceneStatus.COMPLETED or scene.end_turn_id is None:
                raise InvalidReference("scene_ids", f"scene {scene_id!r} has not ended at a turn")
            scenes.append((self.story.turn(scene.end_turn_id), scene))
        scenes.sort(key=lambda pair: pair[0].depth)
        last = scenes[-1][0]
        ctx = self.story.context(campaign_id)
        line = self.core.lineage_for(ctx, last.id)
        if not all(line.contains(end.branch_id, end.depth) for end, _ in scenes):
            raise InvalidReference("scene_ids", "the arc's scenes are not on one line")
        return scenes[0][1].start_turn_id, last

    # -- summaries ------------------------------------------------------------------------------------

    def summarize(
        self, campaign_id: str, span_id: str, *, text: str | None = None, visibility: Visibility | None = None
    ) -> Summary:
        """The span's summary: ``text`` (the GM's), else formed by the memory former from its turns and the
        outcomes of the scenes that ended in it. The span names its newest summary.

        Raises:
            StoryInvalid: the span has not ended, has no words to summarize, or no former is bound and no text
                is given (nothing is written then).
        """
        span = self.get(campaign_id, span_id)
        if span.to_turn_id is None:
            raise StoryInvalid(f"span {span_id!r} is still being played: end it first")
        turns = self.turns(span)
        former = "gm"
        if text is None:
            text, former = self._formed(span, turns)
        scope = SummaryScope.SESSION if span.kind is SpanKind.SESSION else SummaryScope.ARC
        summary = Summary(
            campaign_id=campaign_id,
            scope=scope,
            anchor_turn_id=span.to_turn_id,
            from_turn_id=turns[0].id if turns else None,
            text=text,
            visibility=visibility,
        )
        summary = self.add_summary(summary)
        self.core.graph.run(*_set(span.id, {"summary_id": summary.id}))
        log.info("span_summarized", campaign_id=campaign_id, span_id=span_id, summary_id=summary.id, former=former)
        return summary

    def _formed(self, span: StorySpan, turns: Sequence[Turn]) -> tuple[str, str]:
        former = self.former()
        if former is None:
            raise StoryInvalid("no memory former is bound: give the summary's text")
        ids = {t.id for t in turns}
        ended = [
            s
            for s in (from_props(Scene, r, key="id") for r in self.story.nodes(cypher.scenes_of(span.campaign_id)))
            if s.end_turn_id in ids
        ]
        outcomes = [o for s in sorted(ended, key=lambda s: s.order) for o in s.canonical_outcomes]
        now = utc_now()
        as_scene = Scene(  # the span read as one long scene: the former's input
            campaign_id=span.campaign_id,
            branch_id=span.branch_id,
            order=0,
            status=SceneStatus.COMPLETED,
            title=span.name,
            canonical_outcomes=outcomes,
            start_turn_id=span.after_turn_id,
            end_turn_id=span.to_turn_id,
            started_at=min(span.started_at, now),
            ended_at=now,
        )
        formed = former.form(as_scene, list(turns), [])
        if not formed.summary:
            raise StoryInvalid(f"span {span.id!r} has nothing to summarize ({'; '.join(formed.notes) or 'no words'})")
        return formed.summary, formed.former

    # -- reading --------------------------------------------------------------------------------------

    def get(self, campaign_id: str, span_id: str) -> StorySpan:
        """A span of the campaign; another campaign's answers like a missing one."""
        rows = self.core.graph.run(*cypher.node(LABEL, span_id))
        if not rows or rows[0]["n"].get("campaign_id") != campaign_id:
            raise StoryNotFound(f"no session or arc {span_id!r} in campaign {campaign_id!r}")
        return from_props(StorySpan, rows[0]["n"], key="id")

    def at(self, campaign_id: str, *, kind: SpanKind | None = None, branch_id: str | None = None) -> list[StorySpan]:
        """The sessions and arcs on the line of the head (or a branch's tip), oldest first: those that ended on
        it, and a session being played that started on it."""
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, None, branch_id)
        rows = anchored_on(self.story.nodes(_of_campaign(campaign_id)), lineage)
        spans = [from_props(StorySpan, r, key="id") for r in rows]
        return [s for s in spans if kind is None or s.kind is kind]

    def turns(self, span: StorySpan) -> list[Turn]:
        """The span's turns, oldest first (none for a session still being played)."""
        if span.to_turn_id is None:
            return []
        after = self.story.turn(span.after_turn_id).depth if span.after_turn_id else -1
        ctx = self.story.context(span.campaign_id)
        return self.story.turns_on(self.core.lineage_for(ctx, span.to_turn_id), min_depth=after + 1)

    # -- helpers --------------------------------------------------------------------------------------

    def _all(self, campaign_id: str) -> list[StorySpan]:
        return [from_props(StorySpan, r, key="id") for r in self.story.nodes(_of_campaign(campaign_id))]

    def _turn(self, campaign_id: str, turn_id: str, field: str) -> Turn:
        try:
            turn = self.story.turn(turn_id)
        except StoryNotFound:
            turn = None
        if turn is None or turn.campaign_id != campaign_id:
            raise InvalidReference(field, f"no turn {turn_id!r} in campaign {campaign_id!r}")
        return turn

    def _last(self, campaign_id: str, turn_id: str | None, field: str = "to_turn_id") -> Turn:
        if turn_id is not None:
            return self._turn(campaign_id, turn_id, field)
        head = self.story.context(campaign_id).head
        if head is None:
            raise StoryInvalid(f"campaign {campaign_id!r} has no turn yet")
        return head

    def _first(self, campaign_id: str, after_turn_id: str | None, last: Turn) -> None:
        """The span after ``after_turn_id`` up to ``last`` holds a turn on one line."""
        if after_turn_id is None:
            return
        after = self.story.turn(after_turn_id)
        line = self.core.lineage_for(self.story.context(campaign_id), last.id)
        if after.depth >= last.depth or not line.contains(after.branch_id, after.depth):
            raise InvalidReference("to_turn_id", f"turn {last.id!r} is not after turn {after_turn_id!r} on its line")

    def _write(self, span: StorySpan, *, depth: int) -> None:
        props = node_props(span, depth=depth, created_at=span.started_at.isoformat())
        self.core.graph.run(*cypher.create_nodes(LABEL, [props]))

    def _update(self, span: StorySpan, *, depth: int) -> None:
        props = node_props(span, depth=depth)
        self.core.graph.run(*_set(span.id, props))
