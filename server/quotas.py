"""Limits per principal: runs per minute, concurrent runs, upload bytes per hour, model tokens per day.

Every limit is off unless configured (``RAGSTREAM_LIMIT_*``). Rates are counted in fixed windows
(the calendar minute, the calendar hour, the UTC day), so a refusal's ``Retry-After`` is exact: the
seconds until the window turns. A concurrent run holds a slot until it ends; a slot whose worker
died is freed by the next admission it would refuse, once the run no longer holds its thread's run
lock (which expires with its worker), and in any case when the run could no longer be going (its
timeout plus a margin).

``admit_run`` checks and takes everything a run needs in one step (atomically, in one Redis round
trip when the counters are shared): a run refused for one limit counts against none. The model
tokens of a day are counted as the model answers, from pydantic-ai's usage of each response
(``spend_tokens``, which gives back the day's count so far); a run starts only with some of the
day's budget left, is given the rest as its own token limit, and asks the model again only while
the day's count, its other runs' included, is under the limit. ``MemoryQuotas`` counts in this process; ``RedisQuotas`` shares the counts
between every worker and host on the same Redis and key prefix.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .config import AppConfig
from .runs import BackendUnavailable

if TYPE_CHECKING:  # the redis extra; RedisQuotas is made only with a client of it
    from redis.asyncio import Redis

__all__ = [
    "LargerThanQuota",
    "Limits",
    "MemoryQuotas",
    "QuotaExceeded",
    "Quotas",
    "RedisQuotas",
    "RunAdmission",
    "open_quotas",
]

logger = logging.getLogger("ragstream.server")

MINUTE, HOUR, DAY = 60, 3600, 86_400

#: Whether the run of a concurrent-run slot (its key, ``thread/run``) is still going.
Running = Callable[[str], Awaitable[bool]]

#: Seconds a caller refused for concurrency is asked to wait (when one of its runs ends is unknown).
CONCURRENT_RETRY_SECONDS = 2


@dataclass(frozen=True)
class Limits:
    """The configured limits; ``None`` is no limit."""

    runs_per_minute: int | None = None
    concurrent_runs: int | None = None
    upload_bytes_per_hour: int | None = None
    tokens_per_day: int | None = None

    @classmethod
    def from_config(cls, config: AppConfig) -> Limits:
        return cls(
            config.limit_runs_per_minute,
            config.limit_concurrent_runs,
            config.limit_upload_bytes_per_hour,
            config.limit_tokens_per_day,
        )

    @property
    def on_runs(self) -> bool:
        return any(v is not None for v in (self.runs_per_minute, self.concurrent_runs, self.tokens_per_day))


class QuotaExceeded(Exception):
    """The principal reached a limit: 429 with ``Retry-After``."""

    code = "quota_exceeded"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))
        self.headers = {"Retry-After": str(self.retry_after)}


class LargerThanQuota(Exception):
    """A single request needs more than a whole window allows: 413, since waiting would not help."""

    code = "quota_exceeded"


@dataclass
class RunAdmission:
    """A run let in: the day's model tokens left for it (``None``: no daily limit), and its slot."""

    tokens_left: int | None
    _release: Callable[[], None] | None = None

    def release(self) -> None:
        """Free the run's concurrent-run slot (once; later calls do nothing)."""
        release, self._release = self._release, None
        if release is not None:
            release()


def _until_next(now: float, window: int) -> float:
    return window - now % window


