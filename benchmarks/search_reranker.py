"""Train a small cross-encoder on the CPU from corpus books the quality questions do not ask about.

No trained cross-encoder ships offline on PyPI, so ``search_quality.py --train-reranker`` builds one:
all-MiniLM-L6-v2's body (the local weights) with a one-logit head, fine-tuned for one epoch on
(question, section) pairs made from books *outside* the question set: the Fate Core SRD (HTML), the Fate
System Toolkit and Fate Accelerated SRDs, and the D&D SRD 5.1 magic items, creatures and class features.
The questions ask about the Fate *Condensed* SRD and the SRD 5.1 spells, rules and conditions. Fate Core
covers the same game as Fate Condensed in other words, so this is in-domain training data, not the test
set; the result says so. Queries are templated from section headings ("how does X work", "what is X");
negatives are random other sections. Nothing is saved in the repository.

Usage::

    python benchmarks/search_reranker.py OUT_DIR      # ~5 minutes on 2 cores
"""

from __future__ import annotations

import html
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CORPUS = REPO.parent / "shared" / "corpus" / "rulebooks"
TEMPLATES = ("how does {} work", "what is {}", "rules for {}", "tell me about {}", "{}")
_TAG_RE = re.compile(r"<[^>]+>")


def sections() -> list[tuple[str, str]]:
    """(heading, text) of every section of the training books."""
    out: list[tuple[str, str]] = []
    core = (CORPUS / "fate-srd" / "fate-core-SRD.html").read_text(encoding="utf-8", errors="replace")
    parts = re.split(r"<h[1-4][^>]*>(.*?)</h[1-4]>", core, flags=re.S)
    for heading, body in zip(parts[1::2], parts[2::2], strict=False):
        text = " ".join(html.unescape(_TAG_RE.sub(" ", body)).split())
        out.append((html.unescape(_TAG_RE.sub("", heading)).strip(), text))
    for name in ("fate-system-toolkit-SRD.md", "fate-accelerated-SRD.md"):
        raw = (CORPUS / "fate-srd" / name).read_text(encoding="utf-8", errors="replace")
        parts = re.split(r"<h[1-4][^>]*>(.*?)</h[1-4]>", raw, flags=re.S)
        for heading, body in zip(parts[1::2], parts[2::2], strict=False):
            text = " ".join(html.unescape(_TAG_RE.sub(" ", body)).split())
            out.append((html.unescape(_TAG_RE.sub("", heading)).strip(), text))
    srd = CORPUS / "dnd-srd-5.1" / "json-srd-2014"
    for name in ("MagicItem.json", "Creature.json", "ClassFeature.json"):
        for row in json.loads((srd / name).read_text(encoding="utf-8")):
            fields = row.get("fields", {})
            if isinstance(fields.get("name"), str) and isinstance(fields.get("desc"), str):
                out.append((fields["name"], " ".join(fields["desc"].split())))
    return [(h, t) for h, t in out if 2 <= len(h) <= 60 and len(t.split()) >= 15]


def pairs(rows: list[tuple[str, str]], n: int, seed: int = 3) -> list[tuple[str, str, float]]:
    rng = random.Random(seed)
    picked = rng.sample(rows, min(n, len(rows)))
    out = []
    for heading, text in picked:
        query = rng.choice(TEMPLATES).format(heading.lower())
        window = " ".join(text.split()[:180])
        out.append((query, window, 1.0))
        other = rng.choice(rows)
        while other[0] == heading:
            other = rng.choice(rows)
        out.append((query, " ".join(other[1].split()[:180]), 0.0))
    rng.shuffle(out)
    return out


def train(
    out_dir: Path, *, examples: int = 1000, batch: int = 16, max_length: int = 160, lr: float = 1e-4
) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from models.embedding import available_cpus, resolve_model_path

    torch.manual_seed(0)
    torch.set_num_threads(available_cpus())
    source = resolve_model_path("all-MiniLM-L6-v2")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1)
    data = pairs(sections(), examples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    started = time.perf_counter()
    losses = []
    for start in range(0, len(data), batch):
        rows = data[start : start + batch]
        enc = tokenizer(
            [q for q, _, _ in rows],
            [p for _, p, _ in rows],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        logits = model(**enc).logits.squeeze(-1)
        loss = loss_fn(logits, torch.tensor([y for _, _, y in rows]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {
        "base": "all-MiniLM-L6-v2 body, one-logit head",
        "pairs": len(data),
        "epochs": 1,
        "train_s": round(time.perf_counter() - started, 1),
        "loss_first_last": [round(sum(losses[:5]) / 5, 3), round(sum(losses[-5:]) / 5, 3)],
        "data": "Fate Core SRD, Fate System Toolkit, Fate Accelerated; SRD 5.1 magic items, creatures, class "
        "features (none of the books the questions ask about)",
    }


if __name__ == "__main__":
    print(json.dumps(train(Path(sys.argv[1]))))
