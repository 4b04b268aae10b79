"""A tiny Llama with random weights and a locally trained tokenizer, written to a folder.

vLLM loads it like any Hugging Face checkpoint; nothing comes from a hub. The weights are random,
so the text is noise, but every path a real model takes (chat template, prefill, decode, prefix
cache, guided decoding) runs for real.

One thing is not left to chance: the model leans towards the tokens that close a JSON string, array
or object. Guided decoding makes every token it allows keep the document valid, but only the model
decides when to stop; a purely random one can fill an unbounded string until ``max_tokens`` and
leave the document open. Leaning towards closers, it writes the shortest document the schema allows,
which is what the structured-output tests need to check the grammar and not the model's luck.
"""

from __future__ import annotations

from pathlib import Path

# Words and JSON punctuation the tokenizer learns merges from; the byte-level alphabet covers the rest,
# so any string (and so any JSON document) can be spelled.
_CORPUS = [
    "The narrator describes the tavern. The party enters the dark hall.",
    "Roll for initiative. The goblin attacks the fighter with a rusty blade.",
    "Spend a fate point to invoke an aspect. Stress boxes absorb shifts of harm.",
    '{"proposals": [{"content": {"type": "entity_created", "name": "Mira"}, "confidence": "high"}]}',
    '{"mood": "tense", "count": 3, "lit": true, "items": ["rope", "torch"]}',
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def build_tiny_llama(path: Path, *, vocab_size: int = 512, seed: int = 0) -> Path:
    """Write a random-weight Llama (2 layers, hidden 128) and its tokenizer to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    _prefer_closing(model, tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path, safe_serialization=True)
    return path


def _prefer_closing(model: object, tokenizer: object, *, lean: float = 8.0) -> None:
    """Add a fixed preference to every logit: random per token, high for closers, low for EOS.

    Every position's residual stream carries a constant feature (dimension 0 of every embedding),
    and the output head reads the preference off it; the random weights elsewhere add their noise.
    """
    import torch

    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(1)
    preference = torch.randn(len(vocab), generator=generator)
    for token, token_id in vocab.items():
        if token and set(token) <= set('"]}'):
            preference[token_id] += lean
        elif token and set(token) <= set(',"'):
            preference[token_id] += lean * 0.75
    preference[tokenizer.eos_token_id] = -lean  # type: ignore[attr-defined]
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 10.0  # type: ignore[attr-defined]
        model.lm_head.weight[:, 0] = 0.3 * preference  # type: ignore[attr-defined]
