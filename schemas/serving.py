"""Serving: its settings and the bodies of the REST API.

Settings share the ``LOREKEEPER_`` prefix with :class:`schemas.settings.Settings` and are read the
same way (environment, ``.env``, ``_FILE`` twins for secrets), built once by
:func:`get_serve_settings`.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.campaign import LibraryPin, check_library_pins
from schemas.common import AttributeValue, Authority, Confidence, Id
from schemas.errors import ConfigError
from schemas.health import Health
from schemas.model_roles import RESERVED_ENGINES, EngineName, ModelRoles
from schemas.search import SearchHit
from schemas.settings import ENV_PREFIX
from schemas.story import (
    ChangeType,
    Evidence,
    InputMode,
    ProposalContent,
    Resolution,
    Speaker,
    StoryProfile,
    SubjectiveKind,
    WorldStateCheckpointKind,
)
from schemas.text import Name, Note, Text, TextOrEmpty, TextRule
from schemas.visibility import Visibility

__all__ = [
    "ApiKeyInfo",
    "BranchCreate",
    "CampaignBundle",
    "CampaignCreate",
    "CampaignLibrary",
    "CheckpointCreate",
    "CreatedKey",
    "CommitRequest",
    "EndSceneRequest",
    "EngineKind",
    "EngineSpec",
    "ExtractedProposal",
    "ExtractionBatch",
    "Health",
    "KeyCreate",
    "MemoryCreate",
    "MemoryRetract",
    "PlayerKeyCreate",
    "ProposalCreate",
    "RetconAnswer",
    "RetconRequest",
    "SceneCreate",
    "Scope",
    "SearchAnswer",
    "ServeSettings",
    "TakeRequest",
    "TurnRequest",
    "WorldCreate",
    "get_serve_settings",
]


class EngineKind(StrEnum):
    """Where the narrator's tokens come from."""

    VLLM = "vllm"  # vLLM in the narrator replicas (GPUs; vLLM's CPU build in its test lane)
    OPENAI = "openai"  # any OpenAI-compatible endpoint: Ollama, a vLLM server, llama.cpp's server
    ECHO = "echo"  # instant and deterministic: tests, benchmarks of the serving overhead, offline demos
    LOCAL = "local"  # the embedded default model in this process on CPU (transformers; models/llm.py fetches it)


class EngineSpec(BaseModel):
    """A named engine of the server, besides its narrator's and extractor's (``LOREKEEPER_ENGINES``: a JSON
    object of these by name), which a campaign may name for a seat (:class:`~schemas.model_roles.ModelRoles`)."""

    model_config = ConfigDict(extra="forbid")

    kind: EngineKind = Field(description="local, openai or echo (vllm runs only as the narrator replicas' engine).")
    base_url: str | None = Field(default=None, description="The OpenAI-compatible endpoint (kind openai).")
    model: str = Field(default="narrator", min_length=1, max_length=200, description="The model's name there.")

    @model_validator(mode="after")
    def _usable(self) -> EngineSpec:
        if self.kind is EngineKind.VLLM:
            raise ValueError("a named engine cannot be vllm (vLLM runs as the narrator replicas' own engine)")
        if self.kind is EngineKind.OPENAI and not self.base_url:
            raise ValueError("a named engine of kind 'openai' needs its base_url")
        return self


