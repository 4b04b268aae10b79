"""Serving measured with the real model: Lorekeeper's narrator against the bare engine, same model, same run.

The model is the embedded default one (SmolLM2-135M-Instruct). At 1, 8 and 32 concurrent tables, each
table playing ``--turns`` turns one after another, and for each narration length of ``--lengths``
(a short 16-token case and a realistic 128-token one), two paths are timed, one after the other:

* **narrator** — :class:`~narrator.turn.TurnFlow` in this process (record the turn, assemble the context
  on the embedded stores, stream the narration, keep the take). The extractor seat is the echo engine
  and search / recall are off, so the model time measured is the narration's alone, as on the bare path;
* **bare** — the engine itself, fed the very prompts the narrator sent (recorded on the narrator path),
  each table's turns in the same order and with the same concurrency: ``--engine local`` runs
  transformers' ``generate`` with a streamer on the loaded model, with the local engine's own narration
  settings (one generation at a time, as the local engine does); ``--engine vllm`` runs vLLM's
  ``AsyncLLM.generate`` on the token ids (run it in the vLLM lane's environment, ``.venv-vllm-cpu``,
  under ``flock /tmp/vllm.lock``).

Both paths are measured the same way, as a client sees them: time to first token from the request
(the narrator's turn request; the bare call, chat template and tokenization included) to the first
non-empty piece; completion tokens by tokenizing the streamed text with the model's tokenizer; tokens/s
as completion tokens over the level's wall time (aggregate) and, per request, tokens after the first
over the time from the first piece to the last (streaming rate, median). Greedy decoding: both paths
write the same tokens for the same prompt. The narrator path also says where its time before the
engine and after it goes (``narrator_phases``: request to the engine's call, last piece to ``done``).

On vLLM it reads, per request, the prompt tokens served from the prefix cache, and reports the hit
rate of every table's second and later turns on both paths (goal >= 90 %: a table's next prompt begins
with its last one, :mod:`narrator.context`). The prefix cache is reset before each path.

Writes ``benchmarks/results/serving_model_<engine>.json`` and ``.png`` (the vLLM lane's environment has
no matplotlib: ``--plot-only vllm`` draws it from the JSON in the main environment).

    .venv/bin/python benchmarks/serving_model.py --engine local --levels 1,8 [--turns 3] [--lengths 16,128]
    flock /tmp/vllm.lock .venv-vllm-cpu/bin/python benchmarks/serving_model.py --engine vllm
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, machine_info, percentile_ms  # noqa: E402

MARK = re.compile(r"table (\d+), turn (\d+)")
_current: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("current", default=None)
_requested: contextvars.ContextVar[float] = contextvars.ContextVar("requested", default=0.0)


class Stream:
    """One request as a client sees it: when it was asked, when its first and last pieces came, what it said."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.text: list[str] = []

    def piece(self, text: str) -> None:
        if not text:
            return
        now = time.perf_counter()
        self.first = self.first if self.first is not None else now
        self.last = now
        self.text.append(text)


def summarise(streams: list[Stream], wall: float, tokenizer: Any) -> dict[str, Any]:
    """The same figures for both paths: tokens counted by the model's tokenizer on the streamed text."""
    ttft = [(s.first if s.first is not None else time.perf_counter()) - s.started for s in streams]
    counts = [len(tokenizer.encode("".join(s.text).strip(), add_special_tokens=False)) for s in streams]
    rates = [
        (n - 1) / (s.last - s.first)
        for s, n in zip(streams, counts, strict=True)
        if s.first is not None and s.last is not None and s.last > s.first and n > 1
    ]
    tokens = sum(counts)
    return {
        "requests": len(streams),
        "ttft_p50_ms": round(percentile_ms(ttft, 0.5), 1),
        "ttft_p95_ms": round(percentile_ms(ttft, 0.95), 1),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "stream_tokens_per_s_p50": round(statistics.median(rates), 2) if rates else None,
    }


