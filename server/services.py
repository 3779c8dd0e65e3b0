"""Everything a running server holds, wired once at startup: knowledge base, threads, engine, binding,
ingestion jobs.

``Services.start`` opens the parts in order and ``close`` releases them in reverse; ``create_app``
does both in the app's lifespan. This is the composition root: it picks the storage backends
(memory, SQLite, Redis, PostgreSQL) behind their interfaces, builds the protocol-neutral run engine
(``ragstream.runs``) and the AG-UI binding on top of it (``ragstream.agui``). Tests and embedding apps
may pass their own agent, toolkit, store, locks, event log, job system or limit counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from pydantic_ai import Agent

from rag_tools import Toolkit, build_chat_toolkit, create_chat_agent
from rag_tools.kb import KnowledgeBase, KnowledgeBaseUnavailable
from rag_tools.state import (
    SQLiteThreadStore,
    StoreError,
    StoreUnusable,
    ThreadStore,
    ToolContextCache,
)
from rag_tools.tools import ToolSystem

from .agui.branch_state import checkpoint_on_save
from .agui.encoding import encode_failure
from .agui.factory import AGUIRunFactory
from .agui.telemetry import run_capabilities
from .config import AppConfig
from .jobs import IngestJobs, SyncScheduler, open_ingest_jobs
from .observe import tracing
from .observe.backends import ObservedKnowledgeBase, ObservedThreadStore
from .observe.outages import outage
from .quotas import Quotas, open_quotas
from .runs import (
    BackendUnavailable,
    EventLog,
    FailureCode,
    MemoryEventLog,
    MemoryRunLocks,
    QuestionBus,
    RunFailure,
    RunLocks,
    RunManager,
    StopBus,
    lease_name,
)
from .tool_locks import LeasedToolLocks

if TYPE_CHECKING:  # the redis extra, imported when RAGSTREAM_REDIS_URL is set
    from redis.asyncio import Redis

__all__ = ["Services", "store_problem"]

logger = logging.getLogger("ragstream.server")

EVICTION_INTERVAL = 60.0
ORPHAN_SWEEP_INTERVAL = 3600.0
ORPHAN_SWEEP_LEASE = lease_name("sweep", "orphans")


def _thread_store(config: AppConfig, redis: Redis | None) -> ThreadStore:
    """Where threads live: PostgreSQL when configured (the durable record; Redis then holds only
    locks and event logs), else Redis when configured, else the SQLite file in the data directory."""
    if config.database_url:
        from rag_tools.state.postgres_store import PostgresThreadStore

        return PostgresThreadStore(config.database_url)
    if redis is not None:
        from rag_tools.state.redis_store import RedisThreadStore

        return RedisThreadStore(redis, prefix=config.redis_prefix)
    return SQLiteThreadStore(config.data_dir / "threads.sqlite3")


async def _open_store(store: ThreadStore) -> None:
    """Prepare the store at start. An unreachable database is not fatal: the server starts, answers
    503 until it is back, and the store prepares itself on first use. A store that cannot be used as
    configured (``StoreUnusable``: a missing database, a newer schema) is fatal."""
    try:
        await store.open()
    except StoreUnusable:
        raise
    except StoreError as exc:  # one line now, one when it is back (observe.outages)
        outage("the thread store").failed(exc)


async def store_problem(config: AppConfig) -> str | None:
    """Why ``serve`` cannot use the configured thread store (a database that does not exist, a schema
    newer than this code), in one line; else ``None``. A store that is down is no problem here: the
    server starts, answers 503 and recovers when it is back."""
    client = None
    if config.redis_url:
        from .runs.redis import redis_client

        client = redis_client(config.redis_url)
    store = _thread_store(config, client)
    try:
        await store.open()
    except StoreUnusable as exc:
        return str(exc)
    except StoreError:
        return None
    finally:
        with contextlib.suppress(Exception):
            await store.close()
        if client is not None:
            await client.aclose()
    return None


@dataclass
class Services:
    """The server's long-lived parts."""

    config: AppConfig
    kb: KnowledgeBase
    store: ThreadStore
    cache: ToolContextCache
    toolkit: Toolkit
    agent: Agent[Any, Any]
    runs: RunManager
    agui: AGUIRunFactory
    tools: ToolSystem
    jobs: IngestJobs
    quotas: Quotas
    redis: Redis | None = None
    stopping: anyio.Event = field(default_factory=anyio.Event)
    """Set once the ASGI server is told to stop (by the SSE responses, which watch for it); the
    local runs then end with ``shutdown`` while their clients are still connected."""
    _background: list[asyncio.Task[Any]] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        config: AppConfig,
        *,
        agent: Agent[Any, Any] | None = None,
        toolkit: Toolkit | None = None,
        store: ThreadStore | None = None,
        locks: RunLocks | None = None,
        logs: EventLog | None = None,
        jobs: IngestJobs | None = None,
        quotas: Quotas | None = None,
    ) -> Services:
        observed = config.metrics or tracing.enabled()
        kb = (ObservedKnowledgeBase if observed else KnowledgeBase).from_config(config)
        if isinstance(kb, ObservedKnowledgeBase):
            kb.count_metrics = config.metrics
        try:
            await kb.open()
        except (
            KnowledgeBaseUnavailable
        ) as exc:  # a store that is down: serve, /health says 503 until it is back
            logger.warning("%s; serving anyway, every call tries again", exc)
        toolkit = toolkit or build_chat_toolkit(config)
        tools = ToolSystem(
            approve_tools=config.approve_tools,
            output_limit=config.tool_output_limit,
            attachment_limit=config.tool_attachment_max_bytes,
        )
        report = tools.load(config.tool_dirs)
        if report.tools or report.toolsets:
            logger.info("user tools loaded: %s", ", ".join(report.tools + report.toolsets))
        # Preflight: a user tool must not shadow a toolkit tool (raises, naming both origins).
        tools.toolsets(extra={f"rag toolkit ({t.id or t.label})": t for t in toolkit.toolsets})
        toolkit.namespaces.update(tools.namespaces)

        stop_bus: StopBus | None = None
        questions: QuestionBus | None = None
        client: Redis | None = None
        if config.redis_url:
            from .runs.redis import RedisEventLog, RedisQuestionBus, RedisRunLocks, RedisStopBus, redis_client

            client = redis_client(config.redis_url)
        store = store or _thread_store(config, client)
        await _open_store(store)
        if client is not None:
            redis_locks = RedisRunLocks(client, config.redis_prefix)
            locks = locks or redis_locks
            logs = logs or RedisEventLog(
                client,
                redis_locks,
                prefix=config.redis_prefix,
                ttl_seconds=config.event_log_ttl_seconds,
                liveness_seconds=min(5.0, config.run_lock_ttl_seconds / 2),
                lock_ttl_seconds=config.run_lock_ttl_seconds,
                worker_lost_event=encode_failure(RunFailure(FailureCode.WORKER_LOST)),
            )
            stop_bus = RedisStopBus(client, config.redis_prefix)
            questions = RedisQuestionBus(client, config.redis_prefix)
            # locked tools (``tool_options(lock=True)``) run alone across every worker
            tools.locks = LeasedToolLocks(redis_locks, ttl_seconds=config.run_lock_ttl_seconds)
        if observed:  # every use of the store (the cache's, the listing's, a fork's, readiness) is counted
            store = ObservedThreadStore(store, count_metrics=config.metrics)
        cache = ToolContextCache(
            store,
            max_entries=config.cache_max_threads,
            ttl_seconds=config.cache_ttl_seconds,
            prepare=toolkit.prepare,
            state_key=toolkit.state_key,
            before_save=checkpoint_on_save,  # the state of each branch, kept beside its entries
        )
        runs = RunManager(
            locks=locks or MemoryRunLocks(),
            logs=logs or MemoryEventLog(ttl_seconds=config.event_log_ttl_seconds),
            encode_failure=encode_failure,
            lock_ttl=config.run_lock_ttl_seconds,
            disconnect_policy=config.effective_disconnect_policy,
            disconnect_grace=config.disconnect_grace_seconds,
            stop_bus=stop_bus,
            count_metrics=config.metrics,
            questions=questions,
        )
        agent = agent or create_chat_agent(config, toolkit)
        quotas = quotas or open_quotas(config, client)
        binding = AGUIRunFactory(
            runs=runs,
            cache=cache,
            agent=agent,
            kb=kb,
            config=config,
            prepare=toolkit.prepare,
            run_timeout=config.run_timeout,
            # given to every run, so an injected agent gets the tool system too
            toolsets=tools.toolsets(),
            capabilities=run_capabilities(tools.capability(), count_metrics=config.metrics),
            count_metrics=config.metrics,
            quotas=quotas,
            question_timeout=config.question_timeout_seconds,
        )
        jobs = jobs or open_ingest_jobs(config, kb)
        await jobs.start()
        services = cls(config, kb, store, cache, toolkit, agent, runs, binding, tools, jobs, quotas, client)
        services._background.append(asyncio.create_task(services._end_runs_when_stopping()))
        services._background.append(asyncio.create_task(services._evict_idle_threads()))
        services._background.append(asyncio.create_task(services._sweep_orphans()))
        if config.sync:
            services._background.append(asyncio.create_task(SyncScheduler(jobs, config.sync).run()))
        return services

    async def _end_runs_when_stopping(self) -> None:
        await self.stopping.wait()
        logger.info("the server is stopping: ending %d local runs", len(self.runs.active))
        self.runs.end_for_shutdown()

    async def _evict_idle_threads(self) -> None:
        while True:
            await asyncio.sleep(EVICTION_INTERVAL)
            try:
                await self.cache.evict_idle()
            except Exception:
                logger.warning("evicting idle threads failed", exc_info=True)

    async def _sweep_orphans(self) -> None:
        """At start, then every hour: remove what interrupted writes left in the knowledge base
        (rag_tools/kb/sweep.py), once older than ``orphan_min_age_seconds``.

        One worker sweeps per round: the first to take the round's lease in the run-lock backend
        (shared through Redis) keeps it until half the interval has passed, so the others skip.
        """
        holder = uuid.uuid4().hex
        while True:
            try:
                if await self.runs.locks.acquire(ORPHAN_SWEEP_LEASE, holder, ORPHAN_SWEEP_INTERVAL / 2):
                    swept = await self.kb.sweep_orphans(self.config.orphan_min_age_seconds)
                    if swept:
                        logger.info("swept %d unpublished documents' originals and chunks", len(swept))
            except (BackendUnavailable, KnowledgeBaseUnavailable) as exc:  # an outage, logged as one
                outage("Redis" if isinstance(exc, BackendUnavailable) else "the knowledge base").failed(exc)
            except Exception:
                logger.warning("sweeping unpublished documents failed", exc_info=True)
            await asyncio.sleep(ORPHAN_SWEEP_INTERVAL)

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        await self.runs.shutdown()
        with contextlib.suppress(Exception):
            await self.quotas.aclose()
        with contextlib.suppress(Exception):
            await self.jobs.close()
        with contextlib.suppress(Exception):
            await self.cache.close()
        with contextlib.suppress(Exception):
            await self.runs.logs.aclose()
        self.kb.close()
