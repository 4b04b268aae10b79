"""A transcript import killed for real (SIGKILL of the ``lorekeeper`` process) at several moments: the campaign
is listed as unfinished and refused for play, ``--resume`` finishes it without a duplicate line or campaign, and
its graph and recall index then hold what a clean import of the same file holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.factory import open_blob_store, open_graph_store, open_memory_text_index, open_vector_index
from story.errors import CampaignIncomplete
from story.service import StoryService

# five runs of the command line, each loading the embedding model: minutes on a busy machine
pytestmark = [pytest.mark.servers, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
SESSIONS, PER_SESSION = 12, 100  # 1,200 lines: two story transactions (1,000 and 200 lines), two record batches
TOPICS = ["the harbour", "a lost key", "the bakery", "night trains", "old maps", "a stray cat", "the orchard"]


def generated(path: Path) -> Path:
    """A conversation of :data:`SESSIONS` sessions, each line distinct."""
    with path.open("w", encoding="utf-8") as out:
        for s in range(1, SESSIONS + 1):
            for n in range(PER_SESSION):
                who = ("Ada", "Bo", "Cy")[n % 3]
                topic = TOPICS[(s * 7 + n) % len(TOPICS)]
                text = f"{who} tells, in session {s}, story {n} about {topic} and what came of it."
                line = {"session": str(s), "time": f"day {s}", "speaker": who, "text": text, "ref": f"s{s}:{n}"}
                out.write(json.dumps(line) + "\n")
    return path


@dataclass
class Run:
    code: int
    events: list[dict[str, object]]
    output: str

    def report(self) -> dict[str, object]:
        (report,) = [e for e in self.events if "campaign_id" in e and "event" not in e]
        return report


def lorekeeper(data: Path, *args: str, kill_at: str | None = None, timeout_s: float = 480) -> Run:
    """Run the command line on ``data`` with JSON logs; SIGKILL it as soon as it logs ``kill_at``."""
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(data)}
    command = [sys.executable, "-m", "lorekeeper.cli", "--log-level", "INFO", "--log-json", *args]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    timer = threading.Timer(timeout_s, proc.kill)  # a hung child fails the test instead of hanging it
    timer.start()
    events: list[dict[str, object]] = []
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
                if kill_at is not None and event.get("event") == kill_at:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        code = proc.wait()
    finally:
        timer.cancel()
    if code == -signal.SIGKILL:
        graph_server_gone(data)
    return Run(code, events, "".join(lines[-40:]))


def graph_server_gone(data: Path, timeout_s: float = 60) -> None:
    """Wait until the graph server a killed command started has been stopped by its watchdog: a store opened
    before would attach to it and lose it mid-read."""
    record = data / "graph" / "falkordb.json"
    try:
        pid = int(json.loads(record.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.1)
    pytest.fail(f"the graph server (pid {pid}) of a killed import was not stopped")


@contextmanager
def opened(data: Path) -> Iterator[tuple[StoryService, Settings]]:
    """The story on ``data``'s stores (no recall index: these checks read the index's stores directly)."""
    settings = Settings(data_dir=data)
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    try:
        yield StoryService(graph, blobs), settings
    finally:
        graph.close()
        blobs.close()


def indexed(settings: Settings, campaign_id: str) -> tuple[int, int]:
    """The campaign's records in the recall index: (vectors, full-text documents)."""
    filters = SearchFilters(campaign=[campaign_id])
    vectors, text = open_vector_index(settings), open_memory_text_index(settings)
    try:
        return vectors.count(settings.memory_collection, filters), text.count(filters)
    finally:
        vectors.close()
        text.close()


def state_of(data: Path) -> tuple[str, int, int]:
    """The one campaign's id, its import cursor and its turns in the graph; play is refused meanwhile."""
    with opened(data) as (story, _):
        (campaign,) = story.list_campaigns()
        assert campaign.transcript_import is not None, "a killed import left a campaign that looks whole"
        with pytest.raises(CampaignIncomplete, match="unfinished import"):
            story.add_turn(campaign.id, "I open the door", narration="It creaks.")
        with pytest.raises(CampaignIncomplete):
            story.start_scene(campaign.id, title="a new scene")
        return campaign.id, campaign.transcript_import.written, len(story.history(campaign.id))


def test_an_import_killed_at_several_moments_is_resumed_to_what_a_clean_import_writes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = generated(tmp_path / "long-talk.jsonl")
    lines = SESSIONS * PER_SESSION
    importing = ["campaign", "import-transcript", str(path)]

    # killed once the campaign exists, before any line is written
    killed = lorekeeper(data, *importing, "--name", "Long talk", kill_at="transcript_import_started")
    assert killed.code == -signal.SIGKILL, killed.output
    campaign_id, written, turns = state_of(data)
    assert (written, turns) == (0, 0)
    listed = lorekeeper(data, "campaign", "list")
    assert f"{campaign_id}  Long talk" in listed.output and f"0 of {lines} lines written" in listed.output
    again = lorekeeper(data, *importing, "--name", "Long talk again")  # not a second campaign: resume it
    assert again.code == 1 and f"campaign {campaign_id!r}" in again.output and "--resume" in again.output

    # resumed, and killed after its first story transaction
    killed = lorekeeper(data, *importing, "--resume", kill_at="transcript_import_written")
    assert killed.code == -signal.SIGKILL, killed.output
    assert state_of(data) == (campaign_id, 1000, 1000)

    # resumed, and killed once every line is in the graph, while the recall index is written
    killed = lorekeeper(data, *importing, "--resume", kill_at="transcript_import_graph_written")
    assert killed.code == -signal.SIGKILL, killed.output
    assert state_of(data) == (campaign_id, lines, lines)

    # resumed to the end
    finished = lorekeeper(data, *importing, "--resume", "--json")
    assert finished.code == 0, finished.output
    assert finished.report()["campaign_id"] == campaign_id and finished.report()["resumed_from"] == lines

    # a clean import of the same file (a finished import may be imported again: another campaign)
    clean = lorekeeper(data, *importing, "--name", "Clean", "--json")
    assert clean.code == 0, clean.output
    clean_id = str(clean.report()["campaign_id"])

    with opened(data) as (story, settings):
        campaigns = story.list_campaigns()
        assert sorted(c.id for c in campaigns) == sorted([campaign_id, clean_id])  # no duplicate campaign
        assert all(c.transcript_import is None for c in campaigns)
        shape = {}
        for cid in (campaign_id, clean_id):
            history = story.history(cid)
            assert [t.depth for t in history] == list(range(lines))  # one line of turns, none twice
            scenes = story.scenes(cid)
            shape[cid] = (
                [t.ref for t in history],
                [(s.title, s.status.value) for s in scenes],
                len(story.summaries(cid)),
                indexed(settings, cid),
            )
        assert shape[campaign_id] == shape[clean_id]
        refs, scenes, summaries, (vectors, documents) = shape[clean_id]
        assert (len(refs), len(scenes), summaries) == (lines, SESSIONS, SESSIONS)
        assert vectors == documents == lines + summaries
        # the resumed campaign plays on
        turn = story.add_turn(campaign_id, "And then?", narration="The tide turns.")
        assert turn.depth == lines
