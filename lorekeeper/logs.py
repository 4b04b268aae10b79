"""Structured logs: named events with fields, as JSON lines or a readable console rendering.

Every layer logs with ``structlog.get_logger(__name__)`` and an event name (``log.info("ingest_item_created",
item_uid=...)``); only entry points (the CLI, the server) call :func:`configure_logging`. The shape of
the lines, and how Ray workers come to log the same way, is :mod:`schemas.logs`.
"""

from __future__ import annotations

from schemas.logs import LogConfig, apply


def configure_logging(level: str = "INFO", *, json: bool = False, directory: str | None = None) -> None:
    """Route stdlib and structlog logs through one renderer on stderr (and per-process files in ``directory``);
    the Ray workers this process starts afterwards log the same way."""
    apply(LogConfig(level=level, json_lines=json, directory=directory))
