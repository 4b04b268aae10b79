"""The axiom judge on labelled cases: does a model find the proposals that break a world's axiom, and only those?

Cases are generated deterministically (``--seed``) from rule templates filled from the corpus: creatures
and spells of the SRD 5.1 JSON, characters and places of the Fate SRD's examples. Each case is one axiom
and two proposals, one that breaks it and one that does not (in a seeded order), e.g. "No Basilisk lives in
this world." against "a new creature 'Basilisk' appears" and "a new creature 'Owlbear' appears". The
templates cover kinds of law (a creature that does not exist, magic that needs a spoken word, the dead that
stay dead, a place closed to outsiders, iron that cannot be enchanted, nobody flying), so no answer fits one
phrasing.

The judge answers through its own path (:class:`narrator.axioms.LLMAxiomJudge`: the prompt, the schema, the
parse), and is scored per proposal: accuracy, and precision and recall of "breaks"; a case the judge could
not rule on (the model failed, or called the axiom unclear) counts as its axiom unchecked. The
deterministic baseline in the same run says "breaks" when a proposal shares a content word with the axiom.

    python benchmarks/axiom_judge.py                         # the local model vs the baseline
    python benchmarks/axiom_judge.py --engine openai --base-url http://host:8000/v1 --model NAME

Writes ``benchmarks/results/axiom_judge.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
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

# (axiom, a proposal that breaks it, one that does not); {c}/{o}: creatures, {p}: a character, {s}: a spell,
# {l}: a place
TEMPLATES = [
    ("No {c} lives in this world.", "a new creature '{c}' appears", "a new creature '{o}' appears"),
    ("Magic needs a spoken word.", "{p} casts {s} in perfect silence", "{p} shouts the words of {s}"),
    ("The dead never return.", "{p}, killed last winter, rises from the grave alive", "{p} mourns at a friend's grave"),
    ("Outsiders cannot enter {l}.", "{p}, an outsider, walks into {l}", "{p}, an outsider, waits at the gate of {l}"),
    ("Iron cannot be enchanted.", "{p} enchants an iron sword", "{p} enchants a silver ring"),
    ("Nobody can fly.", "{p} flies over {l}", "{p} climbs the stairs of {l}"),
]
STOP = {"this", "that", "with", "from", "into", "world", "never", "cannot", "lives", "needs", "over", "their"}


@dataclass
class Case:
    axiom: str
    proposals: list[tuple[str, str, bool]]  # (proposal id, text, breaks)


def _names(file: str) -> list[str]:
    return sorted({r["name"] for r in srd_records(file, pk_key=None) if r.get("name") and "(" not in r["name"]})


def make_cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    creatures, spells = _names("Creature.json")[:300], _names("Spell.json")[:300]
    cases = []
    for index in range(count):
        axiom, breaking, keeping = TEMPLATES[index % len(TEMPLATES)]
        c, o = rng.sample(creatures, 2)
        fill = {"c": c, "o": o, "p": rng.choice(FATE_CHARACTERS), "s": rng.choice(spells), "l": rng.choice(FATE_PLACES)}
        pair = [(breaking.format(**fill), True), (keeping.format(**fill), False)]
        rng.shuffle(pair)
        proposals = [(f"prop_{index}_{i}", text, breaks) for i, (text, breaks) in enumerate(pair)]
        cases.append(Case(axiom.format(**fill), proposals))
    return cases


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in STOP}


def baseline(case: Case) -> dict[str, bool]:
    """A proposal breaks the axiom when it shares a content word with it."""
    law = _words(case.axiom)
    return {pid: bool(law & _words(text)) for pid, text, _ in case.proposals}


def score(rulings: list[tuple[dict[str, bool] | None, Case]]) -> dict[str, Any]:
    tp = fp = fn = right = total = unchecked = 0
    for said, case in rulings:
        if said is None:
            unchecked += 1
            said = {}
        for pid, _, breaks in case.proposals:
            guess = said.get(pid, False)
            total += 1
            right += guess == breaks
            tp += guess and breaks
            fp += guess and not breaks
            fn += breaks and not guess
    return {
        "accuracy": right / total if total else 0.0,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "unchecked_cases": unchecked,
        "proposals": total,
    }


def run_judge(engine: Any, cases: list[Case], max_tokens: int) -> dict[str, Any]:
    from narrator.axioms import LLMAxiomJudge
    from schemas.story import Axiom
    from story.axioms import ProposalText

    judge = LLMAxiomJudge(engine, max_tokens=max_tokens, timeout_s=900, owns_engine=False)
    rulings, seconds = [], []
    try:
        for case in cases:
            axiom = Axiom(world_id="world_bench", text=case.axiom)
            asked = [ProposalText(pid, "system", text) for pid, text, _ in case.proposals]
            started = time.perf_counter()
            ruled = judge.judge([axiom], asked)
            seconds.append(time.perf_counter() - started)
            checked = not ruled.unchecked
            rulings.append(({pid: pid in ruled.violations for pid, _, _ in case.proposals} if checked else None, case))
    finally:
        judge.close()
    return score(rulings) | {"seconds_per_case": sum(seconds) / max(1, len(seconds))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_engine_arguments(parser)
    parser.add_argument("--cases", type=int, default=12)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--max-tokens", type=int, default=None, help="Unset: the engine's own budget.")
    parser.add_argument("--out", type=Path, default=RESULTS / "axiom_judge.json")
    args = parser.parse_args()
    engine = engine_from(args, parser)
    cases = make_cases(args.cases, args.seed)
    base = score([(baseline(case), case) for case in cases])
    budget = args.max_tokens or int(getattr(engine, "structured_max_tokens", 1024))
    started = time.perf_counter()
    measured = run_judge(engine, cases, budget)
    result = {
        "cases": len(cases),
        "seed": args.seed,
        "max_tokens": budget,
        "baseline": base,
        args.engine: measured | {"model": engine.model, "wall_s": time.perf_counter() - started},
        "machine": machine_info(load_average=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(round_floats(result), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(round_floats(result), indent=2))


if __name__ == "__main__":
    main()
