"""Structured answers that fit their token budget: a JSON schema bounded so its documents close in time.

Constrained decoding (the local engine's llguidance matcher, vLLM's guidance backend) makes every
answer a document *of the schema*, but only if the model reaches its closing brace before
``max_tokens``: a small model that writes a 300-character description and a dozen proposals is cut
off, and a cut document is no answer (:class:`~schemas.errors.AnswerTruncated`). Measured with the
embedded SmolLM2-135M at the extractor's 192–320-token budget, 5 of 6 scenes' answers were cut.

:func:`fit_schema` narrows a schema so that the longest document it admits fits the budget:

- optional properties the caller names in ``omit`` (what the system fills in itself: ids of the
  event, turn and scene, visibility) are removed, and constant discriminators (``"type": "entity"``)
  become required, so the answer always names its branch;
- every string gets a ``maxLength`` (identifiers, i.e. strings with a ``pattern``, a shorter one; free
  text a pattern without control characters, see :data:`PLAIN_TEXT`),
  every number a range and a step of 0.01 (else "0.5555…" runs to the budget's end: measured, a
  LoCoMo scene's memories were cut at 480 tokens with a 432-token estimate), nested lists a
  ``maxItems`` and free-form maps a ``maxProperties``;
- an object admits no key its schema does not name (JSON schema admits any by default, and a small
  model wrote ``"":","`` pairs until the budget ran out);
- the answer's top-level lists get the ``maxItems`` that fits the rest of the budget.

Text caps start generous and halve until at least ``min_items`` items of the top-level lists fit, so
a model with a large budget keeps long fields and a small budget trades length for count. The
token count of a document is an estimate (:data:`CHARS_PER_TOKEN`, every key, quote and comma
counted), not a proof: a model that spends one token per character can still be cut, and that stays
an :class:`~schemas.errors.AnswerTruncated` for the caller. The narrowed schema only ever *removes*
documents: every answer of it is still a document of the original schema, and the caller validates
it against its full model as before (rules no JSON schema states, such as "an object or a value, not
both", still drop the one item that breaks them).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

CHARS_PER_TOKEN = 3.0
"""Characters per token assumed for written text (English in a BPE vocabulary runs ~4; 3 errs long)."""

LEVELS = ((240, 4), (160, 4), (120, 3), (80, 2), (60, 2), (40, 1))
"""The bounds tried, loosest first: the ``maxLength`` of free text (identifiers get a third of it, at least
24) and the ``maxItems`` of a list inside an item (aliases, participants, a state change's events), which
is also the ``maxProperties`` of a free-form map."""

PLAIN_TEXT = r"^[^\\\x00-\x1f]*$"
"""Free text holds no control character and no backslash: ``maxLength`` counts characters, but a newline is
written ``\\n`` (two tokens for one character), and a small model loops on them ("\\n\\n\\n…" to the
budget's end). A character may still be written as a ``\\u`` escape, which no schema can forbid."""

NUMBER_LIMIT = 1_000_000
"""Numbers are held to ±this and to hundredths, so each is a few tokens (JSON has no digit limit)."""

MARGIN = 0.9
"""The share of ``max_tokens`` a document may fill (the rest absorbs the estimate's error)."""


_VERBATIM = ("enum", "const", "default", "required", "pattern")  # values, not schemas: never walked into
_STRING_BOUNDS = ("type", "maxLength", "minLength", "pattern")  # what an enum replaces


def fit_schema(
    schema: dict[str, Any], max_tokens: int, *, omit: frozenset[str] = frozenset(), min_items: int = 3
) -> dict[str, Any]:
    """``schema`` narrowed so its longest document is estimated to fit ``max_tokens`` (see the module).

    Args:
        schema: a JSON schema of an object whose top-level lists hold the answer's items (pydantic's
            ``model_json_schema()``, with ``$defs``).
        max_tokens: the answer's budget.
        omit: names of optional properties to remove wherever they appear.
        min_items: how many items of the top-level lists the text caps are shortened to make room for.

    Returns:
        A new schema; ``schema`` is not changed. The same arguments give the same (cached) answer.
    """
    key = json.dumps(schema, sort_keys=True)
    return copy.deepcopy(_fit(key, max_tokens, omit, min_items))


@functools.lru_cache(maxsize=64)
def _fit(key: str, max_tokens: int, omit: frozenset[str], min_items: int) -> dict[str, Any]:
    best: dict[str, Any] = {}
    for text_cap, nested in LEVELS:
        bounded = _bounded(json.loads(key), text_cap, nested, omit)
        items = _fit_lists(bounded, max_tokens)
        best = bounded
        if items >= min_items:
            break
    return best


def _bounded(schema: dict[str, Any], text_cap: int, nested: int, omit: frozenset[str]) -> dict[str, Any]:
    id_cap = max(24, text_cap // 3)

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        node = {
            k: v if k in _VERBATIM else {n: walk(sub) for n, sub in v.items()} if k == "properties" else walk(v)
            for k, v in node.items()
        }  # a "properties" map's keys are names, not keywords: a property called "default" or "type" stays
        node.pop("default", None)
        props = node.get("properties")
        if isinstance(props, dict):
            required = list(node.get("required", []))
            for name in list(props):
                if name in omit and name not in required:
                    del props[name]
                elif "const" in props[name] and name not in required:
                    required.append(name)
            node["required"] = required
            extra = node.get("additionalProperties", True)
            if extra is True:  # unsaid, JSON schema admits any other key: SmolLM2 wrote '"":","' to the budget's end
                node["additionalProperties"] = False
            elif extra is not False:
                node["maxProperties"] = min(int(node.get("maxProperties", len(props) + nested)), len(props) + nested)
        kind = node.get("type")
        if kind == "string" and "enum" not in node and "const" not in node:
            cap = id_cap if "pattern" in node else text_cap
            node["maxLength"] = min(int(node.get("maxLength", cap)), cap)
            node["minLength"] = min(int(node.get("minLength", 0)), node["maxLength"])
            if "pattern" not in node and "format" not in node:
                node["pattern"] = PLAIN_TEXT
        elif kind in ("number", "integer"):
            # unbounded, a number is a loop a small model falls into ("0.5555555555…" to the budget's end)
            node.setdefault("minimum", -NUMBER_LIMIT)
            node.setdefault("maximum", NUMBER_LIMIT)
            if kind == "number":
                node.setdefault("multipleOf", 0.01)
        elif kind == "array":
            node["maxItems"] = min(int(node.get("maxItems", nested)), nested)
            node["minItems"] = min(int(node.get("minItems", 0)), nested)
        elif kind == "object" and not props and node.get("additionalProperties", True) is not False:
            node["maxProperties"] = min(int(node.get("maxProperties", nested)), nested)
        return node

    out = walk(schema)
    # the answer's own lists are sized by _fit_lists, not by the nested cap
    for name, prop in (schema.get("properties") or {}).items():
        if prop.get("type") == "array" and name in out["properties"]:
            out["properties"][name]["maxItems"] = int(prop.get("maxItems", 10_000))
    return out


def _fit_lists(schema: dict[str, Any], max_tokens: int) -> int:
    """Give the top-level lists the ``maxItems`` that fits; returns the items each may hold (at least 1)."""
    defs = schema.get("$defs", {})
    lists = [p for p in schema.get("properties", {}).values() if p.get("type") == "array"]
    if not lists:
        return 10_000
    wanted = [int(p["maxItems"]) for p in lists]
    for prop in lists:
        prop["maxItems"] = 0
    rest = _cost(schema, defs, ())
    per_item = sum(_cost(p["items"], defs, ()) + 1 for p in lists)
    fits = max(1, math.floor((max_tokens * MARGIN - rest) / per_item))
    for prop, most in zip(lists, wanted, strict=True):
        prop["maxItems"] = min(most, fits)
    return fits


def _words(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _cost(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> int:
    """The estimated tokens of the longest document of ``node`` (compact JSON)."""
    if not isinstance(node, dict):
        return 1
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return 8 if name in seen else _cost(defs.get(name, {}), defs, (*seen, name))
    for union in ("anyOf", "oneOf"):
        if union in node:
            return max((_cost(branch, defs, seen) for branch in node[union]), default=1)
    if "const" in node:
        return _words(json.dumps(node["const"])) + 1
    if "enum" in node:
        return max((_words(json.dumps(v)) + 1 for v in node["enum"]), default=1)
    kind = node.get("type")
    if kind == "string":
        return _words("x" * int(node.get("maxLength", 1000))) + 2
    if kind in ("number", "integer"):
        return 6
    if kind in ("boolean", "null"):
        return 1
    if kind == "array":
        return 2 + int(node.get("maxItems", 50)) * (_cost(node.get("items", {}), defs, seen) + 1)
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        total = 2 + sum(_words(json.dumps(name)) + 2 + _cost(value, defs, seen) for name, value in props.items())
        extra = node.get("additionalProperties", not props)
        if extra is not False and not props:
            value = extra if isinstance(extra, dict) else {"type": "string", "maxLength": 40}
            total += int(node.get("maxProperties", 4)) * (8 + _cost(value, defs, seen))
        return total
    return 4


def with_choices(schema: dict[str, Any], choices: dict[str, list[str]]) -> dict[str, Any]:
    """``schema`` with the named string properties (or lists of strings) held to the given values.

    The judge may only name the proposals and axioms it was shown, the former only the characters
    present: as an ``enum`` the model cannot write an id that is not there (nor spend tokens on one),
    instead of writing one the parse then drops. A name given no values is left as it was.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        props = out.get("properties")
        if isinstance(props, dict):
            for name, values in choices.items():
                prop = props.get(name)
                if not values or not isinstance(prop, dict):
                    continue
                allowed = sorted(set(values))
                if prop.get("type") == "array":
                    prop["items"] = {"enum": allowed}
                else:
                    props[name] = {k: v for k, v in prop.items() if k not in _STRING_BOUNDS}
                    props[name]["enum"] = allowed
        return out

    return walk(copy.deepcopy(schema))
