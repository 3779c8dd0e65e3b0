"""The run engine: runs as tasks writing event logs, one run per thread, stop and reconnect.

Protocol-neutral: nothing here knows AG-UI, pydantic-ai or HTTP. A protocol binding
(``ragstream.agui``) builds a ``RunSource`` and hands it to ``RunManager``; the web layer maps the
engine's domain errors (``errors``) to responses. Memory implementations of the event log, run
locks, stop bus and question bus serve one process; ``runs.redis`` shares them between workers and
hosts.
"""

from .errors import BackendUnavailable, QuestionNotFound, RunConflict, RunError, RunNotFound
from .eventlog import EventLog, MemoryEventLog, RunInfo, RunStatus, run_key
from .failures import FailureCode, RunFailure
from .locks import MemoryRunLocks, RunLocks, lease_name
from .manager import ActiveRun, DisconnectPolicy, RunEvent, RunManager, RunSlot, RunSource
from .questions import AnswerStatus, MemoryQuestionBus, QuestionBus
from .stopbus import StopBus

__all__ = [
    "ActiveRun",
    "AnswerStatus",
    "BackendUnavailable",
    "DisconnectPolicy",
    "EventLog",
    "FailureCode",
    "MemoryEventLog",
    "MemoryQuestionBus",
    "MemoryRunLocks",
    "QuestionBus",
    "QuestionNotFound",
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
    "lease_name",
    "run_key",
]
