"""The library a campaign draws on, over HTTP: set at creation, read and replaced at
``/api/v1/campaigns/{id}/library``; unknown ids are 404 naming them, a GM's key (or an admin's) sets it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.serving import KeyRole
from tests.unit.serve_support import api_services
from tests.unit.test_gate_provenance import write_book

pytestmark = pytest.mark.servers

API = "/api/v1"


@pytest.fixture
def services() -> Iterator[Any]:
    with api_services() as services:
        yield services


def test_a_campaign_pins_its_library_at_creation_and_in_play(services: Any) -> None:
    from serve.app import create_app

    manual, _ = write_book(services.story.graph, "Monster Manual")
    write_book(services.story.graph, "Volos Guide", library="lib_extra")
    admin_key, _ = services.keys.create("owner", admin=True)
    admin = {"Authorization": f"Bearer {admin_key}"}
    with TestClient(create_app(services, mcp=False), base_url="http://127.0.0.1") as client:
        world = client.post(f"{API}/worlds", json={"name": "Ashfall"}, headers=admin).json()["id"]
        body: dict[str, Any] = {"world_id": world, "name": "Ember Road", "profile": {"genre": "fantasy"}}

        unknown = client.post(
            f"{API}/campaigns", json={**body, "library_pins": [{"item_id": "item_nope"}]}, headers=admin
        )
        assert unknown.status_code == 404 and "item 'item_nope'" in unknown.json()["message"]
        pins = [{"item_id": manual.uid, "use": "canon"}]
        created = client.post(f"{API}/campaigns", json={**body, "library_pins": pins}, headers=admin)
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        assert created.json()["library_pins"] == [{"library_id": None, "item_id": manual.uid, "use": "canon"}]
        bare = client.post(f"{API}/campaigns", json=body, headers=admin).json()
        assert bare["library_pins"] == []  # no pins: the whole library

        player_key, _ = services.keys.create("player", campaigns=[cid])
        gm_key, _ = services.keys.create("gm", campaigns=[cid], role=KeyRole.GM)
        other_key, _ = services.keys.create("elsewhere", campaigns=[bare["id"]], role=KeyRole.GM)
        player, gm = {"Authorization": f"Bearer {player_key}"}, {"Authorization": f"Bearer {gm_key}"}
        library = f"{API}/campaigns/{cid}/library"

        assert client.get(library, headers=player).json()["pins"] == created.json()["library_pins"]
        new = {"pins": [{"library_id": "lib_extra", "use": "inspiration"}, {"item_id": manual.uid}]}
        assert client.put(library, json=new, headers=player).status_code == 403  # a GM's call
        assert client.put(library, json=new, headers={"Authorization": f"Bearer {other_key}"}).status_code == 403
        changed = client.put(library, json=new, headers=gm)
        assert changed.status_code == 200, changed.text
        assert [(p["library_id"], p["item_id"], p["use"]) for p in changed.json()["pins"]] == [
            ("lib_extra", None, "inspiration"),
            (None, manual.uid, None),
        ]
        assert client.get(f"{API}/campaigns/{cid}", headers=gm).json()["library_pins"] == changed.json()["pins"]

        missing = client.put(library, json={"pins": [{"library_id": "lib_nope"}, {"item_id": "item_x"}]}, headers=gm)
        assert missing.status_code == 404
        assert "library 'lib_nope'" in missing.json()["message"] and "item 'item_x'" in missing.json()["message"]
        twice = client.put(library, json={"pins": [{"item_id": manual.uid}, {"item_id": manual.uid}]}, headers=gm)
        assert twice.status_code == 422 and "pinned twice" in twice.text
        both = client.put(library, json={"pins": [{"item_id": manual.uid, "library_id": "lib_srd"}]}, headers=gm)
        assert both.status_code == 422 and "exactly one of library_id or item_id" in both.text
        assert client.get(library, headers=gm).json() == changed.json()  # refused changes change nothing

        assert client.put(library, json={"pins": []}, headers=gm).json() == {"pins": []}
        assert client.put(f"{API}/campaigns/camp_nope/library", json={"pins": []}, headers=admin).status_code == 404
