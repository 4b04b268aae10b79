"""The :class:`LLMConceptExtractor`: concepts from an OpenAI-compatible endpoint, rules as fallback.

Its configuration (:class:`LLMExtractorConfig`), the structured answer the model must give and its
strict JSON schema (:data:`RESPONSE_FORMAT`), the client with bounded retries and a circuit breaker,
answer parsing, fallback accounting (:class:`LLMExtractionStats`), the per-document harmonisation
of names and kinds, and :func:`build_concept_extractor`, which picks an extractor.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
    field_validator,
)

from jobs.concepts.names import _clean_candidate, _dedupe_aliases, _pick_name, concept_display_name
from jobs.concepts.results import (
    ChunkConcepts,
    ConceptExtractor,
    ConceptMention,
    ConceptRelation,
    ExtractorName,
    _check_bold,
    _mention_order,
)
from jobs.concepts.rules import RuleConceptExtractor
from jobs.document import TextChunk
from schemas.knowledge import ConceptKind, normalize_name

if TYPE_CHECKING:
    from openai import OpenAI

log = logging.getLogger(__name__)


class LLMExtractorConfig(BaseModel):
    """Where and how to ask an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp) for concepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(
        description="API root including /v1, e.g. http://localhost:8000/v1 (vLLM), "
        "http://localhost:11434/v1 (Ollama), http://localhost:8080/v1 (llama.cpp server)."
    )
    model: str = Field(min_length=1, description="Model name the server knows.")
    api_key: SecretStr | None = Field(default=None, description="Bearer token; None for open servers.")
    timeout_s: PositiveFloat = Field(default=60.0, description="Timeout of one request, in seconds.")
    max_concurrency: PositiveInt = Field(default=4, description="Requests in flight at once.")
    max_retries: NonNegativeInt = Field(
        default=2, description="Retries of a request after a timeout, connection error, 408/409/429 or 5xx."
    )
    retry_backoff_s: NonNegativeFloat = Field(
        default=0.5, description="First retry delay; doubles each retry (with a little jitter)."
    )
    chunks_per_request: PositiveInt = Field(default=4, description="Chunks sent in one request.")
    max_concepts_per_chunk: PositiveInt = Field(default=20, description="Concepts kept per chunk.")
    max_chunk_chars: PositiveInt = Field(
        default=6000, description="Chunk text beyond this many characters is not sent."
    )
    max_output_tokens: PositiveInt = Field(default=4096, description="max_tokens of one answer.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_consecutive_failures: PositiveInt = Field(
        default=5,
        description="After this many failed requests in a row, the rest of the call falls back to rules "
        "without asking (the endpoint is down); the next call tries again.",
    )

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(?:/\S*)?", value):
            raise ValueError(f"base_url must be an http(s) URL such as http://localhost:8000/v1, got {value!r}")
        return value.rstrip("/")


class AnswerConcept(BaseModel):
    """One concept in the model's answer."""

    name: str = Field(description="Canonical name, singular, as the text writes it.")
    kind: ConceptKind = Field(description="What the concept names.")
    aliases: list[str] = Field(description="Other names the text uses: plurals, abbreviations.")
    salience: float = Field(description="How central the concept is to the chunk, 0 to 1.")

    @field_validator("kind", mode="before")
    @classmethod
    def _lenient_kind(cls, value: Any) -> Any:
        # a model that invents a kind ("spell") still gave a usable concept
        if isinstance(value, str):
            lowered = value.strip().lower()
            return lowered if lowered in ConceptKind._value2member_map_ else ConceptKind.OTHER.value
        return value

    @field_validator("salience")
    @classmethod
    def _clamp(cls, value: float) -> float:
        if math.isnan(value):
            raise ValueError("salience is NaN")
        return min(1.0, max(0.0, value))


class AnswerChunk(BaseModel):
    id: int = Field(description="The id of the chunk as given in the request.")
    concepts: list[AnswerConcept]


class ConceptAnswer(BaseModel):
    """The structured answer the model must give: concepts per chunk id."""

    chunks: list[AnswerChunk]


