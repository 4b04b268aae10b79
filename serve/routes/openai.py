"""The OpenAI-compatible passthrough (``/v1/chat/completions``, ``/v1/models``) for clients that only want the model."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from narrator.context import estimate_tokens
from schemas.errors import LorekeeperError
from serve.deps import PrincipalDep, ServicesDep


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(pattern="^(system|user|assistant|developer|tool)$")
    content: str = Field(max_length=200_000)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=32_768)
    temperature: float = Field(default=0.8, ge=0, le=2)
    seed: int | None = None
    stream: bool = False


def router() -> APIRouter:
    """``/v1/chat/completions`` for clients that only want the model (any valid key)."""
    r = APIRouter(tags=["openai"])

    @r.post("/v1/chat/completions")
    async def chat(s: ServicesDep, _: PrincipalDep, body: ChatRequest) -> Response:
        engine = s.narrator.default
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        max_tokens = body.max_completion_tokens or body.max_tokens or s.serve.narrator_max_tokens
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        pieces = engine.stream(messages, max_tokens=max_tokens, temperature=body.temperature, seed=body.seed)
        if body.stream:

            async def chunks() -> AsyncIterator[bytes]:
                def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                    doc = {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": engine.model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    return f"data: {json.dumps(doc)}\n\n".encode()

                yield chunk({"role": "assistant"})
                try:
                    async for piece in pieces:
                        yield chunk({"content": piece})
                except LorekeeperError as exc:
                    yield f"data: {json.dumps(exc.to_dict())}\n\n".encode()
                yield chunk({}, "stop")
                yield b"data: [DONE]\n\n"

            return StreamingResponse(chunks(), media_type="text/event-stream")
        text = "".join([piece async for piece in pieces])
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": engine.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": _usage(messages, text),
            }
        )

    @r.get("/v1/models")
    async def models(s: ServicesDep, _: PrincipalDep) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": s.narrator.default.model, "object": "model", "owned_by": "lorekeeper"}],
        }

    return r


def _usage(messages: list[dict[str, str]], text: str) -> dict[str, int]:
    """Token counts by estimate (about four characters a token): engines stream text, not token ids."""
    prompt = sum(estimate_tokens(m["content"]) for m in messages)
    completion = estimate_tokens(text)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
