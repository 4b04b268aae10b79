"""``lorekeeper play``: a table in the terminal, on the same operations as the API.

A line of text is a turn: the narration streams as the model writes it (the default engine is the
embedded model, see docs/narrator.md), then the proposals it made are listed. A line starting with
``/`` is one of the table's verbs (``/help`` lists them), each the API operation of the same name,
called as the table's GM (an admin caller of this process). The history stays on the terminal to
scroll; an error is printed and the table goes on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape

from schemas.errors import LorekeeperError

HELP = """[bold]Verbs[/bold] (anything else is a turn):
  /scene [TITLE]    start a scene (the first turn starts one when none is open)
  /end [SUMMARY]    end the scene: its proposals go through the gate, memories are formed
  /undo, /redo      move the head back or forward one turn
  /retake           narrate the last turn again (a new take)
  /branch [NAME]    fork a branch at the last turn and play on it
  /recall QUERY     what the campaign remembers about QUERY
  /state            the world as of now: entities and current facts
  /rules            the house rules in force
  /help             this list
  /quit             leave the table (the campaign stays; play it again with its id)"""


@dataclass
class Table:
    """One campaign at the terminal: its services, the caller, and what it last did."""

    services: Any
    campaign_id: str
    console: Console
    caller: Any
    last_turn_id: str | None = None
    scene_id: str | None = None
    seed: int | None = None  # each turn's sampling seed (None: unseeded)
    verbs: dict[str, Callable[[str], None]] = field(default_factory=dict)

    def call(self, name: str, body: dict[str, Any] | None = None, **ids: str) -> Any:
        from serve.operations import OPERATIONS, invoke

        op = OPERATIONS[name]
        return asyncio.run(invoke(op, self.services, self.caller, ids, op.body.model_validate(body or {})))

    def stream(self, name: str, body: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
        """Run a turn's stream form, printing the narration as it comes; the ``done`` event."""
        from serve.operations import OPERATIONS
        from serve.operations import stream as open_stream

        op = OPERATIONS[name]

        async def run() -> dict[str, Any]:
            done: dict[str, Any] = {}
            events = await open_stream(op, self.services, self.caller, ids, op.body.model_validate(body or {}))
            async for event in events:
                if event["event"] == "delta":
                    self.console.print(escape(event["text"]), end="", style="italic", soft_wrap=True)
                    self.console.file.flush()
                elif event["event"] == "done":
                    done = event
            return done

        done = asyncio.run(run())
        self.console.print()
        return done


def _turn(table: Table, text: str) -> None:
    if table.scene_id is None:
        _scene(table, "")
    body = {"text": text, "stream": True, "seed": table.seed}
    done = table.stream("play_turn", body, campaign_id=table.campaign_id)
    table.last_turn_id = done.get("turn_id") or table.last_turn_id
    proposals = done.get("proposal_ids") or []
    if proposals:
        table.console.print(f"[dim]{len(proposals)} proposal(s) staged for the scene's end[/dim]")


def _scene(table: Table, title: str) -> None:
    scene = table.call("start_scene", {"title": title or None}, campaign_id=table.campaign_id)
    table.scene_id = scene.id
    table.console.print(f"[dim]scene {scene.id} started{': ' + escape(title) if title else ''}[/dim]")


def _end(table: Table, summary: str) -> None:
    if table.scene_id is None:
        table.console.print("[yellow]no scene is open[/yellow]")
        return
    report = table.call("end_scene", {"summary": summary or None}, scene_id=table.scene_id)
    table.scene_id = None
    counts: dict[str, int] = {}
    for decision in report.decisions:
        counts[decision.status.value] = counts.get(decision.status.value, 0) + 1
    said = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no proposals"
    table.console.print(f"[bold]scene ended[/bold]: {said}; {report.events_committed} event(s) became canon")
    for decision in report.decisions:
        table.console.print(f"  [dim]{decision.status.value}: {escape(decision.rationale)}[/dim]")
    for axiom in report.unchecked_axioms:
        table.console.print(f"  [yellow]axiom not checked: {escape(axiom)}[/yellow]")


def _timeline(table: Table, verb: str) -> None:
    campaign = table.call(verb, campaign_id=table.campaign_id)
    table.last_turn_id = campaign.head_turn_id
    table.console.print(f"[dim]{verb}: the head is now {campaign.head_turn_id or 'the start'}[/dim]")


def _retake(table: Table, _: str) -> None:
    if table.last_turn_id is None:
        table.console.print("[yellow]no turn to retake yet[/yellow]")
        return
    table.stream("retake_turn", {"stream": True}, campaign_id=table.campaign_id, turn_id=table.last_turn_id)


def _branch(table: Table, name: str) -> None:
    if table.last_turn_id is None:
        table.console.print("[yellow]no turn to branch from yet[/yellow]")
        return
    body = {"from_turn_id": table.last_turn_id, "name": name or None}
    branch = table.call("create_branch", body, campaign_id=table.campaign_id)
    table.call("switch_branch", campaign_id=table.campaign_id, branch_id=branch.id)
    table.console.print(f"[dim]on branch {branch.id}{' (' + escape(name) + ')' if name else ''}[/dim]")


