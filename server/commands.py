"""What each ``ragstream`` subcommand does; ``cli`` only parses arguments."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.config
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn
from prometheus_client import start_http_server
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import infer_model
from starlette.authentication import AuthenticationError
from tqdm import tqdm

from rag_tools.extras import MissingExtra, require_extra
from rag_tools.kb import (
    DocumentFilter,
    IngestProgress,
    IngestReport,
    KnowledgeBase,
    KnowledgeBaseError,
    KnowledgeBaseUnavailable,
)

from .auth import Principal, load_scheme, sign_in
from .config import WORKER_CONFIG_ENV, AppConfig, installed_version
from .observe import logs, metrics, tracing
from .services import store_problem

__all__ = [
    "cmd_documents",
    "cmd_eval",
    "cmd_ingest",
    "cmd_mcp",
    "cmd_search",
    "cmd_serve",
    "cmd_sync",
    "ingest_with_progress",
    "knowledge_base_problem",
    "open_knowledge_base",
]


_ingest_log = logging.getLogger("ragstream.ingest")
_serve_log = logging.getLogger("ragstream.server")


class _Progress:
    """A progress bar moving per embedded chunk, and a line per file outcome as it happens.

    Failures are printed as ``error: <path>: <reason>`` on stderr; with ``every_outcome`` the other
    outcomes too, as ``<status>: <path>`` on stdout. With ``log_lines`` (``serve --ingest``:
    a server's log) there is no bar, and each line is a log record instead (text or JSON).
    """

    def __init__(self, *, enabled: bool, every_outcome: bool, log_lines: bool = False) -> None:
        self.every_outcome = every_outcome
        self.log_lines = log_lines
        self.bar: tqdm[None] = tqdm(
            total=0, unit="chunk", desc="ingesting", disable=not enabled or log_lines, file=sys.stderr
        )

    def _say(self, line: str, *, error: bool) -> None:
        if self.log_lines:
            _ingest_log.log(logging.ERROR if error else logging.INFO, line)
        else:
            tqdm.write(line, file=sys.stderr if error else sys.stdout)

    def advance(self, state: IngestProgress) -> None:
        outcome = state.outcome
        if outcome is not None and outcome.status == "error":
            self._say(f"error: {outcome.source}: {outcome.error}", error=True)
        elif outcome is not None and outcome.warnings:
            for warning in outcome.warnings:
                self._say(f"warning: {outcome.source}: {warning}", error=True)
        if outcome is not None and outcome.status != "error" and self.every_outcome:
            chunks = f" ({outcome.chunks} chunks)" if outcome.status in ("added", "updated") else ""
            self._say(f"{outcome.status}: {outcome.source}{chunks}", error=False)
        self.bar.total = state.chunks_total
        self.bar.n = state.chunks_done
        self.bar.set_description(f"ingesting ({state.files_done}/{state.files_total} files)", refresh=False)
        self.bar.refresh()

    def finish(self, report: IngestReport) -> int:
        """Close the bar, print the summary; the exit status."""
        self.bar.close()
        if self.log_lines:
            _ingest_log.info(report.summary())
        else:
            print(report.summary())
        return 1 if report.errors else 0


def open_knowledge_base(config: AppConfig) -> KnowledgeBase:
    """The configured knowledge base (not opened yet); an embedder setting that cannot be used
    (unknown, or its provider's key missing) is a ``KnowledgeBaseError`` saying so in one line."""
    try:
        return KnowledgeBase.from_config(config)
    except (ValueError, UserError) as exc:
        reason = str(exc).split(". ")[0]
        raise KnowledgeBaseError(f"the embedder {config.embedder!r} cannot be used: {reason}") from exc


async def knowledge_base_problem(config: AppConfig) -> str | None:
    """Why ``serve`` cannot serve this knowledge base (an unusable embedder, another embedder than
    the one it was built with, a format it cannot read), in one line; else ``None``. A store that is
    down is no problem here: the server starts, answers 503 and recovers when it is back."""
    try:
        async with open_knowledge_base(config):
            return None
    except KnowledgeBaseUnavailable:
        return None
    except KnowledgeBaseError as exc:
        return str(exc)


def data_dir_problem(config: AppConfig) -> str | None:
    """Why the data directory cannot hold what this configuration keeps there (the SQLite thread store
    and job records, a local knowledge base), in one line: it cannot be created or is not writable.
    ``None`` when it can, or when nothing is kept there (PostgreSQL or Redis, and an s3:// knowledge
    base). A missing directory that can be created is created."""
    kb = config.resolved_kb_uri
    places = [] if config.database_url or config.redis_url else [config.data_dir]
    if "://" not in kb:
        places.append(Path(kb).parent if Path(kb).is_relative_to(config.data_dir) else Path(kb))
    for place in dict.fromkeys(places):
        try:
            place.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=place):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            return (
                f"the data directory {place} cannot be written ({reason}): point RAGSTREAM_DATA_DIR "
                "(or --data-dir) at a writable directory"
            )
    return None


async def _storage_problem(config: AppConfig) -> str | None:
    return await knowledge_base_problem(config) or await store_problem(config)


#: How long a worker may leave uvicorn's supervisor without an answer before it is replaced.
WORKER_HEALTHCHECK_SECONDS = 60


async def ingest_with_progress(
    kb: KnowledgeBase,
    paths: list[str],
    *,
    progress: bool = True,
    groups: Sequence[str] | None = None,
    log_lines: bool = False,
) -> int:
    """Ingest ``paths`` with a progress bar moving per embedded chunk and one line per failed source.

    ``groups`` are who may read the documents (``KnowledgeBase.ingest_paths``).

    Each failure is printed as it happens (sources that do not exist before any work starts) as
    ``error: <path>: <reason>``; the summary goes to stdout. Returns the exit status.
    """
    bar = _Progress(enabled=progress, every_outcome=False, log_lines=log_lines)
    report = await kb.ingest_paths(paths, on_progress=bar.advance, groups=groups)
    return bar.finish(report)


async def cmd_sync(config: AppConfig, args: argparse.Namespace) -> int:
    """Mirror a folder or an S3 prefix: one line per file (added, updated, unchanged, deleted, error)."""
    if (problem := data_dir_problem(config)) is not None:
        print(f"ragstream: {problem}", file=sys.stderr)
        return 1
    bar = _Progress(enabled=not args.no_progress, every_outcome=True)
    try:
        async with open_knowledge_base(config) as kb:
            report = await kb.sync(args.source, on_progress=bar.advance, groups=args.groups)
    except KnowledgeBaseError as exc:
        bar.bar.close()
        print(f"ragstream: {exc}", file=sys.stderr)
        return 1
    return bar.finish(report)


async def cmd_ingest(config: AppConfig, args: argparse.Namespace) -> int:
    if (problem := data_dir_problem(config)) is not None:
        print(f"ragstream: {problem}", file=sys.stderr)
        return 1
    try:
        async with open_knowledge_base(config) as kb:
            return await ingest_with_progress(
                kb, args.paths, progress=not args.no_progress, groups=args.groups
            )
    except KnowledgeBaseError as exc:
        print(f"ragstream: {exc}", file=sys.stderr)
        return 1


async def cmd_search(config: AppConfig, args: argparse.Namespace) -> int:
    doc_filter = DocumentFilter(names=tuple(args.document)) if args.document else None
    try:
        async with open_knowledge_base(config) as kb:
            hits = await kb.search(
                args.query,
                limit=args.limit or config.search_limit,
                mode=args.mode or config.search_mode,
                filter=doc_filter,
            )
    except KnowledgeBaseError as exc:
        print(f"ragstream: {exc}", file=sys.stderr)
        return 1
    if not hits:
        print("no results")
    for rank, hit in enumerate(hits, 1):
        where = hit.location
        print(f"{rank}. [{hit.score:.3f}] {hit.title}{f' — {where}' if where else ''}\n   {hit.uri}")
        print("   " + hit.text.replace("\n", " ")[:300])
    return 0


async def cmd_documents(config: AppConfig, args: argparse.Namespace) -> int:
    try:
        async with open_knowledge_base(config) as kb:
            page = await kb.list_documents(page=args.page)
    except (KnowledgeBaseError, ValueError) as exc:
        print(f"ragstream: {exc}", file=sys.stderr)
        return 1
    for doc in page.documents:
        print(f"{doc.title}\t{doc.uri}\t{doc.chunk_count} chunks")
    print(f"page {page.page} of {page.pages} ({page.total} documents)")
    return 0


async def cmd_eval(config: AppConfig, args: argparse.Namespace) -> int:
    """Labelled questions against the knowledge base: figures per search mode (and answers), misses."""
    from rag_tools.evaluation import (
        MissingExtra,
        QuestionsFileError,
        evaluate,
        evaluation_steps,
        load_questions,
        render_html,
        require_metrics,
    )

    try:
        require_metrics()
        questions = load_questions(args.questions)
    except (MissingExtra, QuestionsFileError) as exc:
        print(f"ragstream: {exc}", file=sys.stderr)
        return 2
    if args.answers and (problem := model_problem(config.model)) is not None:
        print(f"ragstream: {problem}", file=sys.stderr)
        return 2
    try:
        async with open_knowledge_base(config) as kb:
            if not await kb.count_documents():
                print(
                    f"ragstream: the knowledge base at {config.resolved_kb_uri} holds no documents; "
                    "ingest some first (ragstream ingest PATH)",
                    file=sys.stderr,
                )
                return 2
            total = evaluation_steps(questions, args.modes, args.answers)
            with tqdm(
                total=total, unit="step", desc="evaluating", disable=args.no_progress, file=sys.stderr
            ) as bar:
                report = await evaluate(
                    kb, questions, modes=args.modes, answers=args.answers, config=config, on_step=bar.update
                )
    except KnowledgeBaseError as exc:
        print(f"ragstream: {exc}", file=sys.stderr)
        return 1
    print(report.text())
    if args.json_out:
        Path(args.json_out).write_text(report.model_dump_json(indent=1))
    if args.report:
        Path(args.report).write_text(
            render_html(report, title=f"ragstream eval: {Path(args.questions).name}")
        )
    return 0


#: The variable each provider prefix reads its base URL (or endpoint) from.
_BASE_URL_VARIABLES = {
    "openai": "OPENAI_BASE_URL",
    "openai-chat": "OPENAI_BASE_URL",
    "openai-responses": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "ollama": "OLLAMA_BASE_URL",
    "vllm": "VLLM_BASE_URL",
    "azure": "AZURE_OPENAI_ENDPOINT",
}


def _base_url_problem(model: str) -> str | None:
    """Why the base URL ``model``'s provider reads is not one (no http(s) scheme or no host)."""
    variable = _BASE_URL_VARIABLES.get(model.split(":", 1)[0])
    value = os.environ.get(variable or "", "").strip()
    if not variable or not value:
        return None
    parts = urlsplit(value)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return (
        f"--model {model!r}: {variable}={value!r} is not a URL; give the scheme and host, e.g."
        " http://localhost:11434/v1 (docs/models.md lists each provider's)"
    )


def model_problem(model: str | None) -> str | None:
    """Why ``model`` cannot answer (unknown, its provider's key missing, its base URL not a URL), in
    one line; else ``None``."""
    if model is None:
        return None
    if (problem := _base_url_problem(model)) is not None:
        return problem
    try:
        infer_model(model)
    except UserError as exc:
        if str(exc).startswith("Unknown model"):
            return (
                f"--model {model!r} is not a model pydantic-ai knows; use a provider:model string such as "
                "openai:gpt-4o-mini or anthropic:claude-sonnet-4-5, or leave it unset for the offline model"
            )
        return f"--model {model!r} cannot be used: {str(exc).split('. ')[0]}"
    except ImportError as exc:  # the provider's SDK, which its extra installs, is not there
        missing = exc.name or getattr(exc.__cause__, "name", None) or ""
        extra = _PROVIDER_EXTRAS.get(missing.split(".")[0])
        if extra is None:
            return f"--model {model!r} cannot be used: {str(exc).splitlines()[0]}"
        return f"--model {model!r}: {MissingExtra(extra, missing)}"
    return None


#: The extra that installs each provider SDK pydantic-ai imports for a model string.
_PROVIDER_EXTRAS = {"openai": "openai", "anthropic": "anthropic", "google": "google"}


def _require_configured_extras(config: AppConfig) -> None:
    """``MissingExtra`` (one line naming the extra) for the first configured part whose extra is not
    installed: checked before any worker starts, where it would be a traceback per worker."""
    needed: list[tuple[str, str]] = []
    if config.database_url:
        needed += [("postgres", "asyncpg"), ("postgres", "saq"), ("postgres", "psycopg")]
    if config.redis_url:
        needed += [("redis", "redis"), ("redis", "saq")]
    if tracing.tracing_requested():
        needed += [("otel", "opentelemetry.sdk.trace"), ("otel", "opentelemetry.exporter.otlp.proto.http")]
    if any(entry.source.startswith("s3://") for entry in config.sync):
        needed.append(("s3", "boto3"))
    for extra, module in needed:
        require_extra(extra, module)


def cmd_serve(config: AppConfig, args: argparse.Namespace) -> int:
    # the log format applies from the first line: with JSON, every line on stdout and stderr is JSON
    # (a refusal, the ingest's lines, "serving on"), not only what uvicorn logs once it runs
    log_config = logs.log_config(config.log_format, uvicorn.config.LOGGING_CONFIG)
    logging.config.dictConfig(log_config)
    if config.log_format == "json":
        logging.captureWarnings(True)

    def refuse(problem: str, status: int = 2) -> int:
        """Stop before any worker starts, in one line (a JSON record with JSON logs)."""
        if config.log_format == "json":
            _serve_log.error(problem)
        else:
            print(f"ragstream: {problem}", file=sys.stderr)
        return status

    try:
        _require_configured_extras(config)
    except MissingExtra as exc:
        return refuse(str(exc))
    if config.workers > 1 and not config.redis_url:
        return refuse("--workers above 1 needs --redis-url (workers share threads and runs through Redis)")
    for problem in (model_problem(config.model), tracing.tracing_problem()):  # before any work
        if problem is not None:
            return refuse(problem)
    if config.auth:
        try:
            load_scheme(config.auth)
        except ValueError as exc:
            return refuse(str(exc))
    # before any worker starts: a worker that cannot open the knowledge base or the thread store stops
    # with a traceback, and with several workers the server exits 0 a minute later
    if (problem := data_dir_problem(config) or asyncio.run(_storage_problem(config))) is not None:
        return refuse(problem)
    if args.ingest:
        # a server's log, not a terminal: one log line per failed file and the summary, no bar (a
        # person at a terminal still gets the bar, with text logs)
        log_lines = config.log_format == "json" or not sys.stderr.isatty()

        async def ingest() -> int:
            async with open_knowledge_base(config) as kb:
                return await ingest_with_progress(kb, args.ingest, log_lines=log_lines)

        try:
            asyncio.run(ingest())
        except KnowledgeBaseError as exc:
            return refuse(str(exc), status=1)
    # Workers are separate processes: hand them the whole validated configuration.
    os.environ[WORKER_CONFIG_ENV] = config.to_worker_payload()
    own_metrics_dir = _prepare_metrics(config)
    try:
        if config.metrics and (listen := config.metrics_listen) is not None:
            try:  # one listener for the whole server, in this process: it reads every worker's values
                start_http_server(listen[1], listen[0], registry=metrics.registry())
            except OSError as exc:
                return refuse(f"cannot serve metrics on {config.metrics_address}: {exc}")
            _serve_log.info("ragstream metrics on http://%s/metrics", config.metrics_address)
        _serve_log.info(
            "ragstream serving on http://%s:%s (model: %s; ragstream %s)",
            config.host,
            config.port,
            config.model or "offline extractive",
            installed_version(),
        )
        uvicorn.run(
            "ragstream.app:create_served_app",
            factory=True,
            host=config.host,
            port=config.port,
            workers=config.workers,
            log_level="info",
            log_config=log_config,
            timeout_graceful_shutdown=10,
            # a worker answers the supervisor's pings from a thread, which a long model or index load
            # holding the GIL can starve for more than uvicorn's 5 s: the worker was killed, restarted
            # and killed again, forever (server/NOTES.md, "Several workers")
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
        )
    finally:
        if own_metrics_dir is not None:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
    return 0


def _prepare_metrics(config: AppConfig) -> Path | None:
    """Set up prometheus-client's multiprocess mode when the workers are processes of their own (or
    ``PROMETHEUS_MULTIPROC_DIR`` asks for it): an empty values directory, named to every worker
    through the environment. Returns the directory when this command made it (and removes it)."""
    if not config.metrics:
        return None
    given = os.environ.get(metrics.MULTIPROC_ENV)
    if config.workers == 1 and not given:
        return None
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="ragstream-metrics-"))
    metrics.prepare_multiprocess_dir(path)
    os.environ[metrics.MULTIPROC_ENV] = str(path)
    return None if given else path


