"""``TokenBudget``: a run's share of its principal's daily model tokens, as a pydantic-ai capability.

The run is given the day's remaining tokens as pydantic-ai's own ``UsageLimits(total_tokens_limit)``
(``factory``); this capability counts what the run used, from pydantic-ai's usage, into the day
(``Quotas.spend_tokens``) however the run ends (finished, failed, stopped), and names the budget
when it is what stopped the run: pydantic-ai's ``UsageLimitExceeded`` becomes the run failure
``quota_exceeded``, so the client is told that the day's tokens ran out, not that one run was too
long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.run import AgentRunResult

from ..quotas import Quotas
from ..runs import FailureCode, RunFailure

__all__ = ["TokenBudget"]

logger = logging.getLogger("ragstream.runs")


@dataclass
class TokenBudget(AbstractCapability[Any]):
    """Counts one run's model tokens into ``principal``'s day; ``limit`` is its ``total_tokens_limit``."""

    quotas: Quotas
    principal: str
    limit: int

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        start = ctx.usage.total_tokens  # a resumed conversation starts from its stored usage
        try:
            return await handler()
        finally:
            try:
                await self.quotas.spend_tokens(self.principal, ctx.usage.total_tokens - start)
            except Exception:
                logger.warning(
                    "the model tokens of a run of %s were not counted", self.principal, exc_info=True
                )

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        if isinstance(error, UsageLimitExceeded) and ctx.usage.total_tokens > self.limit:
            raise RunFailure(FailureCode.QUOTA_EXCEEDED) from error
        raise error
