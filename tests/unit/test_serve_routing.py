"""Rendezvous hashing of campaigns over narrator replicas: stable, spread, and minimal movement."""

from __future__ import annotations

from collections import Counter

from serve.routing import rendezvous_order


def test_every_process_agrees_on_the_order() -> None:
    replicas = ["r1", "r2", "r3", "r4"]
    assert rendezvous_order("camp_a", replicas) == rendezvous_order("camp_a", list(reversed(replicas)))
    assert sorted(rendezvous_order("camp_a", replicas)) == replicas


def test_campaigns_spread_over_the_replicas() -> None:
    replicas = ["r1", "r2", "r3", "r4"]
    first = Counter(rendezvous_order(f"camp_{i}", replicas)[0] for i in range(4000))
    assert set(first) == set(replicas)
    assert min(first.values()) > 800  # about 1000 each


def test_losing_a_replica_moves_only_its_campaigns() -> None:
    replicas = ["r1", "r2", "r3", "r4"]
    before = {f"camp_{i}": rendezvous_order(f"camp_{i}", replicas)[0] for i in range(2000)}
    after = {c: rendezvous_order(c, ["r1", "r2", "r4"])[0] for c in before}
    moved = {c for c in before if before[c] != after[c]}
    assert moved == {c for c in before if before[c] == "r3"}
    # and its campaigns go where their own order says next, not all to one replica
    assert len({after[c] for c in moved}) == 3
