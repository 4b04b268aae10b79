"""A run stopped while its model loads exits 143 without finalizing under the load (jobs.inprocess)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobs import inprocess

pytestmark = pytest.mark.unit


class _Left(Exception):
    pass


def _record_exit(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def exit_now(code: int) -> None:
        calls.append(("exit", code))
        raise _Left

    monkeypatch.setattr(inprocess.os, "_exit", exit_now)
    monkeypatch.setattr(inprocess.atexit, "_run_exitfuncs", lambda: calls.append("handlers"))
    return calls


def test_a_load_under_way_leaves_at_once_after_the_exit_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record_exit(monkeypatch)
    release = threading.Event()
    loading = threading.Thread(target=release.wait, name=inprocess.MODEL_LOAD_THREAD, daemon=True)
    loading.start()
    try:
        with pytest.raises(_Left):
            inprocess.leave_if_model_loading(143)
    finally:
        release.set()
        loading.join()
    assert calls == ["handlers", ("exit", 143)]


def test_without_a_load_the_exit_is_the_ordinary_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record_exit(monkeypatch)
    inprocess.leave_if_model_loading(143)
    assert calls == []


def test_the_model_loads_in_the_thread_the_exit_looks_for() -> None:
    started = inprocess._in_daemon_thread(lambda: threading.current_thread().name)
    assert started.result(timeout=10) == inprocess.MODEL_LOAD_THREAD
