"""The ``openai`` engine against an endpoint that refuses or fails: our errors at the edge, and the schema it
sends is one a guided-decoding server takes (vLLM's own server is the vLLM lane's test)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from schemas.errors import InvalidRequest, Unavailable
from schemas.serving import ExtractionBatch

pytestmark = pytest.mark.unit

MESSAGES = [{"role": "user", "content": "I open the door."}]


class Endpoint:
    """An HTTP endpoint on loopback answering every chat completion with one status, keeping the bodies."""

    def __init__(self, status: int) -> None:
        from tests.unit.serve_support import free_port

        self.status, self.bodies = status, []  # type: list[dict[str, Any]]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                owner.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                # vLLM's error body for a refused request
                body = json.dumps({"error": {"message": "This model's maximum context length is 1024 tokens"}})
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                return None

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    served = Endpoint(request.param)
    yield served
    served.server.shutdown()


async def _stream(port: int) -> list[str]:
    from narrator.engines import OpenAIEngine

    engine = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5)
    try:
        return [p async for p in engine.stream(MESSAGES, max_tokens=8, temperature=0.0)]
    finally:
        await engine.close()


async def _structured(port: int, schema: dict[str, Any]) -> str:
    from narrator.engines import OpenAIEngine

    engine = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5)
    try:
        return await engine.structured(MESSAGES, schema=schema, max_tokens=8)
    finally:
        await engine.close()


@pytest.mark.parametrize("endpoint", [400, 422], indirect=True)
def test_a_refused_request_is_invalid_not_unavailable(endpoint: Endpoint) -> None:
    with pytest.raises(InvalidRequest, match=f"refused the request \\({endpoint.status}\\).*context length"):
        anyio.run(_stream, endpoint.port)
    with pytest.raises(InvalidRequest, match="refused"):
        anyio.run(_structured, endpoint.port, {"type": "object"})


@pytest.mark.parametrize("endpoint", [503], indirect=True)
def test_a_failing_endpoint_is_unavailable(endpoint: Endpoint) -> None:
    with pytest.raises(Unavailable, match="failed"):
        anyio.run(_stream, endpoint.port)


@pytest.mark.parametrize("endpoint", [400], indirect=True)
def test_the_schema_sent_has_no_one_of(endpoint: Endpoint) -> None:
    schema = ExtractionBatch.model_json_schema()
    assert "oneOf" in json.dumps(schema)
    with pytest.raises(InvalidRequest):
        anyio.run(_structured, endpoint.port, schema)
    sent = endpoint.bodies[-1]["response_format"]["json_schema"]["schema"]
    assert "oneOf" not in json.dumps(sent) and "anyOf" in json.dumps(sent)
    # vLLM's server refuses the keyword ("Grammar error: Unimplemented keys: [propertyNames]")
    assert "propertyNames" in json.dumps(schema) and "propertyNames" not in json.dumps(sent)
    # the discriminator is required: vLLM's server wrote a proposal without it, which the parse refused
    assert "type" not in schema["$defs"]["ProposedEntity"].get("required", [])
    assert "type" in sent["$defs"]["ProposedEntity"]["required"]


def test_a_property_named_like_the_keyword_is_kept() -> None:
    from narrator.engines import portable_schema

    schema = {"type": "object", "properties": {"propertyNames": {"type": "string"}}, "propertyNames": {"pattern": "x"}}
    assert portable_schema(schema) == {"type": "object", "properties": {"propertyNames": {"type": "string"}}}
