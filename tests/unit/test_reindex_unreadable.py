"""``lorekeeper reindex`` skips and reports a record it cannot read, and rebuilds everything else (the rest of
that record's campaign too).

The reported bug: a record the graph held but a reader refused made ``reindex`` die with a validation
traceback at its campaign, so no campaign after it was rebuilt. Records are broken here directly in the
graph (as a bug or a hand edit would leave them), on the embedded stores of the test's data folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorekeeper.cli import app

pytestmark = pytest.mark.servers  # the commands start the embedded graph server
runner = CliRunner()


def _import(tmp_path: Path, name: str, lines: list[str]) -> str:
    path = tmp_path / f"{name}.jsonl"
    rows = [{"session": "1", "speaker": "Ada", "ref": f"{name}:{n}", "text": text} for n, text in enumerate(lines)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    done = runner.invoke(app, ["campaign", "import-transcript", str(path), "--name", name, "--no-summaries", "--json"])
    assert done.exit_code == 0, done.output
    return str(json.loads(done.stdout)["campaign_id"])


def _graph_run(query: str, params: dict[str, object]) -> list[dict[str, object]]:
    from schemas.settings import get_settings
    from stores.factory import open_graph_store

    graph = open_graph_store(get_settings())
    try:
        return graph.run(query, params)
    finally:
        graph.close()


def _indexed(campaign_id: str) -> int:
    from schemas.settings import get_settings
    from story.recall_index import open_recall_index

    index = open_recall_index(get_settings())
    try:
        return index.count(campaign_id)
    finally:
        index.close()


def test_reindex_skips_an_unreadable_record_and_rebuilds_everything_else(tmp_path: Path) -> None:
    first = _import(tmp_path, "first", ["I adopted a terrier named Biscuit.", "We sail for Lisbon in autumn."])
    second = _import(tmp_path, "second", ["The pottery class meets on Thursdays.", "My manager wants cuts."])
    if first > second:  # campaigns are rebuilt in id order: break the one rebuilt first
        first, second = second, first
    (broken,) = _graph_run(
        "MATCH (n:Turn) WHERE n.campaign_id = $c AND n.depth = 1 SET n.depth = 'deep' RETURN n.uid AS uid",
        {"c": first},
    )
    _graph_run("CREATE (:Item {uid: 'item_broken', status: 'ready'})", {})  # an item record missing its fields
    _graph_run("MATCH (n:Campaign {uid: $c}) SET n.name = 'x'", {"c": second})  # the second's index is dropped...

    rebuilt = runner.invoke(app, ["--log-json", "--log-level", "INFO", "reindex"])
    logs = [json.loads(line) for line in rebuilt.stderr.splitlines() if line.startswith("{")]

    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt the recall of 2 campaigns (3 records)" in rebuilt.stdout
    assert f"campaign {first} rebuilt without it: Turn {broken['uid']} cannot be read (depth:" in rebuilt.stderr
    assert "skipped item item_broken" in rebuilt.stderr
    assert "skipped 1 items, 1 unreadable records and 0 whole campaigns" in rebuilt.stderr
    unreadable = [e for e in logs if e["event"] == "recall_record_unreadable"]
    assert [(e["campaign_id"], e["label"], e["record_id"]) for e in unreadable] == [(first, "Turn", broken["uid"])]
    assert [e["item_uid"] for e in logs if e["event"] == "reindex_item_skipped"] == ["item_broken"]
    completed = [e for e in logs if e["event"] == "recall_rebuild_completed"]
    assert completed[0]["skipped_campaigns"] == 0 and completed[0]["unreadable_records"] == 1
    assert completed[0]["partial_campaigns"] == 1
    assert _indexed(second) == 2  # ...and rebuilt
    assert _indexed(first) == 1  # rebuilt without the broken turn: its other turn is indexed
