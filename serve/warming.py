"""What a server is still loading after it started listening: ``/health`` lists it until it is done.

``lorekeeper serve --direct`` listens as soon as its stores are open and hands the slow parts (the
search models and the concept vocabulary: 5 s on a quiet two-core machine, 20 s and more under load)
to a background thread. The server is *live* from its first answer and *ready* once nothing is
warming; a request that needs a part still warming waits for it (the model's own lock), it is never
refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Warming:
    """The parts still warming, by name; each warms in a daemon thread of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._failed: dict[str, str] = {}
        self._idle = threading.Condition(self._lock)

    def start(self, name: str, work: Callable[[], object]) -> threading.Thread:
        """Run ``work`` in the background as part ``name`` (logged as ``serve_warmed`` or ``serve_warm_failed``).

        A failure is logged and kept (:meth:`failed`): the part then loads on first use, as it would
        without warming, and says why there.
        """
        with self._lock:
            self._pending.add(name)

        def run() -> None:
            started = time.perf_counter()
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - a part that fails to warm still loads on first use
                with self._lock:
                    self._failed[name] = f"{type(exc).__name__}: {exc}"
                log.error("serve_warm_failed", part=name, error=str(exc), exception_type=type(exc).__name__)
            else:
                log.info("serve_warmed", part=name, seconds=round(time.perf_counter() - started, 2))
            finally:
                with self._lock:
                    self._pending.discard(name)
                    self._idle.notify_all()

        thread = threading.Thread(target=run, name=f"warm-{name}", daemon=True)
        thread.start()
        return thread

    def names(self) -> list[str]:
        """The parts still warming, sorted (empty: ready)."""
        with self._lock:
            return sorted(self._pending)

    def failed(self) -> dict[str, str]:
        """The parts whose warming failed, and why."""
        with self._lock:
            return dict(self._failed)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is warming; False when ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending, timeout)
