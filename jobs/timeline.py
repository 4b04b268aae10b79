"""When each phase of an ingest ran: the timeline printed in the ingest summary and in ``--json``.

Phases are spans (start and end, in seconds since the job started); moments (the first file done, the
first searchable chunk) are single marks. Phases may overlap (the model loads while Ray starts or the
first file is extracted), which is the point of showing them on one clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: The phases an ingest reports (those that ran, in the order they started; ties in this order).
PHASES = (
    "store_opening",
    "discovery",
    "ray_start",
    "ray_data_planning",
    "actor_start",
    "model_load",
    "stage_opening",
    "first_batch",
    "pipeline",
    "vector_optimize",
    "ray_shutdown",
)

#: Moments: the first file done (any outcome) and the first item whose chunks are searchable.
MOMENTS = ("first_file_done", "first_searchable")


@dataclass
class Timeline:
    """Spans and moments of one ingest on one clock (``time.perf_counter``), thread-safe."""

    started: float = field(default_factory=time.perf_counter)
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    moments: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> float:
        return time.perf_counter() - self.started

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase`` (a phase entered twice keeps its first start and last end)."""
        begin = self.now()
        try:
            yield
        finally:
            self.record(phase, begin, self.now())

    def record(self, phase: str, begin: float, end: float) -> None:
        with self._lock:
            if phase in self.spans:
                begin = min(begin, self.spans[phase][0])
            self.spans[phase] = (begin, end)

    def mark(self, moment: str) -> None:
        """Record ``moment`` now, the first time only."""
        with self._lock:
            self.moments.setdefault(moment, self.now())

    def to_dict(self, total: float) -> dict[str, Any]:
        """``{"phases": {phase: {"start_s", "end_s", "seconds"}}, moment_s…, "total_s"}``, rounded; phases
        in the order they started."""
        order = {name: i for i, name in enumerate(PHASES)}
        phases = {
            name: {"start_s": round(a, 2), "end_s": round(b, 2), "seconds": round(b - a, 2)}
            for name, (a, b) in sorted(self.spans.items(), key=lambda kv: (kv[1][0], order.get(kv[0], len(order))))
        }
        out: dict[str, Any] = {"phases": phases}
        for moment in MOMENTS:
            value = self.moments.get(moment)
            out[f"{moment}_s"] = round(value, 2) if value is not None else None
        out["total_s"] = round(total, 2)
        return out


def describe(timeline: dict[str, Any]) -> list[str]:
    """The timeline as lines for the summary: ``ray_start  0.0 → 5.3 s (5.3 s)``, then the moments."""
    lines = []
    for name, span in timeline.get("phases", {}).items():
        lines.append(
            f"{name.replace('_', ' '):<18} {span['start_s']:6.1f} → {span['end_s']:6.1f} s  ({span['seconds']:.1f} s)"
        )
    for moment in MOMENTS:
        value = timeline.get(f"{moment}_s")
        shown = f"{value:.1f} s" if value is not None else "-"
        lines.append(f"{moment.replace('_', ' '):<18} {shown}")
    lines.append(f"{'total':<18} {timeline.get('total_s', 0):.1f} s")
    return lines
