"""The command line: help lists the commands, config never prints secrets, schema export writes files."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorekeeper.cli import app

pytestmark = pytest.mark.unit
runner = CliRunner()


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("config", "stores", "schema", "version"):
        assert command in result.output


def test_config_json_hides_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_GRAPH_URL", "bolt://db:7687")
    monkeypatch.setenv("LOREKEEPER_GRAPH_USERNAME", "lore")
    monkeypatch.setenv("LOREKEEPER_GRAPH_PASSWORD", "very-secret-value")
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    assert "very-secret-value" not in result.output
    assert json.loads(result.output)["stores"]["graph"]["backend"] == "neo4j"


def test_bad_setting_exits_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_VECTOR_URL", "ftp://nowhere")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 2
    assert "LOREKEEPER_VECTOR_URL" in result.output


def test_schema_export(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "export", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    files = sorted((tmp_path / "out").glob("*.json"))
    assert len(files) > 20
    for file in files:
        assert json.loads(file.read_text())


def test_ingest_prints_plain_progress_lines_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CI log gets a line at the start, every --progress-interval seconds, and at the end."""
    import jobs.pipeline
    from jobs.pipeline import FileOutcome, IngestReport

    def fake_run_ingest(paths, options, *, settings, on_progress):  # noqa: ANN001, ANN202
        on_progress("files_found", {"files": 2})
        time.sleep(0.5)  # a long extraction: only the heartbeat speaks
        on_progress("file_done", {"status": "completed", "pages": 3})
        on_progress("chunks_written", {"chunks": 40})
        on_progress("file_done", {"status": "failed", "error": "bad.pdf: damaged"})
        files = [
            FileOutcome("job_1", str(tmp_path / "good.md"), "completed", chunks=40, pages=3),
            FileOutcome("job_2", str(tmp_path / "bad.pdf"), "failed", error="bad.pdf: damaged"),
        ]
        return IngestReport(library_uid="lib_1", embedding_model="test-model", files=files, seconds=0.6)

    monkeypatch.setattr(jobs.pipeline, "run_ingest", fake_run_ingest)
    result = runner.invoke(app, ["ingest", str(tmp_path), "--library", "core", "--progress-interval", "0.1"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("ingest: ")]
    assert lines[0] == "ingest: looking for files, 0:00 elapsed"
    assert lines[1].startswith("ingest: 0/2 files (0%)"), lines
    # the heartbeat repeats the state while nothing happens
    assert sum(line.startswith("ingest: 0/2 files") for line in lines) >= 3, lines
    assert re.match(
        r"ingest: 2/2 files \(100%, 1 failed\), 3 pages, 40 chunks \([\d.]+ chunks/s\), \d+:\d\d elapsed$", lines[-1]
    )
    # no live bar drawn into the log (rich draws its final state at the end: "files ━━━ 2/2 …")
    assert not re.search(r"^(files|chunks) ", result.stderr, re.MULTILINE), result.stderr


def test_plain_progress_speaks_at_most_once_per_interval_between_events() -> None:
    from jobs.cli import PlainProgress

    out = io.StringIO()
    now = [0.0]
    progress = PlainProgress(out, interval=10.0, clock=lambda: now[0])
    progress.update("files_found", {"files": 4})
    for second in range(1, 30):
        now[0] = float(second)
        progress.update("chunks_written", {"chunks": 5})
    progress.update("file_done", {"status": "completed", "pages": 1})
    progress.close()
    lines = out.getvalue().splitlines()
    # the start, every 10 s of activity (10 and 20), and the end
    assert [line.split(", ")[0] for line in lines] == ["ingest: 0/4 files (0%)"] * 3 + ["ingest: 1/4 files (25%)"]
    assert "145 chunks" in lines[-1]


def test_ingest_summary_shows_each_files_structure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Headings by level, entries and furniture lines dropped, in the table and in --json."""
    import json

    import jobs.pipeline
    from jobs.pipeline import FileOutcome, IngestReport

    structure = {"headings_by_level": {"1": 2, "2": 5, "3": 40}, "entries": 38, "furniture_dropped": 61}

    def fake_run_ingest(paths, options, *, settings, on_progress):  # noqa: ANN001, ANN202
        files = [FileOutcome("job_1", str(tmp_path / "srd.pdf"), "completed", chunks=50, pages=9, structure=structure)]
        return IngestReport(library_uid="lib_1", embedding_model="test-model", files=files, seconds=0.6)

    import jobs.cli

    monkeypatch.setattr(jobs.pipeline, "run_ingest", fake_run_ingest)
    monkeypatch.setattr(jobs.cli.console, "width", 200)
    result = runner.invoke(app, ["ingest", str(tmp_path), "--library", "core"])
    assert result.exit_code == 0, result.output
    assert "headings" in result.stderr and "furniture" in result.stderr
    row = next(line for line in result.stderr.splitlines() if "srd.pdf" in line)
    assert "1:2 2:5 3:40" in row and "38" in row and "61" in row
    result = runner.invoke(app, ["ingest", str(tmp_path), "--library", "core", "--json"])
    assert json.loads(result.stdout.splitlines()[0])["files"][0]["structure"] == structure


def test_ingest_summary_prints_the_executor_and_the_phase_timeline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Which path ran and why, each phase on the job's clock, the first file done and first searchable chunk."""
    import json

    import jobs.cli
    import jobs.pipeline
    from jobs.pipeline import FileOutcome, IngestReport
    from jobs.timeline import Timeline

    def fake_run_ingest(paths, options, *, settings, on_progress):  # noqa: ANN001, ANN202
        assert options.executor.value == "local"  # --executor reaches the options
        timeline = Timeline()
        timeline.record("store_opening", 0.0, 0.4)
        timeline.record("model_load", 0.5, 6.2)
        timeline.record("pipeline", 0.6, 20.0)
        timeline.moments.update(first_file_done=7.5, first_searchable=7.5)
        files = [FileOutcome("job_1", str(tmp_path / "a.md"), "completed", chunks=50, pages=1)]
        report = IngestReport(library_uid="lib_1", embedding_model="m", files=files, seconds=20.3, timeline=timeline)
        report.executor, report.executor_reason = "local", "asked for (local)"
        return report

    monkeypatch.setattr(jobs.pipeline, "run_ingest", fake_run_ingest)
    monkeypatch.setattr(jobs.cli.console, "width", 200)
    args = ["ingest", str(tmp_path), "--library", "core", "--executor", "local"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "stages ran in this process: asked for (local)" in result.stderr
    assert re.search(r"model load\s+0\.5 → \s*6\.2 s\s+\(5\.7 s\)", result.stderr), result.stderr
    assert re.search(r"first searchable\s+7\.5 s", result.stderr)
    assert re.search(r"total\s+20\.3 s", result.stderr)
    body = json.loads(runner.invoke(app, [*args, "--json"]).stdout.splitlines()[0])
    assert body["executor"] == "local" and body["executor_reason"] == "asked for (local)"
    timeline = body["timeline"]
    assert timeline["phases"]["model_load"] == {"start_s": 0.5, "end_s": 6.2, "seconds": 5.7}
    assert list(timeline["phases"]) == ["store_opening", "model_load", "pipeline"]
    assert (timeline["first_file_done_s"], timeline["first_searchable_s"], timeline["total_s"]) == (7.5, 7.5, 20.3)
    bad = runner.invoke(app, ["ingest", str(tmp_path), "--library", "core", "--executor", "gpu"])
    assert bad.exit_code == 2 and "auto, local or ray" in bad.stderr
