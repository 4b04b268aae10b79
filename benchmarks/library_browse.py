"""How long browsing the library and a health check take on the embedded graph as the library grows.

Usage::

    .venv/bin/python benchmarks/library_browse.py                    # 2 libraries x 50 items x 100 chunks
    .venv/bin/python benchmarks/library_browse.py --items 200 --chunks 100 --concepts 5000

A synthetic catalog is written into a fresh data folder through the catalog's own writes (items, chunks
with ``--mentions`` concepts each drawn from ``--concepts``, RELATED_TO weights refreshed per item as
ingest does), then each read of :class:`stores.browse.LibraryBrowser` is timed (``--repeat`` runs after
one warm-up, median and p90): ``libraries`` (every library's item, chunk and concept counts, one
query), ``item`` (one item's 10 chunk previews and 25 concepts), and ``traverse`` from a concept to
depth 1, 2 and 3 (at most 100 concepts). The graph's and the blob store's health probes are timed
the same way. Writes ``benchmarks/results/library_browse.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine_info, percentile_ms, round_floats  # noqa: E402


def _build(catalog: Any, args: argparse.Namespace) -> float:
    """The synthetic catalog; returns the seconds it took."""
    from schemas.knowledge import Chunk, Concept, FileType, Item, ItemStatus, Library, LibraryType

    rng = random.Random(args.seed)
    started = time.perf_counter()
    concepts = [Concept(uid=f"concept_{i:06d}", name=f"Concept {i}") for i in range(args.concepts)]
    for lib_i in range(args.libraries):
        library = catalog.save_library(Library(name=f"library {lib_i}", type=LibraryType.RULEBOOK))
        for item_i in range(args.items):
            uid = f"item_{lib_i}_{item_i:05d}"
            digest = hashlib.sha256(uid.encode()).hexdigest()
            item = Item(
                uid=uid,
                library_uid=library.uid,
                title=uid,
                file_type=FileType.MARKDOWN,
                size_bytes=1,
                content_hash=digest,
                source_ref=uid,
                status=ItemStatus.READY,
            )
            catalog.save_item(item)
            chunks = [
                Chunk(
                    uid=f"{uid}_{c}", item_uid=uid, sequence=c, text_key=f"items/{uid}/chunks/{c}.txt", token_count=100
                )
                for c in range(args.chunks)
            ]
            catalog.save_chunks(chunks)
            mentions = [(chunk.uid, rng.choice(concepts).uid) for chunk in chunks for _ in range(args.mentions)]
            catalog.save_mentions(concepts if (lib_i, item_i) == (0, 0) else [], mentions)
            catalog.refresh_related(uid)
    return time.perf_counter() - started


def _timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return {"median_ms": statistics.median(samples) * 1000, "p90_ms": percentile_ms(samples, 0.9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", type=int, default=2)
    parser.add_argument("--items", type=int, default=50, help="items per library")
    parser.add_argument("--chunks", type=int, default=100, help="chunks per item")
    parser.add_argument("--concepts", type=int, default=2000)
    parser.add_argument("--mentions", type=int, default=5, help="concepts each chunk mentions")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()

    from schemas.settings import load_settings
    from stores.browse import LibraryBrowser
    from stores.catalog import Catalog
    from stores.factory import open_blob_store, open_graph_store
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    with tempfile.TemporaryDirectory(prefix="library-browse-") as folder:
        settings = load_settings(data_dir=Path(folder))
        graph, blobs = open_graph_store(settings), open_blob_store(settings)
        try:
            graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
            built_s = _build(Catalog(graph), args)
            browse = LibraryBrowser(graph, blobs)
            counts = [
                lib.model_dump(include={"name", "item_count", "chunk_count", "concept_count"})
                for lib in browse.libraries()
            ]
            reads = {
                "libraries": _timed(browse.libraries, args.repeat),
                "item": _timed(lambda: browse.item("item_0_00001"), args.repeat),
                **{
                    f"traverse_depth_{d}": _timed(
                        lambda d=d: browse.traverse(concept="concept_000001", depth=d), args.repeat
                    )
                    for d in (1, 2, 3)
                },
                "health_graph": _timed(graph.health, args.repeat),
                "health_blob": _timed(blobs.health, args.repeat),
            }
        finally:
            graph.close()
            blobs.close()
    result = {
        "benchmark": "library_browse",
        "parameters": vars(args),
        "catalog": {"build_s": built_s, "libraries": counts},
        "reads": reads,
        "machine": machine_info(load_average=True),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "library_browse.json"
    out.write_text(json.dumps(round_floats(result, 2), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(round_floats(reads, 2), indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
