"""Small batches (a search's query) are embedded by an ONNX Runtime copy of the model, with torch's vectors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models import onnx_encoder
from models.embedding import SMALL_BATCH, EmbeddingConfig, SentenceTransformerEmbedder, default_onnx_dir
from models.onnx_encoder import OnnxEncoder

pytest.importorskip("onnxruntime", reason="the cpu extra installs onnxruntime")

QUERIES = [
    "what did the blacksmith tell us about the missing caravan",
    "Would Caroline pursue writing as a career option?",
    "How do fate points refresh between sessions?",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def torch_only() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, small_batch_runtime="torch"))
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def with_onnx(folder: Path) -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, onnx_dir=str(folder)))
    embedder.load()
    return embedder


def test_a_query_gets_the_vector_torch_gives(
    with_onnx: SentenceTransformerEmbedder, torch_only: SentenceTransformerEmbedder
) -> None:
    encoder = with_onnx.small_batch_encoder()
    assert encoder is not None and encoder.path.parent.exists()
    assert torch_only.small_batch_encoder() is None
    for query in QUERIES:
        ours, theirs = with_onnx.embed_query(query), torch_only.embed_query(query)
        assert ours.shape == theirs.shape == (with_onnx.dim,) and ours.dtype == np.float32
        assert np.abs(ours - theirs).max() < 1e-5
    batch = with_onnx.embed_documents(QUERIES)  # padded to the longest: the mask keeps padding out
    assert np.abs(batch - torch_only.embed_documents(QUERIES)).max() < 1e-5
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_only_small_batches_go_through_onnx(with_onnx: SentenceTransformerEmbedder, monkeypatch: Any) -> None:
    calls: list[int] = []
    encoder = with_onnx.small_batch_encoder()
    assert encoder is not None
    real = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts: calls.append(len(texts)) or real(texts))
    with_onnx.embed_query("a query")
    with_onnx.embed_documents(["chunk"] * SMALL_BATCH)
    with_onnx.embed_documents(["chunk"] * (SMALL_BATCH + 1))  # a batch of documents: torch, sorted by length
    assert calls == [1, SMALL_BATCH]


def test_the_exported_copy_is_reused_by_a_later_process(
    folder: Path, with_onnx: SentenceTransformerEmbedder, monkeypatch: Any
) -> None:
    assert with_onnx.small_batch_encoder() is not None
    copies = sorted(folder.glob("*.onnx"))
    assert len(copies) == 1 and not list(folder.glob(".*"))  # no temporary file left beside it

    def refuse(model: Any, path: Path) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_encoder, "_export", refuse)
    later = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, onnx_dir=str(folder)))
    encoder = later.small_batch_encoder()
    assert encoder is not None and encoder.path == copies[0]


def test_a_copy_that_differs_from_torch_is_not_used(
    tmp_path: Path, torch_only: SentenceTransformerEmbedder, monkeypatch: Any
) -> None:
    monkeypatch.setattr(OnnxEncoder, "gap", lambda self, model: 0.5)
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, onnx_dir=str(tmp_path)))
    assert embedder.small_batch_encoder() is None
    assert np.abs(embedder.embed_query(QUERIES[0]) - torch_only.embed_query(QUERIES[0])).max() < 1e-6


def test_without_onnxruntime_torch_embeds(
    tmp_path: Path, torch_only: SentenceTransformerEmbedder, monkeypatch: Any
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, onnx_dir=str(tmp_path)))
    assert embedder.small_batch_encoder() is None
    assert not list(tmp_path.iterdir())
    assert np.abs(embedder.embed_query(QUERIES[1]) - torch_only.embed_query(QUERIES[1])).max() < 1e-6


def test_a_model_pooled_otherwise_is_not_exported(torch_only: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = torch_only.model
    cls_pooled = SentenceTransformer(modules=[model[0], type(model[1])(model.get_embedding_dimension(), "cls")])
    assert OnnxEncoder.build(cls_pooled, tmp_path, threads=1, normalize=True) is None
    assert not list(tmp_path.iterdir())


def test_the_ingest_embed_stage_stays_on_torch() -> None:
    """Bulk embedding needs no ONNX copy: an actor would pay its export or load for a job's small tails."""
    from jobs.plan import IngestOptions
    from jobs.stages import EmbedStage

    stage = EmbedStage(IngestOptions(library="lore"))
    assert stage.embedder.config.small_batch_runtime == "torch"
    assert stage.embedder.small_batch_encoder() is None
    assert stage.embedder.embed_documents(["a short tail"]).shape == (1, stage.dim)