def _recall(table: Table, query: str) -> None:
    if not query:
        table.console.print("[yellow]/recall needs a query[/yellow]")
        return
    answer = table.call("recall", {"query": query}, campaign_id=table.campaign_id)
    for hit in answer.hits or []:
        text = " / ".join(hit.text.splitlines())[:200]
        table.console.print(f"  [cyan]{hit.kind}[/cyan] {escape(text)}")
    if not answer.hits:
        table.console.print("[dim]nothing recalled[/dim]")


def _state(table: Table, _: str) -> None:
    state = table.call("get_state_as_of", campaign_id=table.campaign_id)
    names = {e.id: e.name for e in state.entities}
    table.console.print(f"[bold]{len(state.entities)} entities[/bold]: " + escape(", ".join(names.values()) or "-"))
    for fact in state.facts:
        if fact.status.value == "active":
            obj = names.get(fact.object_entity_id or "", fact.value)
            who = names.get(fact.subject_entity_id, fact.subject_entity_id)
            table.console.print(f"  {escape(str(who))} {escape(fact.predicate)} {escape(str(obj))}")


def _rules(table: Table, _: str) -> None:
    rules = table.call("list_house_rules", campaign_id=table.campaign_id)
    for rule in rules:
        table.console.print(f"  {escape(str(getattr(rule, 'text', rule)))}")
    if not rules:
        table.console.print("[dim]no house rules[/dim]")


VERBS: dict[str, Callable[[Table, str], None]] = {
    "scene": _scene,
    "end": _end,
    "undo": lambda t, _: _timeline(t, "undo"),
    "redo": lambda t, _: _timeline(t, "redo"),
    "retake": _retake,
    "branch": _branch,
    "recall": _recall,
    "state": _state,
    "rules": _rules,
    "help": lambda t, _: t.console.print(HELP),
}


def _new_campaign(table: Table) -> None:
    world = table.call("create_world", {"name": "A world at the table"})
    body = {"world_id": world.id, "name": "A new table", "profile": {"genre": "fantasy", "tone": "adventurous"}}
    campaign = table.call("create_campaign", body)
    table.campaign_id = campaign.id
    table.console.print(f"[bold]campaign {campaign.id}[/bold] created (play it again: lorekeeper play {campaign.id})")


def _resume(table: Table) -> None:
    campaign = table.call("get_campaign", campaign_id=table.campaign_id)
    table.last_turn_id = campaign.head_turn_id
    open_scenes = [s for s in table.call("list_scenes", campaign_id=table.campaign_id) if s.status.value == "active"]
    table.scene_id = open_scenes[-1].id if open_scenes else None
    table.console.print(f"[bold]{escape(campaign.name)}[/bold] ({campaign.id}), resumed")


def run_table(table: Table, lines: Iterator[str]) -> None:
    """Play lines until they run out or ``/quit``; every error is printed and play goes on."""
    if table.campaign_id:
        _resume(table)
    else:
        _new_campaign(table)
    table.console.print("Type what you do, or /help.")
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        verb, _, rest = line[1:].partition(" ") if line.startswith("/") else ("", "", line)
        try:
            if not verb:
                _turn(table, rest)
            elif verb in VERBS:
                VERBS[verb](table, rest.strip())
            else:
                table.console.print(f"[yellow]unknown verb /{escape(verb)}[/yellow] (/help lists them)")
        except LorekeeperError as exc:
            table.console.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}")
    table.console.print(f"[dim]left the table; the campaign is {table.campaign_id}[/dim]")


def _prompted(console: Console, stdin: TextIO) -> Iterator[str]:
    while True:
        if stdin.isatty():
            console.print("[bold green]>[/bold green] ", end="")
        line = stdin.readline()
        if not line:
            return
        yield line


@contextmanager
def open_table(campaign_id: str | None, console: Console, settings: Any, serve_settings: Any) -> Iterator[Table]:
    """The services the API would use (on the settings the command read), and a table on them."""
    from serve.auth import Principal
    from serve.services import open_services

    with open_services(settings, serve_settings) as services:
        caller = Principal(key_id="terminal", admin=True)
        yield Table(services=services, campaign_id=campaign_id or "", console=console, caller=caller)


def play_command(
    campaign_id: Annotated[
        str | None, typer.Argument(help="The campaign to play; a new one (and its world) when left out.")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(min=0, max=2**32 - 1, help="Sampling seed of every turn's narration: a game replays alike."),
    ] = None,
) -> None:
    """Sit at a table in the terminal: type what you do, the narrator answers (streamed); /help lists the verbs."""
    from schemas.serving import get_serve_settings
    from schemas.settings import get_settings

    console = Console(highlight=False)
    try:
        with open_table(campaign_id, console, get_settings(), get_serve_settings()) as table:
            table.seed = seed
            run_table(table, _prompted(console, sys.stdin))
    except LorekeeperError as exc:
        Console(stderr=True).print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}")
        raise typer.Exit(2) from None
