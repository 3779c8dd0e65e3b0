"""``ToolContextCache``: per-thread ``ToolContext``s in memory, bounded, in front of a ``ThreadStore``.

Rules that keep updates from being lost:

- Mutate a thread only inside ``transaction(thread_id)``: it holds the thread's lock, hands out the
  entry, saves it when the block succeeds and drops it (so the next reader reloads the last saved
  state) when the block raises. A failed run therefore leaves nothing half-written.
- Entries are evicted least-recently-used beyond ``max_entries`` and after ``ttl_seconds`` idle
  (checked on every access, and by ``evict_idle``), never while locked, and an entry with unsaved
  changes is saved before it goes. "Unsaved" is read off the context's ``version``, so a change
  made through ``get_or_create``'s context (with the context's own methods, or ``mark_changed``
  after mutating a model) is kept too, on eviction or ``close()``; one that raced a transaction
  on the thread in another process is dropped there, the store keeping the other's.
- With a shared store (other processes write too), a transaction compares the stored version with
  the cached one and reloads when they differ.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from .context import ToolContext
from .store import MemoryThreadStore, ThreadRecord, ThreadStore, VersionConflictError

__all__ = ["CacheEntry", "ToolContextCache", "Transaction"]

logger = logging.getLogger(__name__)


@dataclass
class CacheEntry:
    """A cached thread: its context, the record it was loaded from, and its background tasks."""

    thread_id: str
    context: ToolContext
    record: ThreadRecord
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = 0.0
    saved_version: int = 0
    """The context's ``version`` when it was loaded or last saved."""
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    cache: ToolContextCache | None = field(default=None, repr=False)

    @property
    def dirty(self) -> bool:
        """Whether the context may have changed since it was loaded or last saved (a cheap check)."""
        return self.context.version != self.saved_version

    def unsaved(self) -> bool:
        """Whether the context holds changes the store does not: ``dirty`` and its data differs
        (a namespace typed on first use changes the version, not the data)."""
        return self.dirty and self.context.dump_namespaces() != self.record.state

    @property
    def is_new(self) -> bool:
        """True until the thread is saved for the first time."""
        return self.record.version == 0

    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep a background task of this thread; it is cancelled when the entry is evicted."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel_tasks(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    async def apply(self, change: Callable[[ToolContext], Any]) -> None:
        """Apply and save a change that lands after the run that caused it (a background summary).

        It waits for the thread's lock (a run in progress saves first), applies ``change`` to the
        thread's current context (which marks what it changed) and saves it in its own transaction.
        """
        if self.cache is None:
            raise RuntimeError("this entry belongs to no cache")
        async with self.cache.transaction(self.thread_id) as entry:
            change(entry.context)


class Transaction:
    """One locked unit of work on a thread (see ``ToolContextCache.begin``)."""

    def __init__(self, cache: ToolContextCache, entry: CacheEntry, lock: asyncio.Lock) -> None:
        self.cache = cache
        self.entry = entry
        self._lock = lock
        self._closed = False
        self.committed = False

    @property
    def context(self) -> ToolContext:
        return self.entry.context

    async def commit(self) -> None:
        """Save the entry; if saving fails the entry is rolled back and the error raised."""
        try:
            await self.cache.save(self.entry)
        except BaseException:
            self.rollback()
            raise
        self.committed = True

    def rollback(self) -> None:
        """Forget the entry's unsaved changes."""
        self.cache.rollback(self.entry.thread_id)

    def close(self) -> None:
        """Release the thread's lock (idempotent)."""
        if not self._closed:
            self._closed = True
            self._lock.release()
            self.cache._shrink()


