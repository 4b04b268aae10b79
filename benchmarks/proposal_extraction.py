"""Proposal extraction: how many of the state changes a narration implies does an extractor propose?

Scenes are generated deterministically (``--seed``) from the corpus: creatures and magic items of the
SRD 5.1 JSON, characters and places of the Fate SRD's examples. Each scene has a cast already known to
the world, a player's line, a narration, and the changes it implies, typed:

* ``new``: a creature or item the narration introduces (a proposal of type ``entity`` with that name);
* ``about``: a change to a known entity (a ``fact``, ``relationship`` or ``state_change`` proposal whose
  subject, source or any event names that entity's id): it picks up an item, is wounded, moves.

Each extractor answers through the same path as a turn (:func:`narrator.extraction.extraction_messages`,
the engine's structured output against :class:`~schemas.serving.ExtractionBatch`,
:func:`narrator.extraction.parse_extraction`). A proposal is scored by what it names: precision is the
share of the proposals (``event`` ones excluded: a happening is never wrong to note, never asked for)
that match a change of the scene, recall the share of the scene's changes that some proposal matches.
The deterministic baseline in the same run is a pattern reader: a capitalised name of the SRD lists
not in the cast is ``new``, a cast member followed by a changing verb is ``about``.

    python benchmarks/proposal_extraction.py                      # local model vs baseline
    python benchmarks/proposal_extraction.py --engine openai --base-url http://host:8000/v1 --model NAME

Writes ``benchmarks/results/proposal_extraction.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine_info, round_floats, srd_records  # noqa: E402

# Characters and places of the Fate SRD's examples (Fate Core's Landon, Cynere and Zird; Fate
# Accelerated's Reth and Abigail), fixed so a scene set is the same from run to run.
FATE_CHARACTERS = ["Landon", "Cynere", "Zird", "Reth", "Abigail", "Voltaire"]
FATE_PLACES = ["the Crystal Market", "the Sunken Temple", "Riverside Docks", "the Tower of Veiled Hours"]
CHANGING_VERBS = ("picks up", "is wounded", "falls", "walks to", "gives", "loses", "takes")


@dataclass
class Scene:
    cast: dict[str, str]  # id -> name
    player: str
    narration: str
    expected: set[tuple[str, str]] = field(default_factory=set)  # ("new", name) or ("about", entity id)


def _names(file: str, limit: int) -> list[str]:
    names = [r["name"] for r in srd_records(file, pk_key=None) if r.get("name") and "(" not in r["name"]]
    return sorted(set(names))[:limit]


def make_scenes(count: int, seed: int) -> list[Scene]:
    """``count`` scenes, the same for the same seed."""
    rng = random.Random(seed)
    creatures, items = _names("Creature.json", 300), _names("MagicItem.json", 300)
    scenes = []
    for index in range(count):
        hero, friend = rng.sample(FATE_CHARACTERS, 2)
        place = rng.choice(FATE_PLACES)
        cast = {f"ent_{hero.lower()}": hero, f"ent_{friend.lower()}": friend}
        hero_id, friend_id = f"ent_{hero.lower()}", f"ent_{friend.lower()}"
        creature, item = rng.choice(creatures), rng.choice(items)
        kind = index % 3
        if kind == 0:
            narration = f"In {place}, a {creature} lunges at {hero}. {hero} is wounded and falls to one knee."
            expected = {("new", creature.lower()), ("about", hero_id)}
        elif kind == 1:
            narration = f"{hero} picks up the {item} from the altar in {place} and hands it to {friend}."
            expected = {("new", item.lower()), ("about", hero_id), ("about", friend_id)}
        else:
            narration = f"{friend} walks to {place}. A {creature} watches from the shadows, unseen."
            expected = {("new", creature.lower()), ("about", friend_id)}
        scenes.append(Scene(cast, f"What happens in {place}?", narration, expected))
    return scenes


def _ids_in(value: Any, known: set[str]) -> set[str]:
    if isinstance(value, str):
        return {value} & known
    if isinstance(value, dict):
        return set().union(*(_ids_in(v, known) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_ids_in(v, known) for v in value)) if value else set()
    return set()


def keys_of(proposals: list[Any], cast: dict[str, str]) -> list[set[tuple[str, str]]]:
    """What each (non-event) proposal names, as the keys it may match."""
    keys = []
    for proposal in proposals:
        content = proposal.content.model_dump(mode="json")
        if content["type"] == "event":
            continue
        if content["type"] == "entity" and not content.get("entity_id"):
            keys.append({("new", content["name"].strip().lower())})
        else:
            keys.append({("about", i) for i in _ids_in(content, set(cast))})
    return keys


def score(predicted: list[set[tuple[str, str]]], expected: set[tuple[str, str]]) -> tuple[int, int, int]:
    """(matched proposals, proposals, found changes)."""
    matched = sum(1 for keys in predicted if keys & expected)
    found = sum(1 for change in expected if any(change in keys for keys in predicted))
    return matched, len(predicted), found


def baseline(scene: Scene, known_names: set[str]) -> list[set[tuple[str, str]]]:
    """The pattern reader: new SRD names, and cast members followed by a changing verb."""
    out: list[set[tuple[str, str]]] = []
    lowered = scene.narration.lower()
    for name in known_names:
        if re.search(rf"\b{re.escape(name)}\b", lowered) and name not in {n.lower() for n in scene.cast.values()}:
            out.append({("new", name)})
    for entity_id, name in scene.cast.items():
        if any(f"{name} {verb}" in scene.narration for verb in CHANGING_VERBS):
            out.append({("about", entity_id)})
    return out


def _state(scene: Scene) -> Any:
    from schemas.canon import Entity, WorldStateView
    from schemas.common import EntityKind

    entities = [Entity(id=i, world_id="world_bench", kind=EntityKind.CHARACTER, name=n) for i, n in scene.cast.items()]
    return WorldStateView(campaign_id="camp_bench", branch_id="branch_bench", turn_id=None, entities=entities,
                          state_hash="0" * 64)  # fmt: skip


async def run_engine(engine: Any, scenes: list[Scene], max_tokens: int) -> dict[str, Any]:
    from narrator.extraction import extraction_messages, extraction_schema, parse_extraction

    totals = [0, 0, 0]
    expected_total, seconds, dropped = 0, [], 0
    for scene in scenes:
        started = time.perf_counter()
        raw = await engine.structured(
            extraction_messages(_state(scene), scene.player, scene.narration),
            schema=extraction_schema(max_tokens, list(scene.cast)),
            max_tokens=max_tokens,
        )
        seconds.append(time.perf_counter() - started)
        proposals, notes = parse_extraction(raw)
        dropped += len(notes)
        for i, v in enumerate(score(keys_of(proposals, scene.cast), scene.expected)):
            totals[i] += v
        expected_total += len(scene.expected)
    return _summary(totals, expected_total) | {
        "dropped": dropped,
        "seconds_per_scene": sum(seconds) / max(1, len(seconds)),
    }


def _summary(totals: list[int], expected_total: int) -> dict[str, Any]:
    matched, predicted, found = totals
    return {
        "precision": matched / predicted if predicted else 0.0,
        "recall": found / expected_total if expected_total else 0.0,
        "proposals": predicted,
        "changes": expected_total,
    }


def _engine(args: argparse.Namespace) -> Any:
    if args.engine == "openai":
        from narrator.engines import OpenAIEngine

        return OpenAIEngine(args.base_url, args.model)
    if args.engine == "echo":
        from narrator.engines import EchoEngine

        return EchoEngine()
    from narrator.local_engine import LocalEngine

    return LocalEngine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["local", "openai", "echo"], default="local")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--model", default="narrator")
    parser.add_argument("--scenes", type=int, default=9)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS / "proposal_extraction.json")
    args = parser.parse_args()
    if args.engine == "openai" and not args.base_url:
        parser.error("--engine openai needs --base-url")
    scenes = make_scenes(args.scenes, args.seed)
    known = {n.lower() for n in _names("Creature.json", 300) + _names("MagicItem.json", 300)}
    totals, expected_total = [0, 0, 0], 0
    for scene in scenes:
        for i, v in enumerate(score(baseline(scene, known), scene.expected)):
            totals[i] += v
        expected_total += len(scene.expected)
    engine = _engine(args)
    started = time.perf_counter()
    measured = asyncio.run(run_engine(engine, scenes, args.max_tokens))
    result = {
        "scenes": len(scenes),
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "baseline": _summary(totals, expected_total),
        args.engine: measured | {"model": engine.model, "wall_s": time.perf_counter() - started},
        "machine": machine_info(load_average=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(round_floats(result), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(round_floats(result), indent=2))


if __name__ == "__main__":
    main()
