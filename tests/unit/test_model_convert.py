"""The default model converted to a Hugging Face folder (what vLLM serves) is the same model: it loads in
transformers from the folder alone and gives the GGUF model's logits."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_convert_refuses_a_folder_that_exists(tmp_path: Path) -> None:
    from models.hf_folder import convert_to_folder

    with pytest.raises(FileExistsError):
        convert_to_folder(tmp_path / "model.gguf", tmp_path)  # refused before anything is read


@pytest.mark.local_model
def test_the_converted_folder_loads_alone_and_gives_the_same_logits(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models.hf_folder import convert_to_folder
    from models.llm import ensure_default_model
    from narrator.local_engine import load_model

    gguf = ensure_default_model()
    folder = convert_to_folder(gguf, tmp_path / "smollm2")
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the work folder was renamed whole
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    converted = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    original = load_model(gguf)
    messages = [{"role": "user", "content": "The innkeeper hands you a rusty key."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == original.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    assert ids.tolist() == original.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].tolist()
    with torch.inference_mode():
        theirs = original.model(ids).logits
        ours = converted(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()
