"""Helpers for the recall tests: a table set up over HTTP (world, campaign, characters, turns)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def campaign(client: TestClient, name: str = "The Salt Road") -> str:
    world = ok(client.post(f"{API}/worlds", json={"name": "Brinemark", "axioms": ["Salt is money."]}), 201)
    body = {"world_id": world["id"], "name": name, "profile": {"genre": "fantasy", "tone": "grim"}}
    return str(ok(client.post(f"{API}/campaigns", json=body), 201)["id"])


def turn(client: TestClient, campaign_id: str, text: str, **fields: Any) -> str:
    """Play a narrated turn (the echo engine narrates); its id."""
    outcome = ok(client.post(f"{API}/campaigns/{campaign_id}/turns", json={"text": text, **fields}), 201)
    assert outcome["recall_error"] is None, outcome
    return str(outcome["turn_id"])


def characters(client: TestClient, campaign_id: str, *names: str) -> dict[str, str]:
    """Make characters canon through a GM scene (the gate); their entity ids by name."""
    scene = ok(client.post(f"{API}/campaigns/{campaign_id}/scenes", json={"title": "Dramatis personae"}), 201)
    ids = {}
    for name in names:
        body = {"type": "entity", "content": {"kind": "character", "name": name}, "authority": "gm"}
        proposal = ok(client.post(f"{API}/scenes/{scene['id']}/proposals", json=body), 201)
        ids[name] = "ent_" + proposal["id"].split("_", 1)[1]
    report = ok(client.post(f"{API}/scenes/{scene['id']}/end", json={}))
    assert all(d["status"] == "accepted" for d in report["decisions"]), report
    return ids


def recall(client: TestClient, campaign_id: str, query: str, **fields: Any) -> list[dict[str, Any]]:
    body = ok(client.post(f"{API}/campaigns/{campaign_id}/recall", json={"query": query, **fields}))
    assert body["campaign_id"] == campaign_id and body["query"] == query
    return list(body["hits"])
