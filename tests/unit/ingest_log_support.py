"""What the ingest event tests share: the events table of docs/ingest-events.md, JSON logs from the driver and
every Ray worker to one folder, and Ray's metrics export on a free port, scraped and parsed.

Used by tests/unit/test_ingest_events.py (an ingest from the product's bucket) and
tests/unit/test_ingest_source_bucket.py (a JSON ingest from a separate source bucket, on Ray).
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "ingest-events.md"
#: the chart's ServiceMonitor renames Ray's export of our metrics back to the project's names
RAY_EXPORT = re.compile(r"^ray_(lorekeeper_\w+)$")


@dataclass(frozen=True)
class Row:
    event: str
    level: str
    fields: tuple[str, ...]
    process: str
    checked: str

    def checked_by(self, name: str) -> bool:
        """Whether the row's "checked" cell names this test (the cell lists them, comma-separated)."""
        return name in (part.strip() for part in self.checked.split(","))


def table() -> dict[str, Row]:
    """The events table of docs/ingest-events.md (both sections), by event name."""
    rows: dict[str, Row] = {}
    for line in TABLE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 7 or not cells[0].startswith("`"):
            continue
        event, level, fields, _, process, checked, _ = cells
        names = tuple(f.strip() for f in fields.split(",") if f.strip())
        rows[event.strip("`")] = Row(event.strip("`"), level, names, process, checked)
    return rows


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int, wanted: list[str], timeout_s: float = 60.0) -> str:
    """Ray's metrics export on this node, once every ``wanted`` series name shows (Ray reports every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            text = ""
        if all(name in text for name in wanted):
            return text
        time.sleep(1)
    return text


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """A Prometheus text export as (name, labels, value), one per sample line."""
    out = []
    for line in text.splitlines():
        match = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2)))
            out.append((match.group(1), labels, float(match.group(3))))
    return out


@contextmanager
def json_logs_on_local_ray(logs: Path, *, num_cpus: int = 4) -> Iterator[int]:
    """JSON logs (DEBUG) of this process and of every Ray worker to ``logs`` (one file a process), and local
    Ray started with its metrics export on a free port, which is yielded. The logging of this process is
    put back as it was afterwards, and Ray shut down."""
    import ray

    import lorekeeper.logs
    import schemas.logs
    from jobs.pipeline import _runtime_env

    root_logger = logging.getLogger()
    handlers, level, structlog_config = root_logger.handlers[:], root_logger.level, structlog.get_config()
    lorekeeper.logs.configure_logging("DEBUG", json=True, directory=str(logs))
    port = free_port()
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            configure_logging=False,
            _metrics_export_port=port,
            _system_config={"metrics_report_interval_ms": 500},
            runtime_env=_runtime_env(),  # what start_ray gives its workers: the driver's log configuration
        )
        yield port
    finally:
        ray.shutdown()
        schemas.logs._APPLIED = None  # later tests' Ray workers configure nothing
        for handler in root_logger.handlers:
            if handler not in handlers:
                handler.close()
        root_logger.handlers[:] = handlers
        root_logger.setLevel(level)
        structlog.configure(**structlog_config)


def read_lines(logs: Path) -> list[dict[str, Any]]:
    """Every line of every process's log file in ``logs``; each must be one JSON object."""
    lines = []
    for path in sorted(logs.glob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                lines.append(json.loads(text))
    return lines
