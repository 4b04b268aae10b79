"""Scene summaries and memories: how many of a scene's named facts does a former keep?

Scenes are generated deterministically (``--seed``) from the corpus: two or three characters and a place of
the Fate SRD's examples, a magic item and a creature of the SRD 5.1 JSON, and a few turns in which the item
is found, is said to belong to someone absent, and the creature is driven off. The scene's named facts are
the names it turns on (the item, the place, the creature, the absent owner, each character present).

A former writes the scene's summary and the memories of those present through its own path
(:class:`narrator.formation.LLMFormer`: the prompt, the schema, the parse, the extractive fallback) and is
scored by coverage: the share of the named facts its summary names, the share of the characters present
who get a memory, and the share of named facts some memory names. The plain baseline in the same run is
:class:`story.formation.ExtractiveFormer` (sentences of the transcript picked, never written).

    python benchmarks/scene_formation.py                         # the local model vs the baseline
    python benchmarks/scene_formation.py --engine openai --base-url http://host:8000/v1 --model NAME

Writes ``benchmarks/results/scene_formation.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine_info, round_floats, srd_records  # noqa: E402
from benchmarks.model_engines import add_engine_arguments, engine_from  # noqa: E402

FATE_CHARACTERS = ["Landon", "Cynere", "Zird", "Reth", "Abigail", "Voltaire"]
FATE_PLACES = ["the Crystal Market", "the Sunken Temple", "Riverside Docks", "the Tower of Veiled Hours"]


@dataclass
class Bench:
    scene: Any
    turns: list[Any]
    present: list[Any]
    entities: list[Any]
    facts: list[str]


def _names(file: str) -> list[str]:
    return sorted({r["name"] for r in srd_records(file, pk_key=None) if r.get("name") and "(" not in r["name"]})


def make_scenes(count: int, seed: int) -> list[Bench]:
    from schemas.story import InputMode, Scene, Speaker, SpeakerKind, Turn
    from story.formation import NamedEntity

    rng = random.Random(seed)
    items, creatures = _names("MagicItem.json")[:300], _names("Creature.json")[:300]
    benches = []
    for index in range(count):
        a, b, owner = rng.sample(FATE_CHARACTERS, 3)
        place, item, creature = rng.choice(FATE_PLACES), rng.choice(items), rng.choice(creatures)
        present = [NamedEntity(f"entity_{a.lower()}", a), NamedEntity(f"entity_{b.lower()}", b)]
        entities = [*present, NamedEntity(f"entity_{owner.lower()}", owner)]
        lines = [
            (a, f"I search {place}.", f"Beneath a broken table in {place}, {a} finds the {item}."),
            (b, f"I ask {a} what that is.", f"{a} tells {b} that the {item} once belonged to {owner}."),
            (a, "I draw my blade.", f"A {creature} bursts through the door; {b} drives it off with a torch."),
        ]
        camp, branch = f"camp_bench{index}", f"branch_bench{index}"
        turns, parent = [], None
        for depth, (who, said, narration) in enumerate(lines):
            speaker = Speaker(kind=SpeakerKind.ENTITY, entity_id=f"entity_{who.lower()}")
            turn = Turn(campaign_id=camp, branch_id=branch, parent_turn_id=parent, depth=depth, speaker=speaker,
                        input_mode=InputMode.ACTION, text=said, narration=narration)  # fmt: skip
            turns.append(turn)
            parent = turn.id
        scene = Scene(campaign_id=camp, branch_id=branch, order=0, title=f"At {place}",
                      start_turn_id=turns[0].id, end_turn_id=turns[-1].id)  # fmt: skip
        facts = [item, place.removeprefix("the "), creature, owner, a, b]
        benches.append(Bench(scene, turns, present, entities, facts))
    return benches


def _named(text: str, fact: str) -> bool:
    return fact.lower() in text.lower()


def coverage(formed: list[tuple[Any, Bench]]) -> dict[str, Any]:
    summary_hits = memory_hits = remembered = facts = people = fell_back = chars = 0
    for drafted, bench in formed:
        summary = drafted.summary or ""
        chars += len(summary)
        memories = " ".join(m.text for m in drafted.memories)
        summary_hits += sum(_named(summary, f) for f in bench.facts)
        memory_hits += sum(_named(memories, f) for f in bench.facts)
        observers = {m.observer_entity_id for m in drafted.memories}
        remembered += sum(p.entity_id in observers for p in bench.present)
        facts += len(bench.facts)
        people += len(bench.present)
        fell_back += drafted.former != "llm" and bool(drafted.notes)
    return {
        "summary_fact_coverage": summary_hits / facts if facts else 0.0,
        "memory_fact_coverage": memory_hits / facts if facts else 0.0,
        "characters_remembering": remembered / people if people else 0.0,
        "summary_chars": chars / len(formed) if formed else 0.0,
        "fell_back": fell_back,
        "scenes": len(formed),
    }


def run_former(former: Any, benches: list[Bench]) -> dict[str, Any]:
    formed, seconds = [], []
    for bench in benches:
        started = time.perf_counter()
        drafted = former.form(bench.scene, bench.turns, bench.present, entities=bench.entities)
        seconds.append(time.perf_counter() - started)
        formed.append((drafted, bench))
    example = formed[0][0].summary if formed else None
    return coverage(formed) | {"seconds_per_scene": sum(seconds) / max(1, len(seconds)), "first_summary": example}


def main() -> None:
    from narrator.formation import LLMFormer
    from story.formation import ExtractiveFormer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_engine_arguments(parser)
    parser.add_argument("--scenes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--max-tokens", type=int, default=None, help="Unset: the engine's own budget.")
    parser.add_argument("--out", type=Path, default=RESULTS / "scene_formation.json")
    args = parser.parse_args()
    engine = engine_from(args, parser)
    benches = make_scenes(args.scenes, args.seed)
    base = run_former(ExtractiveFormer(), benches)
    budget = args.max_tokens or int(getattr(engine, "structured_max_tokens", 1024))
    former = LLMFormer(engine, max_tokens=budget, timeout_s=900, owns_engine=False)
    started = time.perf_counter()
    try:
        measured = run_former(former, benches)
    finally:
        former.close()
    result = {
        "scenes": len(benches),
        "seed": args.seed,
        "max_tokens": budget,
        "baseline_extractive": base,
        args.engine: measured | {"model": engine.model, "wall_s": time.perf_counter() - started},
        "machine": machine_info(load_average=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(round_floats(result), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(round_floats(result), indent=2))


if __name__ == "__main__":
    main()
