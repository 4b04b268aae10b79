"""The ingest API's write routes refuse text the stores cannot hold, and write nothing then.

Every write route of the ingest app's route table gets, in each of its free-text fields, an over-long text and
a NUL character (and, in its JSON bodies, a lone surrogate: a form's bytes are decoded as UTF-8, which cannot
yield one); each answer must be a 4xx naming the field, with the graph and the blob folder byte-for-byte as
they were. On the embedded stores, without the job runner (nothing is ingested).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jobs.api import create_app
from schemas.settings import load_settings
from tests.unit.store_dump import stores_dump

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the catalog

API = "/api/v1"
JSON_BAD = {"over-long": "x" * 100_001, "lone surrogate": "a\ud800b", "NUL": "a\x00b"}
FORM_BAD = {"over-long": "x" * 100_001, "NUL": "a\x00b"}
# the free-text fields of each write route; one without any is listed with an empty tuple
FIELDS = {
    ("POST", "/library/libraries"): ("name", "description"),
    ("POST", "/library/ingest"): ("path", "title", "source", "source_ref"),
    ("POST", "/library/jobs/{job_id}/retry"): (),
}


def test_ingest_writes_refuse_text_the_stores_cannot_hold(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    root = tmp_path / "books"
    root.mkdir()
    (root / "lore.md").write_text("# Tides\n\nThe tide turns every six hours.\n", encoding="utf-8")
    with TestClient(create_app(settings, allowed_roots=[root], start_runner=False)) as client:
        ctx = client.app.state.ingest  # type: ignore[attr-defined]
        blobs = Path(settings.data_dir)
        writes = {
            (method.upper(), path.removeprefix(API))
            for path, operations in client.app.openapi()["paths"].items()  # type: ignore[attr-defined]
            for method in operations
            if method in ("post", "put", "patch", "delete")
        }
        assert writes == set(FIELDS), f"write routes without a sweep case: {writes - set(FIELDS)}"
        library = client.post(f"{API}/library/libraries", json={"name": "lore", "type": "lore"}).json()["uid"]

        def unchanged(send: object, where: str) -> None:
            before = stores_dump(ctx.graph, None, blobs / "blobs" if (blobs / "blobs").exists() else None)
            answer = send()  # type: ignore[operator]
            assert 400 <= answer.status_code < 500, f"{where}: {answer.status_code} {answer.text[:300]}"
            assert where.split()[1] in answer.text, f"{where}: {answer.text[:300]}"
            after = stores_dump(ctx.graph, None, blobs / "blobs" if (blobs / "blobs").exists() else None)
            assert after == before, where

        base = {"name": "rules", "type": "rulebook", "description": "The core rules."}
        for name in FIELDS[("POST", "/library/libraries")]:
            for label, value in JSON_BAD.items():
                body = json.dumps({**base, name: value}).encode("ascii")
                unchanged(
                    lambda body=body: client.post(
                        f"{API}/library/libraries", content=body, headers={"content-type": "application/json"}
                    ),
                    f"libraries {name} ({label})",
                )
        form = {"library_uid": library, "path": str(root / "lore.md"), "title": "Tides", "source": "a shelf"}
        form["source_ref"] = "lore.md"
        for name in FIELDS[("POST", "/library/ingest")]:
            for label, value in FORM_BAD.items():
                unchanged(
                    lambda name=name, value=value: client.post(f"{API}/library/ingest", data={**form, name: value}),
                    f"ingest {name} ({label})",
                )
        # the same route's JSON body (the contract's way in) holds two free-text fields more
        for name in (*FIELDS[("POST", "/library/ingest")], "s3_key", "file_type", "unknown_field"):
            for label, value in JSON_BAD.items():
                body = json.dumps({**form, name: value}).encode("ascii")
                unchanged(
                    lambda body=body: client.post(
                        f"{API}/library/ingest", content=body, headers={"content-type": "application/json"}
                    ),
                    f"ingest {name} ({label}, JSON)",
                )
        assert client.post(f"{API}/library/libraries", json=base).status_code == 201  # the valid ones are accepted
        assert client.post(f"{API}/library/ingest", data=form).status_code == 202
        assert client.post(f"{API}/library/ingest", json=form).status_code == 202