def _strict_schema(schema: Any, root: dict[str, Any] | None = None) -> Any:
    """The schema in the form OpenAI's strict mode accepts (vLLM and llama.cpp take it as well).

    Every object is closed (``additionalProperties: false``) with all its properties required, and a
    ``$ref`` with sibling keys (pydantic puts a field's description next to it) is inlined, because
    strict mode rejects such siblings.
    """
    root = schema if root is None else root
    if isinstance(schema, list):
        return [_strict_schema(v, root) for v in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and len(schema) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    out = {k: _strict_schema(v, root) for k, v in schema.items()}
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    return out


ANSWER_SCHEMA_NAME = "chunk_concepts"

RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": ANSWER_SCHEMA_NAME,
        "strict": True,
        "schema": _strict_schema(ConceptAnswer.model_json_schema()),
    },
}
"""The ``response_format`` sent with every request (vLLM and OpenAI constrain decoding to it)."""

_SYSTEM_PROMPT = """\
You index tabletop roleplaying game books. For each chunk you are given, list the concepts it \
mentions that a reader might look up: rules terms and mechanics (e.g. an action, a roll, a resource), \
named characters, locations, organizations, creatures, items and events. Skip generic words \
(thing, player, example), chapter titles and page furniture.
For every concept give: name (canonical, singular, as the text writes it), kind (one of: {kinds}), \
aliases (other names the text uses for it: plurals, abbreviations; may be empty), salience (0 to 1: how \
central it is to that chunk). At most {limit} concepts per chunk, the most salient first.
Answer with JSON only: {{"chunks": [{{"id": <chunk id>, "concepts": [...]}}]}}, one entry per chunk id."""


@dataclass(slots=True)
class LLMExtractionStats:
    """What the LLM extractor did, summed over its calls.

    Attributes:
        requests: HTTP requests sent (retries included).
        retries: of those, retries.
        failed_requests: requests whose chunks all fell back (after retries).
        llm_chunks: chunks answered by the model.
        fallback_chunks: chunks answered by the rules instead.
        fallback_reasons: fallback chunks per reason category (``"http_500"``, ``"malformed_json"``…).
        warnings: the first messages explaining fallbacks, for the job's report.
    """

    requests: int = 0
    retries: int = 0
    failed_requests: int = 0
    llm_chunks: int = 0
    fallback_chunks: int = 0
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)


_MAX_WARNINGS = 200


@dataclass(slots=True)
class _RequestResult:
    answers: dict[int, list[AnswerConcept]]  # request-local chunk id -> concepts
    failures: dict[int, str]  # request-local chunk id -> reason


