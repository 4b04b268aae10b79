"""The one log shape of every process: named events with fields, as JSON lines or a console rendering.

Every layer logs with ``structlog.get_logger(__name__)`` and an event name (``log.info("embed_job_completed",
job_id=...)``). An entry point applies a :class:`LogConfig` (``lorekeeper.logs.configure_logging``); the
processes it starts through Ray (Ray Data stage actors, Ray Serve replicas) apply the same one at
start-up through :func:`worker_setup_hook`, so a driver and its workers write the same lines: ``event``,
``level``, ``logger``, ``timestamp`` (ISO, UTC), ``host`` and ``pid``, then the event's fields, with
anything named like a secret masked, nested fields included. The events and their fields are listed
in docs/ingest-events.md.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

_SECRET_KEYS = frozenset({"password", "secret", "secret_key", "access_key", "api_key", "token", "authorization"})
_APPLIED: LogConfig | None = None


class LogConfig(BaseModel):
    """How a process logs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR.")
    json_lines: bool = Field(default=False, description="JSON lines instead of the console rendering.")
    directory: str | None = Field(
        default=None,
        description="Also append JSON lines to DIR/<host>-<pid>.jsonl, one file per process (a driver and its "
        "Ray workers each write their own, so lines never interleave).",
    )


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "***" if str(k).lower() in _SECRET_KEYS else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _drop_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Belt and braces: a field that looks like a secret never reaches a log line, nor one nested in a field.
    for key in list(event):
        event[key] = "***" if key.lower() in _SECRET_KEYS else _masked(event[key])
    return event


def _process(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.setdefault("host", socket.gethostname())
    event.setdefault("pid", os.getpid())
    return event


def _handler(stream: Any, renderer: structlog.types.Processor, shared: list[structlog.types.Processor]) -> Any:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    return handler


def apply(config: LogConfig) -> None:
    """Route stdlib and structlog logs of this process through one renderer on stderr (and the folder)."""
    global _APPLIED
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if config.json_lines
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _process,
        _drop_secrets,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handlers = [_handler(sys.stderr, renderer, shared)]
    if config.directory:
        folder = Path(config.directory)
        folder.mkdir(parents=True, exist_ok=True)
        # line-buffered: a worker killed mid-job has written every line it logged
        stream = open(folder / f"{socket.gethostname()}-{os.getpid()}.jsonl", "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - open for the process's life
        handlers.append(_handler(stream, structlog.processors.JSONRenderer(), shared))
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(config.level.upper())
    _APPLIED = config


def applied() -> LogConfig | None:
    """The configuration this process applied, if any."""
    return _APPLIED


def worker_setup_hook() -> Callable[[], None] | None:
    """What a Ray worker runs at start-up to log as this process does (``runtime_env``'s
    ``worker_process_setup_hook``), or None when this process configured nothing."""
    if _APPLIED is None:
        return None
    hook = functools.partial(apply, _APPLIED)
    hook.__name__ = "apply_log_config"  # type: ignore[attr-defined]  # Ray names the hook by it
    return hook
