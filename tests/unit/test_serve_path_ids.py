"""An id the caller names (a path's ``campaign_id``, a tool's ``scene_id``) that no record of ours can have —
a NUL, a lone surrogate, over 200 characters — is refused as malformed over both doors, naming it.

Before, the value reached the graph, whose driver refused it: a 400 quoting the driver's message
("falkordb embedded graph: strings must not contain NUL characters").
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.unit.serve_support import api_services, running
from tests.unit.test_free_text_sweep import mcp_call

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

API = "/api/v1"
BAD_IDS = {"NUL": "cmp_\x00x", "lone surrogate": "cmp_\ud800", "300 characters": "c" * 300}


def test_malformed_ids_are_refused_naming_them_over_both_doors() -> None:
    from serve.app import create_app

    with api_services() as services, running(create_app(services)) as url, httpx.Client(base_url=url) as client:
        for label, bad in BAD_IDS.items():
            # REST: the id in the path (percent-encoded; a lone surrogate cannot be sent in a URL, so its
            # REST case is the over-long and NUL ones)
            if label != "lone surrogate":
                answer = client.get(f"{API}/campaigns/{quote(bad, safe='')}/turns")
                assert answer.status_code == 422, f"{label}: {answer.status_code} {answer.text[:300]}"
                assert answer.json()["error"] == "validation_failed"
                assert "campaign_id" in answer.json()["message"] and "falkordb" not in answer.text
            result = mcp_call(client, "list_turns", {"campaign_id": bad})
            text = result["content"][0]["text"]
            assert result.get("isError") and "validation_failed" in text and "campaign_id" in text, f"{label}: {text}"
            assert "falkordb" not in text
