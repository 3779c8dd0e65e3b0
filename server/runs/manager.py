"""``RunManager``: runs as tasks that write event logs, whoever produces their events.

A run is a task that writes every event to the run's event log; a response is a subscriber of that
log, not the run itself. That is what lets a client reconnect (to any worker, with a shared log),
lets a stop reach a run from anywhere, and keeps the run independent of one socket.

Starting a run has three steps, in the caller's own code so it reads in order::

    async with manager.reserve(thread_id, run_id, principal, on_busy=check) as slot:
        source = await build_the_run()      # under the thread's run lock
        await slot.launch(source)

``reserve`` takes the thread's run lock (``RunConflict`` when the thread is busy or the run id is
taken in it); ``launch`` opens the run's log and starts its task; leaving the block without a
launch (an error while building) releases the lock. While a run lives it holds the lock, renewed
every third of its lifetime by one task for all of the process's runs (a run whose lock another
took is stopped). When its last local subscriber leaves (and an optional grace period in which a
reconnect keeps it alive has passed), the run is told it is unattended (a question it waits on
then becomes an interrupt, and the run ends by itself), and the disconnect policy decides:
``cancel`` or ``finish`` (the run completes and waits in its log for a later reconnect). A run's
questions are answered through ``answer``, from any worker (``questions``).

The manager knows nothing of HTTP or of the protocol on the wire: a ``RunSource`` yields events
already encoded, marking the terminal one with the run's final status; the ``encode_failure``
callable the protocol binding supplies encodes the terminal event of a run the engine itself had
to end (shutdown, event log lost, a source that raised).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..observe import logs, metrics, tracing
from .errors import BackendUnavailable, QuestionNotFound, RunConflict, RunNotFound
from .eventlog import EventLog, RunInfo, RunStatus, run_key
from .failures import FailureCode, RunFailure
from .locks import RunLocks
from .questions import MemoryQuestionBus, QuestionBus
from .stopbus import StopBus

__all__ = ["ActiveRun", "DisconnectPolicy", "RunEvent", "RunManager", "RunSlot", "RunSource"]

logger = logging.getLogger("ragstream.runs")

#: How long a run's end waits for a lock renewal under way before releasing (a renewal takes
#: about a millisecond; during a Redis outage it waits out the client's timeouts).
RENEWAL_WAIT_SECONDS = 1.0

DisconnectPolicy = Literal["cancel", "finish"]
EncodeFailure = Callable[[RunFailure], bytes]


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run, encoded by the protocol binding.

    ``status`` is set on the terminal event (how the run ended) and ``code`` on a terminal error
    (its failure code, for the metrics); ``flush`` asks the run task to let subscribers send this
    event before the run goes on (the first event, before the model's setup).
    """

    data: bytes
    status: RunStatus | None = None
    flush: bool = False
    code: str | None = None


class RunSource(Protocol):
    """What a protocol binding hands the engine to run: its events, and how to stop and release it."""

    @property
    def thread_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    def events(self) -> AsyncIterator[RunEvent]:
        """The run's events; the last one carries a ``status``. Should not raise."""
        ...

    def cancel(self, failure: RunFailure | None = None) -> None:
        """Ask the run to stop soon (it still ends with a terminal event): as a stop (the cancelled
        outcome), or with ``failure`` as its error when the engine stops it for a reason of its own."""
        ...

    def unattended(self) -> bool:
        """No client follows the run any more. True when the run then ends by itself soon (a
        question it waits on becomes an interrupt), so the disconnect policy need not cancel it."""
        ...

    def close(self) -> None:
        """Release what the run held (called once, after its last event)."""
        ...


@dataclass
class ActiveRun:
    """A run living in this process."""

    info: RunInfo
    source: RunSource
    task: asyncio.Task[None] | None = None
    subscribers: int = 0
    stop_requested: bool = False
    grace: asyncio.TimerHandle | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return self.info.key


class RunSlot:
    """A thread's run lock, held for one run id until the run is launched (see ``RunManager.reserve``)."""

    def __init__(self, manager: RunManager, info: RunInfo) -> None:
        self._manager = manager
        self.info = info
        self.run: ActiveRun | None = None

    async def launch(self, source: RunSource) -> ActiveRun:
        """Open the run's log and start it; the slot's lock now belongs to the run."""
        self.run = await self._manager._launch(self.info, source)
        return self.run


