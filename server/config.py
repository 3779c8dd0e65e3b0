"""``AppConfig``: every setting of the server, read from ``RAGSTREAM_*`` variables and CLI flags.

``ragstream serve`` validates the configuration once (environment plus flags) and hands the whole
validated object to its worker processes (``to_worker_payload`` / ``from_worker_payload``), so
every field reaches every worker, whether it came from the environment or a flag.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from importlib import metadata
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from rag_tools.config import RagConfig
from rag_tools.kb import SyncSourceError, open_sync_source
from rag_tools.kb.access import check_groups

__all__ = [
    "WORKER_CONFIG_ENV",
    "AppConfig",
    "StaticToken",
    "SyncEntry",
    "installed_version",
    "invalid_settings",
    "unreadable_setting",
]

#: The URL schemes each backend's client accepts: anything else is refused when read, not at start-up.
_URL_SCHEMES = {
    "redis_url": ("redis", "rediss", "unix"),
    "database_url": ("postgresql", "postgres"),
    "oidc_issuer": ("https", "http"),
}

#: Where ``serve`` leaves the validated configuration for the worker processes it starts.
WORKER_CONFIG_ENV = "RAGSTREAM_WORKER_CONFIG"


class StaticToken(BaseModel):
    """A configured bearer token and the groups of the principal it signs in.

    ``RAGSTREAM_TOKENS`` takes either form per principal: ``{"alice": "s3cret"}`` or
    ``{"alice": {"token": "s3cret", "groups": ["hr"]}}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: SecretStr
    groups: tuple[str, ...] = ()


