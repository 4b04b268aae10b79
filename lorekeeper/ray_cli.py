"""``lorekeeper up`` / ``down`` / ``status``: a warm local Ray head between commands.

``up`` starts ``ray start --head --block`` in a session of its own (its own process group), waits
until the head is ready, and records it (:mod:`schemas.ray_head`); ``lorekeeper ingest`` (its Ray
stages) and ``lorekeeper serve`` then attach to it instead of starting and stopping a Ray each time.
``down`` sends SIGTERM to the head's process (Ray's own handler stops every process it started, the
workers of attached drivers included), then SIGKILL to whatever of its process group is left after
the grace period, and removes the record. ``RAY_ADDRESS``, when set, still wins: it names a cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import structlog
import typer

from lorekeeper.command_context import console, err_console, read_settings
from schemas.ray_head import RayHead, head_file, read_head

log = structlog.get_logger(__name__)

READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 30.0
DRAIN_S = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")  # the ray CLI of this environment, not another one
    return str(beside) if beside.exists() else "ray"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_ready(process: subprocess.Popen[bytes], temp_dir: Path, port: int, timeout: float) -> str:
    """Until the head has written its address file (Ray does so once every process of the head runs);
    the address in it (the node's own IP, whatever interface the head listens on)."""
    deadline = time.monotonic() + timeout
    marker = temp_dir / "ray_current_cluster"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ray start exited with {process.returncode}")
        address = marker.read_text().strip() if marker.exists() else ""
        if address.endswith(f":{port}"):
            return address
        time.sleep(0.2)
    raise TimeoutError(f"the Ray head did not become ready in {timeout:.0f} s")


def start_head(data_dir: Path, *, port: int | None = None, num_cpus: int | None = None) -> RayHead:
    """Start a Ray head for ``data_dir`` and record it; the one already running when there is one."""
    existing = read_head(data_dir)
    if existing is not None and existing.alive():
        return existing
    if existing is not None:  # a head that died without `down`: its folder goes with the stale record
        shutil.rmtree(existing.temp_dir, ignore_errors=True)
    record = head_file(data_dir)
    record.parent.mkdir(parents=True, exist_ok=True)
    # Ray's sockets live under its temp folder, and a socket path may not exceed ~107 bytes: keep it short.
    temp_dir = Path(tempfile.mkdtemp(prefix="lk-ray-"))
    port = port or _free_port()
    cpus = num_cpus or max(4, os.cpu_count() or 1)  # scheduling shares: four deployments fit a laptop
    log_path = record.parent / "head.log"
    env = {
        **os.environ,
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
        # On SIGTERM Ray drains the node before stopping it (30 s by default, spent whole when idle workers
        # of finished drivers remain); a `lorekeeper serve` on the head deletes its application first itself.
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": os.environ.get("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", str(DRAIN_S)),
    }
    command = [
        _ray_executable(),
        "start",
        "--head",
        "--block",
        f"--port={port}",
        f"--num-cpus={cpus}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    started = time.perf_counter()
    with log_path.open("ab") as out:
        process = subprocess.Popen(  # noqa: S603 - our own ray CLI, arguments built here
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        address = _wait_ready(process, temp_dir, port, READY_TIMEOUT_S)
    except (RuntimeError, TimeoutError):
        _stop_group(process.pid, STOP_GRACE_S)
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    head = RayHead(
        address=address,
        pid=process.pid,
        temp_dir=str(temp_dir),
        num_cpus=cpus,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        log=str(log_path),
    )
    record.write_text(head.model_dump_json(indent=2) + "\n", encoding="utf-8")
    log.info("ray_head_started", address=address, pid=process.pid, seconds=round(time.perf_counter() - started, 2))
    return head


def _stop_group(pid: int, grace: float) -> bool:
    """SIGTERM the head's process, then SIGKILL its process group if anything is left after ``grace``.
    Returns whether the group had to be killed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _group_alive(pid):
            return False
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)  # the head's session: only what it started
    except ProcessLookupError:
        return False
    return True


def _ours(head: RayHead) -> bool:
    """Whether the recorded process is still the head we started (its command names the head's Ray folder),
    so a process id the system gave to another program since is never signalled."""
    try:
        command = Path(f"/proc/{head.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return head.temp_dir.encode() in command


def stop_head(data_dir: Path, *, grace: float = STOP_GRACE_S) -> RayHead | None:
    """Stop the head recorded for ``data_dir`` (every process of its group) and remove the record."""
    head = read_head(data_dir)
    if head is None:
        return None
    killed = _stop_group(head.pid, grace) if _ours(head) else False
    head_file(data_dir).unlink(missing_ok=True)
    shutil.rmtree(head.temp_dir, ignore_errors=True)  # the head's sessions and sockets; its log stays
    log.info("ray_head_stopped", address=head.address, pid=head.pid, killed=killed)
    return head


def up_command(
    port: Annotated[int | None, typer.Option(help="The head's GCS port (default: a free one).")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="Logical CPUs to offer (default: max(4, cores)).")] = None,
) -> None:
    """Start a warm local Ray that `ingest` and `serve` attach to (until `lorekeeper down`)."""
    settings = read_settings()
    started = time.perf_counter()
    try:
        head = start_head(settings.data_dir, port=port, num_cpus=num_cpus)
    except (RuntimeError, TimeoutError, OSError) as exc:
        log_path = head_file(settings.data_dir).with_name("head.log")
        err_console.print(f"[red]error:[/red] the Ray head did not start: {exc} (its output: {log_path})")
        raise typer.Exit(1) from None
    console.print(f"Ray head on {head.address} (pid {head.pid}), ready in {time.perf_counter() - started:.1f} s")


def down_command() -> None:
    """Stop the warm local Ray that `lorekeeper up` started (and every process it runs)."""
    settings = read_settings()
    head = stop_head(settings.data_dir)
    if head is None:
        console.print("no warm Ray to stop")
        return
    console.print(f"Ray head on {head.address} stopped")


def status_command(json_out: Annotated[bool, typer.Option("--json", help="The record as JSON.")] = False) -> None:
    """Whether a warm local Ray runs, and where."""
    settings = read_settings()
    head = read_head(settings.data_dir)
    alive = head is not None and head.alive()
    if json_out:
        print(json.dumps({"up": alive, "head": head.model_dump() if head else None}))
    elif head is None:
        console.print("no warm Ray (start one with `lorekeeper up`)")
    elif alive:
        console.print(f"Ray head on {head.address} (pid {head.pid}), up since {head.started_at}")
    else:
        console.print(f"the Ray head recorded on {head.address} does not answer (`lorekeeper down` clears it)")
    if not alive:
        raise typer.Exit(1)