class ServeSettings(BaseSettings):
    """How the API, the narrator and the extractor run. Build it with :func:`get_serve_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore", validate_default=True
    )

    api_host: str = Field(default="127.0.0.1", description="Address the API binds; not loopback needs API keys.")
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_keys_file: Path | None = Field(
        default=None, description="A file of admin API keys, one per line (a mounted Secret), besides managed keys."
    )
    max_request_bytes: int = Field(default=1 << 20, ge=1024, description="Largest request body (uploads excepted).")
    max_upload_bytes: int = Field(default=512 << 20, ge=1024, description="Largest upload to the ingest API.")
    media_engine: str = Field(
        default="none",
        min_length=1,
        max_length=100,
        description="The engine media jobs run on (story.media_engines): 'none' leaves them queued, saying so; "
        "'development' makes placeholders (an SVG card showing the prompt, WAVs of silence), for development only.",
    )
    max_concurrent_turns: int = Field(
        default=64, ge=1, description="Turns one ingress replica narrates at once; more get 429 with Retry-After."
    )
    mcp_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve MCP on this port of its own (lorekeeper serve --direct); unset: /mcp on the API's port.",
    )
    mcp_require_key: bool = Field(
        default=True,
        description="Whether an MCP caller needs a key; false: a caller without one may use the shared knowledge "
        "tools (search, library, health) and nothing of a campaign.",
    )
    health_timeout_s: float = Field(
        default=2.0, gt=0.0, le=60.0, description="How long a health probe waits for each part before calling it down."
    )

    narrator_engine: EngineKind = Field(
        default=EngineKind.LOCAL, description="local (the embedded default model), vllm, openai or echo."
    )
    narrator_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint (engine openai).")
    narrator_model: str = Field(default="narrator", description="Model name (or path, for vllm).")
    narrator_api_key: SecretStr | None = Field(default=None, description="Key for the OpenAI-compatible endpoint.")
    narrator_api_key_file: Path | None = None
    narrator_max_tokens: int = Field(default=512, ge=1, le=32768, description="Longest narration, in tokens.")
    narrator_temperature: float = Field(default=0.8, ge=0.0, le=2.0)
    narrator_max_model_len: int = Field(default=8192, ge=256, description="Context window (vllm).")
    narrator_gpu_memory_utilization: float = Field(default=0.85, gt=0.0, le=1.0, description="vllm.")

    narrator_min_replicas: int = Field(default=1, ge=0, description="Fewest Narrator replicas (Ray Serve).")
    narrator_max_replicas: int = Field(default=4, ge=1, description="Most Narrator replicas (Ray Serve).")
    narrator_target_ongoing_requests: float = Field(
        default=8, gt=0, description="Requests in flight per Narrator replica the autoscaler aims for (Ray Serve)."
    )
    narrator_upscale_delay_s: float = Field(
        default=30.0, ge=0, description="How long load must stay above target before a Narrator replica is added."
    )
    narrator_downscale_delay_s: float = Field(
        default=600.0, ge=0, description="How long load must stay below target before a Narrator replica is removed."
    )

    extractor_engine: EngineKind | None = Field(
        default=None,
        description="Engine for proposals, scene memories and the axiom judge; with none set, local when the "
        "narrator's is local (every seat on the embedded model), else none (no extraction, extractive memories).",
    )
    extractor_base_url: str | None = None
    extractor_model: str | None = None
    extractor_max_tokens: int | None = Field(
        default=None,
        ge=64,
        le=32768,
        description="Longest structured answer (proposals, scene memories, verdicts); unset: the engine's own "
        "budget (the local model's is 320 tokens, others 1024).",
    )

    engines: dict[EngineName, EngineSpec] = Field(
        default_factory=dict,
        description="Named engines a campaign may choose for a seat (JSON: {name: {kind, base_url, model}}); "
        "'narrator' and 'extractor' name the deployment's own.",
    )

    context_tokens: int = Field(default=6144, ge=512, description="Prompt budget for a turn, across its sections.")
    recent_turns: int = Field(default=8, ge=0, le=200, description="Recent turns put in the prompt verbatim.")
    knowledge_hits: int = Field(default=5, ge=0, le=50, description="Retrieved passages put in the prompt.")
    recall_hits: int = Field(
        default=6, ge=0, le=50, description="Records of the campaign's past recalled into the prompt (0: no recall)."
    )

    @model_validator(mode="after")
    def _secrets_and_engines(self) -> ServeSettings:
        if self.narrator_api_key_file is not None:
            if self.narrator_api_key is not None:
                raise ConfigError(
                    f"{ENV_PREFIX}NARRATOR_API_KEY_FILE",
                    f"both {ENV_PREFIX}NARRATOR_API_KEY and {ENV_PREFIX}NARRATOR_API_KEY_FILE are set",
                )
            try:
                key = self.narrator_api_key_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{ENV_PREFIX}NARRATOR_API_KEY_FILE", f"cannot read it ({exc.strerror})") from None
            object.__setattr__(self, "narrator_api_key", SecretStr(key))
        if self.narrator_engine is EngineKind.VLLM:
            # the prompt budget plus the longest answer must fit the window, or turns fail at run time
            longest = max(self.narrator_max_tokens, self.extractor_max_tokens or 1024)
            needed = self.context_tokens + longest
            if self.narrator_max_model_len < needed:
                raise ConfigError(
                    f"{ENV_PREFIX}NARRATOR_MAX_MODEL_LEN",
                    f"{self.narrator_max_model_len} tokens cannot hold the prompt budget "
                    f"({ENV_PREFIX}CONTEXT_TOKENS={self.context_tokens}) and the longest answer "
                    f"({longest}): make it at least {needed}",
                )
        if self.narrator_min_replicas > self.narrator_max_replicas:
            raise ConfigError(
                f"{ENV_PREFIX}NARRATOR_MIN_REPLICAS",
                f"{self.narrator_min_replicas} is above {ENV_PREFIX}NARRATOR_MAX_REPLICAS={self.narrator_max_replicas}",
            )
        reserved = sorted(set(self.engines) & set(RESERVED_ENGINES))
        if reserved:
            raise ConfigError(f"{ENV_PREFIX}ENGINES", f"{reserved} name the deployment's own engines: pick other names")
        if self.narrator_engine is EngineKind.LOCAL and self.extractor_engine is None:
            object.__setattr__(self, "extractor_engine", EngineKind.LOCAL)
        if self.narrator_engine is EngineKind.OPENAI and not self.narrator_base_url:
            raise ConfigError(f"{ENV_PREFIX}NARRATOR_BASE_URL", "engine 'openai' needs the endpoint's base URL")
        if self.extractor_engine is EngineKind.OPENAI and not (self.extractor_base_url or self.narrator_base_url):
            raise ConfigError(f"{ENV_PREFIX}EXTRACTOR_BASE_URL", "engine 'openai' needs the endpoint's base URL")
        if self.mcp_port is not None and self.mcp_port == self.api_port:
            raise ConfigError(
                f"{ENV_PREFIX}MCP_PORT",
                f"{self.mcp_port} is the API's port: leave it unset to serve MCP at /mcp on the API's port",
            )
        return self

    @property
    def loopback(self) -> bool:
        return self.api_host in ("127.0.0.1", "::1", "localhost")


def get_serve_settings() -> ServeSettings:
    """The process's serve settings, read once."""
    return _cached()