class RunManager:
    """Starts runs, tracks the ones living in this process, and serves their event logs."""

    def __init__(
        self,
        *,
        locks: RunLocks,
        logs: EventLog,
        encode_failure: EncodeFailure,
        worker_id: str | None = None,
        lock_ttl: float = 30.0,
        disconnect_policy: DisconnectPolicy = "cancel",
        disconnect_grace: float = 0.0,
        stop_bus: StopBus | None = None,
        count_metrics: bool = True,
        questions: QuestionBus | None = None,
    ) -> None:
        self.locks = locks
        self.questions: QuestionBus = questions or MemoryQuestionBus()
        self.logs = logs
        self.encode_failure = encode_failure
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self.lock_ttl = lock_ttl
        self.disconnect_policy = disconnect_policy
        self.disconnect_grace = disconnect_grace
        self.stop_bus = stop_bus
        self.count_metrics = count_metrics
        self._runs: dict[str, ActiveRun] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._renewals: set[asyncio.Future[list[None]]] = set()  # rounds of renewals under way
        self._reasserting: asyncio.Task[None] | None = None
        if stop_bus is not None:
            stop_bus.listen(self._stop_local, on_back=self._backend_back)

    @property
    def active(self) -> dict[str, ActiveRun]:
        """The runs living in this process, by key."""
        return dict(self._runs)

    async def running(self, key: str) -> bool:
        """Whether the run ``key`` is going on any worker: it holds its thread's lock (the lock of a
        run whose worker died expires, as the run log's readers find too)."""
        thread_id, _, run_id = key.partition("/")
        return await self.locks.holder(thread_id) == run_id

    # -- starting ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def reserve(
        self,
        thread_id: str,
        run_id: str,
        principal: str,
        *,
        on_busy: Callable[[str | None], Awaitable[None]] | None = None,
    ) -> AsyncIterator[RunSlot]:
        """Hold the thread's run lock for ``run_id`` while the caller builds the run.

        ``RunConflict`` when the run id is already taken in this thread or another run holds the
        thread; ``on_busy`` runs first in either case, given the owner of the run in the way (when
        known), so the caller can answer a thread the principal may not see as missing rather than
        busy. Without a ``launch`` in the block, the lock is released when it ends.
        """
        info = RunInfo(run_id, thread_id, principal, self.worker_id)
        logs.bind(principal=principal, thread=thread_id, run=run_id)
        if (taken := await self.logs.info(info.key)) is not None:
            if on_busy is not None:
                await on_busy(taken.owner)
            raise RunConflict(
                f"run {run_id!r} already exists in thread {thread_id!r}; send a new runId for a new run",
                "run_exists",
            )
        if not await self.locks.acquire(thread_id, run_id, self.lock_ttl):
            if on_busy is not None:
                holder = await self.locks.holder(thread_id)
                running = None if holder is None else await self.logs.info(run_key(thread_id, holder))
                await on_busy(None if running is None else running.owner)
            raise RunConflict(
                f"thread {thread_id!r} is busy with another run; wait for it to finish or stop it",
                "thread_busy",
            )
        slot = RunSlot(self, info)
        try:
            yield slot
        finally:
            if slot.run is None:
                with contextlib.suppress(BackendUnavailable):
                    await self.locks.release(thread_id, run_id)

    async def _launch(self, info: RunInfo, source: RunSource) -> ActiveRun:
        try:
            await self.logs.open(info)
        except BaseException:
            source.close()
            raise
        active = ActiveRun(info, source)
        self._runs[info.key] = active
        # The task runs in a copy of this (the request's) context: its log ids and its trace.
        active.task = asyncio.create_task(self._run(active), name=f"run-{info.key}")
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_locks(), name="run-lock-renewer")
        return active

    # -- running -----------------------------------------------------------------------------

    async def _run(self, active: ActiveRun) -> None:
        attributes = {"ragstream.thread_id": active.info.thread_id, "ragstream.run_id": active.info.run_id}
        with tracing.span("ragstream.run", **attributes):
            await self._execute(active)

    async def _execute(self, active: ActiveRun) -> None:
        source, key = active.source, active.key
        status: RunStatus = "error"
        code: str | None = None  # the terminal RUN_ERROR's code, or the engine's own failure
        ended_by_engine = False
        terminal = False
        logging_failed = False
        started = time.perf_counter()
        if self.count_metrics:
            metrics.ACTIVE_RUNS.inc()
        try:
            async for event in source.events():
                if not logging_failed:
                    try:
                        await self.logs.append(key, event.data)
                    except BackendUnavailable:
                        # nobody can follow the run any more: stop it (nothing is saved) and drain
                        logger.error("run %s: the event log is unavailable; stopping the run", key)
                        logging_failed = True
                        source.cancel()
                        await self._append_failure(key, RunFailure(FailureCode.EVENT_LOG_UNAVAILABLE))
                        code, ended_by_engine = FailureCode.EVENT_LOG_UNAVAILABLE.value, True
                if event.status is not None:
                    terminal, status = True, event.status
                    if not ended_by_engine:
                        code = event.code
                elif event.flush:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            if not terminal:
                await self._append_failure(key, RunFailure(FailureCode.SHUTDOWN))
                code, ended_by_engine = FailureCode.SHUTDOWN.value, True
            raise
        except Exception as exc:  # the source broke its promise not to raise: end the stream properly
            if not terminal:
                reference = uuid.uuid4().hex[:12]
                logger.error("run %s failed (reference %s)", key, reference, exc_info=exc)
                failure = RunFailure(
                    FailureCode.INTERNAL_ERROR,
                    f"The run failed because of an internal error (reference {reference}).",
                )
                await self._append_failure(key, failure)
                code, ended_by_engine = failure.code.value, True
        finally:
            outcome = "error" if ended_by_engine or not terminal else status
            elapsed = time.perf_counter() - started
            note = getattr(source, "usage_note", None)  # a binding may say what the run's model used
            used = note() if note is not None else None
            logger.info(
                "run %s ended: %s%s after %.3f s%s",
                key,
                outcome,
                f" ({code})" if code else "",
                elapsed,
                f", {used}" if used else "",
            )
            if self.count_metrics:
                metrics.ACTIVE_RUNS.dec()
                metrics.RUNS.labels(outcome, code or "").inc()
                metrics.RUN_DURATION.labels(outcome).observe(elapsed)
            if tracing.enabled():
                tracing.end_run(outcome, code)
            source.close()
            self._runs.pop(key, None)
            if self._renewals:
                # a renewal sent before the run ended reaches the lock first: after the release it
                # would take the freed lock again (a renewal takes a free lock) for a run that is over;
                # bounded, since during an outage a renewal waits out Redis timeouts
                await asyncio.wait(set(self._renewals), timeout=RENEWAL_WAIT_SECONDS)
            if not self._runs and self._renewer is not None:
                # an idle process keeps no task: the next run starts a new renewer
                self._renewer.cancel()
                self._renewer = None
            with contextlib.suppress(Exception):
                await self.locks.release(active.info.thread_id, active.info.run_id)
            with contextlib.suppress(Exception):
                await self.logs.close(key, status)

    async def _append_failure(self, key: str, failure: RunFailure) -> None:
        with contextlib.suppress(Exception):
            await self.logs.append(key, self.encode_failure(failure))

    async def _renew_locks(self) -> None:
        """Renew the run locks of this process's runs every third of their lifetime, while it has runs."""
        while self._runs:
            await asyncio.sleep(self.lock_ttl / 3)
            # no reference to a run survives the next sleep: an ended run is freed at once
            await self._renew_all()

    async def _renew_all(self) -> None:
        """One round of renewals of every local run's lock (a run ending meanwhile waits for it)."""
        renewal = asyncio.gather(*[self._renew(active) for active in self._runs.values()])
        self._renewals.add(renewal)
        try:
            await renewal
        finally:
            self._renewals.discard(renewal)

    def _backend_back(self) -> None:
        """The shared backend is back after an outage, maybe restarted empty: take the local runs'
        locks and write their event logs again now, not at the next heartbeat or event (until then
        another worker would see the thread free and the run gone)."""
        if self._runs and (self._reasserting is None or self._reasserting.done()):
            self._reasserting = asyncio.create_task(self._reassert(), name="run-reassert")

    async def _reassert(self) -> None:
        await self._renew_all()
        with contextlib.suppress(Exception):
            await self.logs.restore()

    async def _renew(self, active: ActiveRun) -> None:
        info = active.info
        try:
            held = await self.locks.renew(info.thread_id, info.run_id, self.lock_ttl)
        except Exception:
            logger.warning("could not renew the run lock of %s", info.key, exc_info=True)
            return
        if not held and self._runs.get(info.key) is active:
            logger.error("run %s lost its thread lock; stopping it", info.key)
            active.source.cancel()

    async def forget(self, thread_id: str) -> None:
        """Drop the ended runs of a deleted thread: their events are no longer readable, and their
        ids are free for a later thread of that id."""
        await self.logs.forget(thread_id)

    # -- following ---------------------------------------------------------------------------

    async def find(self, thread_id: str, run_id: str, principal: str) -> RunInfo:
        """The run ``run_id`` of ``thread_id`` as ``principal`` may see it; ``RunNotFound`` otherwise.

        A run of someone else's thread and a run that never existed give the same answer.
        """
        info = await self.logs.info(run_key(thread_id, run_id))
        if info is None or info.owner != principal:
            raise RunNotFound(f"run {run_id!r} not found in thread {thread_id!r}")
        return info

    async def subscribe(self, info: RunInfo, after: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        """The run's events after ``after`` as ``(sequence, data)`` batches, then its live tail."""
        active = self._runs.get(info.key)
        if active is not None:
            active.subscribers += 1
            if active.grace is not None:
                active.grace.cancel()
                active.grace = None
        if self.count_metrics:
            metrics.ACTIVE_STREAMS.inc()
        last = after
        try:
            async for batch in self.logs.read(info.key, after):
                last = batch[-1][0]
                yield batch
        except BackendUnavailable as exc:
            logger.warning("run %s: cannot read its event log: %s", info.key, exc)
            lost = RunFailure(
                FailureCode.EVENT_LOG_UNAVAILABLE, "The run's event log is unavailable; reconnect later."
            )
            yield [(last, self.encode_failure(lost))]  # its id: where a reconnect resumes
        finally:
            if self.count_metrics:
                metrics.ACTIVE_STREAMS.dec()
            if active is not None:
                active.subscribers -= 1
                if active.subscribers == 0 and active.task is not None and not active.task.done():
                    self._last_subscriber_left(active)

    def _last_subscriber_left(self, active: ActiveRun) -> None:
        if self.disconnect_grace <= 0:
            self._unattended(active)
            return
        loop = asyncio.get_running_loop()

        def expire() -> None:
            active.grace = None
            if active.subscribers == 0:
                self._unattended(active)

        active.grace = loop.call_later(self.disconnect_grace, expire)

    def _unattended(self, active: ActiveRun) -> None:
        """Nobody follows the run (after the grace period): tell it, then apply the policy."""
        ends_by_itself = active.source.unattended()
        if self.disconnect_policy == "cancel" and not ends_by_itself:
            active.source.cancel()

    # -- questions ---------------------------------------------------------------------------

    async def answer(self, info: RunInfo, question_id: str, payload: dict[str, Any]) -> None:
        """Deliver a person's answer to a question the run asked, wherever the run lives.

        ``RunConflict`` when the run has ended (``run_ended``) or the question was already answered
        or timed out (``question_closed``); ``QuestionNotFound`` when the run never asked it.
        """
        if info.status != "running":
            raise RunConflict(
                f"run {info.run_id!r} has ended; if it left this question open, the thread now waits on it"
                " as an interrupt: resume the thread with the answer",
                "run_ended",
            )
        status = await self.questions.answer(info.key, question_id, payload)
        if status == "unknown":
            raise QuestionNotFound(f"run {info.run_id!r} asked no question {question_id!r}")
        if status == "closed":
            raise RunConflict(
                f"question {question_id!r} was already answered or is no longer open", "question_closed"
            )

    # -- stopping ----------------------------------------------------------------------------

    async def stop(self, info: RunInfo) -> None:
        """Ask a run to stop, wherever it runs; it ends with the ``cancelled`` outcome."""
        active = self._runs.get(info.key)
        if active is not None:
            active.stop_requested = True
            active.source.cancel()
        elif info.status == "running":
            if self.stop_bus is None:
                raise RunConflict(
                    f"run {info.run_id!r} runs in another worker and this backend cannot reach it",
                    "remote_run",
                )
            await self.stop_bus.publish(info.key)

    async def wait_ended(self, info: RunInfo) -> None:
        """Return once the run has ended and its thread is free for the next run; a run elsewhere
        is watched through its log. Callers bound the wait (``asyncio.timeout``)."""
        active = self._runs.get(info.key)
        if active is not None and active.task is not None:
            await asyncio.wait([active.task])
        while True:  # a run elsewhere: its status is the shared log's, which nothing here signals
            current = await self.logs.info(info.key)
            if current is None or current.status != "running":
                return
            await asyncio.sleep(0.05)

    def _stop_local(self, key: str) -> None:
        active = self._runs.get(key)
        if active is not None:
            active.stop_requested = True
            active.source.cancel()

    def end_for_shutdown(self) -> None:
        """Ask every local run to end with ``RUN_ERROR`` ``shutdown`` (not a stop a user asked for:
        it ends as the server's failure); each still writes that terminal event to its log, so a
        client streaming it reads why it ended before its connection closes."""
        for run in self._runs.values():
            run.source.cancel(RunFailure(FailureCode.SHUTDOWN))

    async def shutdown(self) -> None:
        """End every local run with ``RUN_ERROR`` ``shutdown`` (a follower elsewhere, or a reconnect,
        learns the server stopped it, not that someone pressed Stop) and wait for them to end."""
        for task in (self._renewer, self._reasserting):
            if task is not None:
                task.cancel()
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        self.end_for_shutdown()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self.stop_bus is not None:
            await self.stop_bus.close()
        await self.questions.aclose()
