"""What the lane's tests share: its environment, the engine's size, and the timings they record."""

from __future__ import annotations

import copy
import json
from typing import Any

# Small on purpose: the lane shares 2 cores and 24 GiB with everything else on the machine.
LANE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (the CPU build ignores gpu_memory_utilization)
    "HF_HUB_OFFLINE": "1",  # nothing comes from a hub: the model is a local folder
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # vLLM 0.29's CPU build saves its compiled model (AOT) but cannot load it back ("'function' object has no
    # attribute 'finalize_loading'"), so every engine start compiled again; without AOT, inductor's own
    # cache is reused from the second start on.
    "VLLM_USE_AOT_COMPILE": "0",
}
MAX_MODEL_LEN = 1024
# A prompt budget and answers that fit that window (the settings refuse a window that cannot hold them).
SMALL_WINDOW = {"context_tokens": 512, "narrator_max_tokens": 64, "extractor_max_tokens": 256}

TIMINGS: dict[str, float] = {}
"""Seconds spent in each stage of the lane, printed at the end of the run."""


def proposals_schema(max_tokens: int | None, *, min_items: int = 0, max_items: int | None = None) -> dict[str, Any]:
    """The proposals schema as the extractor asks for it: narrowed so its documents close within ``max_tokens``
    (what the turn flow sends), or the whole one (``None``); with at least ``min_items`` proposals and at most
    ``max_items`` (both only remove documents). A copy: the extractor's own is shared."""
    from narrator.extraction import extraction_schema

    schema = copy.deepcopy(extraction_schema(max_tokens))
    proposals = schema["properties"]["proposals"]
    proposals["minItems"] = max(min_items, proposals.get("minItems", 0))
    if max_items is not None:
        proposals["maxItems"] = min(max_items, proposals.get("maxItems", max_items))
    return schema


def read_proposals(text: str, schema: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """What the turn flow makes of a structured answer, checked: a document of the schema the engine was
    sent (the grammar's promise: :func:`narrator.engines.portable_schema` of ``schema``), and every proposal
    in it either staged or dropped with a reason (rules no JSON schema states, such as a fact's "an entity
    or a value, not both", are the parse's, one proposal at a time).

    Returns:
        The proposals :func:`narrator.extraction.parse_extraction` keeps, and its reasons for the others.
    """
    import jsonschema

    from narrator.engines import portable_schema
    from narrator.extraction import parse_extraction

    document = json.loads(text)
    jsonschema.validate(document, portable_schema(schema))
    good, dropped = parse_extraction(text)
    assert len(good) + len(dropped) == len(document["proposals"]), (good, dropped)
    NOTES.append(f"{len(good)} proposal(s) kept, {len(dropped)} dropped {dropped}: {text[:300]}")
    return good, dropped


NOTES: list[str] = []
"""What the model answered where the lane checks the flow around its words, printed at the end of the run."""
