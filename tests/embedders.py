"""A fast deterministic embedder for tests that need many vectors or a second embedder."""

from __future__ import annotations

import hashlib
import re

import numpy as np
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.embeddings import VectorEmbeddingModel


class HashingEmbeddingModel(VectorEmbeddingModel):
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

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        return [self.vector(t) for t in texts]
