"""The conflict benchmark's ground truth holds: every restatement it writes says the true value, every change
does not, by the same comparison the gate makes; and the book it ingests prints stat blocks as the SRD does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from schemas.rulefacts import Comparison, entry_key
from story.source_check import compare_claim

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
rc = pytest.importorskip("rule_conflicts")
books = pytest.importorskip("rulebook_books")


@pytest.fixture(scope="module")
def claims() -> list[object]:
    truth = rc.srd_truth()
    keys = [k for k in truth if truth[k].kind in rc.FIELDS][::7]  # every seventh entry of every kind
    return list(rc.conflict_set(truth, keys, seed=3))


def test_restatements_say_the_truth_and_changes_do_not(claims: list[object]) -> None:
    assert len(claims) > 400
    fields = {(c.kind, c.field) for c in claims}
    assert {("creature", "hit_points"), ("spell", "range"), ("magic_item", "rarity")} <= fields
    wrong = [
        (c.entry, c.field, c.said, c.truth.canonical())
        for c in claims
        if compare_claim(c.said, c.truth, c.field) is not (Comparison.SAME if c.correct else Comparison.DIFFERENT)
    ]
    assert wrong == []


def test_the_same_seed_writes_the_same_set() -> None:
    truth = rc.srd_truth()
    keys = sorted(truth)[:40]
    first = [(c.entry, c.field, c.said) for c in rc.conflict_set(truth, keys, seed=5)]
    assert first == [(c.entry, c.field, c.said) for c in rc.conflict_set(truth, keys, seed=5)]
    assert first != [(c.entry, c.field, c.said) for c in rc.conflict_set(truth, keys, seed=6)]


def test_the_markdown_book_prints_a_stat_block_as_bold_labelled_lines() -> None:
    tree = books.srd_tree(("Monsters",), scale=0.05)
    text = rc.tree_markdown(tree)
    assert text.startswith("# System Reference Document 5.1\n")
    entry = next(n for n, level, _ in tree.walk() if n.kind == "entry")
    block = text.split(f"#### {entry.title}\n\n", 1)[1].split("\n\n#### ", 1)[0]
    lines = block.split("\n")
    assert any(line.startswith("**Armor Class** ") and line.endswith("  ") for line in lines)
    assert any(line.startswith("**Hit Points** ") for line in lines)
    assert entry_key(entry.title) in rc.srd_truth()