class LLMConceptExtractor:
    """Concept extraction by an LLM behind an OpenAI-compatible API, falling back to the rules.

    Chunks are sent ``chunks_per_request`` at a time, ``max_concurrency`` requests at once, with the
    JSON schema of :class:`ConceptAnswer` as ``response_format``. A chunk whose answer is missing,
    malformed or failed after retries gets the rule extractor's answer and a ``fallback_reason``;
    nothing here raises for a bad endpoint. The client opens lazily in the process that uses it, so
    the extractor pickles to Ray workers without a live connection.

    Args:
        config: the endpoint and limits.
        rules: the extractor used for fallbacks (and for relations); a default one if None.
    """

    def __init__(self, config: LLMExtractorConfig, *, rules: RuleConceptExtractor | None = None) -> None:
        self.config = config
        self.rules = rules or RuleConceptExtractor(max_concepts_per_chunk=config.max_concepts_per_chunk)
        self.stats = LLMExtractionStats()
        self._client: OpenAI | None = None
        self._lock = threading.Lock()
        self._failures_in_a_row = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "rules": self.rules, "stats": self.stats}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], rules=state["rules"])  # type: ignore[misc]
        self.stats = state["stats"]

    # -- protocol ------------------------------------------------------------------------------------

    def extract(
        self,
        chunks: Sequence[TextChunk],
        *,
        bold_terms_by_chunk: Sequence[Sequence[str]] | None = None,
    ) -> list[ChunkConcepts]:
        """Return the concepts each chunk mentions, by the model where it answered, else by rules.

        Raises:
            ValueError: if ``bold_terms_by_chunk`` is not one entry per chunk.
        """
        _check_bold(chunks, bold_terms_by_chunk)
        if not chunks:
            return []
        with self._lock:
            self._failures_in_a_row = 0  # each call gives a failing endpoint a fresh chance
        size = self.config.chunks_per_request
        batches = [list(range(start, min(start + size, len(chunks)))) for start in range(0, len(chunks), size)]
        with ThreadPoolExecutor(max_workers=self.config.max_concurrency, thread_name_prefix="concepts") as pool:
            futures = [pool.submit(self._ask, chunks, batch, bold_terms_by_chunk) for batch in batches]
            results = [f.result() for f in futures]  # in submission order: deterministic output

        answers: dict[int, list[AnswerConcept]] = {}
        reasons: dict[int, str] = {}
        for batch, result in zip(batches, results, strict=True):
            for local, position in enumerate(batch, start=1):
                if local in result.answers:
                    answers[position] = result.answers[local]
                else:
                    reasons[position] = result.failures.get(local, "missing_chunk: no answer for this chunk")
        fallback: list[ChunkConcepts] = []
        if reasons:
            # the rules see the whole document so their vocabulary and names match a rules-only run
            fallback = self.rules.extract(chunks, bold_terms_by_chunk=bold_terms_by_chunk)
        out: list[ChunkConcepts] = []
        for position, chunk in enumerate(chunks):
            if position in answers:
                out.append(ChunkConcepts(chunk.sequence, self._mentions(chunk, answers[position]), ExtractorName.LLM))
            else:
                reason = reasons[position]
                out.append(replace(fallback[position], extractor=ExtractorName.RULES_FALLBACK, fallback_reason=reason))
                self._record_fallback(chunk.sequence, reason)
        with self._lock:
            self.stats.llm_chunks += len(answers)
        return _harmonise(out)

    def relate(self, mentions: Sequence[ChunkConcepts]) -> list[ConceptRelation]:
        """RELATED_TO edges between co-mentioned concepts (see :func:`relate_concepts`)."""
        return self.rules.relate(mentions)

    # -- requests ----------------------------------------------------------------------------------

    def _openai(self) -> OpenAI:
        """The OpenAI SDK client, created on first use in this process.

        Raises:
            ImportError: if the ``openai`` package is not installed.
        """
        with self._lock:
            if self._client is None:
                try:
                    from openai import OpenAI
                except ImportError as exc:  # pragma: no cover - depends on the environment
                    raise ImportError("the LLM concept extractor needs the 'openai' package") from exc
                key = self.config.api_key.get_secret_value() if self.config.api_key else "EMPTY"
                # retries are ours (they must also cover our own failure accounting), so the SDK's are off
                self._client = OpenAI(
                    base_url=self.config.base_url, api_key=key, timeout=self.config.timeout_s, max_retries=0
                )
            return self._client

    def request_messages(
        self, chunks: Sequence[TextChunk], bold: Sequence[Sequence[str]] | None
    ) -> list[dict[str, str]]:
        """The chat messages for one request; chunk ids are 1..len(chunks) within the request."""
        payload = []
        for local, chunk in enumerate(chunks, start=1):
            item: dict[str, Any] = {
                "id": local,
                "headings": list(chunk.heading_path),
                "text": chunk.text[: self.config.max_chunk_chars],
            }
            if bold is not None and bold[local - 1]:
                item["bold_terms"] = list(bold[local - 1])
            payload.append(item)
        system = _SYSTEM_PROMPT.format(
            kinds=", ".join(k.value for k in ConceptKind), limit=self.config.max_concepts_per_chunk
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps({"chunks": payload}, ensure_ascii=False)},
        ]

    def _ask(
        self,
        chunks: Sequence[TextChunk],
        batch: list[int],
        bold: Sequence[Sequence[str]] | None,
    ) -> _RequestResult:
        """Send one request (with retries) and parse it; never raises."""
        ids = list(range(1, len(batch) + 1))
        try:
            content = self._complete(
                self.request_messages(
                    [chunks[p] for p in batch], [bold[p] for p in batch] if bold is not None else None
                )
            )
        except _RequestFailed as failed:
            return _RequestResult({}, dict.fromkeys(ids, failed.reason))
        except Exception as exc:  # never let one request take the job down
            log.exception("concept extraction request failed unexpectedly")
            return _RequestResult({}, dict.fromkeys(ids, f"error: {type(exc).__name__}: {exc}"[:300]))
        return _parse_answer(content, ids)

    def _complete(self, messages: list[dict[str, str]]) -> str:
        """One chat completion with bounded retries; returns the answer text.

        Raises:
            _RequestFailed: with the reason, when every attempt failed or the answer is unusable.
        """
        import openai

        client = self._openai()
        # plain dicts: the same request works against vLLM, Ollama and llama.cpp, typed SDK params or not
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "response_format": RESPONSE_FORMAT,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_output_tokens,
            "timeout": self.config.timeout_s,
        }
        attempts = self.config.max_retries + 1
        reason = "error: no attempt made"
        for attempt in range(attempts):
            with self._lock:
                if self._failures_in_a_row >= self.config.max_consecutive_failures:
                    raise _RequestFailed(
                        f"circuit_open: {self._failures_in_a_row} requests in a row failed; last: {reason}"
                    )
                self.stats.requests += 1
                self.stats.retries += attempt > 0
            retry_after: float | None = None
            try:
                response = client.chat.completions.create(**request)
            except openai.APITimeoutError:
                reason, retryable = f"timeout: no answer within {self.config.timeout_s}s", True
            except openai.APIConnectionError as exc:
                reason, retryable = f"connection: {exc}", True
            except openai.APIStatusError as exc:
                code = exc.status_code
                reason = f"http_{code}: {_short(str(exc.message))}"
                retryable = code in (408, 409, 429) or code >= 500
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
            except openai.OpenAIError as exc:
                reason, retryable = f"error: {type(exc).__name__}: {_short(str(exc))}", False
            else:
                with self._lock:
                    self._failures_in_a_row = 0
                return _answer_text(response)
            if not retryable or attempt == attempts - 1:
                break
            delay = self.config.retry_backoff_s * (2**attempt) * (1.0 + 0.25 * random.random())
            time.sleep(max(delay, min(retry_after or 0.0, 30.0)))
        with self._lock:
            self._failures_in_a_row += 1
            self.stats.failed_requests += 1
        raise _RequestFailed(reason)

    # -- answers -----------------------------------------------------------------------------------

    def _mentions(self, chunk: TextChunk, concepts: list[AnswerConcept]) -> list[ConceptMention]:
        """The model's concepts for one chunk, cleaned and keyed like the rules' ones."""
        lowered = chunk.text.casefold()
        by_key: dict[str, ConceptMention] = {}
        for concept in concepts:
            surface = _clean_candidate(concept.name, max_words=6)
            if surface is None:
                continue
            name = concept_display_name(surface)
            key = normalize_name(name)
            if not key:
                continue
            # aliases are names too: short, one line (a rambling model must not break Concept.aliases)
            aliases = {" ".join(a.split()) for a in concept.aliases if a.strip() and len(a) <= 80}
            if surface != name:
                aliases.add(surface)
            count = sum(lowered.count(form) for form in {key, *(normalize_name(a) for a in aliases)} if form)
            mention = ConceptMention(
                name=name,
                normalized_name=key,
                kind=concept.kind,
                aliases=tuple(_dedupe_aliases(aliases, key)),
                score=round(concept.salience, 4),
                count=count,
                evidence=("llm",),
            )
            previous = by_key.get(key)
            if previous is None or mention.score > previous.score:
                by_key[key] = mention
        ordered = sorted(by_key.values(), key=_mention_order)
        return ordered[: self.config.max_concepts_per_chunk]

    def _record_fallback(self, sequence: int, reason: str) -> None:
        category = reason.split(":", 1)[0]
        with self._lock:
            self.stats.fallback_chunks += 1
            self.stats.fallback_reasons[category] += 1
            if len(self.stats.warnings) < _MAX_WARNINGS:
                self.stats.warnings.append(f"chunk {sequence}: rules used instead of the LLM ({reason})")
        log.warning("concepts: chunk %s fell back to rules: %s", sequence, reason)