@lru_cache(maxsize=1)
def _cached() -> ServeSettings:
    return ServeSettings()


get_serve_settings.cache_clear = _cached.cache_clear  # type: ignore[attr-defined]


# ============================================================================================
# API keys


class Scope(StrEnum):
    """What a key may do besides its campaigns."""

    ADMIN = "admin"  # everything: libraries, ingest, every campaign, keys


class KeyRole(StrEnum):
    """A campaign key's role at the table: the highest authority it may claim (admin keys: any)."""

    PLAYER = "player"  # plays turns, proposes with player authority, adds its character's memories, reads
    GM = "gm"  # also runs the table: scenes, the gate, the head, retcons, rulings, its campaign's keys


class ApiKeyInfo(BaseModel):
    """An API key as listed (never the secret)."""

    id: Id
    name: Name
    admin: bool = False
    role: KeyRole = Field(
        default=KeyRole.PLAYER, description="On its campaigns: what authority its proposals and retcons may claim."
    )
    campaigns: list[Id] = Field(default_factory=list, description="Campaigns the key may read and write.")
    character_entity_id: Id | None = Field(default=None, description="The character a player key plays.")
    created_at: str
    revoked: bool = False


class KeyCreate(BaseModel):
    """``POST /api/v1/keys`` (admin): a new key. A GM mints player keys with :class:`PlayerKeyCreate`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    admin: bool = False
    role: KeyRole = KeyRole.PLAYER
    campaigns: list[Id] = Field(default_factory=list, max_length=1000)
    character_entity_id: Id | None = Field(default=None, description="The character a player key plays.")


class PlayerKeyCreate(BaseModel):
    """``POST /api/v1/campaigns/{id}/keys`` (the campaign's GM): a player key for this campaign."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    character_entity_id: Id | None = Field(default=None, description="The character the player plays.")


class CreatedKey(BaseModel):
    """A key just created: the secret, shown this once and never stored, and the key as listed."""

    key: str = Field(description="The secret: send it as 'Authorization: Bearer KEY'. It is not shown again.")
    info: ApiKeyInfo


# ============================================================================================
# answers of the API's operations (both doors)


class SearchAnswer(BaseModel):
    """A knowledge search's hits, with the time it took."""

    query: str
    hits: list[SearchHit]
    took_ms: float


class RetconAnswer(BaseModel):
    """A retconned fact and the fact that replaces it (None: it simply never was)."""

    fact_id: Id
    status: str = "retconned"
    replaced_by: Id | None = None


class CampaignBundle(BaseModel):
    """A campaign exported as a bundle (a zip); in JSON (over MCP) its bytes travel base64-encoded."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    campaign_id: Id
    filename: str
    media_type: str = "application/zip"
    size: int = Field(ge=0)
    sha256: str
    data: bytes


# ============================================================================================
# request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorldCreate(_Body):
    name: Name
    description: Text | None = None
    axioms: list[Text] = Field(default_factory=list, max_length=500)


class CampaignCreate(_Body):
    world_id: Id
    name: Name
    profile: StoryProfile
    narrator_rules: list[Text] = Field(default_factory=list, max_length=200)
    library_pins: list[LibraryPin] = Field(
        default_factory=list,
        max_length=500,
        description="The libraries and items the campaign draws on (empty: the whole library).",
    )

    model_roles: ModelRoles | None = Field(
        default=None, description="The engine that plays each seat (narrator, extractor, summarizer, judge)."
    )

    _check_pins = field_validator("library_pins")(check_library_pins)


class CampaignLibrary(_Body):
    """The libraries and items a campaign draws on, each with its use; empty = the whole library."""

    pins: list[LibraryPin] = Field(default_factory=list, max_length=500)

    _check_pins = field_validator("pins")(check_library_pins)


class TurnRequest(_Body):
    text: TextOrEmpty = Field(default="", description="The player's input.")
    input_mode: InputMode = InputMode.ACTION
    speaker: Speaker | None = None
    stream: bool = Field(default=False, description="Stream the narration as server-sent events.")
    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**32 - 1,
        description="Sampling seed of the narration: the same seed, prompt and model narrate the same text on one "
        "machine (None: unseeded). Recorded in the turn's generation metadata.",
    )


class TakeRequest(_Body):
    stream: bool = False


class BranchCreate(_Body):
    from_turn_id: Id
    name: Name | None = None


class CheckpointCreate(_Body):
    name: Name
    turn_id: Id | None = None
    kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL
    description: Note | None = None


class SceneCreate(_Body):
    title: Name | None = None
    location_entity_id: Id | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list, max_length=500)


class ProposalCreate(_Body):
    """A proposed change. Who proposed it is the server's to record (from the caller's key), never the
    client's; the authority claimed must be one the caller's role may claim (never ``system``)."""

    type: ChangeType
    content: dict[str, Any]
    authority: Authority = Authority.PLAYER
    confidence: Confidence = 1.0
    evidence: Evidence = Field(default_factory=Evidence)
    turn_id: Id | None = None
    resolution: Resolution | None = None


class CommitRequest(_Body):
    proposal_ids: list[Id] = Field(min_length=1, max_length=1000)


class EndSceneRequest(_Body):
    summary: Text | None = None


class RetconRequest(_Body):
    campaign_id: Id
    reason: Note
    value: AttributeValue = None
    object_entity_id: Id | None = None
    authority: Authority = Authority.GM


class MemoryCreate(_Body):
    """``POST /api/v1/campaigns/{id}/memories``: what a character remembers, believes or feels."""

    observer_entity_id: Id = Field(description="Whose memory it is (an entity of the campaign at the anchor turn).")
    text: Text
    kind: SubjectiveKind = SubjectiveKind.MEMORY
    subject_entity_ids: list[Id] = Field(default_factory=list, max_length=100, description="Who or what it is about.")
    anchor_turn_id: Id | None = Field(
        default=None, description="The turn it belongs to (seen only from that turn's future); the head when unset."
    )
    salience: Confidence = 0.5
    visibility: Visibility | None = Field(
        default=None,
        description="Who at the table may see it: 'public', 'gm' (the GM's alone) or named characters' players; "
        "unset: known to its observer.",
    )


class MemoryRetract(_Body):
    """``POST /api/v1/campaigns/{id}/memories/{memory_id}/retract``: why the memory no longer holds."""

    reason: Note


# ============================================================================================
# what the extractor model writes (its JSON schema constrains the generation)


class ExtractedProposal(_Body):
    """One change the narration implies, as the extractor model states it."""

    content: ProposalContent = Field(description="The typed change; its `type` says which kind.")
    confidence: Confidence = Field(description="How sure the extractor is that the narration implies it.")
    quote: Annotated[str, TextRule(500)] | None = Field(
        default=None, description="The words of the narration it rests on."
    )


class ExtractionBatch(_Body):
    """Everything the extractor found in one turn."""

    proposals: list[ExtractedProposal] = Field(default_factory=list, max_length=50)
