"""The CONCEPTS step: rule extraction on the real Fate SRD, relations, and the LLM extractor over HTTP.

The Fate texts are read in place from ``../shared/corpus`` (the tests that need them skip without it).
The LLM extractor talks to a canned OpenAI-compatible server started on 127.0.0.1 inside the test.
"""

from __future__ import annotations

import json
import pickle
import re
import socket
import time
from collections import Counter, defaultdict
from itertools import combinations

import pytest
from pydantic import SecretStr, ValidationError

from jobs.concepts import (
    RESPONSE_FORMAT,
    ChunkConcepts,
    ConceptExtractor,
    ConceptMention,
    ExtractorName,
    LLMConceptExtractor,
    LLMExtractorConfig,
    RuleConceptExtractor,
    assign_bold_terms,
    build_concept_extractor,
    collect_concepts,
    concept_display_name,
    relate_concepts,
)
from jobs.document import Block, BlockKind, TextChunk
from schemas.knowledge import ConceptKind, normalize_name
from tests.unit.concept_fixtures import (
    FATE_CONDENSED,
    FATE_DIR,
    canned_openai_server,
    markdown_chunks,
    window_chunks,
)

pytestmark = pytest.mark.unit

needs_corpus = pytest.mark.skipif(not FATE_CONDENSED.exists(), reason=f"Fate SRD corpus not found at {FATE_DIR}")

FATE_CORE_CONCEPTS = [
    "fate point", "aspect", "stress", "consequence", "skill", "stunt", "invoke", "compel",
    "refresh", "boost", "create an advantage", "overcome", "attack", "defend", "high concept",
    "situation aspect", "free invoke", "zone", "conflict", "contest", "challenge", "major milestone",
]  # fmt: skip
JUNK = {
    "the", "if you", "if", "you", "chapter", "page", "page xx", "introduction", "credits",
    "getting started", "who are you", "example", "examples", "a", "an", "and", "this", "when",
}  # fmt: skip


def chunk(sequence: int, text: str, heading_path: list[str] | None = None) -> TextChunk:
    return TextChunk(
        sequence=sequence,
        text=text,
        heading_path=heading_path or [],
        page_start=None,
        page_end=None,
        token_count=max(1, len(text.split())),
    )


def keys_of(result: list[ChunkConcepts]) -> set[str]:
    return {m.normalized_name for c in result for m in c.concepts}


@pytest.fixture(scope="module")
def fate() -> tuple[list[TextChunk], list[list[str]]]:
    if not FATE_CONDENSED.exists():
        pytest.skip(f"Fate SRD corpus not found at {FATE_DIR}")
    return markdown_chunks(FATE_CONDENSED)


@pytest.fixture(scope="module")
def fate_result(fate: tuple[list[TextChunk], list[list[str]]]) -> list[ChunkConcepts]:
    chunks, bold = fate
    return RuleConceptExtractor().extract(chunks, bold_terms_by_chunk=bold)


# ---------------------------------------------------------------------------------------------------
# Rule extractor on the Fate SRD
# ---------------------------------------------------------------------------------------------------


@needs_corpus
def test_finds_the_core_fate_concepts(fate_result: list[ChunkConcepts]) -> None:
    text = FATE_CONDENSED.read_text(encoding="utf-8").casefold()
    concepts = {c.normalized_name: c for c in collect_concepts(fate_result)}
    for name in FATE_CORE_CONCEPTS:
        assert name in text, f"the corpus changed: {name!r} is not in Fate Condensed any more"
        assert name in concepts, f"{name!r} not found; got {sorted(concepts)[:80]}"
    # the book is about aspects, skills and fate points: they lead the ranking
    top = [c.normalized_name for c in collect_concepts(fate_result)[:15]]
    for name in ("aspect", "skill", "fate point", "consequence", "stunt"):
        assert name in top, top
    assert concepts["aspect"].kind is ConceptKind.MECHANIC
    assert concepts["fate point"].kind is ConceptKind.MECHANIC
    assert concepts["aspect"].chunk_count >= 40
    # capitalised skill names in running text ("roll Athletics") become concepts too
    assert {"athletics", "fight", "stealth"} <= set(concepts)
    # "Game Master (GM)": one concept with the acronym as alias, no separate "gm"
    assert "GM" in concepts["game master"].aliases
    assert "gm" not in concepts