class _RequestFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _answer_text(response: Any) -> str:
    """The text of a completion, or :class:`_RequestFailed` when there is none to parse."""
    if not getattr(response, "choices", None):
        raise _RequestFailed("empty_answer: the response has no choices")
    choice = response.choices[0]
    if choice.finish_reason == "length":
        raise _RequestFailed("truncated: the answer hit max_tokens")
    content = choice.message.content if choice.message is not None else None
    if not content or not content.strip():
        raise _RequestFailed("empty_answer: the answer has no content")
    return content


def _parse_answer(content: str, ids: list[int]) -> _RequestResult:
    """Validate an answer; keep the chunk entries that are valid when others are not."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        return _RequestResult({}, dict.fromkeys(ids, f"malformed_json: {exc.msg} at char {exc.pos}"))
    try:
        answer = ConceptAnswer.model_validate(data)
    except ValidationError as exc:
        entries = data.get("chunks") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return _RequestResult({}, dict.fromkeys(ids, f"invalid_answer: {_validation_summary(exc)}"))
        answers: dict[int, list[AnswerConcept]] = {}
        failures: dict[int, str] = {}
        for entry in entries:
            try:
                parsed = AnswerChunk.model_validate(entry)
            except ValidationError as entry_exc:
                local = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(local, int) and local in ids:
                    failures[local] = f"invalid_answer: {_validation_summary(entry_exc)}"
                continue
            if parsed.id in ids:
                answers[parsed.id] = parsed.concepts
        return _RequestResult(answers, {k: v for k, v in failures.items() if k not in answers})
    answers = {c.id: c.concepts for c in answer.chunks if c.id in ids}
    return _RequestResult(answers, {})


def _validation_summary(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return _short(f"{exc.error_count()} error(s), first at {where or 'top'}: {first['msg']}")


def _harmonise(chunks: list[ChunkConcepts]) -> list[ChunkConcepts]:
    """One name, kind and alias set per key across a document's chunks (LLM and rules mixed)."""
    llm_names: dict[str, Counter[str]] = defaultdict(Counter)
    rule_names: dict[str, Counter[str]] = defaultdict(Counter)
    kinds: dict[str, Counter[tuple[bool, ConceptKind]]] = defaultdict(Counter)
    aliases: dict[str, set[str]] = defaultdict(set)
    for chunk in chunks:
        from_llm = chunk.extractor is ExtractorName.LLM
        for m in chunk.concepts:
            (llm_names if from_llm else rule_names)[m.normalized_name][m.name] += 1
            kinds[m.normalized_name][(from_llm, m.kind)] += 1
            aliases[m.normalized_name].update(m.aliases)
    final: dict[str, tuple[str, ConceptKind, tuple[str, ...]]] = {}
    for key in kinds:
        # the model's names and kinds outrank the rules' guesses; then the most votes; then enum order
        name = _pick_name(llm_names[key] or rule_names[key])
        (_, kind), _ = min(kinds[key].items(), key=lambda kv: (not kv[0][0], -kv[1], kv[0][1].value))
        final[key] = (name, kind, tuple(_dedupe_aliases(aliases[key], key)))
    out = []
    for chunk in chunks:
        mentions = [
            replace(
                m,
                name=final[m.normalized_name][0],
                kind=final[m.normalized_name][1],
                aliases=final[m.normalized_name][2],
            )
            for m in chunk.concepts
        ]
        out.append(replace(chunk, concepts=mentions))
    return out


# ---------------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------------


def build_concept_extractor(config: LLMExtractorConfig | None) -> ConceptExtractor:
    """The LLM extractor when an endpoint is configured, the rule extractor otherwise."""
    if config is None:
        return RuleConceptExtractor()
    return LLMConceptExtractor(config)
