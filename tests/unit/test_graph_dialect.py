"""The Cypher dialect layer: tokenizer, rewrites, parameter rendering, transaction composition."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from schemas.errors import InvalidRequest, NotSupported
from schemas.settings import CypherDialect
from stores.graph import dialect as dl
from stores.graph.base import GraphSchema, PropertyIndex, UniqueConstraint
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA, NODE_LABELS

pytestmark = pytest.mark.unit
FALKOR, NEO4J = CypherDialect.FALKORDB, CypherDialect.NEO4J


# -- tokenizer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (n:Person {name: 'O\\'Brien'}) RETURN n",
        'RETURN "a // not a comment" AS s, $`odd name`, `weird``label` // trailing',
        "MATCH (n) /* block\n comment */ RETURN n.x",
    ],
)
def test_tokens_join_back_to_the_query(query: str) -> None:
    assert "".join(t.text for t in dl.tokenize(query)) == query


def test_unterminated_string_is_refused() -> None:
    with pytest.raises(dl.DialectError):
        dl.tokenize("RETURN 'open")


@pytest.mark.parametrize(
    ("query", "writes"),
    [
        ("MATCH (n) RETURN n", False),
        ("MATCH (n:Set {create: 1}) WHERE n.delete = 2 RETURN n.merge", False),
        ("RETURN 'CREATE (n)' AS text", False),
        ("MATCH (n)-[:SET]->(m) RETURN m", False),
        ("CREATE (n)", True),
        ("MATCH (n) SET n.x = 1", True),
        ("MATCH (n) detach delete n", True),
        ("UNWIND $rows AS r MERGE (n {uid: r})", True),
        ("MATCH (n) FOREACH (x IN [1] | REMOVE n.y)", True),
    ],
)
def test_is_write_ignores_strings_labels_and_keys(query: str, writes: bool) -> None:
    assert dl.is_write(query) is writes


def test_rename_params_skips_strings_and_quotes_odd_names() -> None:
    query = "MATCH (n {uid: $uid}) WHERE n.s = '$uid' RETURN $`odd name`"
    assert dl.rename_params(query, "t1_") == "MATCH (n {uid: $t1_uid}) WHERE n.s = '$uid' RETURN $`t1_odd name`"
    assert dl.param_names(query) == {"uid", "odd name"}


# -- rewrites ----------------------------------------------------------------------------------------


def test_neo4j_text_is_never_changed() -> None:
    query = "MATCH (n) WHERE EXISTS { MATCH (n)-->() } RETURN elementId(n), datetime() // c"
    assert dl.translate(query, NEO4J) == query


def test_element_id_and_datetime_rewrites() -> None:
    out = dl.translate("MATCH (n) RETURN elementId(n) AS id, datetime() AS now, n.datetime AS d", FALKOR)
    assert out == "MATCH (n) RETURN toString(id(n)) AS id, localdatetime() AS now, n.datetime AS d"


def test_comments_are_stripped_for_falkordb() -> None:
    assert dl.translate("MATCH (n) // why\nRETURN n /* x */", FALKOR) == "MATCH (n)  \nRETURN n"


def test_exists_subquery_becomes_a_pattern_predicate() -> None:
    out = dl.translate("MATCH (n) WHERE NOT EXISTS { MATCH (n)-[:R]->(:X {k: 1}) } RETURN n", FALKOR)
    assert out == "MATCH (n) WHERE NOT ( (n)-[:R]->(:X {k: 1}) ) RETURN n"


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (n) WHERE EXISTS { MATCH (n)-->(m) WHERE m.x = 1 } RETURN n",
        "MATCH (n) WHERE EXISTS { MATCH (n)-->(), (n)<--() } RETURN n",
        "MATCH (n) WHERE EXISTS { MATCH (n)-->(m) RETURN m } RETURN n",
    ],
)
def test_richer_exists_subqueries_are_refused(query: str) -> None:
    with pytest.raises(dl.UnsupportedQuery):
        dl.translate(query, FALKOR)


def test_shortest_path_in_match_moves_to_with() -> None:
    out = dl.translate(
        "MATCH p = shortestPath((a:X {uid: $a})-[:R*..5]->(b:X {uid: $b})) WHERE length(p) > 1 RETURN p", FALKOR
    )
    assert out == (
        "MATCH (a:X {uid: $a}), (b:X {uid: $b}) WITH *, shortestPath((a)-[:R*..5]->(b)) AS p "
        "WHERE length(p) > 1 RETURN p"
    )


def test_shortest_path_needs_named_endpoints() -> None:
    with pytest.raises(dl.UnsupportedQuery):
        dl.translate("MATCH p = shortestPath((:X {uid: 1})-[*]->(b)) RETURN p", FALKOR)


# -- parameters --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (None, "null"),
        (True, "true"),
        (-7, "-7"),
        (0.1, "0.1"),
        (1e-20, "1e-20"),
        ('it\'s \\ "q"\n', "'it\\'s \\\\ \"q\"\\n'"),
        ([1, "a", [None]], "[1, 'a', [null]]"),
        ({"k": 1, "odd key": {"n": False}}, "{k: 1, `odd key`: {n: false}}"),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, 999, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "localdatetime('2024-01-02T01:04:05')",
        ),
        (dt.date(2024, 1, 2), "date('2024-01-02')"),
    ],
)
def test_cypher_literals(value: object, literal: str) -> None:
    assert dl.cypher_literal(value) == literal


@pytest.mark.parametrize("value", [math.nan, math.inf, 2**63, "nul\x00", b"bytes", {1: "x"}, object()])
def test_unrenderable_parameters_are_refused(value: object) -> None:
    with pytest.raises(dl.DialectError):
        dl.cypher_literal(value)


def test_floats_keep_full_precision() -> None:
    value = 0.12345678901234567
    assert float(dl.cypher_literal(value)) == value


def test_inline_params_header_and_temporal_substitution() -> None:
    at = dt.datetime(2024, 1, 2, 3, 4, 5)
    out = dl.inline_params("CREATE (n {at: $at, name: $name}) RETURN '$at'", {"name": "x", "at": at})
    assert out == "CYPHER name='x' CREATE (n {at: (localdatetime('2024-01-02T03:04:05')), name: $name}) RETURN '$at'"
    assert dl.inline_params("RETURN 1", {}) == "RETURN 1"


# -- schema DDL --------------------------------------------------------------------------------------


def test_schema_ddl_per_dialect() -> None:
    schema = GraphSchema(
        constraints=(UniqueConstraint("A"),), indexes=(PropertyIndex("A", "uid"), PropertyIndex("A", "n"))
    )
    neo = dl.schema_ddl(schema, NEO4J)
    assert neo == [
        "CREATE CONSTRAINT lk_A_uid_unique IF NOT EXISTS FOR (n:A) REQUIRE n.uid IS UNIQUE",
        "CREATE INDEX lk_A_n IF NOT EXISTS FOR (n:A) ON (n.n)",
    ]
    falkor = dl.schema_ddl(schema, FALKOR, graph="g")
    assert falkor == [
        "CREATE INDEX FOR (n:A) ON (n.uid)",
        "CREATE INDEX FOR (n:A) ON (n.n)",
        dl.RedisCommand(("GRAPH.CONSTRAINT", "CREATE", "g", "UNIQUE", "NODE", "A", "PROPERTIES", "1", "uid")),
    ]


def test_schema_names_must_be_identifiers() -> None:
    with pytest.raises(dl.DialectError):
        dl.schema_ddl(GraphSchema(constraints=(UniqueConstraint("A) DETACH DELETE (n"),)), NEO4J)


def test_product_schema_covers_every_label() -> None:
    assert {c.label for c in LOREKEEPER_GRAPH_SCHEMA.constraints} == set(NODE_LABELS)
    assert all(c.property == "uid" for c in LOREKEEPER_GRAPH_SCHEMA.constraints)
    assert len(set(NODE_LABELS)) == len(NODE_LABELS)
    assert {"Library", "Chunk", "Concept", "Campaign", "Turn", "Entity", "Fact", "Commit"} <= set(NODE_LABELS)
    assert {ix.label for ix in LOREKEEPER_GRAPH_SCHEMA.indexes} <= set(NODE_LABELS)
    dl.schema_ddl(LOREKEEPER_GRAPH_SCHEMA, NEO4J)
    dl.schema_ddl(LOREKEEPER_GRAPH_SCHEMA, FALKOR)


# -- transactions ------------------------------------------------------------------------------------


def test_compose_writes_chains_statements_with_barriers() -> None:
    text, params = dl.compose_writes([("CREATE (n {a: $a}) RETURN n", {"a": 1}), ("MATCH (n) SET n.b = $a;", {"a": 2})])
    assert text == (
        "CREATE (n {a: $t0_a}) WITH count(*) AS _t0\nMATCH (n) SET n.b = $t1_a WITH count(*) AS _t1\nRETURN _t1 AS done"
    )
    assert params == {"t0_a": 1, "t1_a": 2}


def test_compose_writes_renames_a_repeated_statement_at_each_position() -> None:
    # a statement's shape is read once per text: each position still gets its own names, odd names quoted,
    # strings left alone, and the white space before a dropped RETURN stripped
    query = "  MATCH (n {k: $k}) SET n.s = '$k', n.o = $`odd name`\n  RETURN n ;"
    text, params = dl.compose_writes([(query, {"k": 1, "odd name": 2}), (query, {"k": 3, "odd name": 4})])
    assert text == (
        "MATCH (n {k: $t0_k}) SET n.s = '$k', n.o = $`t0_odd name` WITH count(*) AS _t0\n"
        "MATCH (n {k: $t1_k}) SET n.s = '$k', n.o = $`t1_odd name` WITH count(*) AS _t1\n"
        "RETURN _t1 AS done"
    )
    assert params == {"t0_k": 1, "t0_odd name": 2, "t1_k": 3, "t1_odd name": 4}
    for i in range(2):
        assert text.split("\n")[i] == (
            dl.rename_params(query, f"t{i}_").strip().rstrip(";").strip().removesuffix("RETURN n").rstrip()
            + f" WITH count(*) AS _t{i}"
        )


@pytest.mark.parametrize(
    "query",
    ["CREATE (n) RETURN n UNION CREATE (m) RETURN m", "MATCH (n) SET n.x = 1 RETURN n LIMIT 1"],
)
def test_compose_refuses_what_cannot_be_chained(query: str) -> None:
    with pytest.raises(dl.UnsupportedQuery):
        dl.compose_writes([(query, {})])


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, text: str, params: dict) -> list[dict]:
        self.calls.append((text, dict(params)))
        return [{"read": True}]


def test_deferred_transaction_reads_now_and_writes_at_commit() -> None:
    engine = _Recorder()
    tx = dl.DeferredWriteTransaction(engine, store="s")
    assert tx.run("MATCH (n) RETURN count(n) AS c") == [{"read": True}]
    assert tx.run("CREATE (n:A {x: $x})", {"x": 1}) == []
    pending = tx.run("MATCH (n:A) SET n.y = 2 RETURN n")
    assert tx.pending == 2 and len(engine.calls) == 1
    with pytest.raises(NotSupported):
        len(pending)
    with pytest.raises(NotSupported):
        tx.run("MATCH (n) RETURN n")  # a read after a queued write could not see it
    tx.commit()
    assert len(engine.calls) == 2 and engine.calls[1][1] == {"t0_x": 1}
    with pytest.raises(InvalidRequest):
        tx.run("RETURN 1")


def test_deferred_transaction_rollback_sends_nothing() -> None:
    engine = _Recorder()
    tx = dl.DeferredWriteTransaction(engine, store="s")
    tx.run("CREATE (n)")
    tx.rollback()
    assert engine.calls == []


def test_deferred_transaction_refuses_unsupported_statements_early() -> None:
    tx = dl.DeferredWriteTransaction(_Recorder(), store="s")
    with pytest.raises(NotSupported):
        tx.run("MATCH (n) SET n.x = 1 RETURN n LIMIT 1")
    with pytest.raises(InvalidRequest):
        tx.run("RETURN 'open")