def test_copies_are_kept_in_the_users_cache_not_a_shared_temporary_folder(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_onnx_dir() == tmp_path / "cache" / "lorekeeper" / "onnx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_onnx_dir() == tmp_path / "home" / ".cache" / "lorekeeper" / "onnx"


def test_a_damaged_kept_copy_is_exported_again(folder: Path, with_onnx: SentenceTransformerEmbedder) -> None:
    encoder = with_onnx.small_batch_encoder()
    assert encoder is not None
    damaged = folder / "damaged"
    damaged.mkdir(exist_ok=True)
    (damaged / encoder.path.name).write_bytes(b"not an onnx model")
    again = OnnxEncoder.build(with_onnx.model, damaged, threads=1, normalize=True)
    assert again is not None and again.path == damaged / encoder.path.name
    assert np.abs(again.encode(QUERIES) - encoder.encode(QUERIES)).max() < 1e-6


def test_a_later_process_embeds_a_query_without_torch(folder: Path, with_onnx: SentenceTransformerEmbedder) -> None:
    """A search or a server that only embeds queries opens the kept copy by its record: no torch import."""
    import subprocess

    assert with_onnx.small_batch_encoder() is not None
    assert len(list(folder.glob("source-*.json"))) == 1  # the record the build wrote beside its copy
    code = (
        "import sys, json\n"
        "from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder\n"
        f"e = SentenceTransformerEmbedder(EmbeddingConfig(threads=1, onnx_dir={str(folder)!r}))\n"
        f"vectors = [e.embed_query(q).tolist() for q in {QUERIES!r}]\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, "
        "'st': 'sentence_transformers' in sys.modules, 'vectors': vectors}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    found = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert found["torch"] is False and found["st"] is False
    for query, vector in zip(QUERIES, found["vectors"], strict=True):
        assert np.abs(np.asarray(vector, dtype=np.float32) - with_onnx.embed_query(query)).max() < 1e-5


def test_the_folder_tokenizer_reads_as_the_models_own(with_onnx: SentenceTransformerEmbedder) -> None:
    import tokenizers

    source = with_onnx._source_folder()
    assert source is not None
    ours = onnx_encoder.FolderTokenizer(tokenizers.Tokenizer.from_file(str(source / "tokenizer.json")), source)
    theirs = with_onnx.model.tokenizer
    texts = [
        *QUERIES,
        "",
        "Ünïcödé — “quoted” naïve café, 3rd-level 60-ft. sphere (1d3)",
        "word " * 400,  # truncated at the model's length
        "The Kraken's lair\n\ttabs and  spaces",
    ]
    for batch in ([t] for t in texts), [texts]:
        for group in batch:
            a = ours(group, max_length=with_onnx.max_tokens)
            b = theirs(group, padding=True, truncation=True, max_length=with_onnx.max_tokens, return_tensors="np")
            for name in ("input_ids", "attention_mask", "token_type_ids"):
                assert np.array_equal(a[name], np.asarray(b[name])), (name, group)


def test_a_kept_copy_whose_record_disagrees_is_not_opened(
    tmp_path: Path, with_onnx: SentenceTransformerEmbedder, folder: Path
) -> None:
    import json
    import shutil

    source = with_onnx._source_folder()
    assert source is not None
    for path in folder.iterdir():
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    (record_path,) = tmp_path.glob("source-*.json")
    record = json.loads(record_path.read_text())
    assert OnnxEncoder.open_kept(source, tmp_path, threads=1, normalize=True) is not None
    record["vectors"] = [[v + 0.01 for v in vector] for vector in record["vectors"]]
    record_path.write_text(json.dumps(record))
    assert OnnxEncoder.open_kept(source, tmp_path, threads=1, normalize=True) is None
    assert OnnxEncoder.open_kept(source, tmp_path, threads=1, normalize=False) is None  # another record's key


def test_the_records_key_follows_the_model_folder(tmp_path: Path, with_onnx: SentenceTransformerEmbedder) -> None:
    import shutil

    source = with_onnx._source_folder()
    assert source is not None
    copy = tmp_path / "model"
    shutil.copytree(source, copy)
    assert onnx_encoder.source_key(copy, True) == onnx_encoder.source_key(source, True)
    config = copy / "config.json"
    config.write_text(config.read_text().replace("}", ', "edited": true}', 1))
    assert onnx_encoder.source_key(copy, True) != onnx_encoder.source_key(source, True)
