"""The embedded default model as a Hugging Face folder, for engines that do not read GGUF (vLLM).

transformers reads the GGUF file of :mod:`models.llm` (dequantizing it to float32) but cannot save a
model loaded that way as it is, so the conversion rebuilds the model from its config, copies the state
dict into it, and saves that (safetensors) beside the tokenizer, its chat template included. The folder
is written under a temporary name and renamed whole: a crash leaves no half folder that looks done. The
converted model gives the GGUF model's logits (the same float32 weights); ``lorekeeper model convert``
runs it, and ``.ci/vllm-cpu`` can serve the folder instead of random weights.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def convert_to_folder(gguf: Path, dest: Path) -> Path:
    """Write the model of ``gguf`` as a Hugging Face folder at ``dest`` (config, safetensors, tokenizer).

    Raises:
        FileExistsError: ``dest`` exists already (nothing is overwritten).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dest.exists():
        raise FileExistsError(f"{dest} exists already")
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    # The config loaded from GGUF says how its weights were quantized; the folder's are plain float32, and
    # a reader that saw the note (vLLM) would try to load them as GGUF.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    rebuilt = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = rebuilt.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:  # a tied output head is not in the dict
        raise ValueError(f"the rebuilt model does not take the weights: missing {missing}, unexpected {unexpected}")
    rebuilt.tie_weights()
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        rebuilt.save_pretrained(str(work), safe_serialization=True)
        tokenizer.save_pretrained(str(work))
        work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log.info("local_model_converted", gguf=str(gguf), folder=str(dest), seconds=round(time.perf_counter() - started, 2))
    return dest
