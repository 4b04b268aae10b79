"""The command line of campaign memory: ``campaign import-transcript``, ``recall`` (one query or a file of
them) and ``reindex`` rebuilding every campaign's recall, on the embedded stores of the test's data folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorekeeper.cli import app

pytestmark = pytest.mark.servers  # the commands start the embedded graph server
runner = CliRunner()

LINES = [
    {"session": "1", "time": "1 May 2023", "speaker": "Ada", "ref": "s1:1",
     "text": "I finally adopted a puppy from the shelter, a scruffy terrier named Biscuit."},
    {"session": "1", "time": "1 May 2023", "speaker": "Bo", "ref": "s1:2",
     "text": "The quarterly budget review went badly; my manager wants cuts everywhere."},
    {"session": "2", "time": "9 June 2023", "speaker": "Bo", "ref": "s2:1",
     "text": "I signed up for a pottery class on Thursdays to get away from screens."},
    {"session": "2", "time": "9 June 2023", "speaker": "Bo", "ref": "s2:2",
     "text": "We are moving to Lisbon in the autumn for my partner's new job."},
]  # fmt: skip


def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "ada-and-bo.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES), encoding="utf-8")
    return path


def test_import_recall_and_reindex(tmp_path: Path) -> None:
    imported = runner.invoke(
        app, ["campaign", "import-transcript", str(transcript(tmp_path)), "--name", "A&B", "--no-summaries", "--json"]
    )
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout)
    campaign_id = report["campaign_id"]
    assert campaign_id.startswith("camp_")
    assert (report["turns"], report["sessions"], report["summaries"], report["records"]) == (4, 2, 0, 4)

    one = runner.invoke(app, ["recall", campaign_id, "Which of them owns a dog now?", "--limit", "2", "--json"])
    assert one.exit_code == 0, one.output
    hits = [json.loads(line) for line in one.stdout.splitlines()]
    assert len(hits) == 2 and all({"turn_id", "ref", "text", "score", "scores"} <= set(hit) for hit in hits)
    (dog,) = [hit for hit in hits if hit["ref"] == "s1:1"]  # found by meaning: the vector leg's first
    assert dog["text"] == LINES[0]["text"] and dog["ranks"]["vector"] == 1

    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        json.dumps({"id": "dog", "query": "Which of them owns a dog now?"})
        + "\n\n"
        + json.dumps({"id": 7, "query": "relocating abroad"})
        + "\n",
        encoding="utf-8",
    )
    many = runner.invoke(app, ["recall", campaign_id, "--queries", str(queries), "--limit", "3", "--json"])
    assert many.exit_code == 0, many.output
    answers = [json.loads(line) for line in many.stdout.splitlines()]
    assert [a["id"] for a in answers] == ["dog", 7]
    assert all(len(a["hits"]) == 3 for a in answers)
    assert "s1:1" in [h["ref"] for h in answers[0]["hits"]] and "s2:2" in [h["ref"] for h in answers[1]["hits"]]

    shown = runner.invoke(app, ["recall", campaign_id, "relocating abroad", "--limit", "4"])
    assert shown.exit_code == 0, shown.output
    assert "s2:2" in shown.stdout and "Bo (9 June 2023)" in shown.stdout and "Lisbon" in shown.stdout

    again = runner.invoke(app, ["campaign", "import-transcript", str(transcript(tmp_path)), "--name", "A&B"])
    assert again.exit_code == 0, again.output
    assert "imported 4 turns in 2 scenes (2 summaries) as campaign camp_" in again.stdout
    assert campaign_id not in again.stdout  # the same file again is another campaign

    rebuilt = runner.invoke(app, ["reindex"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt the recall of 2 campaigns (10 records)" in rebuilt.stdout  # 4 lines; 4 lines and 2 summaries


def test_an_unknown_campaign_exits_1() -> None:
    result = runner.invoke(app, ["recall", "camp_missing", "anything"])
    assert result.exit_code == 1
    assert "no campaign 'camp_missing'" in result.output


def test_a_broken_transcript_exits_2_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + '{"speaker": "Bo", "text": "unfinished\n', encoding="utf-8")
    result = runner.invoke(app, ["campaign", "import-transcript", str(path), "--name", "Broken", "--json"])
    assert result.exit_code == 2
    assert f"{path}:2: malformed JSON" in result.output
    assert result.stdout == ""


def test_bad_recall_arguments_exit_2(tmp_path: Path) -> None:
    neither = runner.invoke(app, ["recall", "camp_x"])
    assert neither.exit_code == 2 and "give a QUERY or --queries FILE" in neither.output
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": 1, "query": "fine"}) + "\n" + json.dumps({"query": "no id"}) + "\n")
    both = runner.invoke(app, ["recall", "camp_x", "text", "--queries", str(queries)])
    assert both.exit_code == 2
    broken = runner.invoke(app, ["recall", "camp_x", "--queries", str(queries), "--json"])
    assert broken.exit_code == 2 and f"{queries}:2: expected a JSON object with 'id'" in broken.output
