"""Health probes: one cheap probe per part the server stands on, each bounded in time, none on the event loop.

A part's probe is the store's own ``health()`` (a ping, a folder check, a bucket check), a single
short embedding for a loaded model, or a model listing for a narrator endpoint: never a query over
the data. Blocking probes run in threads of their own, so a store that hangs cannot take the threads
that requests run on; a probe still running when the next check comes is waited on again rather than
started twice, so a hung store holds one thread, however often it is probed. A part that
does not answer within the timeout is reported ``down`` ("no answer within 2.0 s") and the check
answers anyway.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from typing import Any

import structlog

from schemas.errors import LorekeeperError
from schemas.health import DEPENDENCIES, DependencyHealth, Health, HealthStatus

log = structlog.get_logger(__name__)

Outcome = tuple[HealthStatus, str | None]
"""A probe's answer: the part's status and a detail (what answered, or why it is idle)."""

BlockingProbe = Callable[[], Outcome]
AsyncProbe = Callable[[], Awaitable[Outcome]]
Running = Future[tuple[Outcome, float]] | asyncio.Task[tuple[Outcome, float]]
"""A probe under way (a thread's or the loop's), answering its outcome and how long it took."""


def store_probe(store: Any) -> BlockingProbe:
    """The probe of a store: its ``health()`` (raises when the store does not answer)."""

    def probe() -> Outcome:
        store.health()
        return HealthStatus.OK, None

    return probe


def embedding_probe(embedder: Any) -> BlockingProbe:
    """The embedding model: idle until loaded (it loads on first use); once loaded, one short query embedded
    by the model itself (not an answer kept from an earlier query)."""

    def probe() -> Outcome:
        model = getattr(embedder, "inner", embedder)  # past SharedQueries' cache of recent queries
        name = str(getattr(model, "name", "")) or None
        if not getattr(model, "loaded", True):
            return HealthStatus.IDLE, f"{name} (loads on first use)"
        vector = model.embed_query("health")
        if len(vector) == 0:
            raise ValueError("the model answered an empty vector")
        return HealthStatus.OK, name

    return probe


def engine_probe(engine: Any) -> AsyncProbe:
    """The narrator engine: its own ``health()`` where it has one (an endpoint's model listing, a loaded model,
    the Narrator deployment's answer), else ok (an engine with nothing to reach)."""

    async def probe() -> Outcome:
        check = getattr(engine, "health", None)
        status = HealthStatus(await check()) if check is not None else HealthStatus.OK
        name = str(getattr(engine, "model", "")) or None
        return status, f"{name} (loads on first use)" if status is HealthStatus.IDLE and name else name

    return probe


def _reason(exc: BaseException) -> str:
    if isinstance(exc, LorekeeperError):
        return exc.client_message
    return f"{type(exc).__name__}: {exc}"[:300]


class HealthProbes:
    """Runs the probes of a health check, at most one at a time per part.

    Args:
        timeout_s: how long a check waits for each part.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._running: dict[str, tuple[float, Running]] = {}

    async def check(
        self, blocking: Mapping[str, BlockingProbe], asynchronous: Mapping[str, AsyncProbe], off: tuple[str, ...] = ()
    ) -> dict[str, DependencyHealth]:
        """Every part's health, probed at once; parts in ``off`` are not part of this server."""
        names = [*blocking, *asynchronous]
        answers = await asyncio.gather(*(self._one(name, blocking.get(name), asynchronous.get(name)) for name in names))
        found = dict(zip(names, answers, strict=True))
        found.update({name: DependencyHealth(status=HealthStatus.OFF) for name in off})
        order = {name: i for i, name in enumerate(DEPENDENCIES)}
        return dict(sorted(found.items(), key=lambda kv: order.get(kv[0], len(order))))

    async def value(self, name: str, fn: Callable[[], Any], default: Any) -> Any:
        """``fn()`` run like a probe (in a thread of its own, one at a time, within the timeout), or ``default``
        when it fails or does not answer in time (whether the API runs open: a question to the graph too)."""
        started, running = self._start(name, lambda: (fn(), None), None)  # type: ignore[arg-type,return-value]
        waiter = asyncio.wrap_future(running) if isinstance(running, Future) else running
        try:
            (answer, _), _took = await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except Exception:  # noqa: BLE001 - a failed or slow answer is the default
            return default
        return answer

    async def _one(
        self, name: str, blocking: BlockingProbe | None, asynchronous: AsyncProbe | None
    ) -> DependencyHealth:
        started, running = self._start(name, blocking, asynchronous)
        waiter = asyncio.wrap_future(running) if isinstance(running, Future) else running
        try:
            (status, detail), took = await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            waited = round((time.perf_counter() - started) * 1000, 2)
            return DependencyHealth(
                status=HealthStatus.DOWN, latency_ms=waited, detail=f"no answer within {self.timeout_s:g} s"
            )
        except Exception as exc:  # noqa: BLE001 - any failure of a probe is the part's being down
            waited = round((time.perf_counter() - started) * 1000, 2)
            return DependencyHealth(status=HealthStatus.DOWN, latency_ms=waited, detail=_reason(exc))
        return DependencyHealth(status=status, latency_ms=round(took * 1000, 2), detail=detail)

    def _start(
        self, name: str, blocking: BlockingProbe | None, asynchronous: AsyncProbe | None
    ) -> tuple[float, Running]:
        """The part's probe: the one still running from an earlier check, else a new one."""
        with self._lock:
            current = self._running.get(name)
            if current is not None and not current[1].done() and _awaitable_here(current[1]):
                return current
            started = time.perf_counter()
            running: Running
            if blocking is not None:
                running = Future()
                thread = threading.Thread(target=_run, args=(blocking, running), name=f"health-{name}", daemon=True)
                thread.start()
            else:
                assert asynchronous is not None
                running = asyncio.get_running_loop().create_task(_timed_async(asynchronous))
            self._running[name] = (started, running)
            return started, running


def _awaitable_here(running: Future[Any] | asyncio.Task[Any]) -> bool:
    """A thread's probe can be awaited from any loop, a task only from its own."""
    return isinstance(running, Future) or running.get_loop() is asyncio.get_running_loop()


def _run(probe: BlockingProbe, into: Future[tuple[Outcome, float]]) -> None:
    """A blocking probe in a thread of its own (a daemon: a store hung for good never holds up the exit)."""
    started = time.perf_counter()
    try:
        outcome = probe()
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the probe
        into.set_exception(exc)
        return
    into.set_result((outcome, time.perf_counter() - started))


async def _timed_async(probe: AsyncProbe) -> tuple[Outcome, float]:
    started = time.perf_counter()
    outcome = await probe()
    return outcome, time.perf_counter() - started


def overall(checks: Mapping[str, DependencyHealth]) -> str:
    """ok, or degraded when any part is down (an idle model or a part this server has not is no failure)."""
    return "degraded" if any(c.status is HealthStatus.DOWN for c in checks.values()) else "ok"


def logged(health: Health) -> Health:
    """Log the check as ``mcp_health_check``: each part's status and the whole (a warning when degraded)."""
    fields = {name: check.status.value for name, check in health.checks.items()}
    down = {name: check.detail for name, check in health.checks.items() if check.status is HealthStatus.DOWN}
    emit = log.warning if health.status != "ok" else log.debug
    emit("mcp_health_check", overall=health.status, took_ms=health.took_ms, down=down or None, **fields)
    return health