@needs_corpus
def test_no_junk_concepts(fate_result: list[ChunkConcepts]) -> None:
    for concept in collect_concepts(fate_result):
        key = concept.normalized_name
        words = key.split()
        assert key not in JUNK, key
        assert words[0] not in {"the", "if", "a", "an", "you", "your", "when", "chapter", "page", "part"}, key
        assert "?" not in concept.name and "page xx" not in key, key
        assert not re.fullmatch(r"[IVXL]+", concept.name), key  # roman numerals
        letters = [w for w in concept.name.split() if any(ch.isalpha() for ch in w)]
        assert not (all(w.isupper() for w in letters) and len("".join(letters)) > 4), key  # shouting


@needs_corpus
def test_normalised_deduplicated_and_consistent(fate_result: list[ChunkConcepts]) -> None:
    seen: dict[str, tuple[str, ConceptKind, tuple[str, ...]]] = {}
    for chunk_concepts in fate_result:
        keys = [m.normalized_name for m in chunk_concepts.concepts]
        assert len(keys) == len(set(keys)), "a concept appears twice in one chunk"
        for m in chunk_concepts.concepts:
            assert m.normalized_name == normalize_name(m.name)
            assert 0.0 < m.score <= 1.0
            # one name, kind and alias set per concept across the whole document
            assert seen.setdefault(m.normalized_name, (m.name, m.kind, m.aliases)) == (m.name, m.kind, m.aliases)
    concepts = {c.normalized_name: c for c in collect_concepts(fate_result)}
    assert "aspects" not in concepts and "fate points" not in concepts  # plurals merged ...
    assert "Aspects" in concepts["aspect"].aliases  # ... and kept as aliases for search
    assert any(normalize_name(a) == "fate points" for a in concepts["fate point"].aliases)
    assert concepts["stress"].name == "Stress"  # not "Stres"
    # every concept becomes a valid graph record with a content-derived uid
    records = [c.to_concept(library_uid="lib_fate") for c in concepts.values()]
    assert len({r.uid for r in records}) == len(records)


@needs_corpus
def test_deterministic_and_picklable(fate: tuple[list[TextChunk], list[list[str]]]) -> None:
    chunks, bold = fate
    extractor = RuleConceptExtractor()
    first = extractor.extract(chunks, bold_terms_by_chunk=bold)
    again = pickle.loads(pickle.dumps(extractor)).extract(chunks, bold_terms_by_chunk=bold)
    assert again == first
    assert pickle.loads(pickle.dumps(first)) == first
    assert [c.sequence for c in first] == [c.sequence for c in chunks]
    for c in first:
        assert c.concepts == sorted(c.concepts, key=lambda m: (-m.score, m.normalized_name))


@needs_corpus
def test_caps_concepts_per_chunk(fate: tuple[list[TextChunk], list[list[str]]]) -> None:
    chunks, bold = fate
    result = RuleConceptExtractor(max_concepts_per_chunk=5).extract(chunks, bold_terms_by_chunk=bold)
    assert max(len(c.concepts) for c in result) == 5


@needs_corpus
def test_co_mention_relations(fate_result: list[ChunkConcepts]) -> None:
    relations = RuleConceptExtractor().relate(fate_result)
    assert relations
    pairs = [(r.source, r.target) for r in relations]
    assert len(pairs) == len(set(pairs)) and all(s < t for s, t in pairs)  # stored once, canonical order
    # recount the weights by hand from the top-12 concepts of each chunk
    per_chunk = [
        (c.sequence, {m.normalized_name for m in sorted(c.concepts, key=lambda m: (-m.score, m.normalized_name))[:12]})
        for c in fate_result
    ]
    chunks_of = Counter(k for _, keys in per_chunk for k in keys)
    both: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for seq, keys in per_chunk:
        for pair in combinations(sorted(keys), 2):
            both[pair].append(seq)
    for r in relations[:200]:
        assert r.chunk_count == len(both[(r.source, r.target)])
        assert r.chunk_sequences == tuple(both[(r.source, r.target)])
        assert r.weight == round(r.chunk_count / (chunks_of[r.source] * chunks_of[r.target]) ** 0.5, 4)
        assert 0.0 < r.weight <= 1.0
    by_pair = {(r.source, r.target): r for r in relations}
    assert by_pair[("aspect", "fate point")].chunk_count >= 5


