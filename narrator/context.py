"""Prompt assembly for a turn: fixed section order, a token budget per section, citations.

The layout is a chat, and a table's next prompt begins with this one, byte for byte, so the model
server's prefix cache holds all of it but the new turn:

* the system message: narrator rules → world axioms → canonical scene state (the stable head: it
  changes only when canon or the campaign's profile does);
* the recent turns, oldest first, each as its input (a user message, ``# <speaker>`` then the text:
  :func:`input_message`) and its narration (an assistant message, what the model wrote);
* the last user message: what this turn retrieved (knowledge, memories; shown only when something was
  found), then the input, rendered as it will be among the recent turns of the next turn.

With nothing retrieved, turn N's messages are turn N-1's plus its narration and the new input; what a
turn retrieved sits in its own last message only, so it costs the next turn that message and its
answer (docs/adr/0008-chat-prompt-layout.md). The recent turns' window moves in steps of half its
size, so past it too most turns still begin with the last (:meth:`PromptAssembler._fit_turns`). Each
section gets a share of the budget and is cut at whole lines (the recent turns at whole turns, the oldest
first); what was cut is counted, never silently mangled.

The memories section holds what the campaign recalls for this input (:mod:`story.recall`): turns,
summaries, canon facts and memories of the turn's line, best first, each with its kind and the turn
it belongs to; the turn's recall record names them (a :class:`RetrievalRecord` of source
``recall``). Without recall (no memory index, or it failed) the section falls back to the line's
latest summaries and its memories by salience.

A turn's narration is read by the whole table, so a turn is assembled from what a seat may see
(:func:`for_viewer`: the secrets rule of :class:`story.viewer.Viewer`); the API narrates every turn from the
table's seat (public records only). No GM-only record, no record known only to some characters, nothing of
a hidden entity reaches the prompt, the narration or the proposals extracted from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.common import sha256_hex
from schemas.desk import SceneNote
from schemas.recall import RecallHit, RecallKind
from schemas.search import SearchHit
from schemas.story import (
    Campaign,
    Memory,
    PromptSection,
    PromptSectionKind,
    PromptSnapshot,
    RecalledHit,
    RetrievalHit,
    RetrievalRecord,
    RetrievalSource,
    Summary,
    Turn,
    WorldStateView,
)
from story.context import TurnContext
from story.recall import speaker_name
from story.viewer import Viewer

#: Share of the context budget per section.
SECTION_SHARE: dict[PromptSectionKind, float] = {
    PromptSectionKind.NARRATOR_RULES: 0.10,
    PromptSectionKind.WORLD_AXIOMS: 0.08,
    PromptSectionKind.SCENE_STATE: 0.20,
    PromptSectionKind.RETRIEVED_KNOWLEDGE: 0.25,
    PromptSectionKind.MEMORIES: 0.10,
    PromptSectionKind.RECENT_TURNS: 0.22,
    PromptSectionKind.PLAYER_INPUT: 0.05,
}

HEADINGS: dict[PromptSectionKind, str] = {
    PromptSectionKind.NARRATOR_RULES: "# How you narrate",
    PromptSectionKind.WORLD_AXIOMS: "# Laws of this world (always true)",
    PromptSectionKind.SCENE_STATE: "# The scene as it stands (canon)",
    PromptSectionKind.RETRIEVED_KNOWLEDGE: "# From the books (cite as [n])",
    PromptSectionKind.MEMORIES: "# Memories and summaries",
    PromptSectionKind.RECENT_TURNS: "# Recent turns",
    PromptSectionKind.PLAYER_INPUT: "# The player now",
}


def for_viewer(
    viewer: Viewer, context: TurnContext, recalled: Sequence[RecallHit] | None, *, notes: Sequence[SceneNote] = ()
) -> tuple[TurnContext, list[RecallHit] | None]:
    """What a turn played from ``viewer``'s seat may draw on: the state, memories and summaries of
    ``context`` that seat may see, and the recalled records among them (each looked up on the turn's line;
    a hit whose record is not there is left out; the GM's ``notes`` it may see). The GM's seat gets everything."""
    if viewer.gm:
        return context, None if recalled is None else list(recalled)
    seen = context.model_copy(
        update={
            "state": viewer.state(context.state),
            "memories": [m for m in context.memories if viewer.sees_memory(m)],
            "summaries": [s for s in context.summaries if viewer.sees_summary(s)],
        }
    )
    if recalled is None:
        return seen, None
    # looked up in the unfiltered records: Viewer.hits applies the rule itself
    hits = viewer.hits(
        recalled, memories=context.memories, state=context.state, summaries=context.summaries, notes=notes
    )
    return seen, hits


def estimate_tokens(text: str) -> int:
    """About four characters a token for English prose: cheap, and only used to share a budget."""
    return (len(text) + 3) // 4


@dataclass(slots=True)
class Assembled:
    """A prompt ready to send, and its records."""

    messages: list[dict[str, str]]
    text: str
    snapshot: PromptSnapshot
    retrieval: RetrievalRecord | None
    recall: RetrievalRecord | None = None
    """What recall returned for the turn (source ``recall``), or why it failed; None without recall."""
    cut: dict[str, int] = field(default_factory=dict)  # lines dropped per section, for the record


class PromptAssembler:
    """Builds the narrator's prompt from canon, knowledge and history within ``budget`` tokens."""

    def __init__(self, *, budget: int, count: Callable[[str], int] = estimate_tokens, window: int = 0) -> None:
        self.budget = budget
        self.count = count
        # the recent turns asked for (LOREKEEPER_RECENT_TURNS): the window's start moves in steps of half of it
        self.window = window

    def _fit(self, kind: PromptSectionKind, lines: Sequence[str], *, keep: str = "first") -> tuple[str, int]:
        limit = int(self.budget * SECTION_SHARE[kind])
        chosen: list[str] = []
        used = 0
        ordered = list(lines) if keep == "first" else list(reversed(lines))
        for line in ordered:
            cost = self.count(line) + 1
            if used + cost > limit:
                break
            chosen.append(line)
            used += cost
        if keep != "first":
            chosen.reverse()
        return "\n".join(chosen), len(lines) - len(chosen)

    def window_start(self, depth: int) -> int:
        """The depth of the first recent turn a prompt for the turn at ``depth`` may show (:meth:`_fit_turns`)."""
        step = max(1, self.window // 2)
        return -(-max(0, depth - self.window) // step) * step if self.window else 0

    def _fit_turns(
        self, turns: Sequence[Turn], names: Mapping[str, str], depth: int
    ) -> tuple[list[dict[str, str]], int]:
        """The recent turns before the turn at ``depth`` that the prompt shows, as chat messages
        (:func:`turn_messages`), and how many messages were left out.

        The window's first turn moves in steps (half the window): a window that slid one turn a turn would
        change the prompt right after its head on every turn, and the prefix cache would hold nothing of the
        turns. So it shows between ``window - step + 1`` and ``window`` turns, and a table's prompt begins
        with its previous one on all but one turn of each step. When the turns shown overrun their share of
        the budget, whole steps leave from the oldest; the latest turns that fit are the last resort."""
        limit = int(self.budget * SECTION_SHARE[PromptSectionKind.RECENT_TURNS])
        step = max(1, self.window // 2)
        start = self.window_start(depth)

        def cost(shown: Sequence[Turn]) -> int:
            return sum(self.count(m["content"]) + 1 for t in shown for m in turn_messages(t, names))

        shown = [t for t in turns if t.depth >= start]
        while shown and cost(shown) > limit and len(shown) > step:
            start += step
            shown = [t for t in shown if t.depth >= start]
        while shown and cost(shown) > limit:
            shown = shown[1:]
        kept = [m for t in shown for m in turn_messages(t, names)]
        return kept, sum(len(turn_messages(t, names)) for t in turns) - len(kept)

    def assemble(
        self,
        *,
        turn: Turn,
        model: str,
        campaign: Campaign,
        axioms: Sequence[str],
        state: WorldStateView,
        hits: Sequence[SearchHit],
        query: str,
        memories: Sequence[Memory],
        summaries: Sequence[Summary],
        recent: Sequence[Turn],
        player_input: str,
        retrieval_error: str | None = None,
        recalled: Sequence[RecallHit] | None = None,
        recall_error: str | None = None,
    ) -> Assembled:
        """The prompt and its records.

        ``recalled`` (the hits of the turn's recall, best first) fills the memories section; when it is
        None (no recall, or ``recall_error`` says why it failed) the section holds ``summaries`` and
        ``memories`` instead.
        """
        names = {e.id: e.name for e in state.entities}
        # the stable head, byte-identical from turn to turn while canon stands: the system message
        head = [
            (PromptSectionKind.NARRATOR_RULES, rule_lines(campaign)),
            (PromptSectionKind.WORLD_AXIOMS, [f"- {a}" for a in axioms]),
            (PromptSectionKind.SCENE_STATE, scene_lines(state)),
        ]
        # what this turn retrieved for its input: in the last message, before the input, shown when found
        retrieved = [
            (PromptSectionKind.RETRIEVED_KNOWLEDGE, knowledge_lines(hits)),
            (
                PromptSectionKind.MEMORIES,
                recall_lines(recalled) if recalled is not None else memory_lines(memories, summaries, state),
            ),
        ]
        records: list[PromptSection] = []
        cut: dict[str, int] = {}

        def section(kind: PromptSectionKind, lines: Sequence[str], *, heading: bool = True) -> str:
            body, dropped = self._fit(kind, lines)
            if dropped:
                cut[kind.value] = dropped
            text = (f"{HEADINGS[kind]}\n{body}" if body else HEADINGS[kind]) if heading else body
            records.append(PromptSection(kind=kind, token_count=self.count(text), content_hash=sha256_hex(text)))
            return text

        system = "\n\n".join(section(kind, lines) for kind, lines in head)
        history, dropped_turns = self._fit_turns(recent, names, turn.depth)
        if dropped_turns:
            cut[PromptSectionKind.RECENT_TURNS.value] = dropped_turns
        transcript = "\n\n".join(m["content"] for m in history)
        records.append(
            PromptSection(
                kind=PromptSectionKind.RECENT_TURNS,
                token_count=self.count(transcript),
                content_hash=sha256_hex(transcript),
            )
        )
        found = [text for kind, lines in retrieved if (text := section(kind, lines)) and lines]
        said = section(PromptSectionKind.PLAYER_INPUT, [player_input or WAITING], heading=False)
        now = "\n\n".join([*found, input_message(speaker_of(turn, names), said)])
        messages = [{"role": "system", "content": system}, *history, {"role": "user", "content": now}]
        whole = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
        snapshot = PromptSnapshot(turn_id=turn.id, model=model, sections=records, content_hash=sha256_hex(whole))
        retrieval = retrieval_record(turn, query, hits, cut, retrieval_error) if hits or retrieval_error else None
        # recall ran (its hits, even none left for this seat) or failed: the turn says so in its provenance
        ran = recalled is not None or recall_error is not None
        recall = recall_record(turn, query, recalled or [], cut, recall_error) if ran else None
        return Assembled(messages=messages, text=whole, snapshot=snapshot, retrieval=retrieval, recall=recall, cut=cut)


def rule_lines(campaign: Campaign) -> list[str]:
    """How the narrator narrates this campaign: the standing instruction, its profile and its own rules."""
    p = campaign.profile
    return [
        "You are the narrator of a tabletop role-playing game. Describe what happens; never decide for the "
        "players; respect the canon below; when the books below inform you, cite them as [n].",
        f"Genre: {p.genre}"
        + (f" ({p.subgenre})" if p.subgenre else "")
        + (f"; tone: {p.tone}" if p.tone else "")
        + f"; point of view: {p.point_of_view.value.replace('_', ' ')}; tense: {p.tense.value}.",
        *(f"- {rule}" for rule in campaign.narrator_rules),
    ]


def _shown(cut: dict[str, int], total: int, kind: PromptSectionKind = PromptSectionKind.RETRIEVED_KNOWLEDGE) -> int:
    return total - cut.get(kind.value, 0)


def retrieval_record(
    turn: Turn, query: str, hits: Sequence[SearchHit], cut: dict[str, int], error: str | None
) -> RetrievalRecord:
    """What the turn's knowledge search found, each hit marked whether the prompt kept it."""
    used_ids = {h.chunk_id for h in hits[: _shown(cut, len(hits))]}
    return RetrievalRecord(
        turn_id=turn.id,
        query=query,
        hits=[
            RetrievalHit(
                chunk_id=h.chunk_id,
                rank=i,
                item_uid=h.item_uid,
                leg_scores=_legs(h.scores),
                fused_score=h.score,
                used_in_prompt=h.chunk_id in used_ids,
            )
            for i, h in enumerate(hits, start=1)
        ],
        error=error,
    )


def recall_record(
    turn: Turn, query: str, hits: Sequence[RecallHit], cut: dict[str, int], error: str | None
) -> RetrievalRecord:
    """The turn's recall as a retrieval record: each recalled record with the turn it belongs to."""
    shown = _shown(cut, len(hits), PromptSectionKind.MEMORIES)
    return RetrievalRecord(
        turn_id=turn.id,
        source=RetrievalSource.RECALL,
        query=query or "(no input)",
        filters={"lineage_of": [turn.id]},
        recalled=[
            RecalledHit(
                record_id=h.id,
                kind=h.kind.value,
                turn_id=h.turn_id,
                rank=i,
                leg_scores=_legs(h.scores),
                fused_score=h.score,
                used_in_prompt=i <= shown,
            )
            for i, h in enumerate(hits, start=1)
        ],
        error=error,
    )


def _legs(scores: dict[str, float]) -> dict[Any, float]:
    names = {"vector": "vector", "text": "full_text", "bm25": "full_text", "full_text": "full_text", "graph": "graph"}
    return {names[k]: v for k, v in scores.items() if k in names}


def scene_lines(state: WorldStateView) -> list[str]:
    """The canonical scene state: where we are, who is here, what they hold, open threads, facts."""
    names = {e.id: e.name for e in state.entities}
    lines: list[str] = []
    for e in state.entities:
        where = names.get(state.locations.get(e.id, ""))
        holder = names.get(state.holders.get(e.id, ""))
        bits = [f"{e.name} ({e.kind.value}, {e.status.value})"]
        if where:
            bits.append(f"at {where}")
        if holder:
            bits.append(f"held by {holder}")
        if e.attributes:
            bits.append(", ".join(f"{k}={v}" for k, v in sorted(e.attributes.items())))
        lines.append("- " + "; ".join(bits))
    for t in state.threads:
        if t.status.value in ("open", "advanced"):
            lines.append(f"- open thread: {t.title}" + (f" (lately: {t.advances[-1].progress})" if t.advances else ""))
    for f in state.facts:
        if f.status.value == "active":
            obj = names.get(f.object_entity_id or "") or f.value
            lines.append(f"- fact: {names.get(f.subject_entity_id, f.subject_entity_id)} {f.predicate} {obj}")
    return lines


def knowledge_lines(hits: Sequence[SearchHit]) -> list[str]:
    out = []
    for i, h in enumerate(hits, start=1):
        where = f", p. {h.page_start}" if h.page_start else ""
        path = " > ".join(h.heading_path)
        head = f"[{i}] {h.title}{where}" + (f" ({path})" if path else "")
        out.append(f"{head}: {' '.join(h.text.split())}")
    return out


def memory_lines(memories: Sequence[Memory], summaries: Sequence[Summary], state: WorldStateView) -> list[str]:
    names = {e.id: e.name for e in state.entities}
    lines = [f"- summary: {s.text}" for s in summaries[-3:]]
    for m in sorted(memories, key=lambda m: -m.salience):
        lines.append(f"- {names.get(m.observer_entity_id, m.observer_entity_id)} ({m.kind.value}): {m.text}")
    return lines


def recall_lines(hits: Sequence[RecallHit]) -> list[str]:
    """Recalled records, best first: when (the turn, and the story's time if known), what kind, the text."""
    lines = []
    for h in hits:
        when = f"turn {h.depth + 1}" + (f", {h.story_time}" if h.story_time else "")
        parts = [" ".join(p.split()) for p in h.text.splitlines() if p.strip()]
        if h.kind is RecallKind.TURN and len(parts) == len(h.speakers):
            text = " ".join(f"{who}: {what}" for who, what in zip(h.speakers, parts, strict=True))
        else:
            text = " ".join(parts)
        lines.append(f"- ({when}) {h.kind.value}: {text}")
    return lines


def turn_lines(turns: Sequence[Turn], names: Mapping[str, str] | None = None) -> list[str]:
    """Recent turns as a transcript: each input under its speaker's name (``names``: entity ids to names)."""
    lines = []
    for t in turns:
        if t.text:
            who = names.get(t.speaker.entity_id, "") if names and t.speaker.entity_id and not t.speaker.name else ""
            lines.append(f"{who or speaker_name(t)}: {t.text}")
        if t.narration:
            lines.append(f"Narrator: {t.narration}")
    return lines


WAITING = "(the player waits; narrate on)"
"""The input of a turn that said nothing."""


def speaker_of(turn: Turn, names: Mapping[str, str] | None = None) -> str:
    """Who said a turn's input: its speaker's name, an entity's name (``names``: entity ids to names), or the
    kind of speaker (Player, GM)."""
    if names and turn.speaker.entity_id and not turn.speaker.name:
        return names.get(turn.speaker.entity_id, "") or speaker_name(turn)
    return speaker_name(turn)


def input_message(who: str, text: str) -> str:
    """A turn's input as the model reads it, the same as the last message of its own turn and as a recent
    turn of the turns after it (so a table's next prompt begins with this one's, byte for byte)."""
    return f"# {who}\n{text or WAITING}"


def turn_messages(turn: Turn, names: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """A recent turn as chat messages: its input (:func:`input_message`), then its narration as the model's
    answer (what the model wrote for it, so the prefix cache holds it already)."""
    messages = [{"role": "user", "content": input_message(speaker_of(turn, names), turn.text)}]
    if turn.narration:
        messages.append({"role": "assistant", "content": turn.narration})
    return messages
