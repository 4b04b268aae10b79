"""Where the Cypher of Neo4j and FalkorDB differ, and nowhere else.

Kept whole (about 730 lines): it is the one place the engines differ (ADR 0001), and its rewrites,
literals, DDL and transactions all work on one private tokenizer and its helpers.

The product writes its queries once, in the subset both engines understand. This module holds the few
things that cannot be written that way:

* :func:`translate` rewrites Neo4j-only syntax for FalkorDB (``elementId``, ``datetime``, an
  ``EXISTS { MATCH … }`` subquery, ``shortestPath`` inside ``MATCH``, comments) and is the identity for
  Neo4j.
* :func:`inline_params` renders parameters as FalkorDB's ``CYPHER name=literal …`` prefix. FalkorDB's
  redis protocol has no separate parameter channel, and its Bolt endpoint serialises parameters with
  ``sprintf`` into a 4 KiB stack buffer (it crashes the server above that, does not escape quotes and
  keeps six decimals of a float), so parameters are always rendered here, escaped, at full precision.
* :func:`schema_ddl` gives the constraint and index DDL of each engine.
* :class:`DeferredWriteTransaction` gives FalkorDB all-or-nothing transactions. FalkorDB has none (its
  Bolt ``BEGIN``/``ROLLBACK`` are no-ops and a redis ``MULTI`` does not roll back a failed command), but
  one ``GRAPH.QUERY`` is atomic: it is undone entirely when any part of it fails. So the writes of a
  transaction are queued and sent at commit as one query, the statements chained by
  ``WITH count(*)`` barriers so that each statement sees the writes of the ones before it.

Everything here is pure text processing over a small tokenizer that knows Cypher's strings,
backticked names, parameters and comments; the stores call it, the unit tests exercise it directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any

from schemas.errors import InvalidRequest, NotSupported
from schemas.settings import CypherDialect
from stores.graph.base import GraphSchema, Record

# -- tokenizer -------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<backtick>`(?:[^`]|``)*`)
  | (?P<param>\$(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)*`|[0-9]+))
  | (?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_WRITE_KEYWORDS = frozenset({"CREATE", "MERGE", "SET", "DELETE", "REMOVE", "DETACH", "DROP", "FOREACH"})
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class DialectError(ValueError):
    """A query or parameter that cannot be expressed for the target engine (malformed input)."""


class UnsupportedQuery(DialectError):
    """Valid Cypher that the target engine cannot run and that has no rewrite here."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def tokenize(query: str) -> list[Token]:
    """Split ``query`` into tokens; joining their texts gives ``query`` back unchanged.

    Raises:
        DialectError: on an unterminated string, backticked name or block comment.
    """
    tokens: list[Token] = []
    for match in _TOKEN_RE.finditer(query):
        kind = match.lastgroup or "punct"
        text = match.group()
        if kind == "punct" and text in "'\"`":
            raise DialectError(f"unterminated {'string' if text != '`' else 'name'} in query")
        if kind == "punct" and query.startswith("/*", match.start()):
            raise DialectError("unterminated block comment in query")
        tokens.append(Token(kind, text))
    return tokens


def _join(tokens: Sequence[Token]) -> str:
    return "".join(t.text for t in tokens)


def _significant(tokens: Sequence[Token]) -> list[int]:
    """Indexes of the tokens that are neither whitespace nor comments."""
    return [i for i, t in enumerate(tokens) if t.kind not in ("space", "comment")]