def test_relation_weights_on_a_small_example() -> None:
    def mentions(seq: int, *keys: str) -> ChunkConcepts:
        return ChunkConcepts(seq, [ConceptMention(k.title(), k, ConceptKind.TERM, score=0.5) for k in keys])

    result = [mentions(0, "aspect", "fate point"), mentions(1, "aspect", "fate point", "stress"),
              mentions(2, "aspect"), mentions(3, "stress", "aspect")]  # fmt: skip
    relations = relate_concepts(result)
    assert [(r.source, r.target, r.chunk_count, r.weight, r.chunk_sequences) for r in relations] == [
        ("aspect", "fate point", 2, round(2 / (4 * 2) ** 0.5, 4), (0, 1)),
        ("aspect", "stress", 2, round(2 / (4 * 2) ** 0.5, 4), (1, 3)),
        ("fate point", "stress", 1, 0.5, (1,)),
    ]
    assert [r.kind.value for r in relations] == ["RELATED_TO"] * 3
    assert relate_concepts(result, min_chunk_count=2)[-1].chunk_count == 2


# ---------------------------------------------------------------------------------------------------
# Rule extractor on small texts: patterns, stop-lists, normalisation
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("surface", "name"),
    [
        ("Aspects", "Aspect"), ("Fate Points", "Fate Point"), ("Stress", "Stress"), ("Status", "Status"),
        ("Abilities", "Ability"), ("Boxes", "Box"), ("NPCs", "NPC"), ("PCs", "PC"), ("Athletics", "Athletics"),
        ("Dice", "Dice"), ("Bonuses", "Bonus"), ("Matches", "Match"), ("Approaches", "Approach"),
        ("Caches", "Cache"), ("Wolves", "Wolf"), ("Ties", "Tie"), ("Basis", "Basis"), ("Consequences",
        "Consequence"), ("non-player characters", "non-player character"), ("Armor  Class", "Armor Class"),
    ],
)  # fmt: skip
def test_display_name_is_singular(surface: str, name: str) -> None:
    assert concept_display_name(surface) == name


def test_patterns_kinds_and_stop_lists() -> None:
    chunks = [
        chunk(0, "CHAPTER THREE\n\nIV. Combat\n\nIf you roll well, the Game Master (GM) smiles. The Dragon "
                 "sleeps. A boost is a free advantage that vanishes once used. When the dice tie, this is "
                 "called a stalemate. Your Armor Class sets how hard you are to hit.", ["Combat", "Opposed Rolls"]),
        chunk(1, "Lord Vexmoor rules Saltmarsh Harbor with the Iron Guild. Every Armor Class check uses "
                 "the GM's judgment. A stalemate favours no one.\nPage 12", ["Combat"]),
        chunk(2, "Opposed rolls happen when two characters act against each other; the GM calls for one.",
              ["Combat", "Opposed Rolls"]),
    ]  # fmt: skip
    result = RuleConceptExtractor().extract(chunks, bold_terms_by_chunk=[["Fate Dice™", "page XX"], [], []])
    by_key = {m.normalized_name: m for c in result for m in c.concepts}
    expected = {
        "opposed roll": ConceptKind.MECHANIC,  # heading, and its lowercase plural in chunk 2
        "combat": ConceptKind.TERM,
        "game master": ConceptKind.TERM,
        "boost": ConceptKind.MECHANIC,  # "X is a …"
        "stalemate": ConceptKind.TERM,  # "called X"
        "armor class": ConceptKind.MECHANIC,  # capitalised name, "class" is a rules word
        "lord vexmoor": ConceptKind.CHARACTER,
        "saltmarsh harbor": ConceptKind.LOCATION,
        "iron guild": ConceptKind.ORGANIZATION,
        "fate dice": ConceptKind.MECHANIC,  # bold, trademark sign dropped
    }
    for key, kind in expected.items():
        assert key in by_key, f"{key!r} missing from {sorted(by_key)}"
        assert by_key[key].kind is kind, (key, by_key[key].kind)
    for junk in ("chapter three", "iv", "if you", "the dragon", "dragon", "page", "page xx", "the", "gm",
                 "your armor class", "the gm"):  # fmt: skip
        assert junk not in by_key, junk
    assert by_key["game master"].aliases == ("GM",)
    # the lowercase mentions are counted: "stalemate" twice, "opposed rolls" in chunk 2
    assert by_key["stalemate"].count >= 1
    chunk2 = {m.normalized_name: m for m in result[2].concepts}
    assert chunk2["opposed roll"].count == 1 and "mention" in chunk2["opposed roll"].evidence
    assert "game master" in chunk2  # found by its acronym


