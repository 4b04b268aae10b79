"""An event loop of one's own for a synchronous caller of an async engine.

The gate's axiom judge and the scene-end memory former are called from synchronous story code, often
on a thread of a running server whose own loop must not be blocked or re-entered. Each owns an
:class:`EngineLoop`: a loop on a daemon thread, started on first use, that runs the engine's
coroutines with a deadline and closes the engine (when owned) and itself on :meth:`EngineLoop.close`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from narrator.engines import NarratorEngine

T = TypeVar("T")


class EngineLoop:
    """Runs an engine's coroutines on a loop of its own thread (named ``name``), started lazily."""

    def __init__(self, engine: NarratorEngine, *, name: str, owns_engine: bool = True) -> None:
        self.engine = engine
        self.name = name
        self.owns_engine = owns_engine
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """The coroutine's result.

        Raises:
            TimeoutError: no answer within ``timeout_s`` (the coroutine is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self._running_loop())
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the model did not answer within {timeout_s:g} s") from None

    def close(self) -> None:
        """Close the engine (when owned) and stop the loop."""
        try:
            if self.owns_engine:
                self.run(self.engine.close(), 60.0)
        finally:
            with self._lock:
                loop, thread = self._loop, self._thread
                self._loop = self._thread = None
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
                if thread is not None:
                    thread.join(timeout=10)
                loop.close()