class Recorder:
    """Wraps the engine's ``stream`` on the narrator path: keeps each call's messages under its table and turn,
    when the engine was called (after the turn's request), and (vLLM) each request's prompt and cached tokens."""

    def __init__(self, engine: Any) -> None:
        self.prompts: dict[tuple[int, int], list[dict[str, str]]] = {}
        self.cache: dict[tuple[int, int], tuple[int, int]] = {}
        self.tokens: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        self.block_size = 1
        self.to_engine: list[float] = []
        stream = engine.stream

        async def recorded(messages: list[dict[str, str]], **kwargs: Any) -> Any:
            found = MARK.search(messages[-1]["content"])
            key = (int(found.group(1)), int(found.group(2))) if found else (-1, -1)
            self.prompts[key] = messages
            if _requested.get():
                self.to_engine.append(time.perf_counter() - _requested.get())
            token = _current.set(key)
            try:
                async for piece in stream(messages, **kwargs):
                    yield piece
            finally:
                _current.reset(token)

        engine.stream = recorded

    def watch_vllm(self, engine: Any, block_size: int) -> None:
        """Read each request's prompt and cached token counts (both paths call the same ``generate``), and the
        token ids of its prompt and output (what the cache could hold for the table's next turn)."""
        inner = engine._engine
        generate = inner.generate
        self.block_size = block_size

        async def counted(prompt: Any, params: Any, **kwargs: Any) -> Any:
            last, written = None, []
            async for output in generate(prompt, params, **kwargs):
                last = output
                written.extend(output.outputs[0].token_ids)
                yield output
            key = _current.get()
            if key is not None and last is not None:
                ids = list(last.prompt_token_ids or [])
                self.cache[key] = (len(ids), int(last.num_cached_tokens or 0))
                self.tokens[key] = (ids, ids + written)

        inner.generate = counted

    def hit_rate(self) -> dict[str, Any] | None:
        """The prefix cache's share of the prompt tokens of every table's second and later turns, and its share
        of what a cache could have held: the prompt's common prefix with the table's previous prompt and
        output, in whole KV blocks (the new input, and the part of a block after it, can never be cached)."""
        later = [(k, v) for k, v in self.cache.items() if k[1] >= 1]
        if not later:
            return None
        prompt, cached = sum(p for _, (p, _) in later), sum(c for _, (_, c) in later)
        cacheable = 0
        for (t, i), _ in later:
            ids, before = self.tokens[(t, i)][0], self.tokens.get((t, i - 1), ([], []))[1]
            common = next((n for n, (a, b) in enumerate(zip(ids, before, strict=False)) if a != b), None)
            common = min(len(ids), len(before)) if common is None else common
            cacheable += common // self.block_size * self.block_size
        return {
            "later_turns": len(later),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 3) if prompt else None,
            "cacheable_tokens": cacheable,
            "hit_rate_of_cacheable": round(cached / cacheable, 3) if cacheable else None,
        }


async def narrator_level(flow: Any, campaigns: list[str], turns: int) -> tuple[list[Stream], float, list[float]]:
    """Every table plays its turns one after another, all tables at once. Returns the streams, the wall time
    and, per turn, the seconds from its last piece to ``done`` (the take kept, proposals extracted)."""
    from schemas.serving import TurnRequest

    streams: list[Stream] = []
    after: list[float] = []

    async def table(t: int, campaign_id: str) -> None:
        for i in range(turns):
            stream = Stream()
            _requested.set(stream.started)
            request = TurnRequest(text=f"I search the old cellar for the lost key (table {t}, turn {i}).")
            async for event in flow.play(campaign_id, request):
                if event["event"] == "delta":
                    stream.piece(event["text"])
                elif event["event"] == "done" and stream.last is not None:
                    after.append(time.perf_counter() - stream.last)
            streams.append(stream)

    started = time.perf_counter()
    await asyncio.gather(*(table(t, c) for t, c in enumerate(campaigns)))
    return streams, time.perf_counter() - started, after


