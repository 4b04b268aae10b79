"""What the benchmark scripts share: where the corpus and results live, the machine a run reports,
the SRD 5.1 JSON records, rounding of a result for its JSON, latency percentiles, and the untrained
MiniLM-shaped cross-encoder the search benchmarks time and score.

Imported as ``benchmarks.common`` (each script puts the repository root on ``sys.path`` first).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
SRD_JSON = CORPUS / "rulebooks" / "dnd-srd-5.1" / "json-srd-2014"
RESULTS = REPO / "benchmarks" / "results"


def machine_info(*, load_average: bool = False) -> dict[str, Any]:
    """The CPUs, Python and platform of this run; with ``load_average``, the 1-minute load average now
    (the machine is shared: noise)."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if load_average:
        info["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return info


def srd_records(name: str, *, pk_key: str | None = "pk", folder: Path = SRD_JSON) -> list[dict[str, Any]]:
    """The records of one SRD 5.1 JSON file (``Spell.json``…): each row's fields, with its primary key
    under ``pk_key`` (none when ``pk_key`` is None)."""
    rows = json.loads((folder / name).read_text(encoding="utf-8"))
    if pk_key is None:
        return [row["fields"] for row in rows]
    return [row["fields"] | {pk_key: row.get("pk")} for row in rows]


def round_floats(value: Any, digits: int = 4) -> Any:
    """``value`` with every float in it (through dicts and lists) rounded to ``digits`` places."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: round_floats(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [round_floats(v, digits) for v in value]
    return value


def percentile_ms(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1, nearest rank) of ``samples`` in seconds, in milliseconds."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def untrained_cross_encoder(folder: Path, layers: int = 6) -> Path:
    """A cross-encoder of ms-marco-MiniLM-L{layers}-v2's shape, written to ``folder``: the local
    all-MiniLM-L6-v2 body (its first ``layers`` layers) under a one-logit head that is not trained
    (seeded, so every run builds the same one)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from models.embedding import resolve_model_path

    torch.manual_seed(0)
    source = resolve_model_path("all-MiniLM-L6-v2")
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, num_hidden_layers=layers)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder
