"""A fast deterministic embedder for tests that need many vectors or a second embedder."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType


class HashingEmbeddingModel(EmbeddingModel):
    """Bag of hashed words: texts sharing words get similar vectors. Not a product embedder."""

    def __init__(self, dimensions: int = 64, name: str = "hashing") -> None:
        super().__init__()
        self.dimensions = dimensions
        self._name = name

    @property
    def model_name(self) -> str:
        return f"{self._name}-{self.dimensions}"

    @property
    def system(self) -> str:
        return "test"

    def vector(self, text: str) -> list[float]:
        v = np.zeros(self.dimensions, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimensions] += 1.0
        norm = float(np.linalg.norm(v)) or 1.0
        return (v / norm).tolist()

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        return EmbeddingResult(
            [self.vector(t) for t in texts],
            inputs=texts,
            input_type=input_type,
            model_name=self.model_name,
            provider_name=self.system,
        )
