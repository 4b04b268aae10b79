"""What the lane's tests share: its environment, the engine's size, and the timings they record."""

from __future__ import annotations

# Small on purpose: the lane shares 2 cores and 24 GiB with everything else on the machine.
LANE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (the CPU build ignores gpu_memory_utilization)
    "HF_HUB_OFFLINE": "1",  # nothing comes from a hub: the model is a local folder
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
MAX_MODEL_LEN = 1024
# A prompt budget and answers that fit that window (the settings refuse a window that cannot hold them).
SMALL_WINDOW = {"context_tokens": 512, "narrator_max_tokens": 64, "extractor_max_tokens": 256}

TIMINGS: dict[str, float] = {}
"""Seconds spent in each stage of the lane, printed at the end of the run."""