class ToolContextCache:
    """Bounded cache of thread contexts with per-thread locks, backed by a ``ThreadStore``."""

    def __init__(
        self,
        store: ThreadStore | None = None,
        *,
        max_entries: int = 1000,
        ttl_seconds: float = 3600.0,
        prepare: Callable[[ToolContext], Any] | None = None,
        state_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        before_save: Callable[[CacheEntry, dict[str, dict[str, Any]]], Any] | None = None,
    ) -> None:
        self.store = store or MemoryThreadStore()
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._prepare = prepare
        self._state_key = state_key
        self._clock = clock
        self._before_save = before_save
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()
        # A lock lives as long as an entry or a waiting task holds it, so two tasks can never
        # end up holding different locks for one thread.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._loading: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._background: set[asyncio.Task[Any]] = set()
        self._evicting: set[str] = set()  # dirty entries whose saving-eviction is under way

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, thread_id: object) -> bool:
        return thread_id in self._entries

    # -- access ------------------------------------------------------------------------------

    async def get_or_create(self, thread_id: str) -> tuple[ToolContext, bool]:
        """The thread's context and whether the thread is new (never saved).

        Changes made to the context are saved when its entry is evicted or the cache closes. To
        change a thread under its lock and save at once (what a run does), use ``transaction``.
        """
        entry = await self._entry(thread_id, revalidate=False)
        return entry.context, entry.is_new

    async def get_entry(self, thread_id: str, *, revalidate: bool = True) -> CacheEntry:
        """The cache entry (context plus stored record) of ``thread_id``."""
        return await self._entry(thread_id, revalidate=revalidate)

    def lock(self, thread_id: str) -> asyncio.Lock:
        """The in-process lock of ``thread_id`` (held by ``transaction``)."""
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = asyncio.Lock()
        return lock

    async def begin(self, thread_id: str) -> Transaction:
        """Take the thread's lock and its entry; end with ``commit()`` or ``rollback()``, then ``close()``.

        The lock belongs to the transaction, not to a task: a request handler may begin it and the
        run task it starts may finish it.
        """
        lock = self.lock(thread_id)
        await lock.acquire()
        try:
            entry = await self._entry(thread_id, revalidate=True)
        except BaseException:
            lock.release()
            raise
        return Transaction(self, entry, lock)

    @asynccontextmanager
    async def transaction(self, thread_id: str, *, save: bool = True) -> AsyncIterator[CacheEntry]:
        """Hold the thread's lock; save on success, roll back to the stored state on error.

        With ``save=False`` the caller saves (or not) with ``save()`` before the block ends.
        """
        txn = await self.begin(thread_id)
        try:
            yield txn.entry
            if save:
                await txn.commit()
        except BaseException:
            txn.rollback()
            raise
        finally:
            txn.close()

    async def save(self, entry: CacheEntry) -> None:
        """Persist the entry's context and record (compare-and-set on its version).

        ``before_save`` (given at construction) sees the entry, whose record still holds the state
        last saved, and the state about to be saved; it may add to the record's ``extras``.
        """
        version = entry.context.version
        state = entry.context.dump_namespaces()
        if self._before_save is not None:
            self._before_save(entry, state)
        record = replace(entry.record, state=state)
        entry.record = await self.store.save(record)
        entry.saved_version = version

    def rollback(self, thread_id: str) -> None:
        """Forget in-memory changes: the next access reloads the last saved state."""
        self._drop(thread_id)

    async def delete(self, thread_id: str) -> bool:
        """Remove a thread from the cache and the store."""
        async with self.lock(thread_id):
            self._drop(thread_id)
            return await self.store.delete(thread_id)

    # -- eviction ----------------------------------------------------------------------------

    async def evict(self, thread_id: str) -> bool:
        """Evict one entry (saving unsaved changes first); ``False`` if absent or locked."""
        entry = self._entries.get(thread_id)
        if entry is None or entry.lock.locked() or self.lock(thread_id).locked():
            return False
        if entry.unsaved():
            async with self.lock(thread_id):
                if self._entries.get(thread_id) is entry:
                    try:
                        await self.save(entry)
                    except VersionConflictError:
                        _warn_dropped(thread_id)
        self._drop(thread_id)
        return True

    async def evict_idle(self) -> int:
        """Evict entries idle for longer than ``ttl_seconds``; returns how many went."""
        cutoff = self._clock() - self.ttl_seconds
        stale = [tid for tid, e in self._entries.items() if e.last_used < cutoff]
        evicted = 0
        for thread_id in stale:
            evicted += await self.evict(thread_id)
        return evicted

    async def settle(self) -> None:
        """Wait for the saving-evictions scheduled in the background (capacity overflow)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Finish background saves, save unsaved entries, cancel background tasks, close the store."""
        await self.settle()
        for thread_id in list(self._entries):
            await self.evict(thread_id)
        for entry in list(self._entries.values()):
            entry.cancel_tasks()
        self._entries.clear()
        await self.store.close()

    # -- internals ---------------------------------------------------------------------------

    async def _entry(self, thread_id: str, *, revalidate: bool) -> CacheEntry:
        entry = self._entries.get(thread_id)
        if entry is not None and revalidate and self.store.shared:
            stored = await self.store.version(thread_id)
            # While the store answered, the entry may have been evicted or replaced: look again.
            if self._entries.get(thread_id) is not entry:
                entry = None
            elif stored != (entry.record.version or None):
                if entry.unsaved():
                    _warn_dropped(thread_id)
                self._drop(thread_id)
                entry = None
        if entry is None:
            loading = self._loading.get(thread_id)
            if loading is None:
                loading = self._loading[thread_id] = asyncio.Lock()
            async with loading:
                entry = self._entries.get(thread_id)
                if entry is None:
                    entry = await self._load(thread_id)
                    self._entries[thread_id] = entry
        entry.last_used = self._clock()
        self._entries.move_to_end(thread_id)
        self._shrink()
        return entry

    async def _load(self, thread_id: str) -> CacheEntry:
        record = await self.store.load(thread_id) or ThreadRecord(thread_id)
        context = ToolContext.from_dump(record.state, state_key=self._state_key)
        if self._prepare is not None:
            self._prepare(context)
        return CacheEntry(
            thread_id, context, record, lock=self.lock(thread_id), saved_version=context.version, cache=self
        )

    def _drop(self, thread_id: str) -> None:
        entry = self._entries.pop(thread_id, None)
        if entry is not None:
            entry.cancel_tasks()

    def _shrink(self) -> None:
        """Schedule saving-evictions beyond ``max_entries`` and of entries idle past ``ttl_seconds``
        (oldest first, locked ones skipped)."""
        excess = len(self._entries) - len(self._evicting) - self.max_entries
        cutoff = self._clock() - self.ttl_seconds
        # Entries are kept in the order of their last use: walk from the oldest only as far as
        # needed (this runs twice per run, and copying a full cache here cost ~0.5 ms per run at
        # 1,000 threads).
        victims: list[tuple[str, CacheEntry]] = []
        for thread_id, entry in self._entries.items():
            if len(victims) >= excess and entry.last_used >= cutoff:
                break
            if not entry.lock.locked() and thread_id not in self._evicting:
                victims.append((thread_id, entry))
        for thread_id, entry in victims:
            if entry.dirty:  # saved first, in the background; counted as gone meanwhile
                self._evicting.add(thread_id)
                task = asyncio.get_running_loop().create_task(self.evict(thread_id))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
                task.add_done_callback(lambda _, tid=thread_id: self._evicting.discard(tid))
            else:
                self._drop(thread_id)


def _warn_dropped(thread_id: str) -> None:
    logger.warning(
        "thread %s changed in the store since it was cached: its unsaved changes in this process are dropped",
        thread_id,
    )