class SyncEntry(BaseModel):
    """A source to mirror on a schedule (``RAGSTREAM_SYNC``): a folder or ``s3://bucket/prefix``.

    Each run is a job of ``owner`` (a token principal; without tokens the local principal), who
    sees it in ``GET /documents/jobs`` and may cancel it. ``groups``, when given, are who may read
    the synced documents (``[]``: everyone); without them a document keeps its groups.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    interval_seconds: float = Field(default=300.0, ge=10)
    owner: str | None = None
    groups: tuple[str, ...] | None = None

    @field_validator("groups")
    @classmethod
    def _valid_groups(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else check_groups(value)

    @field_validator("source")
    @classmethod
    def _folder_or_s3(cls, value: str) -> str:
        try:  # the sync's own reading of the spec (no I/O: a folder is resolved, a bucket named)
            open_sync_source(value)
        except SyncSourceError as exc:
            raise ValueError(f"a sync source is a folder or s3://bucket/prefix: {exc}") from None
        return value


_MODULE_FUNCTION = re.compile(r"[\w.]+:\w+")


class AppConfig(RagConfig, BaseSettings):
    """The server's configuration: the RAG settings plus HTTP, auth, storage and run policy.

    Every field reads the environment variable ``RAGSTREAM_<FIELD>`` (for example
    ``RAGSTREAM_DATA_DIR``); CLI flags override the environment.
    """

    model_config = SettingsConfigDict(
        env_prefix="RAGSTREAM_",
        extra="forbid",
        validate_assignment=True,
        env_parse_none_str="none",
        # `RAGSTREAM_STATE_KEY=` (what a compose file passes for an unset `${VAR}`) means unset
        env_ignore_empty=True,
    )

    host: str = Field(default="127.0.0.1", description="Interface to listen on.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port to listen on.")
    workers: int = Field(default=1, ge=1, le=64, description="Worker processes (more than one needs Redis).")
    redis_url: str | None = Field(
        default=None,
        description="Redis URL for run locks, event logs and (without a database URL) threads shared by workers.",
    )
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL: threads live there (the durable record); Redis keeps locks and logs.",
    )
    tokens: dict[str, StaticToken] = Field(
        default_factory=dict,
        description=(
            'Bearer tokens by principal, as JSON: {"alice": "s3cret"}, or with the principal\'s groups: '
            '{"alice": {"token": "s3cret", "groups": ["hr"]}}. Empty: no authentication.'
        ),
    )
    editors: list[str] = Field(
        default_factory=list,
        description=(
            'Principals who may upload and delete documents, as JSON: ["alice"]. Every name must have a '
            "token. Without tokens the local principal is an editor."
        ),
    )
    editor_groups: list[str] = Field(
        default_factory=list,
        description=(
            'Groups whose members may upload and delete documents, as JSON: ["kb-editors"] (groups come '
            "from static tokens, the OIDC groups claim or the auth hook)."
        ),
    )
    oidc_issuer: str | None = Field(
        default=None,
        description=(
            "OpenID Connect issuer URL: bearer JWTs it signs sign users in (keys from its discovery "
            "document's jwks_uri). Needs oidc_audience."
        ),
    )
    oidc_audience: str | None = Field(
        default=None, description="The audience (aud) a JWT must be issued for: this API's identifier."
    )
    oidc_principal_claim: str = Field(default="sub", description="The JWT claim naming the principal.")
    oidc_groups_claim: str = Field(
        default="groups", description="The JWT claim listing the principal's groups."
    )
    oidc_leeway_seconds: float = Field(
        default=30.0, ge=0, le=300, description="Clock skew allowed when checking exp, nbf and iat."
    )
    oidc_jwks_refetch_seconds: float = Field(
        default=60.0,
        ge=0,
        description=(
            "Floor between key-set fetches caused by a token with an unknown key id (rotation); "
            "tokens with unknown keys in between are refused without a fetch."
        ),
    )
    mcp: bool = Field(
        default=False,
        description=(
            "Serve the knowledge base as an MCP server at /mcp (streamable HTTP, the same sign-in and "
            "document access as /agui); needs the mcp extra."
        ),
    )
    mcp_allow_writes: bool = Field(
        default=False,
        description="Offer the MCP tools ingest_document and delete_document (to editors only); off: read-only.",
    )
    auth: str | None = Field(
        default=None,
        description=(
            "Your own sign-in scheme, as module:function: called with the request's headers, it "
            "returns the principal (ragstream.Principal or a name), None, or raises ragstream.Refused."
        ),
    )
    limit_runs_per_minute: int | None = Field(
        default=None, ge=1, description="Runs a principal may start per calendar minute; unset: no limit."
    )
    limit_concurrent_runs: int | None = Field(
        default=None, ge=1, description="Runs a principal may have going at once; unset: no limit."
    )
    limit_upload_bytes_per_hour: int | None = Field(
        default=None,
        ge=1,
        description="Upload bytes a principal may send per calendar hour; unset: no limit.",
    )
    limit_tokens_per_day: int | None = Field(
        default=None,
        ge=1,
        description="Model tokens a principal's runs may use per UTC day, across runs; unset: no limit.",
    )
    job_heartbeat_seconds: float = Field(
        default=10.0,
        ge=1,
        description=(
            "How often workers look for ingestion jobs whose worker died; a job silent for three "
            "times this is retried once, then failed."
        ),
    )
    sync: list[SyncEntry] = Field(
        default_factory=list,
        description=(
            'Sources mirrored on a schedule, as JSON: [{"source": "s3://bucket/prefix", '
            '"interval_seconds": 300, "owner": "alice"}]; each run is a job of its owner.'
        ),
    )
    orphan_min_age_seconds: float = Field(
        default=3600.0,
        ge=0,
        description=(
            "Age after which what an interrupted write left (the original file and chunks of a document "
            "never published) is swept; the sweep runs at start and every hour."
        ),
    )
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS; empty: off.")
    cors_headers: list[str] = Field(
        default_factory=list,
        description=(
            "Request headers browsers may send across origins besides Authorization, Content-Type,"
            ' Last-Event-ID and the trace context (traceparent, tracestate), as JSON: ["X-Api-Key"] for'
            " a sign-in hook that reads one."
        ),
    )
    max_body_bytes: int = Field(default=1_000_000, ge=1024, description="Largest accepted /agui body.")
    max_upload_bytes: int = Field(
        default=20_000_000, ge=1024, description="Largest accepted document upload."
    )
    run_timeout: float = Field(
        default=300.0, gt=0, description="Seconds a run may take before it is stopped."
    )
    keepalive_seconds: float = Field(
        default=15.0, gt=0, description="Seconds without a write after which an SSE stream gets a keep-alive."
    )
    redis_prefix: str = Field(
        default="ragstream:", description="Prefix of every Redis key (several apps, one Redis)."
    )
    disconnect_policy: Literal["cancel", "finish"] | None = Field(
        default=None,
        description=(
            "When the last client of a run disconnects: cancel the run, or let it finish for a reconnect. "
            "Default: cancel with one process, finish with Redis (the reconnect may reach another worker)."
        ),
    )
    disconnect_grace_seconds: float = Field(
        default=5.0,
        ge=0,
        description=(
            "With the cancel policy: how long a reconnect may take before cancelling "
            "(a reloaded chat page picks its run up within it)."
        ),
    )
    event_log_ttl_seconds: float = Field(
        default=600.0, gt=0, description="How long a finished run's events stay available for reconnects."
    )
    run_lock_ttl_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Expiry of a run's thread lock; a heartbeat renews it while the run lives.",
    )
    tool_dirs: list[Path] = Field(
        default_factory=lambda: [Path(".ragstream/tools")],
        description="Directories of user tool files (*.py exporting TOOLS / TOOLSETS).",
    )
    approve_tools: list[str] = Field(
        default_factory=list,
        description="Tool names or glob patterns whose calls always need approval, in every thread.",
    )
    question_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long a tool's live question waits for the answer before the call fails.",
    )
    tool_output_limit: int = Field(
        default=20_000,
        ge=500,
        description="Characters of a tool result the model sees; the rest by reference.",
    )
    tool_attachment_max_bytes: int = Field(
        default=1_000_000,
        ge=1,
        le=6_000_000,
        description="Largest file a tool may attach to its result (`ToolResult`); larger ones are not kept.",
    )
    cache_max_threads: int = Field(default=1000, ge=1, description="Thread contexts kept in memory.")
    cache_ttl_seconds: float = Field(
        default=3600.0, gt=0, description="Idle time before a context is evicted."
    )
    metrics: bool = Field(
        default=True,
        description="Count Prometheus metrics (ragstream_*) and serve them; false: no /metrics, nothing counted.",
    )
    metrics_address: str | None = Field(
        default=None,
        description=(
            "host:port where `ragstream serve` serves /metrics on a listener of its own (then not on "
            "the main app, and without a token); unset: GET /metrics on the main app, with a token."
        ),
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines as plain text, or as JSON lines with principal, thread, run and trace ids.",
    )

    @field_validator("redis_url", "database_url", "oidc_issuer")
    @classmethod
    def _known_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        schemes = _URL_SCHEMES[str(info.field_name)]
        if value is not None and urlsplit(value).scheme not in schemes:
            example = f"{schemes[0]}://host/..."
            raise ValueError(
                f"must be a {' or '.join(f'{s}://' for s in schemes)} URL (e.g. {example}), got {value!r}"
            )
        return value

    @field_validator("auth")
    @classmethod
    def _module_function(cls, value: str | None) -> str | None:
        if value is not None and not _MODULE_FUNCTION.fullmatch(value):
            raise ValueError(f"must be module:function (e.g. myapp.auth:authenticate), got {value!r}")
        return value

    @field_validator("metrics_address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"metrics_address must be host:port (e.g. 127.0.0.1:9464), got {value!r}")
        return value

    @property
    def metrics_listen(self) -> tuple[str, int] | None:
        """``metrics_address`` as ``(host, port)`` (brackets of an IPv6 host removed)."""
        if self.metrics_address is None:
            return None
        host, _, port = self.metrics_address.rpartition(":")
        return host.strip("[]"), int(port)

    @field_validator("tokens", mode="before")
    @classmethod
    def _token_entries(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {
            name: {"token": entry} if isinstance(entry, str | SecretStr) else entry
            for name, entry in value.items()
        }

    @model_validator(mode="after")
    def _editors_have_tokens(self) -> AppConfig:
        only_tokens = self.tokens and not self.oidc_issuer and not self.auth
        unknown = [name for name in self.editors if only_tokens and name not in self.tokens]
        if unknown:
            raise ValueError(f"editors without a token: {', '.join(unknown)} (editors name token principals)")
        return self

    @model_validator(mode="after")
    def _oidc_needs_an_audience(self) -> AppConfig:
        if self.oidc_issuer and not self.oidc_audience:
            raise ValueError(
                "oidc_issuer needs oidc_audience (RAGSTREAM_OIDC_AUDIENCE): the API's identifier"
            )
        return self

    @model_validator(mode="after")
    def _syncs_are_owned_once(self) -> AppConfig:
        sources = [entry.source for entry in self.sync]
        if len(set(sources)) != len(sources):
            raise ValueError("RAGSTREAM_SYNC names a source twice")
        for entry in self.sync:
            if self.tokens and entry.owner not in self.tokens:
                raise ValueError(
                    f"the sync of {entry.source!r} needs an owner with a token (who sees and may cancel its jobs)"
                )
        return self

    @property
    def sign_in_required(self) -> bool:
        """Whether callers must sign in (static tokens, OIDC or an auth hook); else one local user."""
        return bool(self.tokens or self.oidc_issuer or self.auth)

    @property
    def effective_disconnect_policy(self) -> Literal["cancel", "finish"]:
        """``disconnect_policy``, or its default for the backend in use."""
        if self.disconnect_policy is not None:
            return self.disconnect_policy
        return "finish" if self.redis_url else "cancel"

    def to_worker_payload(self) -> str:
        """Every field, validated, as JSON (secrets included) for the server's own worker processes."""
        data: dict[str, Any] = self.model_dump(mode="json")
        data["tokens"] = {
            name: {"token": entry.token.get_secret_value(), "groups": list(entry.groups)}
            for name, entry in self.tokens.items()
        }
        return json.dumps(data)

    @classmethod
    def from_worker_payload(cls, payload: str | None = None) -> AppConfig:
        """The configuration ``serve`` validated (from ``WORKER_CONFIG_ENV``), else from the environment."""
        payload = payload if payload is not None else os.environ.get(WORKER_CONFIG_ENV)
        if payload is None:
            return cls()
        return cls.model_validate_json(payload)


