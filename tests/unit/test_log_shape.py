"""The one log shape (schemas/logs.py): JSON lines with the process's host and pid, secrets masked at any
depth, one file per process in a log folder, and the same configuration applied in another process
through the hook Ray runs when it starts a worker."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

import lorekeeper.logs
import schemas.logs

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _applied_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schemas.logs, "_APPLIED", None)


def _lines(folder: Path) -> dict[str, list[dict[str, object]]]:
    return {
        path.name: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted(folder.glob("*.jsonl"))
    }


def test_a_line_carries_the_process_and_masks_secrets_at_any_depth(tmp_path: Path) -> None:
    assert schemas.logs.worker_setup_hook() is None  # nothing configured: workers are left alone
    lorekeeper.logs.configure_logging("DEBUG", json=True, directory=str(tmp_path))
    structlog.get_logger("tests.log_shape").info(
        "mcp_tool_called", tool="create_key", arguments={"name": "gm", "api_key": "sk-1", "nested": [{"token": "t"}]}
    )
    for handler in __import__("logging").getLogger().handlers:
        handler.flush()
    files = _lines(tmp_path)
    assert list(files) == [f"{os.uname().nodename}-{os.getpid()}.jsonl"]
    (line,) = [entry for entry in files[next(iter(files))] if entry["event"] == "mcp_tool_called"]
    assert line["pid"] == os.getpid() and line["host"] == os.uname().nodename
    assert line["level"] == "info" and line["logger"] == "tests.log_shape" and line["timestamp"]
    assert line["arguments"] == {"name": "gm", "api_key": "***", "nested": [{"token": "***"}]}


def test_a_worker_started_with_the_hook_logs_as_the_driver_does(tmp_path: Path) -> None:
    lorekeeper.logs.configure_logging("INFO", json=True, directory=str(tmp_path))
    hook = schemas.logs.worker_setup_hook()
    assert hook is not None and hook.__name__  # type: ignore[attr-defined]  # Ray names an exported hook by it
    # Ray pickles the hook to every worker it starts; a fresh process runs it, then logs
    script = (
        "import pickle, sys, structlog\n"
        "pickle.loads(sys.stdin.buffer.read())()\n"
        "structlog.contextvars.bind_contextvars(job_id='ingest_x')\n"
        "structlog.get_logger('jobs.events').info('embed_task_started', retry_count=0)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(hook), capture_output=True, timeout=120, check=True
    )
    stderr_line = json.loads(child.stderr.decode().strip().splitlines()[-1])
    files = _lines(tmp_path)
    theirs = [entries for name, entries in files.items() if not name.endswith(f"-{os.getpid()}.jsonl")]
    assert len(theirs) == 1 and theirs[0] == [stderr_line]  # its own file, the same line as on its stderr
    assert stderr_line["event"] == "embed_task_started" and stderr_line["job_id"] == "ingest_x"
    assert {"level", "logger", "timestamp", "host", "pid"} <= set(stderr_line) and stderr_line["pid"] != os.getpid()


def test_the_ray_job_entrypoint_configures_the_same_logs(tmp_path: Path) -> None:
    """``python -m jobs --log-json ingest …`` logs as ``lorekeeper --log-json`` does, so its stage actors do too."""
    from typer.testing import CliRunner

    from jobs.cli import app

    logs = str(tmp_path / "logs")
    arguments = ["--log-json", "--log-level", "INFO", "--log-dir", logs, "ingest", str(tmp_path / "no"), "--library=x"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code != 0  # no such path: the options were taken all the same
    assert schemas.logs.applied() == schemas.logs.LogConfig(level="INFO", json_lines=True, directory=logs)
    assert schemas.logs.worker_setup_hook() is not None
