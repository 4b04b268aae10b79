"""A sentence-transformers model's encoder run by ONNX Runtime, for the small batches of a search.

A query is one short text: torch spends most of its ~8 ms on the per-call overhead of a dozen layers,
where ONNX Runtime runs the same graph in ~3 ms on one thread (all-MiniLM-L6-v2, measured in
``benchmarks/recall_scale.py``). The vectors are the same model's, equal to ~1e-7, so a query embedded
here finds what it found through torch among documents embedded by torch.

The model's transformer is exported once per model, torch and transformers version into a folder and
reused by later processes (the file name holds a hash of all of them; the export is written to a
temporary name and moved into place, so processes starting together never read half a file). Only a
plain stack is exported: a Transformer, mean pooling, optionally Normalize; anything else, a missing
``onnx``/``onnxruntime``, or a copy whose vectors differ from torch's leaves the caller on torch.

A copy built by an earlier process is also opened *without torch* (:meth:`OnnxEncoder.open_kept`): the
build writes a record beside it, named by a digest of the model folder and of the installed torch,
transformers, sentence-transformers and ONNX Runtime versions, holding torch's own vectors of the probe
texts; a later process finds the record by the same digest, tokenizes with the model folder's
``tokenizer.json`` (the ``tokenizers`` library, which the HF tokenizer wraps) and checks the copy's
vectors against the recorded ones before using it. A search or a server that only embeds queries then
starts in well under a second instead of the seconds torch and sentence-transformers take to import.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

log = structlog.get_logger(__name__)

#: Largest difference from torch's vector that a built copy may show on the probe texts.
TOLERANCE = 1e-4
PROBES = ("A short query.", "What did the blacksmith tell us about the missing caravan, forty sessions ago?")
OPSET = 17


class OnnxEncoder:
    """Embeds texts with an ONNX copy of a loaded ``SentenceTransformer`` (mean pooling, as it does).

    Build it with :meth:`build`, which returns None where the copy cannot be made or does not match.
    Safe to call from several threads (ONNX Runtime's ``run`` is; the tokenizer is used under a lock).
    """

    def __init__(self, session: Any, tokenizer: Any, max_tokens: int, normalize: bool, path: Path) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.normalize = normalize
        self.path = path
        self.inputs = [i.name for i in session.get_inputs()]
        self._lock = threading.Lock()

    @classmethod
    def build(
        cls, model: Any, folder: Path, *, threads: int, normalize: bool, source: Path | None = None
    ) -> OnnxEncoder | None:
        """An encoder for ``model`` (a loaded ``SentenceTransformer``), exporting it into ``folder`` unless
        a copy is there already; None (logged as ``embedding_onnx_unavailable``) where it cannot be used.

        Args:
            model: the sentence-transformers model torch runs.
            folder: where exported copies are kept.
            source: the model folder ``model`` was loaded from; with it, the record that lets a later
                process open the copy without torch (:meth:`open_kept`) is written.
            threads: ONNX Runtime's intra-op threads.
            normalize: L2-normalise the vectors (as the embedder's config says).
        """
        try:
            import onnxruntime as ort
        except ImportError:
            log.info("embedding_onnx_unavailable", reason="onnxruntime is not installed (the cpu extra has it)")
            return None
        try:
            if not _plain_stack(model):
                log.info("embedding_onnx_unavailable", reason="not a Transformer + mean pooling model")
                return None
            path = folder / f"{_key(model)}.onnx"
            kept = path.exists()
            if not kept:
                _export(model, path)
            max_tokens = int(model.max_seq_length or 256)
            try:
                encoder = cls(_session(ort, path, threads), model.tokenizer, max_tokens, normalize, path)
                gap = encoder.gap(model)
            except Exception:
                if not kept:
                    raise
                encoder, gap = None, float("inf")
            if kept and gap > TOLERANCE:
                # a kept copy that no longer loads or reads right (damaged on disk) is made again, once
                log.warning("embedding_onnx_reexported", path=str(path))
                path.unlink(missing_ok=True)
                _export(model, path)
                encoder = cls(_session(ort, path, threads), model.tokenizer, max_tokens, normalize, path)
                gap = encoder.gap(model)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the caller on torch, which still works
            log.warning("embedding_onnx_unavailable", reason=f"{type(exc).__name__}: {exc}")
            return None
        if gap > TOLERANCE:
            log.warning("embedding_onnx_unavailable", reason=f"its vectors differ from torch's by {gap:.2e}")
            return None
        if source is not None:
            _write_record(folder, source, normalize, path, max_tokens, model)
        log.info("embedding_onnx_ready", path=str(path), threads=threads)
        return encoder

    @classmethod
    def open_kept(cls, source: Path, folder: Path, *, threads: int, normalize: bool) -> OnnxEncoder | None:
        """The copy an earlier process built from the model folder ``source`` into ``folder``, opened
        without torch; None (the caller then loads torch and :meth:`build` s) where there is no record for
        this model and these versions, its copy or the folder's ``tokenizer.json`` is missing, or its
        vectors differ from the recorded ones."""
        try:
            import onnxruntime as ort
            import tokenizers
        except ImportError:
            return None
        try:
            record_path = folder / f"source-{source_key(source, normalize)}.json"
            if not record_path.is_file() or not (source / "tokenizer.json").is_file():
                return None
            record = json.loads(record_path.read_text())
            path = folder / record["onnx"]
            tokenizer = FolderTokenizer(tokenizers.Tokenizer.from_file(str(source / "tokenizer.json")), source)
            encoder = cls(_session(ort, path, threads), tokenizer, int(record["max_tokens"]), normalize, path)
            expected = np.asarray(record["vectors"], dtype=np.float32)
            gap = float(np.abs(encoder.encode(list(record["probes"])) - expected).max())
        except Exception as exc:  # noqa: BLE001 - the caller still has torch's way
            log.warning("embedding_onnx_kept_unusable", reason=f"{type(exc).__name__}: {exc}")
            return None
        if gap > TOLERANCE:
            log.warning("embedding_onnx_kept_unusable", reason=f"vectors differ from the recorded ones by {gap:.2e}")
            return None
        log.info("embedding_onnx_ready", path=str(path), threads=threads, torch=False)
        return encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts`` (float32, input order), as the sentence-transformers model gives them."""
        with self._lock:
            enc = self.tokenizer(
                list(texts), padding=True, truncation=True, max_length=self.max_tokens, return_tensors="np"
            )
        feeds = {name: np.asarray(enc[name], dtype=np.int64) for name in self.inputs}
        hidden = self.session.run(None, feeds)[0]
        mask = np.asarray(enc["attention_mask"], dtype=np.float32)[..., None]
        vectors = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        if self.normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32, copy=False)

    def gap(self, model: Any) -> float:
        """The largest difference between this copy's vectors and ``model``'s own on :data:`PROBES`."""
        theirs = model.encode(list(PROBES), normalize_embeddings=self.normalize, convert_to_numpy=True)
        return float(np.abs(self.encode(PROBES) - theirs).max())


def _session(ort: Any, path: Path, threads: int) -> Any:
    """An ONNX Runtime session on ``path`` with ``threads`` intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # a spinning worker thread takes a core from the other processes of a small machine
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _plain_stack(model: Any) -> bool:
    """Whether ``model`` is Transformer, mean Pooling and at most a Normalize (what :meth:`encode` does)."""
    kinds = [type(module).__name__ for module in model]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        return False
    pooling = model[1]
    mode = getattr(pooling, "pooling_mode", None)
    if mode is not None:
        return mode == "mean"
    return bool(getattr(pooling, "pooling_mode_mean_tokens", False)) and not any(
        getattr(pooling, f"pooling_mode_{m}", False) for m in ("cls_token", "max_tokens", "weightedmean_tokens")
    )


def _key(model: Any) -> str:
    """A name for the exported copy: the model's weights and config, and the exporting versions."""
    import torch
    import transformers

    auto = model[0].auto_model
    digest = hashlib.sha256()
    digest.update(json.dumps(auto.config.to_dict(), sort_keys=True, default=str).encode())
    for name, tensor in sorted(auto.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().flatten()[:1024].cpu().float().numpy().tobytes())  # tells weights apart
        digest.update(str(tuple(tensor.shape)).encode())
    digest.update(f"{torch.__version__} {transformers.__version__} {OPSET}".encode())
    return f"{auto.config.model_type}-{digest.hexdigest()[:16]}"


def _export(model: Any, path: Path) -> None:
    """Export ``model``'s transformer (token ids in, last hidden state out) to ``path``, atomically."""
    import torch

    auto = model[0].auto_model
    sample = model.tokenizer(["warm up"], return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.auto = auto

        def forward(self, *tensors: Any) -> Any:
            return self.auto(**dict(zip(names, tensors, strict=True))).last_hidden_state

    axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "hidden"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".onnx")
    os.close(fd)
    try:
        # the tracer's warnings are about shapes the dynamic axes cover; they would only alarm a user
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden().eval(),
                tuple(sample[name] for name in names),
                tmp,
                input_names=names,
                output_names=["hidden"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class FolderTokenizer:
    """A model folder's ``tokenizer.json`` (the ``tokenizers`` library) called as the HF tokenizer is by
    :meth:`OnnxEncoder.encode`: padded to the longest text, truncated to ``max_length``, numpy arrays."""

    def __init__(self, tokenizer: Any, source: Path) -> None:
        self.tokenizer = tokenizer
        config_path = source / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        pad = config.get("pad_token", "[PAD]")
        pad = pad.get("content", "[PAD]") if isinstance(pad, dict) else pad
        pad_id = tokenizer.token_to_id(pad)
        self.pad = (pad, 0 if pad_id is None else pad_id)

    def __call__(self, texts: list[str], *, max_length: int, **_: Any) -> dict[str, np.ndarray]:
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(pad_id=self.pad[1], pad_token=self.pad[0])
        found = self.tokenizer.encode_batch(texts)
        return {
            "input_ids": np.asarray([e.ids for e in found], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in found], dtype=np.int64),
            "token_type_ids": np.asarray([e.type_ids for e in found], dtype=np.int64),
        }


#: Files above this size are digested by their size and their first and last MiB (the weights: reading
#: all 90 MB of them on every start would cost more than the import it saves).
_SAMPLED = 16 << 20


def source_key(source: Path, normalize: bool) -> str:
    """A digest of the model folder's files and of the installed versions that made and check a copy:
    computed without importing torch."""
    from importlib import metadata

    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(source)} {size}".encode())
        with path.open("rb") as handle:
            if size <= _SAMPLED:
                digest.update(handle.read())
            else:
                digest.update(handle.read(1 << 20))
                handle.seek(-(1 << 20), os.SEEK_END)
                digest.update(handle.read())
    for dist in ("torch", "transformers", "sentence-transformers", "onnxruntime"):
        try:
            digest.update(f"{dist} {metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{dist} -".encode())
    digest.update(f"{OPSET} {normalize}".encode())
    return digest.hexdigest()[:16]


def _write_record(folder: Path, source: Path, normalize: bool, path: Path, max_tokens: int, model: Any) -> None:
    """The record :meth:`OnnxEncoder.open_kept` finds the copy by, with torch's vectors of the probes;
    written to a temporary name and moved into place. A failure only costs later processes torch's start."""
    try:
        vectors = model.encode(list(PROBES), normalize_embeddings=normalize, convert_to_numpy=True)
        record = {"onnx": path.name, "max_tokens": max_tokens, "probes": list(PROBES), "vectors": vectors.tolist()}
        target = folder / f"source-{source_key(source, normalize)}.json"
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.stem}-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        os.replace(tmp, target)
    except Exception as exc:  # noqa: BLE001
        log.warning("embedding_onnx_record_failed", reason=f"{type(exc).__name__}: {exc}")
