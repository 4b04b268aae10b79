"""The ``local`` engine: the embedded default model run in this process on CPU with transformers.

The model (:mod:`models.llm`: SmolLM2-135M-Instruct, a GGUF file fetched once and checked, or
``LOREKEEPER_LOCAL_MODEL``) is loaded once per process and shared by every :class:`LocalEngine` in it
(the narrator's, the extractor's, the memory former's and the axiom judge's), in a worker thread so
the caller's event loop keeps answering; the event ``local_model_loaded`` reports the seconds it took.
One generation runs at a time on the shared model (a lock; CPU cores are the limit anyway).

Its chat template renders the messages; narration streams as the model writes (a streamer fed from
the generating thread); generation stops at the model's end-of-turn token, at ``max_tokens``, or when
the reader stops reading. Structured output is valid by construction: llguidance (the library behind
vLLM's ``guidance`` backend) compiles the JSON schema into a grammar and masks, at every step, the
tokens that would leave it, so the answer is a document of the schema unless ``max_tokens`` cuts it
short. Errors at the edge are the other engines': a request the model cannot take (a prompt beyond its
context, a schema the compiler refuses) is :class:`~schemas.errors.InvalidRequest`, a model that
cannot be had or fails is :class:`~schemas.errors.Unavailable` / :class:`~schemas.errors.ConfigError`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from models.llm import DEFAULT_LOCAL_MODEL
from narrator.engines import AnswerTruncated, Message, guidable_schema
from schemas.errors import InvalidRequest, LorekeeperError, Unavailable

log = structlog.get_logger(__name__)


@dataclass
class LoadedModel:
    """A model and its tokenizers, loaded once per process per path."""

    name: str
    path: Path
    model: Any
    tokenizer: Any
    guidance_tokenizer: Any
    context_tokens: int
    load_seconds: float
    lock: threading.Lock


_loaded: dict[str, LoadedModel] = {}
_loading = threading.Lock()


def load_model(path: Path) -> LoadedModel:
    """The model at ``path`` (a GGUF file or a Hugging Face folder), loaded on first call in this process."""
    key = str(path.resolve())
    with _loading:
        if key in _loaded:
            return _loaded[key]
        import llguidance.hf
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        started = time.perf_counter()
        if path.is_dir():
            folder, extra = path, {}
        else:
            folder, extra = path.parent, {"gguf_file": path.name}
        try:
            tokenizer: Any = AutoTokenizer.from_pretrained(str(folder), **extra)
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **extra)
        except (OSError, ValueError) as exc:
            raise Unavailable("narrator", f"cannot load the local model {path}: {exc}") from None
        model.eval()
        vocab = int(model.config.vocab_size)
        guidance = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
        context = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        seconds = time.perf_counter() - started
        name = _name_of(path)
        loaded = LoadedModel(name, path, model, tokenizer, guidance, context, seconds, threading.Lock())
        _loaded[key] = loaded
        log.info("local_model_loaded", model=name, path=str(path), seconds=round(seconds, 2), context_tokens=context)
        return loaded


def _name_of(path: Path) -> str:
    """A model's name from its path: a folder's name, a GGUF file's name up to its quantization."""
    return path.name if path.is_dir() else path.stem.split(".")[0]