def cmd_mcp(config: AppConfig, args: argparse.Namespace) -> int:
    """The knowledge base as an MCP server (``server/mcp/``): stdio, or streamable HTTP with ``--http``.

    Nothing but the protocol goes to stdout on stdio; every problem is one line on stderr.
    """
    from .mcp import mcp_problem

    for problem in (mcp_problem(), model_problem(config.model)):
        if problem is not None:
            print(f"ragstream: {problem}", file=sys.stderr)
            return 2
    if args.http and args.token:
        print(
            "ragstream: --token is for stdio; over HTTP each request signs in with its own", file=sys.stderr
        )
        return 2
    operator = None
    if args.token:
        try:
            operator = asyncio.run(_token_principal(config, args.token))
        except (ValueError, AuthenticationError) as exc:
            print(f"ragstream: --token: {exc}", file=sys.stderr)
            return 2
    if (problem := asyncio.run(knowledge_base_problem(config))) is not None:
        print(f"ragstream: {problem}", file=sys.stderr)
        return 2
    allow_writes = args.allow_writes or config.mcp_allow_writes
    if args.http:
        from .app import create_mcp_app

        print(f"ragstream MCP server on http://{config.host}:{config.port}/mcp", file=sys.stderr)
        uvicorn.run(
            create_mcp_app(config, allow_writes=allow_writes),
            host=config.host,
            port=config.port,
            log_level="info",
            log_config=logs.log_config(config.log_format, uvicorn.config.LOGGING_CONFIG),
        )
        return 0
    from .mcp.endpoint import serve_stdio

    asyncio.run(serve_stdio(config, allow_writes=allow_writes, operator=operator))
    return 0


async def _token_principal(config: AppConfig, token: str) -> Principal:
    """The principal ``token`` signs in with the configured schemes, as a request bearing it would."""
    from .app import sign_in_schemes

    schemes = sign_in_schemes(config)
    if not schemes:
        raise ValueError(
            "no sign-in is configured (RAGSTREAM_TOKENS, RAGSTREAM_OIDC_ISSUER or RAGSTREAM_AUTH)"
        )
    return await sign_in(schemes, {"authorization": f"Bearer {token}"})