def test_running_heads_and_page_numbers_are_ignored() -> None:
    body = [
        "Each zone holds the characters standing in it. Moving between zones costs an action.",
        "A Sturdy Door blocks the corridor; breaking it is an overcome action.",
        "Zones can carry situation aspects such as Thick Smoke or Slippery Ice.",
        "An Ancient Vault lies below. Reaching it takes three zones of movement.",
        "The Ancient Vault holds the Crown of Ash, which the Cult of Embers wants.",
        "Moving through Thick Smoke needs an overcome roll against Fair opposition.",
    ]
    chunks = [
        chunk(i, f"MONSTER MANUAL OF DOOM\n{text}\n{i + 40}\nThe Grim Handbook | {i + 40}")
        for i, text in enumerate(body)
    ]
    keys = keys_of(RuleConceptExtractor().extract(chunks))
    assert "monster manual of doom" not in keys and "grim handbook" not in keys
    assert keys == {"sturdy door", "thick smoke", "slippery ice", "ancient vault", "crown of ash", "cult of embers"}
    # "Cult of Embers" stays plural: the text never writes "embers" in lowercase, so it is a name


def test_glossary_seed_finds_lowercase_mentions() -> None:
    chunks = [chunk(0, "Move your token between zones, then mark stress if the ground is rough.")]
    assert "zone" not in keys_of(RuleConceptExtractor().extract(chunks))
    keys = keys_of(RuleConceptExtractor(glossary=["Zone", "Stress"]).extract(chunks))
    assert {"zone", "stress"} <= keys


def test_bold_terms_must_match_the_chunks() -> None:
    with pytest.raises(ValueError, match="one per chunk"):
        RuleConceptExtractor().extract([chunk(0, "Aspects are true.")], bold_terms_by_chunk=[[], []])
    assert RuleConceptExtractor().extract([]) == []


def test_assign_bold_terms_by_page_and_text() -> None:
    blocks = [
        Block(BlockKind.PARAGRAPH, "Spend a Fate Point to invoke.", page=1, bold_terms=["Fate Point"]),
        Block(BlockKind.PARAGRAPH, "Mark Stress boxes.", page=2, bold_terms=["Stress", "Fate Point"]),
    ]
    chunks = [
        TextChunk(0, "Spend a Fate Point to invoke.", [], 1, 1, 6),
        TextChunk(1, "Mark Stress boxes. Fate Point spent.", [], 2, 2, 6),
        TextChunk(2, "Stress again.", [], 3, 3, 2),  # page 3 has no bold terms
    ]
    assert assign_bold_terms(chunks, blocks) == [["Fate Point"], ["Fate Point", "Stress"], []]


@needs_corpus
def test_throughput_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(FATE_DIR.glob("*.md"))]
    chunks: list[TextChunk] = []
    while len(chunks) < 2000:
        for text in texts:
            chunks.extend(window_chunks(text, size=2000, start_sequence=len(chunks)))
    extractor = RuleConceptExtractor()
    started = time.perf_counter()
    result = extractor.extract(chunks)
    elapsed = time.perf_counter() - started
    chars = sum(len(c.text) for c in chunks)
    with capsys.disabled():
        print(
            f"\n[concepts] rules: {len(chunks)} chunks ({chars / len(chunks):.0f} chars avg) in {elapsed:.2f}s"
            f" = {len(chunks) / elapsed:.0f} chunks/s, {chars / elapsed / 1e6:.2f} MB/s on one core"
        )
    assert sum(len(c.concepts) for c in result) > len(chunks)  # a speed check, not a time limit