class _Stop:
    """A stopping criterion the reader sets when it stops reading (a table left mid-narration)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool)


class _Guided:
    """A logits processor that keeps generation inside a grammar (llguidance's matcher)."""

    def __init__(self, loaded: LoadedModel, grammar: str) -> None:
        import llguidance
        import llguidance.torch as lt

        self.matcher = llguidance.LLMatcher(loaded.guidance_tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise InvalidRequest("extractor", f"the engine refused the schema: {self.matcher.get_error()}")
        self.bitmask = lt.allocate_token_bitmask(1, loaded.guidance_tokenizer.vocab_size)
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import llguidance.torch as lt

        if self.started:
            self.matcher.consume_token(int(input_ids[0, -1]))
        self.started = True
        if self.matcher.is_error():  # cannot happen for a token the mask allowed; kept loud if it does
            raise RuntimeError(f"guided decoding left the grammar: {self.matcher.get_error()}")
        lt.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        lt.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        return scores


def json_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar of a JSON schema, compact (no free whitespace a model could pad with).

    Lenient, as vLLM's guidance backend is: a keyword the compiler does not implement (``propertyNames``
    of a free-form attribute map) is left unenforced rather than refusing the schema; the parse of the
    answer still validates each item against the full schema.
    """
    import llguidance

    try:
        return str(
            llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(guidable_schema(schema)), defaults={"whitespace_flexible": False, "lenient": True}
            )
        )
    except ValueError as exc:
        raise InvalidRequest("extractor", f"the engine refused the schema: {exc}") from None


LOCAL_STRUCTURED_MAX_TOKENS = 480
"""The local engine's structured-answer budget (unless LOREKEEPER_EXTRACTOR_MAX_TOKENS sets one). The
callers narrow their schemas to it (:mod:`narrator.schema_budget`), so the answer closes in time: two
proposals of :class:`~schemas.serving.ExtractionBatch`, a scene's summary with three memories, or three
verdicts. At ~8 tokens/s on a laptop CPU, 1024 tokens made
one turn's extraction take minutes; a cut answer is an error the caller records, never a silent nothing."""


NARRATION_SAMPLING: dict[str, Any] = {"repetition_penalty": 1.2, "no_repeat_ngram_size": 5}
"""What keeps a small model's narration from looping (never applied to structured answers, whose keys
repeat). Without it SmolLM2-135M at temperature 0.8 wrote one sentence ("I'm going to use it to unlock
another door.") 40 times over in a 512-token turn of ``lorekeeper play``; ``benchmarks/narration_repetition.py``
measures the distinct-word share and repeated 4-grams with and without it."""


def _stop_ids(loaded: LoadedModel) -> set[int]:
    """The token ids that end the model's turn (what generation stops at before max_tokens)."""
    ids = loaded.model.generation_config.eos_token_id
    stops = set(ids) if isinstance(ids, list) else ({ids} if ids is not None else set())
    if loaded.tokenizer.eos_token_id is not None:
        stops.add(int(loaded.tokenizer.eos_token_id))
    return stops


class LocalEngine:
    """The embedded model in this process (see the module docstring).

    Args:
        path: the model (a GGUF file or a Hugging Face folder); by default :func:`models.llm.local_model_path`.
    """

    structured_max_tokens = LOCAL_STRUCTURED_MAX_TOKENS
    """The budget of a structured answer when the settings name none (:func:`narrator.extraction.extractor_budget`)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._loaded: LoadedModel | None = None
        configured = path or (
            Path(os.environ["LOREKEEPER_LOCAL_MODEL"]) if os.environ.get("LOREKEEPER_LOCAL_MODEL") else None
        )
        # the name is known before the load (a replica reports its model at start-up)
        self.model = _name_of(configured) if configured is not None else DEFAULT_LOCAL_MODEL.name

    async def ready(self) -> LoadedModel:
        """The loaded model (loaded off the event loop on first call)."""
        if self._loaded is None:
            self._loaded = await asyncio.to_thread(self._load)
            self.model = self._loaded.name
        return self._loaded

    async def health(self) -> str:
        """``ok`` once the model is loaded, ``idle`` before (it loads on first use; a probe never loads it)."""
        return "ok" if self._loaded is not None else "idle"

    def _load(self) -> LoadedModel:
        from models.llm import local_model_path

        return load_model(self._path or local_model_path())

    def _inputs(self, loaded: LoadedModel, messages: list[Message], max_tokens: int, role: str) -> Any:
        inputs = loaded.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        length = int(inputs["input_ids"].shape[1])
        if length + max_tokens > loaded.context_tokens:
            raise InvalidRequest(
                role,
                f"the prompt ({length} tokens) and the answer ({max_tokens}) exceed the model's context "
                f"({loaded.context_tokens} tokens)",
            )
        return inputs

    def _generate(self, loaded: LoadedModel, inputs: Any, seed: int | None = None, **kwargs: Any) -> Any:
        import torch

        kwargs.setdefault("do_sample", False)
        with loaded.lock, torch.inference_mode():
            if seed is not None and kwargs.get("do_sample"):
                torch.manual_seed(seed)
            return loaded.model.generate(**inputs, pad_token_id=loaded.tokenizer.eos_token_id, **kwargs)

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        from transformers import StoppingCriteriaList, TextIteratorStreamer

        loaded = await self.ready()
        inputs = self._inputs(loaded, messages, max_tokens, "narrator")
        streamer = TextIteratorStreamer(loaded.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=None)
        stop = _Stop()
        sampling: dict[str, Any] = {"do_sample": temperature > 0, **NARRATION_SAMPLING}
        if temperature > 0:
            sampling.update(temperature=temperature, top_p=0.95, seed=seed)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self._generate(
                    loaded,
                    inputs,
                    max_new_tokens=max_tokens,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([stop]),
                    **sampling,
                )
            except BaseException as exc:  # reported to the reader below
                failure.append(exc)
                streamer.end()

        thread = threading.Thread(target=run, name="local-model-generate", daemon=True)
        thread.start()
        try:
            while True:
                piece = await asyncio.to_thread(next, streamer, None)
                if piece is None:
                    break
                if piece:
                    yield piece
        finally:
            stop.event.set()
        await asyncio.to_thread(thread.join)
        if failure:
            raise self._translated(failure[0], "narrator")

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        loaded = await self.ready()
        inputs = self._inputs(loaded, messages, max_tokens, "extractor")
        grammar = await asyncio.to_thread(json_grammar, schema)
        guided = await asyncio.to_thread(_Guided, loaded, grammar)

        def run() -> tuple[str, bool]:
            from transformers import LogitsProcessorList

            processors = LogitsProcessorList([guided])
            out = self._generate(loaded, inputs, max_new_tokens=max_tokens, logits_processor=processors)
            new = out[0, inputs["input_ids"].shape[1] :]
            # the grammar ends the answer with the end-of-turn token once the document closes: without
            # it, max_tokens cut the document short
            closed = len(new) < max_tokens or int(new[-1]) in _stop_ids(loaded)
            return str(loaded.tokenizer.decode(new, skip_special_tokens=True)), closed

        try:
            text, closed = await asyncio.to_thread(run)
        except LorekeeperError:
            raise
        except Exception as exc:
            raise self._translated(exc, "extractor") from None
        if not closed:
            # what the model was writing when the budget ran out says why (a loop, a long field)
            log.warning(
                "structured_answer_cut", model=self.model, max_tokens=max_tokens, chars=len(text), tail=text[-160:]
            )
            raise AnswerTruncated.at("extractor", max_tokens)
        return text

    @staticmethod
    def _translated(exc: BaseException, role: str) -> LorekeeperError:
        if isinstance(exc, LorekeeperError):
            return exc
        return Unavailable(role, f"the local model failed: {type(exc).__name__}: {exc}")

    async def close(self) -> None:
        return None  # the model stays loaded for the process: other engines in it share it
