"""The embedding stage on a GPU: the same model and interface as on the CPU, on CUDA.

Runs only where a GPU is lent (``pytest -m gpu tests/gpu``); skipped elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from jobs.plan import plan_stages
from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - depends on the machine
    pytest.skip("no CUDA device", allow_module_level=True)


def test_cuda_embeddings_match_cpu() -> None:
    texts = ["Spend a fate point to invoke an aspect.", "Stress boxes absorb shifts of harm."] * 64
    gpu = SentenceTransformerEmbedder(EmbeddingConfig(device="cuda", batch_size=256)).embed_documents(texts)
    cpu = SentenceTransformerEmbedder(EmbeddingConfig(device="cpu")).embed_documents(texts[:2])
    assert gpu.shape == (len(texts), 384) and gpu.dtype == np.float32
    assert np.allclose(gpu[:2], cpu, atol=1e-3)


def test_gpu_plan_gives_one_embed_actor_per_gpu() -> None:
    plan = plan_stages(16, torch.cuda.device_count(), embedded_stores=False)
    assert plan.embed_gpus == 1 and plan.embed_concurrency == torch.cuda.device_count()
    assert plan.embed_batch_size >= 256