# ---------------------------------------------------------------------------------------------------
# LLM extractor against a canned OpenAI-compatible server
# ---------------------------------------------------------------------------------------------------

LLM_CASES = ["aspects", "stress", "skills", "bad-entry", "malformed", "aspects",
             "error500", "aspects", "flaky", "stress", "missing", "skills"]  # fmt: skip
RULEBOOK_TEXT = (
    "Aspects are phrases that describe your character. Spend a Fate Point to invoke an aspect. "
    "When you take a hit, mark Stress or take a Consequence. Each Skill has a rating on the ladder."
)


def llm_config(base_url: str, **overrides: object) -> LLMExtractorConfig:
    settings: dict[str, object] = {
        "base_url": base_url,
        "model": "test-model",
        "api_key": SecretStr("sk-test"),
        "timeout_s": 5.0,
        "max_concurrency": 2,
        "max_retries": 2,
        "retry_backoff_s": 0.05,
        "chunks_per_request": 2,
    }
    return LLMExtractorConfig.model_validate(settings | overrides)


def test_llm_extractor_structured_output_fallbacks_and_retries() -> None:
    pytest.importorskip("openai")
    chunks = [chunk(i, f"[[case:{case}]] {RULEBOOK_TEXT}", ["Rules", case]) for i, case in enumerate(LLM_CASES)]
    bold = [["Fate Point"] if i == 0 else [] for i in range(len(chunks))]
    with canned_openai_server() as (base_url, log):
        extractor = LLMConceptExtractor(llm_config(base_url))
        result = extractor.extract(chunks, bold_terms_by_chunk=bold)

    # which extractor answered for each chunk, and why the rules stepped in
    answered = {c.sequence: (c.extractor, (c.fallback_reason or "").split(":")[0]) for c in result}
    llm, fallback = ExtractorName.LLM, ExtractorName.RULES_FALLBACK
    assert answered == {
        0: (llm, ""), 1: (llm, ""), 2: (llm, ""), 3: (fallback, "invalid_answer"),
        4: (fallback, "malformed_json"), 5: (fallback, "malformed_json"),
        6: (fallback, "http_500"), 7: (fallback, "http_500"),
        8: (llm, ""), 9: (llm, ""), 10: (fallback, "missing_chunk"), 11: (llm, ""),
    }  # fmt: skip
    stats = extractor.stats
    assert stats.fallback_reasons == Counter(
        {"malformed_json": 2, "http_500": 2, "invalid_answer": 1, "missing_chunk": 1}
    )
    assert (stats.llm_chunks, stats.fallback_chunks) == (6, 6)
    # 6 requests, the 500 one retried twice, the flaky one once
    assert (stats.requests, stats.retries, stats.failed_requests) == (9, 3, 1)
    assert log.markers["error500"] == 3 and log.markers["flaky"] == 2
    assert len(stats.warnings) == 6 and stats.warnings[0].startswith("chunk 3:")
    assert log.peak_in_flight <= 2  # the concurrency limit held

    # the model's answers, cleaned: junk dropped, kinds and salience made valid, names singular
    first = {m.normalized_name: m for m in result[0].concepts}
    assert set(first) == {"aspect", "fate point", "high concept"}
    assert first["aspect"].name == "Aspect" and first["aspect"].kind is ConceptKind.MECHANIC
    assert first["aspect"].evidence == ("llm",) and first["aspect"].score == 0.95
    assert "FP" in first["fate point"].aliases
    assert first["aspect"].count >= 2  # "aspect" occurs in the chunk text
    assert {m.normalized_name for m in result[1].concepts} == {"stress", "consequence"}  # "the" dropped
    stunt = {m.normalized_name: m for m in result[2].concepts}["stunt"]
    assert (stunt.kind, stunt.score) == (ConceptKind.OTHER, 1.0)  # unknown kind "spell", salience 1.7
    # fallback chunks carry the rules' answer for the same text
    rules_keys = {m.normalized_name for m in result[4].concepts}
    assert {"aspect", "fate point", "stress", "consequence"} <= rules_keys
    assert all("llm" not in m.evidence for m in result[4].concepts)
    # one name per concept across LLM and rule chunks
    names = {(m.normalized_name, m.name, m.kind) for c in result for m in c.concepts}
    assert len({k for k, _, _ in names}) == len(names)
    assert extractor.relate(result)

    # every request asked for structured output with the answer's JSON schema, in strict form
    def refs_alone(node: object) -> bool:
        if isinstance(node, dict):
            return ("$ref" not in node or len(node) == 1) and all(refs_alone(v) for v in node.values())
        return all(refs_alone(v) for v in node) if isinstance(node, list) else True

    assert refs_alone(RESPONSE_FORMAT)
    assert len(log.requests) == 9
    for body, headers in zip(log.requests, log.headers, strict=True):
        assert body["model"] == "test-model"
        assert body["response_format"]["type"] == "json_schema"
        schema = body["response_format"]["json_schema"]
        assert schema["name"] == "chunk_concepts" and schema["strict"] is True
        assert schema["schema"] == RESPONSE_FORMAT["json_schema"]["schema"]
        assert schema["schema"]["required"] == ["chunks"] and schema["schema"]["additionalProperties"] is False
        assert headers["authorization"] == "Bearer sk-test"
        sent = json.loads(body["messages"][-1]["content"])["chunks"]
        assert [c["id"] for c in sent] == list(range(1, len(sent) + 1))
    sent_chunks = [c for body in log.requests for c in json.loads(body["messages"][-1]["content"])["chunks"]]
    with_bold = [c for c in sent_chunks if "bold_terms" in c]  # requests run concurrently: any order
    assert [(c["bold_terms"], c["headings"]) for c in with_bold] == [(["Fate Point"], ["Rules", "aspects"])]


