"""Both doors of the API for the operation tests: one call, made over REST or over MCP, read back the same way.

:class:`Doors` calls an operation by name with its ids and request fields, over REST (the route the
operation declares, through a TestClient) or over MCP (a JSON-RPC ``tools/call`` on ``/mcp``), and
answers ``(code, value)``: ``code`` is None on success, else the error code the door reported
(``unauthorized``, ``forbidden``, ``not_found``, ``validation_failed`` …).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

API = "/api/v1"
HEADERS = {"Accept": "application/json, text/event-stream"}


@dataclass
class Doors:
    client: Any  # a TestClient over the app (with its lifespan entered: MCP's session manager runs)

    def call(self, door: str, name: str, key: str | None, ids: dict[str, str], body: dict[str, Any]) -> tuple[Any, Any]:
        return self.rest(name, key, ids, body) if door == "rest" else self.mcp(name, key, ids, body)

    def rest(self, name: str, key: str | None, ids: dict[str, str], body: dict[str, Any]) -> tuple[Any, Any]:
        from serve.operations import OPERATIONS

        op = OPERATIONS[name]
        assert op.rest is not None, name
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        path = API + op.rest.path.format(**ids)
        if op.rest.raw_body:
            response = self.client.request(op.rest.method, path, content=body["data"], headers=headers)
        elif op.rest.method == "GET":
            params = {k: v for k, v in body.items() if v is not None}
            response = self.client.request("GET", path, params=params, headers=headers)
        else:
            response = self.client.request(op.rest.method, path, json=body, headers=headers)
        if response.status_code >= 400:
            return response.json()["error"], response.json()
        if response.headers["content-type"].startswith("application/zip"):
            return None, {"data": base64.b64encode(response.content).decode()}
        return None, response.json()

    def mcp(self, name: str, key: str | None, ids: dict[str, str], body: dict[str, Any]) -> tuple[Any, Any]:
        headers = {**HEADERS, **({"Authorization": f"Bearer {key}"} if key else {})}
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": {**ids, **body}},
        }
        response = self.client.post("/mcp", json=message, headers=headers)
        if response.status_code >= 400:
            return response.json()["error"], response.json()
        result = response.json()["result"]
        text = result["content"][0]["text"] if result.get("content") else "null"
        if result.get("isError"):
            match = re.search(r"(?:^|: )([a-z_]+): ", text)
            return (match.group(1) if match else text), text
        return None, json.loads(text)
