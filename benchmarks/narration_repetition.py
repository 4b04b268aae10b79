"""How much a local model's narration repeats itself, with and without the engine's anti-loop sampling.

Small models loop: SmolLM2-135M at temperature 0.8 wrote one sentence 40 times in a 512-token turn.
:data:`narrator.local_engine.NARRATION_SAMPLING` adds a repetition penalty and bans repeated 5-grams
in narration. This harness narrates the same player turns (scenes drawn from the Fate SRD's examples)
both ways in one run, with the same seeds, and scores each narration by the share of its word 4-grams
that repeat an earlier one (0: none repeats) and its distinct-word share.

    python benchmarks/narration_repetition.py --turns 4 --max-tokens 160

Writes ``benchmarks/results/narration_repetition.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine_info, round_floats  # noqa: E402

SYSTEM = "You are the narrator of a fantasy tabletop role-playing game. Narrate in the second person, vividly."
TURNS = [
    "I pick up the rusty iron key from the tavern floor and put it in my pocket.",
    "Landon draws his sword and steps between Cynere and the guards at the Crystal Market.",
    "I ask the old ferryman at Riverside Docks what he saw last night.",
    "Zird reads the runes on the door of the Sunken Temple aloud.",
    "I climb the Tower of Veiled Hours, counting the bells as they ring.",
    "We share a meal by the fire and I tell the others about my brother.",
]


def repetition(text: str) -> dict[str, float]:
    words = text.lower().split()
    grams = [tuple(words[i : i + 4]) for i in range(max(0, len(words) - 3))]
    repeated = len(grams) - len(set(grams))
    return {
        "words": len(words),
        "repeated_4gram_share": repeated / len(grams) if grams else 0.0,
        "distinct_word_share": len(set(words)) / len(words) if words else 0.0,
    }


async def narrate(engine: Any, turn: str, max_tokens: int, seed: int) -> str:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": turn}]
    return "".join([p async for p in engine.stream(messages, max_tokens=max_tokens, temperature=0.8, seed=seed)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from narrator import local_engine

    engine = local_engine.LocalEngine()
    anti_loop = dict(local_engine.NARRATION_SAMPLING)
    rows: dict[str, list[dict[str, Any]]] = {"plain sampling (baseline)": [], "engine's anti-loop sampling": []}
    started = time.perf_counter()
    for n, turn in enumerate(TURNS[: args.turns]):
        for name, sampling in (("plain sampling (baseline)", {}), ("engine's anti-loop sampling", anti_loop)):
            local_engine.NARRATION_SAMPLING.clear()
            local_engine.NARRATION_SAMPLING.update(sampling)
            text = asyncio.run(narrate(engine, turn, args.max_tokens, args.seed + n))
            rows[name].append({"turn": turn, **repetition(text), "text": text})
            print(f"[{name}] {turn}\n  {text[:300]!r}\n  {repetition(text)}", flush=True)
    local_engine.NARRATION_SAMPLING.clear()
    local_engine.NARRATION_SAMPLING.update(anti_loop)
    summary = {
        name: {
            key: sum(r[key] for r in got) / len(got) for key in ("repeated_4gram_share", "distinct_word_share", "words")
        }
        for name, got in rows.items()
    }
    report = {
        "benchmark": "narration_repetition",
        "model": engine.model,
        "max_tokens": args.max_tokens,
        "temperature": 0.8,
        "anti_loop_sampling": anti_loop,
        "summary": summary,
        "turns": rows,
        "wall_s": time.perf_counter() - started,
        "machine": machine_info(load_average=True),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "narration_repetition.json").write_text(json.dumps(round_floats(report), indent=2) + "\n")
    print(json.dumps(round_floats(summary), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