def test_llm_timeout_falls_back() -> None:
    pytest.importorskip("openai")
    with canned_openai_server(slow_s=1.5) as (base_url, _log):
        extractor = LLMConceptExtractor(llm_config(base_url, timeout_s=0.4, max_retries=0))
        result = extractor.extract([chunk(0, f"[[case:slow]] {RULEBOOK_TEXT}")])
    assert result[0].extractor is ExtractorName.RULES_FALLBACK
    assert result[0].fallback_reason is not None and result[0].fallback_reason.startswith("timeout")
    assert result[0].concepts  # the rules answered instead


def test_llm_unreachable_endpoint_opens_the_circuit() -> None:
    pytest.importorskip("openai")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    config = llm_config(f"http://127.0.0.1:{port}/v1", max_retries=1, max_concurrency=1, max_consecutive_failures=1)
    extractor = LLMConceptExtractor(config)
    chunks = [chunk(i, RULEBOOK_TEXT) for i in range(6)]
    result = extractor.extract(chunks)
    reasons = [(c.fallback_reason or "").split(":")[0] for c in result]
    assert reasons == ["connection"] * 2 + ["circuit_open"] * 4
    assert all(c.extractor is ExtractorName.RULES_FALLBACK and c.concepts for c in result)
    assert extractor.stats.requests == 2  # one try and one retry; then no more requests


def test_build_concept_extractor_and_pickling() -> None:
    rules = build_concept_extractor(None)
    assert isinstance(rules, RuleConceptExtractor) and isinstance(rules, ConceptExtractor)
    config = llm_config("http://localhost:8000/v1/")
    llm = build_concept_extractor(config)
    assert isinstance(llm, LLMConceptExtractor) and isinstance(llm, ConceptExtractor)
    assert config.base_url == "http://localhost:8000/v1"
    clone = pickle.loads(pickle.dumps(llm))  # Ray ships stages to workers: no live client inside
    assert isinstance(clone, LLMConceptExtractor) and clone.config == config and clone._client is None
    with pytest.raises(ValidationError, match="base_url"):
        LLMExtractorConfig(base_url="localhost:8000", model="m")
    with pytest.raises(ValidationError):
        LLMExtractorConfig(base_url="http://x/v1", model="m", max_concurrency=0)
