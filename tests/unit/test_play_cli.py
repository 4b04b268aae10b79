"""``lorekeeper play``: a table in the terminal, driven through its standard input as a person would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.servers  # the embedded graph runs redis-server with FalkorDB as a child process

LORE = [sys.executable, "-c", "from lorekeeper.cli import app; app()"]


def _play(data: Path, lines: list[str], *args: str, engine: str = "echo", timeout: float = 280, **limits: str) -> str:
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(data), "LOREKEEPER_NARRATOR_ENGINE": engine}
    env.update({"LOREKEEPER_NARRATOR_MAX_TOKENS": "16", "LOREKEEPER_EXTRACTOR_MAX_TOKENS": "64", "COLUMNS": "200"})
    env.update({f"LOREKEEPER_{name.upper()}": value for name, value in limits.items()})
    done = subprocess.run(
        [*LORE, "play", *args], input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_table_plays_its_verbs_and_resumes(tmp_path: Path) -> None:
    out = _play(
        tmp_path,
        ["I open the tavern door.", "/retake", "/branch side", "/undo", "/redo", "/recall tavern", "/state",
         "/rules", "/bogus", "/end The door opened.", "/quit", "never read"],
    )  # fmt: skip
    campaign = re.search(r"campaign (camp_\w+) created", out)
    assert campaign, out
    narrated = re.findall(r"^The world answers: I open the tavern door\.$", out, re.MULTILINE)
    assert len(narrated) == 2  # the turn and its retake
    assert "on branch" in out and "(side)" in out
    assert "undo: the head is now the start" in out and "redo: the head is now turn_" in out
    assert "turn I open the tavern door. / The world answers" in out  # recalled
    assert "unknown verb /bogus" in out and "scene ended" in out and "no house rules" in out
    again = _play(tmp_path, ["/state", "/end", "/nope"], campaign.group(1))
    assert "resumed" in again and "no scene is open" in again and "unknown verb /nope" in again


def test_an_unknown_campaign_is_a_clear_error_and_the_table_goes_on(tmp_path: Path) -> None:
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(tmp_path)}
    done = subprocess.run([*LORE, "play", "camp_nope"], input="/quit\n", capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "camp_nope" in done.stderr


@pytest.mark.local_model
@pytest.mark.timeout(900)
def test_the_default_model_narrates_at_the_table(tmp_path: Path) -> None:
    """The model narrates, its extractor stages a change the narration implies, and the scene's end makes it
    canon (a seeded turn: the same narration, hence the same extraction, on each run on one machine)."""
    turn = "I search the cellar of the Copper Lantern inn and find a rusty iron key under a barrel."
    out = _play(
        tmp_path, [turn, "/end", "/state", "/quit"], "--seed", "7", engine="local", timeout=880,
        narrator_max_tokens="96", extractor_max_tokens="320",
    )  # fmt: skip
    narration = out.split("scene_", 1)[1].split("\n", 2)[1]
    assert narration.strip() and "The world answers" not in narration
    staged = re.search(r"^(\d+) proposal\(s\) staged for the scene's end$", out, re.MULTILINE)
    assert staged, out
    ended = re.search(r"^scene ended: (\d+) accepted.*; (\d+) event\(s\) became canon$", out, re.MULTILINE)
    assert ended and int(ended.group(1)) >= 1 and int(ended.group(2)) >= 1, out