def _keyword_positions(tokens: Sequence[Token]) -> Iterator[tuple[int, str, int]]:
    """Yield ``(index, KEYWORD, depth)`` for words used as clause keywords.

    A word right after ``.`` or ``:`` is a property, label or type name, and one right before ``:`` is a
    map key, so neither is a keyword. Depth counts open ``(``, ``[`` and ``{``.
    """
    sig = _significant(tokens)
    depth = 0
    for pos, i in enumerate(sig):
        tok = tokens[i]
        if tok.kind == "punct":
            if tok.text in "([{":
                depth += 1
            elif tok.text in ")]}":
                depth = max(0, depth - 1)
            continue
        if tok.kind != "word":
            continue
        prev = tokens[sig[pos - 1]].text if pos > 0 else ""
        nxt = tokens[sig[pos + 1]].text if pos + 1 < len(sig) else ""
        if prev in (".", ":") or nxt == ":":
            continue
        yield i, tok.upper, depth


def strip_comments(query: str) -> str:
    """``query`` with its ``//`` and ``/* */`` comments removed (FalkorDB reads them as query text)."""
    return _join(
        [Token("space", "\n" if "\n" in t.text else " ") if t.kind == "comment" else t for t in tokenize(query)]
    )


@lru_cache(maxsize=4096)
def is_write(query: str) -> bool:
    """Whether ``query`` contains an updating clause (CREATE, MERGE, SET, DELETE, REMOVE, FOREACH…)."""
    return any(kw in _WRITE_KEYWORDS for _, kw, _ in _keyword_positions(tokenize(query)))


def param_names(query: str) -> set[str]:
    """The names of the ``$parameters`` that ``query`` refers to."""
    return {_param_name(t.text) for t in tokenize(query) if t.kind == "param"}


def _param_name(text: str) -> str:
    name = text[1:]
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def rename_params(query: str, prefix: str) -> str:
    """Prefix every ``$name`` in ``query`` with ``prefix`` (strings and comments are left alone)."""
    out = []
    for tok in tokenize(query):
        if tok.kind == "param":
            tok = Token("param", "$" + _quote_name(prefix + _param_name(tok.text)))
        out.append(tok)
    return _join(out)


def _quote_name(name: str) -> str:
    return name if _IDENT_RE.match(name) else "`" + name.replace("`", "``") + "`"


# -- parameters as Cypher literals (FalkorDB) ------------------------------------------------------


def cypher_literal(value: Any) -> str:
    """Render a JSON-like Python value as a FalkorDB Cypher literal, escaped and at full precision.

    Supported: ``None``, ``bool``, ``int`` (64-bit), finite ``float``, ``str`` (no NUL), lists/tuples,
    maps with string keys, and ``datetime``/``date`` (FalkorDB keeps whole seconds and no time zone:
    an aware datetime is converted to UTC first).

    Raises:
        DialectError: for any other type, a NaN/infinite float, an out-of-range int or a NUL in a string.
    """
    out: list[str] = []
    _render(value, out)
    return "".join(out)


def _render(value: Any, out: list[str]) -> bool:
    """Append the literal of ``value`` to ``out`` (see :func:`cypher_literal`), in one walk that also tells
    whether it holds a date or datetime, which FalkorDB's ``CYPHER`` header cannot carry.

    Returns:
        Whether ``value`` is or holds a ``date``/``datetime``.
    """
    # strings first: most values of a write are; str is disjoint from every type below, so the order of
    # the remaining checks (bool before int, datetime before date) is the one that matters
    if isinstance(value, str):
        out.append(_string_literal(value))
        return False
    if value is None:
        out.append("null")
        return False
    if isinstance(value, bool):
        out.append("true" if value else "false")
        return False
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise DialectError("integer parameter out of the 64-bit range")
        out.append(str(value))
        return False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DialectError("NaN and infinite floats cannot be stored")
        out.append(repr(value))
        return False
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        out.append(f"localdatetime('{value.isoformat(timespec='seconds')}')")
        return True
    if isinstance(value, date):
        out.append(f"date('{value.isoformat()}')")
        return True
    temporal = False
    if isinstance(value, dict | Mapping):  # dict first: the ABC check is the slow one
        out.append("{")
        for n, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise DialectError("map parameter keys must be strings")
            out.append(f"{', ' if n else ''}{_quote_name(key)}: ")
            temporal = _render(item, out) or temporal
        out.append("}")
        return temporal
    if isinstance(value, list | tuple):
        out.append("[")
        for n, item in enumerate(value):
            if n:
                out.append(", ")
            temporal = _render(item, out) or temporal
        out.append("]")
        return temporal
    raise DialectError(f"unsupported parameter type {type(value).__name__}")


