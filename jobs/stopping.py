"""Stopping the way a container is stopped: SIGTERM, then SIGKILL after a grace period.

Kubernetes, Docker and podman stop a container by sending SIGTERM to its main process. Python's default
is to die at once, and ``ray.init`` replaces whatever handler was there with Ray's own, which calls
``sys.exit`` in the middle of whatever the main thread is doing (``lorekeeper serve --direct`` aborted
with exit 134 and a traceback). A long-running command instead registers what SIGTERM should do
(:func:`on_sigterm`): the ingest stops at the next safe point, the API stops accepting requests and lets
the ones in flight finish. Ray is started through :func:`init_ray`, which keeps that handler in place.

"Safe point": the handler runs in the main thread between two bytecodes, so raising there could cut a
store write in half. The ingest therefore only raises :class:`Interrupted` inside :func:`interruptible`
regions, where the main thread merely waits for Ray (the next batch), and otherwise checks
:func:`requested` between batches.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: The exit code of a command stopped by SIGTERM before its work was done (128 + SIGTERM, the shell's
#: convention): the work done is kept, and running the same command again finishes the rest.
EXIT_INTERRUPTED = 128 + signal.SIGTERM

_actions: list[Callable[[int], None]] = []
_installed = False  # on_sigterm was called in this process's main thread
_requested: int | None = None
_waiting = 0  # interruptible regions the main thread is in


class Interrupted(BaseException):  # noqa: N818 - named for what happened, like KeyboardInterrupt
    """The process was asked to stop (SIGTERM) while it waited for work; nothing half-written.

    A BaseException, like KeyboardInterrupt: it passes the ``except Exception`` of the code it crosses
    (Ray Data's iterator logged an Exception raised inside it as a Ray bug, with a full stack trace)
    and is caught where the stop is handled.
    """

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name} before this was done; run it again to finish")

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        return (Interrupted, (self.signum,))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _record(signum: int) -> None:
    global _requested
    first = _requested is None
    _requested = signum
    if first:
        log.warning("stop_requested", signal=signal.Signals(signum).name)
    for action in list(_actions):
        action(signum)


def _dispatch(signum: int, frame: FrameType | None) -> None:
    _record(signum)
    if _waiting:
        raise Interrupted(signum)


def on_sigterm(action: Callable[[int], None] | None = None) -> None:
    """Handle SIGTERM in this process: record it (:func:`requested`), run ``action`` (in the main thread,
    between two bytecodes: it should only set a flag), and raise :class:`Interrupted` where the main
    thread is in an :func:`interruptible` region.

    Only the main thread can install a signal handler; elsewhere (a server's worker thread, a Ray actor)
    this does nothing.
    """
    global _installed
    if not _main_thread():
        return
    if action is not None:
        _actions.append(action)
    signal.signal(signal.SIGTERM, _dispatch)
    _installed = True


def reclaim() -> None:
    """Install this module's handler again where :func:`on_sigterm` was called in this process, after
    Ray changed it: ``ray.init`` installs its own (Python's and a native one), and after
    ``ray.shutdown`` SIGTERM killed the process outright although Python still reported the handler it
    had, so the handler is always set again here. Elsewhere this leaves the handler alone."""
    if _installed and _main_thread():
        signal.signal(signal.SIGTERM, _dispatch)


def init_ray(**kwargs: Any) -> None:
    """``ray.init(**kwargs)``, keeping this module's SIGTERM handling where :func:`on_sigterm` was called.

    Two things in Ray's driver undo it. ``ray.init`` installs Ray's handlers (``sys.exit`` wherever the
    main thread is; a head node's, which kills the node): a SIGTERM while Ray started left its agents
    running. And the driver installs a native crash handler that takes SIGTERM too, which
    ``ray.shutdown`` removes by setting SIGTERM back to the default action while Python still reports
    this module's handler: a SIGTERM during the seconds ``ray.shutdown`` takes killed the process
    outright (1.6 s at the end of an ingest). So where SIGTERM is handled, Ray does not install its
    handlers while it starts (the signal is recorded and acted on once it has started), and the driver
    goes without that crash handler (its errors are reported by Python as ever; Ray's worker processes
    keep it). Both switches are Ray internals: Ray is pinned (pyproject), and the SIGTERM tests of
    ``serve`` and ``ingest`` fail if a Ray release moves them.

    Raises:
        Interrupted: Ray turned a SIGTERM into an exit while it started anyway (what had started is
            shut down first).
    """
    import ray

    if not (_installed and _main_thread()):
        ray.init(**kwargs)
        return
    from ray._private import ray_constants
    from ray._private import utils as ray_utils

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    set_handler = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        ray.init(**kwargs)
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        _record(signal.SIGTERM)
        ray.shutdown()
        raise Interrupted(signal.SIGTERM) from None
    finally:
        ray_utils.set_sigterm_handler = set_handler
        reclaim()


def requested() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _requested


@contextmanager
def interruptible() -> Iterator[None]:
    """A region where the main thread only waits: SIGTERM raises :class:`Interrupted` here (at once if
    it came before). Elsewhere the signal is only recorded. Off the main thread: checks on entry only."""
    if _requested is not None:
        raise Interrupted(_requested)
    if not _main_thread():
        yield
        return
    global _waiting
    _waiting += 1
    try:
        yield
    finally:
        _waiting -= 1


def reset() -> None:
    """Forget a recorded stop and the registered actions, and restore the default handler (for tests
    that run commands in one process)."""
    global _requested, _waiting, _installed
    _requested = None
    _waiting = 0
    _installed = False
    _actions.clear()
    if _main_thread() and signal.getsignal(signal.SIGTERM) is _dispatch:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
