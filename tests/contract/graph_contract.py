"""The graph store contract, written once and run on every backend (tests/contract/test_graph.py).

A test class mixes in :class:`GraphStoreContract`, provides a ``graph`` fixture yielding an empty
store, and sets ``deferred_writes`` to say which transaction model its engine has:

* ``False`` (Neo4j): interactive transactions; a statement sees the writes before it and fails where
  it is run.
* ``True`` (FalkorDB): reads before the first write run at once; writes are applied together, as one
  atomic query, at commit, where a failure surfaces. See stores/graph/dialect.py.
"""

from __future__ import annotations

import datetime as dt
import pickle
import threading
from typing import Any, ClassVar

import pytest

from schemas.errors import Conflict, InvalidRequest, NotSupported
from stores.graph.base import GraphSchema, GraphStore, UniqueConstraint
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

CONTRACT_SCHEMA = GraphSchema(
    constraints=(UniqueConstraint("CtPerson", "uid"), UniqueConstraint("CtCounter", "uid")),
)

_PLAIN = (type(None), bool, int, float, str, list, dict, dt.datetime, dt.date)


def _assert_plain(value: Any) -> None:
    assert isinstance(value, _PLAIN), f"{type(value).__name__} is not plain Python"
    if isinstance(value, list):
        for item in value:
            _assert_plain(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            _assert_plain(item)


def _count(graph: GraphStore, label: str) -> int:
    return graph.run(f"MATCH (n:{label}) RETURN count(n) AS n")[0]["n"]


@pytest.mark.contract
class GraphStoreContract:
    """Behaviour every graph backend must show; needs a ``graph`` fixture (an empty store)."""

    deferred_writes: ClassVar[bool] = False

    # -- basics ---------------------------------------------------------------------------------

    def test_health(self, graph: GraphStore) -> None:
        graph.health()

    def test_results_are_plain_python(self, graph: GraphStore) -> None:
        graph.run(
            "CREATE (a:CtNode {uid: 'a', n: 1, x: 1.5, ok: true, tags: ['t1', 't2']})"
            "-[:CT_LINK {w: 2}]->(b:CtNode {uid: 'b'})"
        )
        rows = graph.run(
            "MATCH p = (a:CtNode {uid: 'a'})-[r:CT_LINK]->(b) "
            "RETURN a, r, b, p, a.uid AS uid, [1, 2] AS xs, {k: 'v'} AS m, null AS nothing"
        )
        assert len(rows) == 1
        row = rows[0]
        _assert_plain(row)
        assert row["a"] == {"uid": "a", "n": 1, "x": 1.5, "ok": True, "tags": ["t1", "t2"], "_labels": ["CtNode"]}
        assert row["r"] == {"w": 2, "_type": "CT_LINK"}
        assert row["p"] == [row["a"], row["r"], row["b"]]
        assert (row["uid"], row["xs"], row["m"], row["nothing"]) == ("a", [1, 2], {"k": "v"}, None)

    def test_merge_is_idempotent(self, graph: GraphStore) -> None:
        rows = [{"uid": f"p{i}", "name": f"Person {i}"} for i in range(50)]
        query = (
            "UNWIND $rows AS row MERGE (p:CtPerson {uid: row.uid}) SET p.name = row.name "
            "WITH p MERGE (w:CtWorld {uid: 'w'}) MERGE (p)-[:CT_IN]->(w)"
        )
        graph.run(query, {"rows": rows})
        graph.run(query, {"rows": rows})
        assert _count(graph, "CtPerson") == 50
        assert _count(graph, "CtWorld") == 1
        assert graph.run("MATCH (:CtPerson)-[r:CT_IN]->(:CtWorld) RETURN count(r) AS n")[0]["n"] == 50

    def test_unwind_batch_of_1000_rows(self, graph: GraphStore) -> None:
        rows = [{"uid": f"n{i}", "props": {"i": i, "name": f"node {i}", "tags": ["x", str(i)]}} for i in range(1000)]
        graph.run("UNWIND $rows AS row CREATE (n:CtNode {uid: row.uid}) SET n += row.props", {"rows": rows})
        assert _count(graph, "CtNode") == 1000
        found = graph.run("MATCH (n:CtNode {uid: 'n777'}) RETURN n.i AS i, n.name AS name, n.tags AS tags")
        assert found == [{"i": 777, "name": "node 777", "tags": ["x", "777"]}]

    # Every JSON type as a parameter. Floats with up to 15 significant digits: FalkorDB prints doubles
    # with 15 (see the ADR); Neo4j keeps all 17.
    JSON_VALUES: ClassVar[dict[str, Any]] = {
        "null": None,
        "true": True,
        "false": False,
        "int": 2**62 + 7,
        "negative": -42,
        "float": 0.1,
        "small": 1.5e-7,
        "big_float": 123456.789012345,
        "string": "quote ' double \" backslash \\ newline \n tab \t unicode é 中 🐉",
        "empty": "",
        "ints": [1, 2, 3],
        "strings": ["a", "b"],
        "empty_list": [],
        "nested": {"a": {"b": [1, {"c": "x"}], "d": None}, "e": [[1, 2], [3]]},
    }

    @pytest.mark.parametrize("key", sorted(JSON_VALUES))
    def test_parameters_of_every_json_type_round_trip(self, graph: GraphStore, key: str) -> None:
        value = self.JSON_VALUES[key]
        assert graph.run("RETURN $value AS value", {"value": value}) == [{"value": value}]

    def test_list_properties(self, graph: GraphStore) -> None:
        graph.run(
            "CREATE (n:CtNode {uid: 'l'}) SET n.tags = $tags, n.scores = $scores, n.none = $empty",
            {"tags": ["red", "blue"], "scores": [1.5, 2.5], "empty": []},
        )
        row = graph.run("MATCH (n:CtNode {uid: 'l'}) RETURN n.tags AS tags, n.scores AS scores, n.none AS none")[0]
        assert row == {"tags": ["red", "blue"], "scores": [1.5, 2.5], "none": []}
        hits = graph.run("MATCH (n:CtNode) WHERE 'blue' IN n.tags RETURN n.uid AS uid")
        assert hits == [{"uid": "l"}]

    def test_datetime_parameters_round_trip_at_second_precision(self, graph: GraphStore) -> None:
        when = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
        graph.run("CREATE (:CtNode {uid: 't', at: $at})", {"at": when})
        got = graph.run("MATCH (n:CtNode {uid: 't'}) RETURN n.at AS at")[0]["at"]
        assert isinstance(got, dt.datetime) and got == when

    def test_variable_length_paths(self, graph: GraphStore) -> None:
        graph.run(
            "CREATE (:CtNode {uid: 'a'})-[:CT_NEXT]->(:CtNode {uid: 'b'})-[:CT_NEXT]->(:CtNode {uid: 'c'})"
            "-[:CT_NEXT]->(:CtNode {uid: 'd'})"
        )
        rows = graph.run(
            "MATCH p = (:CtNode {uid: 'a'})-[:CT_NEXT*1..2]->(x) RETURN x.uid AS uid, length(p) AS hops ORDER BY hops"
        )
        assert rows == [{"uid": "b", "hops": 1}, {"uid": "c", "hops": 2}]
        paths = graph.run("MATCH p = (:CtNode {uid: 'a'})-[:CT_NEXT*3]->(:CtNode {uid: 'd'}) RETURN p")
        assert [item.get("uid", item.get("_type")) for item in paths[0]["p"]] == [
            "a",
            "CT_NEXT",
            "b",
            "CT_NEXT",
            "c",
            "CT_NEXT",
            "d",
        ]

    def test_rewritten_neo4j_syntax_gives_the_same_answers(self, graph: GraphStore) -> None:
        graph.run("CREATE (:CtNode {uid: 'a'})-[:CT_NEXT]->(:CtNode {uid: 'b'})-[:CT_NEXT]->(:CtNode {uid: 'c'})")
        with_next = graph.run(
            "MATCH (n:CtNode) WHERE EXISTS { MATCH (n)-[:CT_NEXT]->() } RETURN n.uid AS uid ORDER BY uid"
        )
        assert with_next == [{"uid": "a"}, {"uid": "b"}]
        last = graph.run("MATCH (n:CtNode) WHERE NOT EXISTS { MATCH (n)-[:CT_NEXT]->(:CtNode) } RETURN n.uid AS uid")
        assert last == [{"uid": "c"}]
        hops = graph.run(
            "MATCH p = shortestPath((a:CtNode {uid: 'a'})-[:CT_NEXT*]->(c:CtNode {uid: 'c'})) RETURN length(p) AS n"
        )
        assert hops == [{"n": 2}]
        ids = graph.run("MATCH (n:CtNode {uid: 'a'}) RETURN elementId(n) AS id")
        assert isinstance(ids[0]["id"], str)

    def test_stream_yields_every_record(self, graph: GraphStore) -> None:
        graph.run("UNWIND range(1, 300) AS i CREATE (:CtNode {i: i})")
        seen = [row["i"] for row in graph.stream("MATCH (n:CtNode) RETURN n.i AS i ORDER BY i")]
        assert seen == list(range(1, 301))

    # -- errors ---------------------------------------------------------------------------------

    def test_syntax_error_is_invalid_request(self, graph: GraphStore) -> None:
        with pytest.raises(InvalidRequest) as info:
            graph.run("MATC (n) RETURN n")
        assert graph.name in str(info.value)

    def test_ensure_schema_is_idempotent(self, graph: GraphStore) -> None:
        graph.ensure_schema(CONTRACT_SCHEMA)
        graph.ensure_schema(CONTRACT_SCHEMA)
        graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)

    def test_uniqueness_violation_is_conflict_and_writes_nothing(self, graph: GraphStore) -> None:
        graph.ensure_schema(CONTRACT_SCHEMA)
        graph.run("CREATE (:CtPerson {uid: 'p1'})")
        with pytest.raises(Conflict):
            graph.run("CREATE (:CtPerson {uid: 'p1'})")
        # one statement is atomic: the batch fails whole on its one duplicate
        with pytest.raises(Conflict):
            graph.run("UNWIND $uids AS uid CREATE (:CtPerson {uid: uid})", {"uids": ["p2", "p3", "p1", "p4"]})
        assert _count(graph, "CtPerson") == 1

    # -- transactions ---------------------------------------------------------------------------

    def test_transaction_commits_every_statement(self, graph: GraphStore) -> None:
        with graph.transaction() as tx:
            tx.run("CREATE (:CtNode {uid: 'a'})")
            tx.run("MATCH (a:CtNode {uid: 'a'}) CREATE (a)-[:CT_NEXT]->(:CtNode {uid: 'b'})")
            tx.run("UNWIND $rows AS row CREATE (:CtNode {uid: row})", {"rows": ["c", "d"]})
        assert _count(graph, "CtNode") == 4
        # the second statement saw the first one's write
        assert graph.run("MATCH (:CtNode {uid: 'a'})-[r:CT_NEXT]->() RETURN count(r) AS n") == [{"n": 1}]

    def test_exception_in_the_block_writes_nothing(self, graph: GraphStore) -> None:
        with pytest.raises(RuntimeError), graph.transaction() as tx:
            tx.run("CREATE (:CtNode {uid: 'a'})")
            tx.run("CREATE (:CtNode {uid: 'b'})")
            raise RuntimeError("the caller changed its mind")
        assert _count(graph, "CtNode") == 0

    def test_failing_statement_mid_transaction_writes_nothing(self, graph: GraphStore) -> None:
        graph.ensure_schema(CONTRACT_SCHEMA)
        graph.run("CREATE (:CtPerson {uid: 'taken'})")
        with pytest.raises(Conflict), graph.transaction() as tx:
            tx.run("CREATE (:CtNode {uid: 'before'})")
            tx.run("CREATE (:CtPerson {uid: 'taken'})")
            tx.run("CREATE (:CtNode {uid: 'after'})")
        assert _count(graph, "CtNode") == 0
        assert _count(graph, "CtPerson") == 1

    def test_runtime_error_mid_transaction_writes_nothing(self, graph: GraphStore) -> None:
        with pytest.raises(InvalidRequest), graph.transaction() as tx:
            tx.run("CREATE (:CtNode {uid: 'before'})")
            tx.run("UNWIND [1, 0] AS d CREATE (:CtNode {v: 10 / d})")
        assert _count(graph, "CtNode") == 0

    def test_reads_in_a_transaction(self, graph: GraphStore) -> None:
        graph.run("CREATE (:CtNode {uid: 'seed', v: 1})")
        with graph.transaction() as tx:
            assert tx.run("MATCH (n:CtNode {uid: 'seed'}) RETURN n.v AS v") == [{"v": 1}]
            tx.run("MATCH (n:CtNode {uid: 'seed'}) SET n.v = 2")
            if self.deferred_writes:
                with pytest.raises(NotSupported):
                    tx.run("MATCH (n:CtNode {uid: 'seed'}) RETURN n.v AS v")
            else:
                assert tx.run("MATCH (n:CtNode {uid: 'seed'}) RETURN n.v AS v") == [{"v": 2}]
        assert graph.run("MATCH (n:CtNode {uid: 'seed'}) RETURN n.v AS v") == [{"v": 2}]

    def test_concurrent_compare_and_set_loses_no_update(self, graph: GraphStore) -> None:
        # The portable read-modify-write: read the version, then one guarded statement that writes
        # only if nobody else did in between (one statement is atomic on both engines); retry if not.
        graph.ensure_schema(CONTRACT_SCHEMA)
        graph.run("CREATE (:CtCounter {uid: 'c', value: 0, version: 0})")
        threads, increments, errors = 4, 10, []

        def work() -> None:
            try:
                for _ in range(increments):
                    while True:
                        row = graph.run("MATCH (c:CtCounter {uid: 'c'}) RETURN c.value AS value, c.version AS v")[0]
                        done = graph.run(
                            "MATCH (c:CtCounter {uid: 'c'}) WHERE c.version = $v "
                            "SET c.value = $value, c.version = $v + 1 RETURN c.version AS v",
                            {"v": row["v"], "value": row["value"] + 1},
                        )
                        if done:
                            break
            except Exception as exc:  # surfaced below: a thread's exception would otherwise vanish
                errors.append(exc)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert not errors, errors
        final = graph.run("MATCH (c:CtCounter {uid: 'c'}) RETURN c.value AS value, c.version AS v")
        assert final == [{"value": threads * increments, "v": threads * increments}]

    def test_concurrent_transactions_are_each_all_or_nothing(self, graph: GraphStore) -> None:
        errors: list[Exception] = []

        def work(worker: int) -> None:
            try:
                for batch in range(5):
                    with graph.transaction() as tx:
                        for i in range(4):
                            tx.run("CREATE (:CtNode {worker: $w, batch: $b, i: $i})", {"w": worker, "b": batch, "i": i})
            except Exception as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert not errors, errors
        sizes = graph.run("MATCH (n:CtNode) RETURN n.worker AS w, n.batch AS b, count(*) AS n")
        assert len(sizes) == 20 and {row["n"] for row in sizes} == {4}

    # -- pickling (Ray ships stores to workers) -------------------------------------------------

    def test_store_pickles_before_and_after_use(self, graph: GraphStore) -> None:
        pickle.dumps(graph)
        graph.run("CREATE (:CtNode {uid: 'pickled'})")
        copy = pickle.loads(pickle.dumps(graph))
        try:
            assert copy.run("MATCH (n:CtNode {uid: 'pickled'}) RETURN n.uid AS uid") == [{"uid": "pickled"}]
            pickle.dumps(copy)
        finally:
            copy.close()