_STRING_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string_literal(text: str) -> str:
    if "\x00" in text:
        raise DialectError("strings must not contain NUL characters")
    # one C-level replace per escape (the backslash first) instead of a Python step per character:
    # a chunk's text or a batch of facts is escaped ~20x faster
    for plain, escaped in _STRING_ESCAPES.items():
        if plain in text:
            text = text.replace(plain, escaped)
    return "'" + text + "'"


def inline_params(query: str, params: Mapping[str, Any] | None) -> str:
    """Prefix ``query`` with FalkorDB's ``CYPHER name=literal …`` header carrying ``params``.

    The header accepts literals only, so a parameter holding a date or datetime (rendered as a
    ``localdatetime('…')`` call) is substituted into the query body where it is referenced instead.

    Raises:
        DialectError: for a parameter that cannot be rendered (see :func:`cypher_literal`).
    """
    if not params:
        return query
    header: list[str] = []
    inline: dict[str, str] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            raise DialectError("parameter names must be non-empty strings")
        out: list[str] = []
        if _render(value, out):
            inline[name] = "(" + "".join(out) + ")"
        else:
            header.append(f"{_quote_name(name)}={''.join(out)}")
    if inline:
        query = _join(
            [
                Token("word", inline[_param_name(t.text)]) if t.kind == "param" and _param_name(t.text) in inline else t
                for t in tokenize(query)
            ]
        )
    return ("CYPHER " + " ".join(header) + " " + query) if header else query


# -- query rewrites --------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def translate(query: str, dialect: CypherDialect) -> str:
    """Rewrite ``query`` (written for Neo4j) so that ``dialect``'s engine runs it with the same meaning.

    Raises:
        DialectError: when the query is malformed (an unterminated string, unbalanced brackets).
        UnsupportedQuery: when it uses Neo4j syntax that has no FalkorDB rewrite here.
    """
    if dialect is CypherDialect.NEO4J:
        return query
    tokens = [t for t in tokenize(strip_comments(query))]
    tokens = _rewrite_function_calls(tokens)
    tokens = _rewrite_exists_subqueries(tokens)
    tokens = _rewrite_shortest_path_match(tokens)
    return _join(tokens).strip()


def _next_sig(tokens: Sequence[Token], i: int) -> int:
    """Index of the first significant token after ``i`` (or ``len(tokens)``)."""
    j = i + 1
    while j < len(tokens) and tokens[j].kind in ("space", "comment"):
        j += 1
    return j


def _prev_sig(tokens: Sequence[Token], i: int) -> int:
    j = i - 1
    while j >= 0 and tokens[j].kind in ("space", "comment"):
        j -= 1
    return j