def _window(now: float, window: int) -> int:
    return int(now // window)


async def _checking(call: Awaitable[Any]) -> Any:
    """``call``'s result; a Redis failure as ``BackendUnavailable`` (the limits cannot be checked)."""
    from redis.exceptions import RedisError

    try:
        return await call
    except RedisError as exc:
        raise BackendUnavailable(f"the limits cannot be checked: {exc}") from exc


class Quotas(ABC):
    """The limits and their counters."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self.clock = clock

    async def admit_run(
        self, principal: str, run_key: str, *, hold_seconds: float, running: Running | None = None
    ) -> RunAdmission:
        """Let a run of ``principal`` start, taking a concurrent-run slot for at most ``hold_seconds``;
        ``QuotaExceeded`` when it may not. Refused for concurrency, it first frees the slots whose
        runs ``running`` says are over (their worker died) and asks again."""
        if not self.limits.on_runs:
            return RunAdmission(None)
        now = self.clock()
        refused, tokens_used = await self._admit(principal, run_key, now, now + hold_seconds)
        if refused == "concurrent" and running is not None and await self._free_ended(principal, running):
            refused, tokens_used = await self._admit(principal, run_key, now, now + hold_seconds)
        limits = self.limits
        if refused == "runs":
            raise QuotaExceeded(
                f"{principal!r} started {limits.runs_per_minute} runs this minute, the limit; "
                "retry after the minute turns",
                _until_next(now, MINUTE),
            )
        if refused == "concurrent":
            raise QuotaExceeded(
                f"{principal!r} already has {limits.concurrent_runs} runs going, the limit; "
                "retry when one has finished",
                CONCURRENT_RETRY_SECONDS,
            )
        if refused == "tokens":
            raise QuotaExceeded(
                f"{principal!r} used today's {limits.tokens_per_day} model tokens; retry after 00:00 UTC",
                _until_next(now, DAY),
            )
        tokens_left = None if limits.tokens_per_day is None else limits.tokens_per_day - tokens_used
        release = (lambda: self._release(principal, run_key)) if limits.concurrent_runs else None
        return RunAdmission(tokens_left, release)

    async def spend_tokens(self, principal: str, tokens: int) -> int | None:
        """Count ``tokens`` model tokens used by a run of ``principal`` into its day; the day's
        tokens counted so far, by every run of the principal (``None`` without a daily limit)."""
        if self.limits.tokens_per_day is None:
            return None
        return await self._spend(principal, max(tokens, 0), self.clock())

    async def tokens_used(self, principal: str) -> int | None:
        """The model tokens counted into ``principal``'s day so far (``None`` without a daily limit)."""
        if self.limits.tokens_per_day is None:
            return None
        return await self._tokens(principal, self.clock())

    async def admit_upload(self, principal: str, size: int) -> None:
        """Count an upload of ``size`` bytes into the principal's hour; ``QuotaExceeded`` (or
        ``LargerThanQuota``) without counting it when it does not fit."""
        limit = self.limits.upload_bytes_per_hour
        if limit is None:
            return
        if size > limit:
            raise LargerThanQuota(
                f"this upload of {size} bytes is more than the {limit} bytes a principal may upload per hour"
            )
        now = self.clock()
        used = await self._upload(principal, size, limit, now)
        if used is not None:
            raise QuotaExceeded(
                f"{principal!r} uploaded {used} bytes this hour; {size} more would pass the limit of "
                f"{limit}; retry after the hour turns",
                _until_next(now, HOUR),
            )

    async def _free_ended(self, principal: str, running: Running) -> bool:
        """Free the principal's slots whose runs are over; whether there were any."""
        ended = [key for key in await self._slots(principal) if not await running(key)]
        if ended:
            await self._drop(principal, ended)
        return bool(ended)

    @abstractmethod
    async def _slots(self, principal: str) -> list[str]:
        """The run keys holding the principal's concurrent-run slots."""

    @abstractmethod
    async def _drop(self, principal: str, run_keys: list[str]) -> None:
        """Free these slots now."""

    @abstractmethod
    async def _admit(self, principal: str, run_key: str, now: float, hold_until: float) -> tuple[str, int]:
        """Check and take atomically: ``("", tokens used today)``, or the refused limit's name."""

    @abstractmethod
    def _release(self, principal: str, run_key: str) -> None: ...

    @abstractmethod
    async def _spend(self, principal: str, tokens: int, now: float) -> int:
        """Add ``tokens`` to the day's count; the count."""

    @abstractmethod
    async def _tokens(self, principal: str, now: float) -> int:
        """The day's count, read."""

    @abstractmethod
    async def _upload(self, principal: str, size: int, limit: int, now: float) -> int | None:
        """Add ``size`` if it fits; else the bytes already counted this hour."""

    async def aclose(self) -> None:  # noqa: B027 (nothing to wait for unless a backend says so)
        """Wait for slot releases still under way."""


class MemoryQuotas(Quotas):
    """Counters in this process (one worker, no Redis)."""

    _SPANS: ClassVar[dict[str, int]] = {"runs": MINUTE, "tokens": DAY, "upload": HOUR}

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.time) -> None:
        super().__init__(limits, clock)
        self._counts: dict[tuple[str, str], tuple[int, int]] = {}  # (kind, principal) -> (window, count)
        self._active: dict[str, dict[str, float]] = {}
        self._pruned_in: int | None = None  # the minute of the last prune

    def _prune(self, now: float) -> None:
        """Forget the counts of windows that have passed and the principals with no run going, once a
        minute: a long-lived server sees many principals, most of them once."""
        minute = _window(now, MINUTE)
        if minute == self._pruned_in:
            return
        self._pruned_in = minute
        self._counts = {
            key: counted
            for key, counted in self._counts.items()
            if counted[0] == _window(now, self._SPANS[key[0]])
        }
        self._active = {
            principal: live
            for principal, slots in self._active.items()
            if (live := {key: until for key, until in slots.items() if until > now})
        }

    def _count(self, kind: str, principal: str, window: int) -> int:
        counted_in, count = self._counts.get((kind, principal), (window, 0))
        return count if counted_in == window else 0

    def _add(self, kind: str, principal: str, window: int, amount: int) -> None:
        self._counts[kind, principal] = (window, self._count(kind, principal, window) + amount)

    async def _admit(self, principal: str, run_key: str, now: float, hold_until: float) -> tuple[str, int]:
        self._prune(now)
        limits = self.limits
        minute, day = _window(now, MINUTE), _window(now, DAY)
        if (
            limits.runs_per_minute is not None
            and self._count("runs", principal, minute) >= limits.runs_per_minute
        ):
            return "runs", 0
        active = self._active.setdefault(principal, {})
        for key in [k for k, until in active.items() if until <= now]:
            del active[key]
        if limits.concurrent_runs is not None and len(active) >= limits.concurrent_runs:
            return "concurrent", 0
        used = self._count("tokens", principal, day)
        if limits.tokens_per_day is not None and used >= limits.tokens_per_day:
            return "tokens", used
        if limits.runs_per_minute is not None:
            self._add("runs", principal, minute, 1)
        if limits.concurrent_runs is not None:
            active[run_key] = hold_until
        return "", used

    def _release(self, principal: str, run_key: str) -> None:
        self._active.get(principal, {}).pop(run_key, None)

    async def _slots(self, principal: str) -> list[str]:
        return list(self._active.get(principal, {}))

    async def _drop(self, principal: str, run_keys: list[str]) -> None:
        for key in run_keys:
            self._release(principal, key)

    async def _spend(self, principal: str, tokens: int, now: float) -> int:
        day = _window(now, DAY)
        self._add("tokens", principal, day, tokens)
        return self._count("tokens", principal, day)

    async def _tokens(self, principal: str, now: float) -> int:
        return self._count("tokens", principal, _window(now, DAY))

    async def _upload(self, principal: str, size: int, limit: int, now: float) -> int | None:
        self._prune(now)
        hour = _window(now, HOUR)
        used = self._count("upload", principal, hour)
        if used + size > limit:
            return used
        self._add("upload", principal, hour, size)
        return None


