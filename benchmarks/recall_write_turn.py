"""A turn's write to the memory index, by parts, on the code of a given checkout (issue 30).

One table, the instant echo engine, ``turns`` turns on the embedded stores; the index's write methods
are wrapped to time each part (embedding, the full-text upsert with its commit, the reload, the vector
upsert). Run it for two checkouts in one session (a ``git worktree`` of the older commit) so the
machine's load falls on both alike; ``benchmarks/results/recall_write_turn.json`` holds such a run.

    .venv/bin/python benchmarks/recall_write_turn.py ROOT [TURNS]   # prints RESULT {json}
"""

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

root = Path(sys.argv[1])
sys.path.insert(0, str(root))
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 20
from narrator.engines import EchoEngine  # noqa: E402
from schemas.serving import EngineKind, ServeSettings, TurnRequest  # noqa: E402
from schemas.settings import load_settings  # noqa: E402
from schemas.story import StoryProfile  # noqa: E402
from serve.services import SingleEngine, open_services  # noqa: E402

parts: dict[str, list[float]] = {}


def wrap(obj, method, name):
    orig = getattr(obj, method)

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            parts.setdefault(name, []).append(time.perf_counter() - t)

    setattr(obj, method, timed)


with tempfile.TemporaryDirectory() as tmp:
    settings = load_settings(data_dir=Path(tmp))
    serve = ServeSettings(api_host="127.0.0.1", narrator_engine=EngineKind.ECHO, max_concurrent_turns=64)
    with open_services(settings, serve, narrator=SingleEngine(EchoEngine("instant"))) as s:
        s.open = True
        w = s.story.create_world("Bench", axioms=["The dead stay dead."])
        cid = s.story.create_campaign(w.id, "K", StoryProfile(genre="fantasy")).id
        idx = s.story.recall_index

        async def play(n):
            lat = []
            for i in range(n):
                t = time.perf_counter()
                async for _ in s.flow.play(cid, TurnRequest(text=f"I search the cellar, step {i}.")):
                    pass
                lat.append(time.perf_counter() - t)
            return lat

        asyncio.run(play(2))
        wrap(idx, "write_now" if hasattr(idx, "write_now") else "write", "write_total")
        wrap(idx.embedder, "embed_documents", "embed_documents")
        if hasattr(idx, "_indexed_neighbours"):
            wrap(idx, "_indexed_neighbours", "indexed_neighbours")
        wrap(idx.text, "upsert", "text_upsert")
        wrap(idx.text, "refresh", "text_refresh")
        wrap(idx.vectors, "upsert", "vector_upsert")
        wrap(idx.vectors, "scroll", "vector_scroll")
        lat = asyncio.run(play(turns))
        out = {
            "turn_p50_ms": round(statistics.median(lat) * 1000, 1),
            "parts_p50_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in parts.items()},
            "parts_calls": {k: len(v) for k, v in parts.items()},
        }
        print("RESULT " + json.dumps(out))