async def bare_level(
    bare: Any, prompts: dict[tuple[int, int], Any], tables: int, turns: int
) -> tuple[list[Stream], float]:
    """The narrator's prompts again, straight into the engine: each table's turns in order, all tables at once."""
    streams: list[Stream] = []

    async def table(t: int) -> None:
        for i in range(turns):
            token = _current.set((t, i))
            try:
                streams.append(await bare(prompts[(t, i)]))
            finally:
                _current.reset(token)

    started = time.perf_counter()
    await asyncio.gather(*(table(t) for t in range(tables)))
    return streams, time.perf_counter() - started


def bare_local(loaded: Any, max_tokens: int) -> Any:
    """transformers' generate with a streamer on the loaded model, greedy, with the local engine's narration
    settings (repetition penalty, no repeated 5-gram), one generation at a time."""
    import torch
    from transformers import TextIteratorStreamer

    from narrator.local_engine import NARRATION_SAMPLING

    async def one(messages: list[dict[str, str]]) -> Stream:
        stream = Stream()
        inputs = loaded.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        streamer = TextIteratorStreamer(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True)

        def run() -> None:
            with loaded.lock, torch.inference_mode():
                loaded.model.generate(
                    **inputs, max_new_tokens=max_tokens, do_sample=False, streamer=streamer,
                    pad_token_id=loaded.tokenizer.eos_token_id, **NARRATION_SAMPLING,
                )  # fmt: skip

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        while (piece := await asyncio.to_thread(next, streamer, None)) is not None:
            stream.piece(piece)
        await asyncio.to_thread(thread.join)
        return stream

    return one


def bare_vllm(engine: Any, max_tokens: int) -> Any:
    """vLLM's AsyncLLM.generate on the prompt's token ids, greedy, streamed by deltas."""
    import uuid

    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    async def one(messages: list[dict[str, str]]) -> Stream:
        stream = Stream()
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, output_kind=RequestOutputKind.DELTA)
        async for output in engine._engine.generate(engine._prompt(messages), params, request_id=uuid.uuid4().hex):
            stream.piece(output.outputs[0].text)
        return stream

    return one


async def build(kind: str, levels: list[int], block_size: int) -> tuple[Any, Any]:
    """The engine, started, and its tokenizer."""
    if kind == "local":
        from narrator.local_engine import LocalEngine

        engine: Any = LocalEngine()
        loaded = await engine.ready()
        return engine, loaded.tokenizer
    from lorekeeper.model_cli import converted_default_model
    from narrator.engines import VLLMEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    kwargs = {"max_num_seqs": max(levels), "block_size": block_size}
    engine = VLLMEngine(str(converted_default_model()), max_model_len=4096, engine_kwargs=kwargs)
    return engine, None


def phases(to_engine: list[float], after: list[float]) -> dict[str, Any]:
    """Where the narrator's own time goes, per turn: before the engine is called, and after its last piece."""
    return {
        "request_to_engine_p50_ms": round(percentile_ms(to_engine, 0.5), 1) if to_engine else None,
        "request_to_engine_p95_ms": round(percentile_ms(to_engine, 0.95), 1) if to_engine else None,
        "last_piece_to_done_p50_ms": round(percentile_ms(after, 0.5), 1) if after else None,
        "last_piece_to_done_p95_ms": round(percentile_ms(after, 0.95), 1) if after else None,
    }