def _matching(tokens: Sequence[Token], i: int) -> int:
    """Index of the bracket closing the one at ``i``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener, closer, depth = tokens[i].text, pairs[tokens[i].text], 0
    for j in range(i, len(tokens)):
        if tokens[j].kind != "punct":
            continue
        if tokens[j].text == opener:
            depth += 1
        elif tokens[j].text == closer:
            depth -= 1
            if depth == 0:
                return j
    raise DialectError(f"unbalanced {opener!r} in query")


def _is_call(tokens: Sequence[Token], i: int, name: str) -> bool:
    tok = tokens[i]
    if tok.kind != "word" or tok.text.lower() != name.lower():
        return False
    prev, nxt = _prev_sig(tokens, i), _next_sig(tokens, i)
    return (prev < 0 or tokens[prev].text != ".") and nxt < len(tokens) and tokens[nxt].text == "("


def _rewrite_function_calls(tokens: list[Token]) -> list[Token]:
    # elementId(x) -> toString(id(x)): FalkorDB has integer ids only; a string keeps callers' types.
    # datetime(…) -> localdatetime(…): FalkorDB has no zoned datetime; values are read back as UTC.
    out = list(tokens)
    i = 0
    while i < len(out):
        if _is_call(out, i, "elementId"):
            open_i = _next_sig(out, i)
            close_i = _matching(out, open_i)
            out[close_i : close_i + 1] = [Token("punct", ")"), Token("punct", ")")]
            out[i] = Token("word", "toString(id")
        elif _is_call(out, i, "datetime"):
            out[i] = Token("word", "localdatetime")
        i += 1
    return out


_CLAUSE_WORDS = (
    frozenset({"MATCH", "OPTIONAL", "WITH", "RETURN", "UNWIND", "CALL", "UNION", "WHERE", "ORDER", "SKIP", "LIMIT"})
    | _WRITE_KEYWORDS
)


def _rewrite_exists_subqueries(tokens: list[Token]) -> list[Token]:
    # EXISTS { [MATCH] pattern } -> (pattern): FalkorDB evaluates a bare pattern as a predicate, but
    # has no subqueries in expressions; anything richer (WHERE, several patterns) is refused.
    out = list(tokens)
    i = 0
    while i < len(out):
        tok = out[i]
        nxt = _next_sig(out, i)
        if tok.upper == "EXISTS" and nxt < len(out) and out[nxt].text == "{":
            close_i = _matching(out, nxt)
            inner = out[nxt + 1 : close_i]
            sig = [t for t in inner if t.kind not in ("space", "comment")]
            if sig and sig[0].upper == "MATCH":
                first = next(k for k, t in enumerate(inner) if t.kind not in ("space", "comment"))
                inner = inner[first + 1 :]
            if any(kw in _CLAUSE_WORDS for _, kw, d in _keyword_positions(inner)) or any(
                t.text == "," for t in _top_level(inner)
            ):
                raise UnsupportedQuery(
                    "FalkorDB has no EXISTS subqueries; only EXISTS { MATCH <one pattern> } is rewritten"
                )
            out[i : close_i + 1] = [Token("punct", "("), *inner, Token("punct", ")")]
        i += 1
    return out


def _top_level(tokens: Sequence[Token]) -> list[Token]:
    """The tokens of ``tokens`` not nested inside any bracket."""
    depth, out = 0, []
    for tok in tokens:
        if tok.kind == "punct" and tok.text in ")]}":
            depth -= 1
        if depth == 0:
            out.append(tok)
        if tok.kind == "punct" and tok.text in "([{":
            depth += 1
    return out


def _rewrite_shortest_path_match(tokens: list[Token]) -> list[Token]:
    # MATCH p = shortestPath((a…)-[r]->(b…)) -> MATCH (a…), (b…) WITH *, shortestPath((a)-[r]->(b)) AS p
    # FalkorDB computes shortest paths only in WITH/RETURN, between endpoints already bound.
    out = list(tokens)
    i = 0
    while i < len(out):
        if out[i].upper != "MATCH":
            i += 1
            continue
        var_i = _next_sig(out, i)
        eq_i = _next_sig(out, var_i)
        fn_i = _next_sig(out, eq_i)
        if not (
            fn_i < len(out) and out[eq_i].text == "=" and out[fn_i].text.lower() in ("shortestpath", "allshortestpaths")
        ):
            i += 1
            continue
        prev = _prev_sig(out, i)
        if prev >= 0 and out[prev].upper == "OPTIONAL":
            raise UnsupportedQuery("OPTIONAL MATCH with shortestPath is not rewritten for FalkorDB")
        open_i = _next_sig(out, fn_i)
        close_i = _matching(out, open_i)
        inner_start = _next_sig(out, open_i)
        if out[inner_start].text != "(":
            raise DialectError("shortestPath needs a pattern")
        a_close = _matching(out, inner_start)
        b_open = max(
            k
            for k in range(a_close + 1, close_i)
            if out[k].text == "(" and _matching(out, k) == _prev_sig(out, close_i)
        )
        a_node, b_node = out[inner_start : a_close + 1], out[b_open:close_i]
        rel = out[a_close + 1 : b_open]
        a_var, b_var = _node_variable(a_node), _node_variable(b_node)
        sp = [
            out[fn_i],
            Token("punct", "("),
            Token("word", f"({a_var})"),
            *rel,
            Token("word", f"({b_var})"),
            Token("punct", ")"),
        ]
        replacement = [
            Token("word", "MATCH"),
            Token("space", " "),
            *a_node,
            Token("punct", ","),
            Token("space", " "),
            *b_node,
            Token("space", " "),
            Token("word", "WITH"),
            Token("space", " "),
            Token("punct", "*"),
            Token("punct", ","),
            Token("space", " "),
            *sp,
            Token("space", " "),
            Token("word", "AS"),
            Token("space", " "),
            out[var_i],
        ]
        out[i : close_i + 1] = replacement
        i += len(replacement)
    return out


def _node_variable(node: Sequence[Token]) -> str:
    sig = [t for t in node if t.kind not in ("space", "comment")]
    if len(sig) < 3 or sig[1].kind not in ("word", "backtick"):
        raise UnsupportedQuery("shortestPath endpoints need variables to be rewritten for FalkorDB")
    return sig[1].text


# -- schema DDL ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedisCommand:
    """A redis-protocol command (FalkorDB's ``GRAPH.CONSTRAINT`` is not Cypher)."""

    args: tuple[str, ...]


def schema_ddl(schema: GraphSchema, dialect: CypherDialect, *, graph: str = "falkordb") -> list[str | RedisCommand]:
    """The statements that create ``schema``, in order, for ``dialect``.

    Neo4j: ``CREATE CONSTRAINT … IF NOT EXISTS`` and ``CREATE INDEX … IF NOT EXISTS`` (idempotent by
    themselves; an index on a constrained property is skipped because the constraint owns one).
    FalkorDB: ``CREATE INDEX`` (it raises "already indexed" when it exists, which the store ignores) and
    then, per constraint, ``GRAPH.CONSTRAINT CREATE`` over the redis protocol, which requires that index.
    """
    targets: list[tuple[str, str]] = [(c.label, c.property) for c in schema.constraints]
    targets += [(ix.label, ix.property) for ix in schema.indexes]
    for pair in targets:
        for name in pair:
            if not _IDENT_RE.match(name):
                raise DialectError(f"schema names must be plain identifiers, got {name!r}")
    constrained = {(c.label, c.property) for c in schema.constraints}
    statements: list[str | RedisCommand] = []
    if dialect is CypherDialect.NEO4J:
        for c in schema.constraints:
            statements.append(
                f"CREATE CONSTRAINT lk_{c.label}_{c.property}_unique IF NOT EXISTS "
                f"FOR (n:{c.label}) REQUIRE n.{c.property} IS UNIQUE"
            )
        for ix in schema.indexes:
            if (ix.label, ix.property) not in constrained:
                statements.append(
                    f"CREATE INDEX lk_{ix.label}_{ix.property} IF NOT EXISTS FOR (n:{ix.label}) ON (n.{ix.property})"
                )
        return statements
    for label, prop in dict.fromkeys(targets):  # in order, once each
        statements.append(f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
    for c in schema.constraints:
        args = ("GRAPH.CONSTRAINT", "CREATE", graph, "UNIQUE", "NODE", c.label, "PROPERTIES", "1", c.property)
        statements.append(RedisCommand(args))
    return statements


# -- all-or-nothing transactions for FalkorDB ------------------------------------------------------


class DeferredRecords(list[Record]):
    """The records of a write queued in a FalkorDB transaction: not readable, ever.

    FalkorDB applies a transaction's writes at commit as one query, which returns no per-statement
    records. Reading this object raises instead of pretending the write returned nothing; a statement
    without ``RETURN`` gets a plain empty list instead.
    """

    def __init__(self, store: str, url: str | None) -> None:
        super().__init__()
        self._store, self._url = store, url

    def _refuse(self) -> NotSupported:
        return NotSupported(
            self._store,
            "the records of a write inside a FalkorDB transaction are not available (writes are applied "
            "together at commit); return what you need from a read before the writes, or use run()",
            url=self._url,
        )

    def __len__(self) -> int:
        raise self._refuse()

    def __iter__(self) -> Iterator[Record]:
        raise self._refuse()

    def __getitem__(self, index: Any) -> Any:
        raise self._refuse()

    def __bool__(self) -> bool:
        raise self._refuse()

    def __eq__(self, other: object) -> bool:
        raise self._refuse()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<DeferredRecords: applied at commit, not readable>"


def compose_writes(statements: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """Chain write statements into one FalkorDB query that applies all of them or none.

    Each statement's parameters are renamed ``t<i>_<name>``; its final ``RETURN`` (whose records are
    not kept) is dropped; statements are joined by ``WITH count(*) AS _t<i>``, an aggregation that
    always yields exactly one row, so the next statement runs once and sees the previous writes. (A
    ``CALL { … }`` per statement would not do: FalkorDB's subqueries do not see the writes made
    earlier in the same query.)

    Raises:
        UnsupportedQuery: for a top-level ``UNION`` or a ``SKIP``/``LIMIT`` after the final ``RETURN``.
    """
    parts: list[str] = []
    merged: dict[str, Any] = {}
    for i, (query, params) in enumerate(statements):
        prefix = f"t{i}_"
        parts.append(f"{_write_shape(query).body(prefix)} WITH count(*) AS _t{i}")
        for name, value in params.items():
            merged[prefix + name] = value
    parts.append(f"RETURN _t{len(statements) - 1} AS done" if statements else "RETURN 0 AS done")
    return "\n".join(parts), merged


def has_final_return(query: str) -> bool:
    """Whether ``query`` ends with a top-level ``RETURN`` clause (so it produces records)."""
    return any(kw == "RETURN" and depth == 0 for _, kw, depth in _keyword_positions(tokenize(query)))


def _final_return(tokens: Sequence[Token]) -> int:
    """Index of the final top-level ``RETURN`` in ``tokens`` (``len(tokens)`` when there is none).

    Raises:
        UnsupportedQuery: a top-level ``UNION``, or ``SKIP``/``LIMIT`` after the final ``RETURN``.
    """
    positions = [(i, kw) for i, kw, depth in _keyword_positions(tokens) if depth == 0]
    if any(kw == "UNION" for _, kw in positions):
        raise UnsupportedQuery("UNION cannot be part of a FalkorDB transaction; run it on its own")
    returns = [i for i, kw in positions if kw == "RETURN"]
    if not returns:
        return len(tokens)
    last = returns[-1]
    if any(kw in ("SKIP", "LIMIT") and i > last for i, kw in positions):
        raise UnsupportedQuery("SKIP/LIMIT after a write's RETURN cannot be part of a FalkorDB transaction")
    return last


@dataclass(frozen=True, slots=True)
class _WriteShape:
    """A write statement as :func:`compose_writes` chains it, read once per query text: a transaction
    queues the same few statements many times over (an import: 11 texts in ~300 writes)."""

    returns: bool  # it has a top-level RETURN (its records are deferred)
    pieces: tuple[str, ...]  # the body without its final RETURN, split around its parameters
    params: tuple[str, ...]  # the parameter names between the pieces

    def body(self, prefix: str) -> str:
        """The body with every ``$name`` renamed ``$<prefix>name`` (what :func:`rename_params` gives)."""
        out = [self.pieces[0]]
        for name, piece in zip(self.params, self.pieces[1:], strict=True):
            out.append("$" + _quote_name(prefix + name))
            out.append(piece)
        return "".join(out)


@lru_cache(maxsize=4096)
def _write_shape(query: str) -> _WriteShape:
    """The :class:`_WriteShape` of ``query`` (stripped of white space and trailing ``;``).

    Raises:
        UnsupportedQuery: a top-level ``UNION``, or ``SKIP``/``LIMIT`` after the final ``RETURN``.
    """
    tokens = tokenize(query.strip().rstrip(";").strip())
    end = _final_return(tokens)
    returns = end < len(tokens)
    pieces: list[str] = []
    params: list[str] = []
    text: list[str] = []
    for tok in tokens[:end]:
        if tok.kind == "param":
            pieces.append("".join(text))
            params.append(_param_name(tok.text))
            text = []
        else:
            text.append(tok.text)
    last = "".join(text)
    # renaming changes no white space, so stripping the body's end after it equals stripping the last piece
    pieces.append(last.rstrip() if returns else last)
    return _WriteShape(returns, tuple(pieces), tuple(params))


Executor = Callable[[str, Mapping[str, Any]], list[Record]]


class DeferredWriteTransaction:
    """An all-or-nothing transaction for FalkorDB, built on the atomicity of one query.

    * A read (no updating clause) before any write runs at once and sees committed data.
    * A write is queued; :meth:`run` returns an empty list for it (a :class:`DeferredRecords` that
      refuses to be read when the statement has a ``RETURN``).
    * A read after a queued write is refused (it could not see the queued writes).
    * :meth:`commit` sends the queued writes as one query (see :func:`compose_writes`): FalkorDB runs it
      under the graph's write lock, so it is isolated from other writers, and undoes all of it if any
      statement fails. :meth:`rollback` just drops the queue; nothing was written.

    Args:
        execute: runs one (already translated) query with its parameters and returns its records.
        store: the store name for error messages.
        url: the store's (redacted) location for error messages.
    """

    def __init__(self, execute: Executor, *, store: str, url: str | None = None) -> None:
        self._execute = execute
        self._store, self._url = store, url
        self._pending: list[tuple[str, Mapping[str, Any]]] = []
        self._closed = False

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[Record]:
        """Run a read now or queue a write; see the class docstring."""
        if self._closed:
            raise InvalidRequest(self._store, "the transaction is already finished", url=self._url)
        try:
            text = translate(query, CypherDialect.FALKORDB)
        except UnsupportedQuery as exc:
            raise NotSupported(self._store, str(exc), url=self._url) from None
        except DialectError as exc:
            raise InvalidRequest(self._store, str(exc), url=self._url) from None
        params = dict(params or {})
        if is_write(text):
            try:
                shape = _write_shape(text)  # refuse UNION / LIMIT now, not at commit
            except UnsupportedQuery as exc:
                raise NotSupported(self._store, str(exc), url=self._url) from None
            self._pending.append((text, params))
            return DeferredRecords(self._store, self._url) if shape.returns else []
        if self._pending:
            raise NotSupported(
                self._store,
                "a read after a write inside a FalkorDB transaction cannot see the queued writes; "
                "read first, or split the transaction",
                url=self._url,
            )
        return self._execute(text, params)

    @property
    def pending(self) -> int:
        """How many writes are queued for commit."""
        return len(self._pending)

    def commit(self) -> None:
        """Apply every queued write in one atomic query (nothing to do when none were queued)."""
        self._closed = True
        pending, self._pending = self._pending, []
        if pending:
            text, params = compose_writes(pending)
            self._execute(text, params)

    def rollback(self) -> None:
        """Drop the queued writes; none of them reached the engine."""
        self._closed = True
        self._pending = []
