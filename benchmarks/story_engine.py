"""Story engine on the embedded stores: state as of any turn, scene commits, and racing writers.

Measured in one run, on the embedded graph (FalkorDB) and a local blob folder:

1. **state as of a random turn** in a campaign of ``--turns`` turns on 5 branches (main, and four
   branches forked along it), with a scene every ``--scene-every`` turns committing
   ``--proposals-per-scene`` proposals. p50/p95 of ``StoryService.world_state`` (the fold) and
   ``StoryService.state`` (the typed view) at random turns, beside the same fold replayed from the
   first event with no snapshot (the ratio snapshots buy), with the snapshot interval.
2. **scene commit of 50 proposals** (entities, facts, relationships, moves, events): p50/p95 of
   ``end_scene``.
3. **racing writers**: ``--writers`` threads on ``--campaigns`` campaigns, each writer its own
   ``StoryService`` (so only the graph's commit token orders them), adding turns and committing
   scenes; lost updates (turns asked for but missing from the line) and commits per second.

Targets (issue 4): state p95 <= 20 ms; commit of 50 p95 <= 100 ms; 0 lost updates.
Writes ``benchmarks/results/story_engine.json`` and ``story_engine.png``.

    .venv/bin/python benchmarks/story_engine.py [--turns 10000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.progress import Progress  # noqa: E402

from benchmarks.common import RESULTS, percentile_ms  # noqa: E402
from schemas.story import StoryProfile  # noqa: E402
from stores.blob.local import LocalBlobStore  # noqa: E402
from stores.graph.falkordb import EmbeddedFalkorGraphStore  # noqa: E402
from story.service import StoryService  # noqa: E402
from story.state import WorldState  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    return round(percentile_ms(samples, q), 3)


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": pct(samples, 0.5),
        "p95_ms": pct(samples, 0.95),
        "mean_ms": round(statistics.mean(samples) * 1000, 3),
        "n": len(samples),
    }


def entity_id(proposal_id: str) -> str:
    return f"ent_{proposal_id.split('_', 1)[1]}"


class Builder:
    """Plays a campaign through the service: turns, and scenes of proposals every few turns."""

    def __init__(self, story: StoryService, campaign_id: str, rng: random.Random, per_scene: int) -> None:
        self.story, self.campaign_id, self.rng, self.per_scene = story, campaign_id, rng, per_scene
        self.people: list[str] = []
        self.places: list[str] = []
        self.items: list[str] = []

    def scene(self, *, count: int | None = None) -> float:
        """Open a scene, stage ``count`` proposals, end it; returns the seconds end_scene took."""
        story, rng = self.story, self.rng
        scene = story.start_scene(self.campaign_id)
        count = count or self.per_scene
        for i in range(count):
            roll = rng.random()
            if roll < 0.25 or len(self.people) < 3 or len(self.places) < 2 or not self.items:
                kind = rng.choice(["character", "location", "item"]) if len(self.people) >= 3 else "character"
                if len(self.places) < 2 and len(self.people) >= 3:
                    kind = "location"
                if not self.items and len(self.places) >= 2 and len(self.people) >= 3:
                    kind = "item"
                p = story.propose(
                    scene.id,
                    type="entity",
                    authority="gm",
                    confidence=1.0,
                    content={"kind": kind, "name": f"{kind} {len(self.people) + len(self.places)}-{i}"},
                )
                {"character": self.people, "location": self.places, "item": self.items}[kind].append(entity_id(p.id))
            elif roll < 0.5:
                story.propose(
                    scene.id,
                    type="state_change",
                    authority="system",
                    confidence=0.9,
                    evidence={"turn_ids": [story.get_campaign(self.campaign_id).head_turn_id]},
                    content={
                        "events": [
                            {
                                "kind": "current_location_set",
                                "entity_id": rng.choice(self.people),
                                "location_entity_id": rng.choice(self.places),
                            }
                        ]
                    },
                )
            elif roll < 0.7:
                story.propose(
                    scene.id,
                    type="fact",
                    authority="gm",
                    confidence=1.0,
                    content={
                        "subject_entity_id": rng.choice(self.people),
                        "predicate": f"mood{rng.randint(0, 20)}",
                        "value": rng.choice(["calm", "angry", "sad", "bold"]),
                    },
                )
            elif roll < 0.85:
                a, b = rng.sample(self.people, 2)
                story.propose(
                    scene.id,
                    type="relationship",
                    authority="gm",
                    confidence=1.0,
                    content={"source_entity_id": a, "target_entity_id": b, "kind": rng.choice(["ally_of", "rival_of"])},
                )
            else:
                story.propose(
                    scene.id,
                    type="event",
                    authority="gm",
                    confidence=1.0,
                    content={
                        "title": f"happening {rng.randint(0, 10**6)}",
                        "participant_entity_ids": rng.sample(self.people, 2),
                    },
                )
        started = time.perf_counter()
        story.end_scene(scene.id)
        return time.perf_counter() - started


def build_campaign(
    story: StoryService, turns: int, scene_every: int, per_scene: int, seed: int, progress: Progress
) -> tuple[str, list[str]]:
    rng = random.Random(seed)
    world = story.create_world("Benchmark world")
    campaign = story.create_campaign(world.id, "Ten thousand turns", StoryProfile(genre="fantasy"))
    builder = Builder(story, campaign.id, rng, per_scene)
    main_turns = turns * 2 // 5
    per_branch = (turns - main_turns) // 4
    fork_at = [main_turns * k // 5 for k in (1, 2, 3, 4)]
    task = progress.add_task("building the campaign", total=turns)
    turn_ids: list[str] = []

    def play(n: int) -> None:
        for _ in range(n):
            turn_ids.append(story.add_turn(campaign.id, f"turn {len(turn_ids)}", narration="Something happens.").id)
            if len(turn_ids) % scene_every == 0:
                builder.scene()
            progress.advance(task)

    play(main_turns)
    for depth in fork_at:
        story.create_branch(campaign.id, turn_ids[depth])
        play(per_branch)
    progress.update(task, completed=turns)
    return campaign.id, turn_ids


def measure_state(
    story: StoryService, campaign_id: str, turn_ids: list[str], samples: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    picks = [rng.choice(turn_ids) for _ in range(samples)]
    fold: list[float] = []
    view: list[float] = []
    replayed: list[int] = []
    from_scratch: list[float] = []
    for turn_id in picks:
        ctx = story.story.context(campaign_id)
        lineage = story._lineage_for(ctx, turn_id)
        t0 = time.perf_counter()
        built = story.snapshots.state_at(campaign_id, lineage)
        fold.append(time.perf_counter() - t0)
        replayed.append(built.replayed)
        t0 = time.perf_counter()
        story.state(campaign_id, turn_id=turn_id)
        view.append(time.perf_counter() - t0)
    for turn_id in picks[: max(5, samples // 10)]:
        ctx = story.story.context(campaign_id)
        lineage = story._lineage_for(ctx, turn_id)
        t0 = time.perf_counter()
        state = WorldState()
        for seq, event in story.story.events_on(campaign_id, lineage, after_seq=0):
            state.apply(event, seq=seq)
        from_scratch.append(time.perf_counter() - t0)
    final = story.world_state(campaign_id)
    return {
        "fold": summary(fold),
        "typed_view": summary(view),
        "replay_from_first_event_no_snapshot": summary(from_scratch),
        "events_replayed_after_snapshot": {"mean": round(statistics.mean(replayed), 1), "max": max(replayed)},
        "snapshot_speedup_p50": round(pct(from_scratch, 0.5) / max(pct(fold, 0.5), 1e-6), 1),
        "state_size_at_head": {
            "entities": len(final.entities),
            "facts": len(final.facts),
            "relationships": len(final.relationships),
            "events": final.event_count,
        },
    }


def measure_commits(story: StoryService, runs: int, seed: int, progress: Progress) -> dict[str, Any]:
    world = story.create_world("Commit world")
    campaign = story.create_campaign(world.id, "Fifty at a time", StoryProfile(genre="fantasy"))
    builder = Builder(story, campaign.id, random.Random(seed), 50)
    story.add_turn(campaign.id, "warm up", narration="ok")
    builder.scene(count=30)  # a cast to act on
    timings = []
    task = progress.add_task("scene commits of 50 proposals", total=runs)
    for _ in range(runs):
        story.add_turn(campaign.id, "on we go", narration="ok")
        timings.append(builder.scene(count=50))
        progress.advance(task)
    return summary(timings)


def measure_racing(
    graph: Any, blobs: Any, writers: int, campaigns: int, turns_each: int, progress: Progress
) -> dict[str, Any]:
    setup = StoryService(graph, blobs)
    world = setup.create_world("Race world")
    ids = [setup.create_campaign(world.id, f"table {i}", StoryProfile(genre="fantasy")).id for i in range(campaigns)]
    services = [StoryService(graph, blobs) for _ in range(writers)]
    done = [0] * writers
    errors: list[str] = []
    task = progress.add_task(f"{writers} writers on {campaigns} campaigns", total=writers * turns_each)

    def writer(n: int) -> None:
        service, campaign_id = services[n], ids[n % campaigns]
        try:
            for i in range(turns_each):
                service.add_turn(campaign_id, f"writer {n} turn {i}", narration="ok")
                done[n] += 1
                progress.advance(task)
        except Exception as exc:  # recorded: a lost update is what this measures
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    on_lines = sum(len(setup.history(c)) for c in ids)
    branches = sum(len(setup.branches(c)) for c in ids)
    return {
        "writers": writers,
        "campaigns": campaigns,
        "turns_per_writer": turns_each,
        "turns_acknowledged": sum(done),
        "turns_on_the_lines": on_lines,
        "lost_updates": sum(done) - on_lines,
        "extra_branches": branches - campaigns,
        "errors": errors[:5],
        "wall_s": round(wall, 2),
        "commits_per_s": round(sum(done) / wall, 1),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    s = result["state_as_of_turn"]
    labels = ["fold\n(snapshot + events)", "typed view", "replay from\nfirst event"]
    keys = ["fold", "typed_view", "replay_from_first_event_no_snapshot"]
    for i, q in enumerate(("p50_ms", "p95_ms")):
        axes[0].bar([x + i * 0.4 for x in range(3)], [s[k][q] for k in keys], width=0.4, label=q)
    axes[0].axhline(20, color="red", ls="--", lw=1, label="target p95 20 ms")
    axes[0].set_xticks([x + 0.2 for x in range(3)], labels)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("ms")
    axes[0].set_title(
        f"State as of a random turn ({result['config']['turns']} turns, 5 branches,\n"
        f"snapshot every {result['config']['snapshot_interval']} events)"
    )
    axes[0].legend(fontsize=8)
    c = result["scene_commit_50"]
    axes[1].bar(["p50", "p95"], [c["p50_ms"], c["p95_ms"]], color="tab:green")
    axes[1].axhline(100, color="red", ls="--", lw=1, label="target 100 ms")
    axes[1].set_ylabel("ms")
    axes[1].set_title("Scene commit of 50 proposals")
    axes[1].legend(fontsize=8)
    r = result["racing_writers"]
    axes[2].bar(
        ["acknowledged", "on the lines"], [r["turns_acknowledged"], r["turns_on_the_lines"]], color="tab:purple"
    )
    axes[2].set_title(
        f"{r['writers']} writers on {r['campaigns']} campaigns: {r['lost_updates']} lost, "
        f"{r['commits_per_s']} commits/s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--scene-every", type=int, default=10)
    parser.add_argument("--proposals-per-scene", type=int, default=12)
    parser.add_argument("--snapshot-interval", type=int, default=64)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--commit-runs", type=int, default=30)
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--campaigns", type=int, default=8)
    parser.add_argument("--turns-per-writer", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a small run to check the harness")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.quick:
        args.turns, args.samples, args.commit_runs, args.turns_per_writer = 500, 50, 5, 3
    result: dict[str, Any] = {
        "benchmark": "story_engine",
        "config": {
            "turns": args.turns,
            "branches": 5,
            "scene_every": args.scene_every,
            "proposals_per_scene": args.proposals_per_scene,
            "snapshot_interval": args.snapshot_interval,
            "quick": args.quick,
        },
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m_before": round(os.getloadavg()[0], 2),
        },
        "targets": {"state_p95_ms": 20, "commit_50_p95_ms": 100, "lost_updates": 0},
    }
    with tempfile.TemporaryDirectory(prefix="lk-story-bench-") as tmp, Progress() as progress:
        graph = EmbeddedFalkorGraphStore(Path(tmp) / "graph", query_timeout_s=120)
        blobs = LocalBlobStore(Path(tmp) / "blobs")
        try:
            story = StoryService(graph, blobs, snapshot_interval=args.snapshot_interval)
            story.prepare()
            t0 = time.perf_counter()
            campaign_id, turn_ids = build_campaign(
                story, args.turns, args.scene_every, args.proposals_per_scene, args.seed, progress
            )
            result["build_s"] = round(time.perf_counter() - t0, 1)
            result["state_as_of_turn"] = measure_state(story, campaign_id, turn_ids, args.samples, args.seed)
            result["scene_commit_50"] = measure_commits(story, args.commit_runs, args.seed, progress)
            result["racing_writers"] = measure_racing(
                graph, blobs, args.writers, args.campaigns, args.turns_per_writer, progress
            )
        finally:
            graph.close()
    result["environment"]["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "story_engine_quick" if args.quick else "story_engine"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / f"{name}.png")
    print(json.dumps({k: v for k, v in result.items() if k not in ("environment",)}, indent=2))


if __name__ == "__main__":
    main()