def installed_version() -> str:
    """The installed distribution's version (``ragstream --version``); a source tree never installed
    says so."""
    try:
        return metadata.version("ragstream")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def unreadable_setting(error: SettingsError) -> str:
    """One line for a variable whose value pydantic-settings could not parse (a JSON field's bad JSON)."""
    field = re.search(r'field "(\w+)"', str(error))
    name = f"RAGSTREAM_{field.group(1).upper()}" if field else "a RAGSTREAM_* variable"
    cause = error.__cause__
    reason = f" ({cause})" if cause is not None else ""
    return f"{name} is not valid JSON{reason}"


def invalid_settings(error: ValidationError, flags: Collection[str] = ()) -> str:
    """One line naming each rejected setting as the user gave it (``--flag`` or ``RAGSTREAM_*``) and why."""
    problems = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        message = item["msg"].removeprefix("Value error, ")
        if not loc:  # a rule across settings: its message names them
            problems.append(message)
            continue
        field, rest = loc[0], loc[1:]
        name = f"--{field.replace('_', '-')}" if field in flags else f"RAGSTREAM_{field.upper()}"
        where = f"{name}[{'.'.join(rest)}]" if rest else name
        given = item.get("input")
        shown = f" (got {given!r})" if isinstance(given, str | int | float) and "got " not in message else ""
        problems.append(f"{where}: {message}{shown}")
    return "; ".join(problems)
