"""Cross-encoder re-rankers behind one interface.

A cross-encoder reads the query and a passage together and scores how well the passage answers the
query; it is far slower than a bi-encoder, so search runs it only over the few best fused candidates.
The implementation is sentence-transformers' ``CrossEncoder`` loaded from a local folder: nothing is
fetched from a model hub at run time. No cross-encoder's weights ship on PyPI (flashrank and the like
download theirs on first use), so there is no default model: set ``LOREKEEPER_RERANKER_MODEL`` to a
folder holding a sentence-transformers or transformers sequence-classification model (for example
``cross-encoder/ms-marco-MiniLM-L6-v2`` copied onto the machine; a larger one such as
``BAAI/bge-reranker-v2-m3`` on GPUs).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from models.embedding import available_cpus
from schemas.errors import ConfigError, LorekeeperError


class RerankError(LorekeeperError):
    """The re-ranking model could not be loaded or failed on a batch."""

    status_code = 500
    code = "rerank_error"


class RerankConfig(BaseModel):
    """Which cross-encoder to load and how to run it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(
        min_length=1,
        description="A local folder holding a cross-encoder (sentence-transformers CrossEncoder or a "
        "transformers sequence-classification model with its tokenizer). Nothing is fetched from a hub.",
    )
    device: str = Field(default="cpu", description="cpu, cuda or cuda:N.")
    batch_size: int = Field(default=32, gt=0, le=1024, description="Query-passage pairs per forward pass.")
    max_length: int = Field(
        default=256, gt=8, le=8192, description="Tokens of query + passage read per pair (the rest is cut)."
    )
    threads: int | None = Field(
        default=None,
        gt=0,
        description="torch intra-op threads while scoring on CPU; None = every core. Set around each call, so "
        "the query embedder in the same process can keep its own (one query is too small to share; ten "
        "query-passage pairs are not: 2 threads scored them 2x faster than 1 on 2 cores).",
    )

    @property
    def name(self) -> str:
        """The model's name as recorded on search results (the folder's last path segment)."""
        return self.model.rstrip("/").rsplit("/", 1)[-1]


@runtime_checkable
class Reranker(Protocol):
    """Scores ``(query, passage)`` pairs; higher means a better answer to the query."""

    @property
    def name(self) -> str:
        """The model's name, recorded on re-ranked results and metrics."""
        ...

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One float per passage, in input order, shape ``(len(passages),)``."""
        ...


def resolve_reranker_path(model: str) -> str:
    """The local folder of a reranker model.

    Raises:
        ConfigError: ``model`` is not an existing folder (models are never downloaded at run time).
    """
    if not os.path.isdir(model):
        raise ConfigError(
            "LOREKEEPER_RERANKER_MODEL",
            f"{model!r} is not a local model folder (nothing is fetched from a hub; no reranker ships on PyPI)",
        )
    return model


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder``, loaded lazily in the process that scores.

    Scores are the model's raw logits for one-label models (no sigmoid): the order is the same and
    nothing saturates; for two-label models, the logit of the positive label.
    """

    def __init__(self, config: RerankConfig) -> None:
        self.config = config
        self.name = config.name
        self._model: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    @property
    def model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        path = resolve_reranker_path(self.config.model)
        import torch
        import transformers
        from sentence_transformers import CrossEncoder

        transformers.logging.disable_progress_bar()
        del torch  # threads are set per call (score)
        try:
            model = CrossEncoder(
                path, device=self.config.device, max_length=self.config.max_length, local_files_only=True
            )
        except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear error
            raise RerankError(f"cannot load reranker model {self.config.model!r}: {exc}") from exc
        model.eval()
        return model

    def load(self) -> None:
        """Load the model now (a replica's constructor), not on the first query."""
        self.model  # noqa: B018

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        import torch

        model = self.model
        previous = torch.get_num_threads()
        if self.config.device == "cpu":
            torch.set_num_threads(self.config.threads or available_cpus())
        try:
            raw = model.predict(
                [(query, p) for p in passages],
                batch_size=self.config.batch_size,
                show_progress_bar=False,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
            )
        except Exception as exc:  # noqa: BLE001
            raise RerankError(f"reranker {self.name!r} failed: {exc}") from exc
        finally:
            torch.set_num_threads(previous)
        scores = np.asarray(raw, dtype=np.float32)
        if scores.ndim == 2:  # two labels: (not relevant, relevant)
            scores = scores[:, -1]
        return scores.reshape(len(passages))


def build_reranker(config: RerankConfig | None) -> Reranker | None:
    """The reranker the configuration asks for, or None when none is configured."""
    return CrossEncoderReranker(config) if config is not None else None
