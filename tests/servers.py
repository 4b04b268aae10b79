"""Start protocol-compatible servers for the contract tests: free ports, readiness, clean shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, *, host: str = "127.0.0.1", timeout: float = 30.0, proc: subprocess.Popen | None = None
) -> None:
    """Block until ``host:port`` accepts TCP connections; fail fast if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout}s")


class ServerProcess:
    """A server subprocess with its log file; ``stop()`` terminates it (then kills it)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        exe = shutil.which(argv[0]) or argv[0]
        self.port = port
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        try:
            wait_for_port(port, timeout=ready_timeout, proc=self.proc)
        except Exception:
            self.stop()
            raise RuntimeError(f"{argv[0]} failed to start; log:\n{log.read_text(errors='replace')[-2000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log_file.close()