async def run_all(
    kind: str, levels: list[int], turns: int, lengths: list[int], data: Path, block_size: int
) -> dict[str, Any]:
    """Kept whole: one engine and one story for every length and level, each level's two paths back to back."""
    from narrator.engines import EchoEngine
    from schemas.serving import ServeSettings
    from schemas.settings import load_settings
    from schemas.story import StoryProfile
    from serve.services import SingleEngine, open_services

    engine, tokenizer = await build(kind, levels, block_size)
    started = time.perf_counter()
    async for _ in engine.stream([{"role": "user", "content": "Hello."}], max_tokens=1, temperature=0.0):
        pass
    out: dict[str, Any] = {"engine_start_s": round(time.perf_counter() - started, 1), "runs": {}}
    # warm: a narration of the longest length on a prompt of a turn's size, so neither path pays first calls
    warm = [{"role": "system", "content": "You narrate. " * 60}, {"role": "user", "content": "I look around."}]
    async for _ in engine.stream(warm, max_tokens=max(lengths), temperature=0.0):
        pass
    tokenizer = tokenizer or engine._tokenizer
    recorder = Recorder(engine)
    if kind == "vllm":
        recorder.watch_vllm(engine, block_size)

    async def cold() -> None:
        """Each path starts from an empty prefix cache: the bare replay must not reuse the narrator's prompts."""
        if kind == "vllm":
            await engine._engine.reset_prefix_cache()

    settings = load_settings(data_dir=data)
    for max_tokens in lengths:
        serve = ServeSettings(
            narrator_max_tokens=max_tokens, narrator_temperature=0.0, context_tokens=3072, extractor_max_tokens=64,
            max_concurrent_turns=1024,
        )  # fmt: skip
        bare = bare_local(engine._loaded, max_tokens) if kind == "local" else bare_vllm(engine, max_tokens)
        run: dict[str, Any] = {"narrator": {}, "bare": {}, "narrator_phases": {}, "prefix_cache": {}}
        with open_services(
            settings, serve, narrator=SingleEngine(engine), extractor=EchoEngine(), with_search=False,
            with_recall=False,
        ) as services:  # fmt: skip
            services.open = True
            world = services.story.create_world("Bench", axioms=["The dead stay dead.", "Magic has a price."])
            for level in levels:
                campaigns = [
                    services.story.create_campaign(world.id, f"Table {level}-{i}", StoryProfile(genre="fantasy")).id
                    for i in range(level)
                ]
                recorder.prompts.clear(), recorder.cache.clear(), recorder.tokens.clear(), recorder.to_engine.clear()
                await cold()
                streams, wall, after = await narrator_level(services.flow, campaigns, turns)
                run["narrator"][str(level)] = summarise(streams, wall, tokenizer)
                run["narrator_phases"][str(level)] = phases(recorder.to_engine, after)
                prompts, narrated_cache = dict(recorder.prompts), recorder.hit_rate()
                recorder.cache.clear(), recorder.tokens.clear()
                await cold()
                streams, wall = await bare_level(bare, prompts, level, turns)
                run["bare"][str(level)] = summarise(streams, wall, tokenizer)
                if narrated_cache is not None:
                    run["prefix_cache"][str(level)] = {"narrator": narrated_cache, "bare": recorder.hit_rate()}
                load = [round(x, 1) for x in os.getloadavg()]
                key = str(level)
                print(f"{max_tokens} tok x{level}: narrator {run['narrator'][key]} {run['narrator_phases'][key]}")
                print(f"{max_tokens} tok x{level}: bare     {run['bare'][key]}", flush=True)
                print(f"{max_tokens} tok x{level}: cache {run['prefix_cache'].get(key)} load {load}", flush=True)
                run.setdefault("load", {})[str(level)] = load
        out["runs"][str(max_tokens)] = run
    await engine.close()
    return out


