"""The run engine: runs as tasks writing event logs, one run per thread, stop and reconnect.

Protocol-neutral: nothing here knows AG-UI, pydantic-ai or HTTP. A protocol binding
(``server.agui``) builds a ``RunSource`` and hands it to ``RunManager``; the web layer maps the
engine's domain errors (``errors``) to responses. Memory implementations of the event log, run
locks and stop bus serve one process; ``runs.redis`` shares them between workers and hosts.
"""

from .errors import BackendUnavailable, RunConflict, RunError, RunNotFound
from .eventlog import EventLog, MemoryEventLog, RunInfo, RunStatus, run_key
from .failures import FailureCode, RunFailure
from .locks import MemoryRunLocks, RunLocks
from .manager import ActiveRun, DisconnectPolicy, RunEvent, RunManager, RunSlot, RunSource
from .stopbus import StopBus

__all__ = [
    "ActiveRun",
    "BackendUnavailable",
    "DisconnectPolicy",
    "EventLog",
    "FailureCode",
    "MemoryEventLog",
    "MemoryRunLocks",
    "RunConflict",
    "RunError",
    "RunEvent",
    "RunFailure",
    "RunInfo",
    "RunLocks",
    "RunManager",
    "RunNotFound",
    "RunSlot",
    "RunSource",
    "RunStatus",
    "StopBus",
    "run_key",
]
