"""Runs as tasks: start them, feed their event logs, let clients subscribe, stop them.

A run is a task that writes every event to the run's event log; an SSE response is a subscriber
of that log, not the run itself. While a run lives it holds the thread's run lock (renewed by a
heartbeat) and the thread's in-process transaction. When its last local subscriber leaves, the
disconnect policy decides: ``cancel`` (after an optional grace period in which a reconnect keeps
it alive) or ``finish`` (the run completes and waits in the log for a later reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ag_ui.core import EventType, RunAgentInput, RunErrorEvent

from ..errors import ApiError
from .adapter import public_error
from .encoding import encode_event, sse_frame
from .eventlog import EventLog, RunInfo, RunStatus
from .execution import RunExecution
from .locks import BackendUnavailable, RunLocks

__all__ = ["ActiveRun", "RunManager"]

logger = logging.getLogger("ragstream.runs")

DisconnectPolicy = Literal["cancel", "finish"]


@dataclass
class ActiveRun:
    """A run living in this process."""

    execution: RunExecution
    task: asyncio.Task[None] | None = None
    subscribers: int = 0
    stop_requested: bool = False
    grace: asyncio.TimerHandle | None = field(default=None, repr=False)

    @property
    def run_id(self) -> str:
        return self.execution.run_id


class RunManager:
    """Starts runs, tracks the ones living in this process, and serves their event logs."""

    def __init__(
        self,
        *,
        locks: RunLocks,
        logs: EventLog,
        worker_id: str | None = None,
        lock_ttl: float = 30.0,
        disconnect_policy: DisconnectPolicy = "cancel",
        disconnect_grace: float = 0.0,
        stop_bus: Any = None,
    ) -> None:
        self.locks = locks
        self.logs = logs
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self.lock_ttl = lock_ttl
        self.disconnect_policy = disconnect_policy
        self.disconnect_grace = disconnect_grace
        self.stop_bus = stop_bus
        self._runs: dict[str, ActiveRun] = {}
        if stop_bus is not None:
            stop_bus.listen(self._stop_local)

    @property
    def active(self) -> dict[str, ActiveRun]:
        return dict(self._runs)

    async def start(
        self,
        run_input: RunAgentInput,
        principal: str,
        prepare: Callable[[], Awaitable[RunExecution]],
        on_busy: Callable[[], Awaitable[None]] | None = None,
    ) -> ActiveRun:
        """Take the thread's run lock, prepare the run (``prepare`` may raise ``ApiError``), start it.

        A second run on a busy thread is ``ApiError(409)``, unless ``on_busy`` raises another answer
        first (the route checks there that the caller may see the thread at all).
        """
        thread_id, run_id = run_input.thread_id, run_input.run_id
        try:
            if await self.logs.info(run_id) is not None:
                raise ApiError(409, f"run {run_id!r} already exists; send a new runId for a new run")
            acquired = await self.locks.acquire(thread_id, run_id, self.lock_ttl)
        except BackendUnavailable as exc:
            raise ApiError(
                503, "runs cannot start: the shared backend is unavailable; retry shortly"
            ) from exc
        if not acquired:
            if on_busy is not None:
                await on_busy()
            raise ApiError(
                409,
                f"thread {thread_id!r} is busy with another run; wait for it to finish or stop it",
                code="thread_busy",
            )
        try:
            execution = await prepare()
            await self.logs.open(RunInfo(run_id, thread_id, principal, self.worker_id))
        except BaseException as exc:
            with contextlib.suppress(BackendUnavailable):
                await self.locks.release(thread_id, run_id)
            if isinstance(exc, BackendUnavailable):
                raise ApiError(
                    503, "runs cannot start: the shared backend is unavailable; retry shortly"
                ) from exc
            raise
        active = ActiveRun(execution)
        self._runs[run_id] = active
        active.task = asyncio.create_task(self._run(active), name=f"run-{run_id}")
        return active

    async def _run(self, active: ActiveRun) -> None:
        execution = active.execution
        heartbeat = asyncio.create_task(self._heartbeat(active))
        status: RunStatus = "error"
        terminal = False
        logging_failed = False
        try:
            async for event in execution.events():
                if not logging_failed:
                    try:
                        await self.logs.append(execution.run_id, encode_event(event))
                    except BackendUnavailable:
                        # nobody can follow the run any more: stop it (nothing is saved) and drain
                        logger.error(
                            "run %s: the event log is unavailable; stopping the run", execution.run_id
                        )
                        logging_failed = True
                        execution.token.cancel()
                        await self._append_error(
                            execution.run_id,
                            "The run's event log is unavailable; the run was stopped.",
                            "event_log_unavailable",
                        )
                if event.type == EventType.RUN_STARTED:
                    # Let the response send it before the agent's run setup takes the loop for ~1 ms.
                    await asyncio.sleep(0)
                elif event.type == EventType.RUN_FINISHED:
                    terminal = True
                    outcome = getattr(getattr(event, "outcome", None), "type", "success")
                    status = {"interrupt": "interrupted", "cancelled": "cancelled"}.get(outcome, "finished")
                elif event.type == EventType.RUN_ERROR:
                    terminal = True
        except asyncio.CancelledError:
            if not terminal:
                await self._append_error(execution.run_id, "The server stopped the run.", "shutdown")
            raise
        except Exception as exc:  # the pipeline itself failed: end the stream properly
            if not terminal:
                message, code = public_error(exc)
                await self._append_error(execution.run_id, message, code)
        finally:
            heartbeat.cancel()
            execution.finish()
            self._runs.pop(execution.run_id, None)
            with contextlib.suppress(Exception):
                await self.locks.release(execution.thread_id, execution.run_id)
            with contextlib.suppress(Exception):
                await self.logs.close(execution.run_id, status)

    async def _append_error(self, run_id: str, message: str, code: str) -> None:
        with contextlib.suppress(Exception):
            await self.logs.append(run_id, encode_event(RunErrorEvent(message=message, code=code)))

    async def _heartbeat(self, active: ActiveRun) -> None:
        execution = active.execution
        while True:
            await asyncio.sleep(self.lock_ttl / 3)
            try:
                held = await self.locks.renew(execution.thread_id, execution.run_id, self.lock_ttl)
            except Exception:
                logger.warning("could not renew the run lock of %s", execution.run_id, exc_info=True)
                continue
            if not held:
                logger.error("run %s lost its thread lock; stopping it", execution.run_id)
                execution.token.cancel()
                return

    async def subscribe(self, run_id: str, after: int = 0) -> AsyncIterator[bytes]:
        """SSE frames of the run's events after ``after``, then its live tail (several per write)."""
        active = self._runs.get(run_id)
        if active is not None:
            active.subscribers += 1
            if active.grace is not None:
                active.grace.cancel()
                active.grace = None
        last = after
        try:
            async for batch in self.logs.read(run_id, after):
                last = batch[-1][0]
                yield b"".join(sse_frame(seq, data) for seq, data in batch)
        except BackendUnavailable as exc:
            logger.warning("run %s: cannot read its event log: %s", run_id, exc)
            lost = RunErrorEvent(
                message="The run's event log is unavailable; reconnect later.", code="event_log_unavailable"
            )
            yield sse_frame(last + 1, encode_event(lost))
        finally:
            if active is not None:
                active.subscribers -= 1
                if active.subscribers == 0 and active.task is not None and not active.task.done():
                    self._last_subscriber_left(active)

    def _last_subscriber_left(self, active: ActiveRun) -> None:
        if self.disconnect_policy != "cancel":
            return
        if self.disconnect_grace <= 0:
            active.execution.token.cancel()
            return
        loop = asyncio.get_running_loop()

        def expire() -> None:
            active.grace = None
            if active.subscribers == 0:
                active.execution.token.cancel()

        active.grace = loop.call_later(self.disconnect_grace, expire)

    async def stop(self, thread_id: str, run_id: str, principal: str) -> RunInfo:
        """Ask a run to stop; it ends with the ``cancelled`` outcome. ``ApiError(404)`` if unknown."""
        try:
            info = await self.logs.info(run_id)
        except BackendUnavailable as exc:
            raise ApiError(503, "the shared backend is unavailable") from exc
        if info is None or info.thread_id != thread_id or info.owner != principal:
            raise ApiError(404, f"run {run_id!r} not found in thread {thread_id!r}")
        active = self._runs.get(run_id)
        if active is not None:
            active.stop_requested = True
            active.execution.token.cancel()
        elif info.status == "running":
            await self.request_remote_stop(info)
        return info

    async def request_remote_stop(self, info: RunInfo) -> None:
        """Ask the worker running ``info`` to stop it (through the stop bus of a shared backend)."""
        if self.stop_bus is None:
            raise ApiError(
                409, f"run {info.run_id!r} runs in another worker and this backend cannot reach it"
            )
        try:
            await self.stop_bus.publish(info.run_id)
        except BackendUnavailable as exc:
            raise ApiError(503, "the run cannot be stopped now: the shared backend is unavailable") from exc

    def _stop_local(self, run_id: str) -> None:
        active = self._runs.get(run_id)
        if active is not None:
            active.stop_requested = True
            active.execution.token.cancel()

    async def shutdown(self) -> None:
        """Cancel every local run and wait for them to end."""
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        for run in self._runs.values():
            run.execution.token.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