# KEYS: runs counter, active runs (sorted set by expiry), tokens counter.
# ARGV: now, runs limit, concurrent limit, tokens limit (0: none), run key, hold until, runs ttl, active ttl.
_ADMIT = """
local now = tonumber(ARGV[1])
local runs_limit, concurrent_limit, tokens_limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if runs_limit > 0 and tonumber(redis.call('GET', KEYS[1]) or '0') >= runs_limit then
  return {'runs', 0}
end
if concurrent_limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= concurrent_limit then
    return {'concurrent', 0}
  end
end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
if tokens_limit > 0 and used >= tokens_limit then
  return {'tokens', used}
end
if runs_limit > 0 then
  redis.call('INCR', KEYS[1])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
end
if concurrent_limit > 0 then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
return {'', used}
"""

# KEYS: the hour's upload counter. ARGV: size, limit, ttl. Returns -1 when added, else the bytes counted.
_UPLOAD = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
  return used
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return -1
"""


class RedisQuotas(Quotas):
    """Counters in Redis under ``<prefix>quota:``, shared by every worker and host."""

    def __init__(
        self, limits: Limits, redis: Redis, prefix: str, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(limits, clock)
        self.redis = redis
        self.prefix = f"{prefix}quota:"
        self._admit_script = redis.register_script(_ADMIT)
        self._upload_script = redis.register_script(_UPLOAD)
        self._releases: set[asyncio.Task[Any]] = set()

    def _key(self, kind: str, principal: str, window: int | None = None) -> str:
        return f"{self.prefix}{kind}:{principal}" + ("" if window is None else f":{window}")

    async def _admit(self, principal: str, run_key: str, now: float, hold_until: float) -> tuple[str, int]:
        limits = self.limits
        keys = [
            self._key("runs", principal, _window(now, MINUTE)),
            self._key("active", principal),
            self._key("tokens", principal, _window(now, DAY)),
        ]
        args = [
            repr(now),
            limits.runs_per_minute or 0,
            limits.concurrent_runs or 0,
            limits.tokens_per_day or 0,
            run_key,
            repr(hold_until),
            2 * MINUTE,
            max(1, math.ceil(hold_until - now)),
        ]
        refused, used = await _checking(self._admit_script(keys=keys, args=args))
        return (refused.decode() if isinstance(refused, bytes) else str(refused)), int(used)

    def _release(self, principal: str, run_key: str) -> None:
        task = asyncio.get_running_loop().create_task(self._zrem(principal, run_key))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _slots(self, principal: str) -> list[str]:
        members = await _checking(self.redis.zrange(self._key("active", principal), 0, -1))
        return [m.decode() if isinstance(m, bytes) else str(m) for m in members]

    async def _drop(self, principal: str, run_keys: list[str]) -> None:
        await _checking(self.redis.zrem(self._key("active", principal), *run_keys))

    async def _zrem(self, principal: str, run_key: str) -> None:
        from redis.exceptions import RedisError

        try:
            await self.redis.zrem(self._key("active", principal), run_key)
        except RedisError:  # the slot expires by itself
            logger.warning("could not free the run slot of %s for %s", run_key, principal, exc_info=True)

    async def _spend(self, principal: str, tokens: int, now: float) -> int:
        from redis.exceptions import RedisError

        key = self._key("tokens", principal, _window(now, DAY))
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.incrby(key, tokens)
                pipe.expire(key, 2 * DAY)
                counted, _ = await pipe.execute()
        except RedisError as exc:
            raise BackendUnavailable(f"the token count cannot be saved: {exc}") from exc
        return int(counted)

    async def _tokens(self, principal: str, now: float) -> int:
        counted = await _checking(self.redis.get(self._key("tokens", principal, _window(now, DAY))))
        return int(counted or 0)

    async def _upload(self, principal: str, size: int, limit: int, now: float) -> int | None:
        key = self._key("upload", principal, _window(now, HOUR))
        used = int(await _checking(self._upload_script(keys=[key], args=[size, limit, 2 * HOUR])))
        return None if used < 0 else used

    async def aclose(self) -> None:
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)


def open_quotas(config: AppConfig, redis: Redis | None) -> Quotas:
    """The configured limits, counted in Redis when there is one, else in this process."""
    limits = Limits.from_config(config)
    if redis is not None:
        return RedisQuotas(limits, redis, config.redis_prefix)
    return MemoryQuotas(limits)
