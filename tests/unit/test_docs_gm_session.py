"""docs/story.md's "A GM's session, end to end" names operations as they are: each row's MCP tool is an operation of
:data:`serve.operations.OPERATIONS`, its REST route and role are the operation's, and every operation the GM's table
test plays (tests/unit/test_serve_gm_table.py) has its row (a renamed tool, a moved route or a new step fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## A GM's session, end to end"
ROLES = {"gm": "GM", "player": "player", "admin": "admin"}


def _rows() -> list[list[str]]:
    text = (ROOT / "docs" / "story.md").read_text(encoding="utf-8")
    assert HEADING in text, "docs/story.md has no GM's session section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in rows]


def test_each_row_names_an_operation_with_its_route_and_role() -> None:
    from serve.operations import OPERATIONS

    rows = _rows()
    assert len(rows) >= 20
    wrong = []
    for _, tool, route, who in rows:
        name = tool.strip("`")
        op = OPERATIONS.get(name)
        if op is None or op.rest is None:
            wrong.append(f"{name}: no such operation")
            continue
        if route != f"`{op.rest.method} /api/v1{op.rest.path}`":
            wrong.append(f"{name}: route {route} is {op.rest.method} /api/v1{op.rest.path}")
        if who != ROLES.get(op.access.role.value, op.access.role.value):
            wrong.append(f"{name}: role {who} is {op.access.role.value}")
        if not op.mcp:
            wrong.append(f"{name}: no MCP tool")
    assert wrong == [], wrong


def test_every_operation_the_gm_table_plays_has_its_row() -> None:
    from serve.operations import OPERATIONS

    played = set(re.findall(r'"([a-z_]+)"', (ROOT / "tests" / "unit" / "test_serve_gm_table.py").read_text()))
    documented = {row[1].strip("`") for row in _rows()}
    assert sorted((played & set(OPERATIONS)) - documented) == []