def ratios(run: dict[str, Any], levels: list[int]) -> dict[str, Any]:
    """Narrator over bare, per level: tokens/s (aggregate and streaming) and time to first token."""
    narrator, bare = run["narrator"], run["bare"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    return {
        str(level): {
            "tokens_per_s": ratio(narrator[str(level)]["tokens_per_s"], bare[str(level)]["tokens_per_s"]),
            "stream_tokens_per_s": ratio(
                narrator[str(level)]["stream_tokens_per_s_p50"], bare[str(level)]["stream_tokens_per_s_p50"]
            ),
            "ttft_p50": ratio(narrator[str(level)]["ttft_p50_ms"], bare[str(level)]["ttft_p50_ms"]),
            "ttft_p95": ratio(narrator[str(level)]["ttft_p95_ms"], bare[str(level)]["ttft_p95_ms"]),
        }
        for level in levels
    }


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["levels"]
    runs = results["runs"]
    fig, axes = plt.subplots(len(runs), 2, figsize=(11, 4 * len(runs)), squeeze=False)
    for row, (length, run) in enumerate(runs.items()):
        ax1, ax2 = axes[row]
        for name, marker in (("narrator", "o"), ("bare", "s")):
            rows = [run[name][str(level)] for level in levels]
            ax1.plot(levels, [r["ttft_p50_ms"] for r in rows], marker=marker, label=f"{name} p50")
            ax1.plot(levels, [r["ttft_p95_ms"] for r in rows], marker=marker, linestyle=":", label=f"{name} p95")
            ax2.plot(levels, [r["tokens_per_s"] for r in rows], marker=marker, label=name)
        cache = run.get("prefix_cache") or {}
        hits = " / ".join(f"{v['narrator']['hit_rate']:.0%}" for v in cache.values() if v["narrator"]["hit_rate"])
        ax1.set(xscale="log", yscale="log", xlabel="concurrent tables", ylabel="time to first token (ms)",
                title=f"TTFT, {length} tokens a turn")  # fmt: skip
        ax2.set(xscale="log", xlabel="concurrent tables", ylabel="tokens / s",
                title=f"Throughput, {length} tokens" + (f"\nlater turns cached {hits}" if hits else ""))  # fmt: skip
        for ax in (ax1, ax2):
            ax.set_xticks(levels, [str(level) for level in levels])
            ax.legend(fontsize=7)
    load = results["machine"]["load_before"][0]
    fig.suptitle(f"{results['model']} on {results['engine']}: narrator vs bare engine, same run (load {load})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["local", "vllm"], default="local")
    parser.add_argument("--levels", default="1,8,32", help="Concurrent tables, comma separated.")
    parser.add_argument("--turns", type=int, default=3, help="Turns each table plays.")
    parser.add_argument("--lengths", default="16,128", help="Narration lengths (max tokens), comma separated.")
    parser.add_argument(
        "--block-size",
        type=int,
        default=32,
        help="vLLM KV block size (CPU default 128; its attention takes multiples of 32).",
    )
    parser.add_argument("--out", default=None, help="Results name (default serving_model_<engine>).")
    parser.add_argument("--plot-only", metavar="NAME", help="Only redraw the plot of results/NAME.json.")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads((RESULTS / f"{args.plot_only}.json").read_text()), RESULTS / f"{args.plot_only}.png")
        return
    levels = [int(x) for x in args.levels.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    name = args.out or f"serving_model_{args.engine}"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lk-serving-model-") as tmp:
        measured = asyncio.run(run_all(args.engine, levels, args.turns, lengths, Path(tmp), args.block_size))
    for run in measured["runs"].values():
        run["ratio_narrator_to_bare"] = ratios(run, levels)
    results = {
        "benchmark": "serving_model",
        "engine": args.engine,
        "model": "SmolLM2-135M-Instruct",
        "levels": levels,
        "turns_per_table": args.turns,
        "lengths": lengths,
        "vllm_block_size": args.block_size if args.engine == "vllm" else None,
        "engine_start_s": measured["engine_start_s"],
        "runs": measured["runs"],
        "goal": {"tokens_per_s_ratio_min": 0.9, "ttft_ratio_max": 1.1, "prefix_cache_hit_rate_min": 0.9},
        "machine": machine_info()
        | {"load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    try:
        plot(results, RESULTS / f"{name}.png")
    except ImportError:  # the vLLM lane's environment has no matplotlib: plot_only redraws from the JSON
        print(f"no matplotlib here: run `.venv/bin/python benchmarks/serving_model.py --plot-only {name}`")
    summary = {
        k: {"ratios": r["ratio_narrator_to_bare"], "cache": r["prefix_cache"]} for k, r in measured["runs"].items()
    }
    print(json.dumps({"summary": summary, "load": results["machine"]["load_after"]}))


if __name__ == "__main__":
    main()
