"""docs/serving.md's operations table lists every operation of :data:`serve.operations.OPERATIONS` with the role
it declares, its REST route and its MCP tool (or why it has none), and no row names an operation that is not
one: adding an operation without its row, or changing its role or route without the docs, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
HEADER = "| operation | who may call it | REST | MCP tool |"


def _rows() -> list[list[str]]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # the header and its rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.replace("\\|", "¦").strip().strip("|").split("|")]
        assert len(cells) == 4, f"a row of four cells: {line}"
        rows.append(cells)
    return rows


def _role(op: object) -> str:
    """The role cell an operation's access rule reads as (the table's vocabulary)."""
    from serve.operations import On, Role

    rule = op.access  # type: ignore[attr-defined]
    if rule.role in (Role.OPEN, Role.ANY, Role.ADMIN):
        return {Role.OPEN: "no key", Role.ANY: "any key", Role.ADMIN: "admin"}[rule.role]
    who = "player" if rule.role is Role.PLAYER else "GM"
    where = {On.WORLD: "of the world", On.SCENE: "of the scene's campaign"}.get(rule.on, "of the campaign")
    return f"{who} {where}"


def test_every_operation_has_its_row_with_role_route_and_tool() -> None:
    from serve.operations import OPERATIONS

    rows = _rows()
    by_tool = {cells[3].strip("`"): cells for cells in rows if cells[3].startswith("`")}
    wrong = []
    for name, op in OPERATIONS.items():
        assert op.rest is not None, name
        route = f"`{op.rest.method} /api/v1{op.rest.path}`"
        if op.mcp:
            cells = by_tool.get(name)
        else:  # REST only: found by its route, its tool cell gives the reason
            cells = next((c for c in rows if c[2].startswith(route)), None)
            if cells is not None and not (cells[3].startswith("—") and op.rest_only and op.rest_only in cells[3]):
                wrong.append(f"{name}: REST-only, its MCP cell must give the reason: {cells[3]!r}")
        if cells is None:
            wrong.append(f"{name}: no row in docs/serving.md's operations table")
            continue
        if cells[1] != _role(op):
            wrong.append(f"{name}: role {cells[1]!r}, declared {_role(op)!r}")
        if not cells[2].startswith(route):
            wrong.append(f"{name}: REST {cells[2]!r}, declared {route}")
        if cells[0].split(":", 1)[0] != op.family:
            wrong.append(f"{name}: family {cells[0].split(':', 1)[0]!r}, declared {op.family!r}")
    assert not wrong, "\n".join(wrong)
    unknown = sorted(set(by_tool) - set(OPERATIONS))
    assert not unknown, f"rows naming no operation: {unknown}"
    assert len(rows) == len(OPERATIONS), "one row per operation"
