"""The settings the RAG toolkit reads: where the knowledge base lives, how to embed, chunk and search.

``RagConfig`` is a plain pydantic model so that library users can build one in code. The server's
``AppConfig`` extends it and reads every field from ``RAGSTREAM_*`` environment variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .embeddings import DEFAULT_EMBEDDER

__all__ = ["RagConfig", "SearchMode"]

SearchMode = Literal["hybrid", "vector", "text"]


def _option_text(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


class RagConfig(BaseModel):
    """Settings for the knowledge base and the toolsets built on it."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid")

    data_dir: Path = Field(
        default=Path(".ragstream/data"),
        description="Directory for the knowledge base and the durable thread store.",
    )
    kb_uri: str | None = Field(
        default=None,
        description="LanceDB URI of the knowledge base (for example s3://bucket/kb); default: <data_dir>/kb.",
    )
    kb_storage_options: dict[str, str] = Field(
        default_factory=dict,
        description=(
            'Object-store options for the knowledge base, as JSON (e.g. {"client_max_retries": "1"}); '
            "they override the standard AWS_* variables."
        ),
    )
    embedder: str = Field(
        default=DEFAULT_EMBEDDER,
        description=(
            "Embedding model: local:all-minilm-l6-v2-int8, local:all-minilm-l6-v2 (fp32: knowledge "
            "bases built before the int8 default), local:wordllama or any pydantic-ai embedder."
        ),
    )
    model: str | None = Field(
        default=None,
        description="Chat model (any pydantic-ai model string); unset means the offline extractive model.",
    )
    model_max_tokens: int | None = Field(
        default=4096,
        ge=1,
        description="Most tokens the model may write per response (max_tokens); unset: the provider's default.",
    )
    model_temperature: float | None = Field(
        default=0.2,
        ge=0.0,
        le=2.0,
        description=(
            "Sampling temperature sent to the model; unset: the provider's default "
            "(reasoning models take none: pydantic-ai leaves it out for them)."
        ),
    )
    model_thinking: bool | Literal["minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        default=None,
        description=(
            "Thinking for models that can: true, false or an effort (minimal ... max), as pydantic-ai's "
            "thinking setting; unset: the model's default."
        ),
    )
    model_timeout: float | None = Field(
        default=60.0,
        gt=0,
        description="Seconds one model request may wait for the provider (per attempt, and between streamed chunks).",
    )
    model_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries of a model request the provider refused for a passing reason (429, 5xx, no connection).",
    )
    model_retry_backoff: float = Field(
        default=1.0,
        ge=0.0,
        le=60.0,
        description="Seconds before the first retry, doubled for each next one (a longer Retry-After wins).",
    )
    history_tokens: int | None = Field(
        default=500,
        ge=0,
        description=(
            "Tokens (estimated) of earlier turns sent with a question, their tool results shortened "
            "to references; newest kept first. none: every earlier turn, whole."
        ),
    )
    context_tokens: int | None = Field(
        default=None,
        ge=1000,
        description="The model's context window in tokens; unset: what pydantic-ai knows of the model, else 128000.",
    )
    chunk_max_chars: int = Field(default=1200, ge=200, le=20_000, description="Upper bound of a chunk.")
    max_file_mb: float = Field(
        default=512.0,
        gt=0,
        description="Largest file ingested, in MB (MiB); a bigger one fails alone with its size and this limit.",
    )
    search_limit: int = Field(default=5, ge=1, le=50, description="Default number of search hits.")
    search_mode: SearchMode = Field(default="hybrid", description="Default search mode.")
    reranker: str = Field(
        default="none",
        description=(
            "Reorders each search's best 20 candidates: none, cross-encoder:<model>, cohere:<model>, "
            "jina:<model>, voyage:<model>, or model[:<chat model>] (the chat model ranks them)."
        ),
    )
    context_chars: int = Field(
        default=1500, ge=0, le=20_000, description="Characters of neighbouring text added to a hit."
    )
    kb_read_consistency_seconds: float = Field(
        default=0.0,
        ge=0.0,
        le=3600.0,
        description=(
            "How old the knowledge base's view of other processes' writes may get, in seconds; 0 checks "
            "on every call (always current), a few seconds saves a round trip per search on object storage."
        ),
    )
    ann_index_threshold: int = Field(
        default=5_000,
        ge=0,
        description="Build the vector index once the chunks table has this many rows (0: never).",
    )
    qa_recall_threshold: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Cosine similarity at which a prior answer is reused."
    )
    qa_history_limit: int = Field(
        default=50, ge=1, description="QA entries kept per thread (oldest evicted)."
    )
    search_history_limit: int = Field(
        default=20, ge=1, description="Searches kept per thread (oldest evicted)."
    )
    citations_limit: int = Field(
        default=200, ge=1, description="Citation cards kept per thread (oldest evicted); readable by index."
    )
    citations_emitted: int = Field(
        default=5,
        ge=0,
        description="Citation cards the AG-UI state carries: the most recently cited ones.",
    )
    searches_emitted: int = Field(
        default=1, ge=0, description="Searches the AG-UI state carries: the latest ones."
    )
    qa_history_emitted: int = Field(
        default=1, ge=0, description="QA entries the AG-UI state carries: the latest ones."
    )
    state_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Put the whole AG-UI state under this key (e.g. ragstream); unset: flat.",
    )

    @field_validator("kb_storage_options", mode="before")
    @classmethod
    def _options_as_strings(cls, value: object) -> object:
        """LanceDB takes strings: JSON numbers and booleans are accepted and spelled as strings."""
        if not isinstance(value, dict):
            return value
        return {key: _option_text(item) for key, item in value.items()}

    @property
    def emit_limits(self) -> dict[str, int]:
        """How many of their latest items the growing state fields carry to the client."""
        return {
            "citations": self.citations_emitted,
            "searches": self.searches_emitted,
            "qa_history": self.qa_history_emitted,
        }

    @property
    def resolved_kb_uri(self) -> str:
        """The knowledge base location: ``kb_uri`` when set, else ``<data_dir>/kb``."""
        return self.kb_uri or str(self.data_dir / "kb")
