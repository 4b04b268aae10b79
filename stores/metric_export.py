"""Metrics that reach a scrape wherever they are recorded: this process's registry and Ray's export.

Every Lorekeeper metric is a :class:`Counter` or :class:`Histogram` of this module. Each records into
the process's own ``prometheus_client`` registry (what ``/metrics`` of the API or a CLI run serves),
and, in a process where Ray is initialized (a Ray Data stage actor, a Ray Serve replica, a driver
connected to Ray), also through ``ray.util.metrics``: Ray's metrics agent on each node exports it,
so what the workers and replicas count reaches the node's metrics port (``ray start
--metrics-export-port``, ``ray.init(_metrics_export_port=…)``). Ray names the exported series
``ray_<name>`` and adds its own labels (``Component``, ``NodeAddress``, ``SessionName``, ``WorkerId``…);
the chart's scrape renames ``ray_lorekeeper_*`` back to ``lorekeeper_*`` (docs/ingestion.md).

A module that defines a metric may be imported twice (tests that reload it, Ray workers unpickling a
stage): the second definition reuses the registered collector instead of raising.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import prometheus_client
from prometheus_client import REGISTRY

_LOCK = threading.Lock()


def _registered(kind: type[Any], name: str, documentation: str, labels: Sequence[str], **kwargs: Any) -> Any:
    """The ``prometheus_client`` collector of this name, made now or the one already registered."""
    with _LOCK:
        existing = REGISTRY._names_to_collectors.get(name)  # noqa: SLF001 - no public lookup exists
        if isinstance(existing, kind):
            return existing
        return kind(name, documentation, list(labels), **kwargs)


def _ray_initialized() -> bool:
    """Whether this process is connected to Ray (never imports Ray where nothing else did)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


class _Metric:
    """What a counter and a histogram share: the local collector, its labels, and the Ray copy."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._ray: Any = None
        self._ray_session: tuple[int, int] = (0, 0)

    def _ray_metric(self) -> Any:
        """The ``ray.util.metrics`` twin, made once per process the first time Ray is up; None without Ray."""
        if not _ray_initialized():
            return None
        import os

        # one twin per process and Ray session: a test that restarts Ray gets a fresh one
        worker = sys.modules["ray"]._private.worker.global_worker
        session = (os.getpid(), id(getattr(worker, "node", None)))
        if self._ray is None or self._ray_session != session:
            self._ray = self._make_ray()
            self._ray_session = session
        return self._ray

    def _make_ray(self) -> Any:
        raise NotImplementedError

    def _tags(self, labels: dict[str, str]) -> dict[str, str]:
        missing = set(self.labelnames) - set(labels)
        if missing or set(labels) - set(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {self.labelnames}, given {sorted(labels)}")
        return {key: str(value) for key, value in labels.items()}


class _CounterChild:
    def __init__(self, metric: Counter, labels: dict[str, str]) -> None:
        self._metric, self._labels = metric, labels

    def inc(self, amount: float = 1) -> None:
        self._metric._inc(amount, self._labels)  # noqa: SLF001 - the child of its own metric


class Counter(_Metric):
    """A counter recorded locally and, under Ray, exported through Ray's metrics agent.

    Args:
        name: the full Prometheus name, ``…_total`` included.
        documentation: what it counts.
        labelnames: its label names.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        self.local = _registered(prometheus_client.Counter, name, documentation, labelnames)

    def _make_ray(self) -> Any:
        from ray.util.metrics import Counter as RayCounter

        return RayCounter(self.name, self.documentation, tag_keys=self.labelnames)

    def labels(self, **labels: str) -> _CounterChild:
        return _CounterChild(self, self._tags(labels))

    def inc(self, amount: float = 1) -> None:
        """Count ``amount`` on a metric without labels."""
        self._inc(amount, self._tags({}))

    def _inc(self, amount: float, labels: dict[str, str]) -> None:
        (self.local.labels(**labels) if labels else self.local).inc(amount)
        twin = self._ray_metric()
        if twin is not None and amount > 0:  # Ray refuses a zero increment
            twin.inc(amount, tags=labels or None)


class _HistogramChild:
    def __init__(self, metric: Histogram, labels: dict[str, str]) -> None:
        self._metric, self._labels = metric, labels

    def observe(self, value: float, *, export: bool = True) -> None:
        """Observe ``value``; ``export=False`` keeps it out of Ray's export (a figure this process's own
        ``/metrics`` shows that would count twice in the cluster's scrape)."""
        self._metric._observe(value, self._labels, export=export)  # noqa: SLF001 - the child of its own metric


class Histogram(_Metric):
    """A histogram recorded locally and, under Ray, exported through Ray's metrics agent (same buckets).

    Ray's export keeps the bucket counts exact; its ``_sum`` is approximated from the buckets.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self.buckets = tuple(float(b) for b in buckets)
        self.local = _registered(prometheus_client.Histogram, name, documentation, labelnames, buckets=self.buckets)

    def _make_ray(self) -> Any:
        from ray.util.metrics import Histogram as RayHistogram

        return RayHistogram(self.name, self.documentation, boundaries=list(self.buckets), tag_keys=self.labelnames)

    def labels(self, **labels: str) -> _HistogramChild:
        return _HistogramChild(self, self._tags(labels))

    def observe(self, value: float) -> None:
        """Observe ``value`` on a metric without labels."""
        self._observe(value, self._tags({}))

    def _observe(self, value: float, labels: dict[str, str], *, export: bool = True) -> None:
        (self.local.labels(**labels) if labels else self.local).observe(value)
        twin = self._ray_metric() if export else None
        if twin is not None:
            twin.observe(value, tags=labels or None)
