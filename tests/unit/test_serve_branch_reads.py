"""Reads over the API answer for the position they name: ``GET …/turns?branch_id=`` lists that branch's line.

Before, the turns route ignored ``branch_id`` and listed the head's line whatever branch was named.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

API = "/api/v1"


@pytest.fixture
def client() -> Iterator[TestClient]:
    from serve.app import create_app

    with (
        api_services() as services,
        TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
    ):
        yield client


def _ok(response: Any) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


def test_turns_are_listed_for_the_branch_named(client: TestClient) -> None:
    world = _ok(client.post(f"{API}/worlds", json={"name": "Ashfall"}))
    cid = _ok(
        client.post(
            f"{API}/campaigns", json={"world_id": world["id"], "name": "Forks", "profile": {"genre": "fantasy"}}
        )
    )["id"]
    t1 = _ok(client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I enter the hall."}))["turn_id"]
    t2 = _ok(client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I climb the stair."}))["turn_id"]
    main = _ok(client.get(f"{API}/campaigns/{cid}"))["active_branch_id"]

    # fork at the first turn and play a turn there: the head is now on the new branch
    branch = _ok(client.post(f"{API}/campaigns/{cid}/branches", json={"from_turn_id": t1, "name": "cellar"}))
    t3 = _ok(client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I go down to the cellar."}))["turn_id"]

    def line(**params: str) -> list[str]:
        return [t["id"] for t in _ok(client.get(f"{API}/campaigns/{cid}/turns", params=params))]

    assert line() == [t1, t3]  # the head's line
    assert line(branch_id=main) == [t1, t2]  # the main branch's tip, not the head's
    assert line(branch_id=branch["id"]) == [t1, t3]
    assert line(turn_id=t2) == [t1, t2]
    # a branch of no campaign answers like a missing one
    assert client.get(f"{API}/campaigns/{cid}/turns", params={"branch_id": "br_nope"}).status_code == 404
