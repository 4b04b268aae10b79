"""A warm local Ray between commands: ``lorekeeper up`` starts a head, ``lorekeeper ingest`` attaches to it
(and leaves it running), ``lorekeeper down`` stops it and leaves no Ray process of it behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.ray_head import RayHead, head_file, read_head, warm_address

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LOREKEEPER = [str(Path(sys.executable).with_name("lorekeeper"))]


def _run(args: list[str], data: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOREKEEPER_DATA_DIR": str(data),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([*LOREKEEPER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _processes_under(temp_dir: str) -> list[str]:
    """Every process on the machine whose command line names the head's Ray folder (its raylet, GCS, workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp_dir in command and str(os.getpid()) != entry.name:
            found.append(f"{entry.name}: {command[:160]}")
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_ingest_attaches_down_leaves_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    book = tmp_path / "book"
    book.mkdir()
    (book / "rules.md").write_text(
        "# Aspects\n\nAn aspect is a phrase that describes something special about a character.\n\n"
        "# Fate points\n\nSpend a fate point to invoke an aspect for a +2 bonus or a reroll.\n"
    )
    up = _run(["up"], data)
    assert up.returncode == 0, up.stdout + up.stderr
    head = read_head(data)
    assert head is not None and head.alive()
    try:
        assert [line for line in _processes_under(head.temp_dir) if "raylet" in line]
        status = _run(["status", "--json"], data)
        assert status.returncode == 0 and json.loads(status.stdout)["up"] is True
        again = _run(["up"], data)  # a second `up` finds the running head
        assert again.returncode == 0 and read_head(data) == head

        ingest = _run(
            [
                "--log-level",
                "INFO",
                "--log-json",
                "ingest",
                str(book),
                "--library",
                "warm",
                "--executor",
                "ray",
                "--json",
            ],
            data,
        )
        assert ingest.returncode == 0, ingest.stdout[-2000:] + ingest.stderr[-4000:]
        attached = [
            json.loads(line)
            for line in (ingest.stdout + ingest.stderr).splitlines()
            if line.startswith("{") and '"ingest_ray_address"' in line
        ]
        assert attached and attached[0]["address"] == head.address and attached[0]["warm"] is True
        report = json.loads(next(line for line in ingest.stdout.splitlines() if line.startswith('{"library_uid"')))
        assert report["executor"] == "ray" and [f["status"] for f in report["files"]] == ["completed"], report
        assert head.alive(), "the ingest stopped the warm head it attached to"
    finally:
        down = _run(["down"], data)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _group_alive(head.pid)
    assert _processes_under(head.temp_dir) == []
    assert read_head(data) is None and not head_file(data).exists()
    assert _run(["status"], data).returncode == 1


def test_a_record_whose_head_is_gone_is_no_warm_ray(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = RayHead(
        address="127.0.0.1:1",
        pid=dead.pid,
        temp_dir=str(tmp_path),
        num_cpus=4,
        started_at="2026-01-01T00:00:00Z",
        log="x",
    )
    head_file(tmp_path).parent.mkdir(parents=True)
    head_file(tmp_path).write_text(record.model_dump_json())
    assert read_head(tmp_path) == record
    assert warm_address(tmp_path) is None
    head_file(tmp_path).write_text("{not json")
    assert read_head(tmp_path) is None and warm_address(tmp_path) is None


def test_down_never_signals_a_process_that_is_not_the_head(tmp_path: Path) -> None:
    from lorekeeper.ray_cli import stop_head

    # the head died without `down`, and the system gave its process id to another program
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = RayHead(
            address="127.0.0.1:1",
            pid=other.pid,
            temp_dir=str(tmp_path / "lk-ray-gone"),
            num_cpus=4,
            started_at="2026-01-01T00:00:00Z",
            log="x",
        )
        head_file(tmp_path).parent.mkdir(parents=True)
        head_file(tmp_path).write_text(record.model_dump_json())
        assert stop_head(tmp_path, grace=1.0) == record
        assert other.poll() is None, "down signalled a process that was not the head"
        assert read_head(tmp_path) is None
    finally:
        other.kill()
        other.wait()
