"""``TokenBudget``: a run's share of its principal's daily model tokens, as a pydantic-ai capability.

The run is given the day's remaining tokens as pydantic-ai's own ``UsageLimits(total_tokens_limit)``
(``factory``); this capability counts each model response's tokens into the day as it arrives
(``Quotas.spend_tokens``) and asks the model again only while the day's count, every run of the
principal included, is under the limit. Runs of one principal that started together therefore stop
at their next model request once the day is spent, rather than each spending the remainder it
started with. The model calls a run's tools make (``ask``'s answer writer, the session summary,
``summarize_document``, ``analyze``) get the same instance (``ChatDeps.model_capabilities``) and
the run's usage, so they count into the day as they arrive and against the run's limit. Whatever a
run used that no response reported is counted when it ends, however it ends (finished, failed,
stopped). pydantic-ai's ``UsageLimitExceeded``, and a request refused here,
become the run failure ``quota_exceeded``, so the client is told that the day's tokens ran out, not
that one run was too long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult

from ..quotas import Quotas
from ..runs import FailureCode, RunFailure

__all__ = ["RunTokens", "TokenBudget"]

logger = logging.getLogger("ragstream.runs")


@dataclass
class TokenBudget(AbstractCapability[Any]):
    """Counts one run's model tokens into ``principal``'s day; ``limit`` is its ``total_tokens_limit``.

    One instance per run (``factory``): it keeps what it has counted of that run.
    """

    quotas: Quotas
    principal: str
    limit: int
    _counted: int = field(default=0, init=False)
    _requests: int = field(default=0, init=False)
    _runs: int = field(default=0, init=False)
    _start: int = field(default=0, init=False)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        # The run's own agent run, and the model calls its tools make (``model_run_options``: the
        # same instance, the run's usage): the rest is counted when the last of them ends.
        self._runs += 1
        if self._runs == 1:
            self._start = ctx.usage.total_tokens  # a resumed conversation starts from its stored usage
        try:
            return await handler()
        finally:
            self._runs -= 1
            if self._runs == 0:
                await self._count(ctx.usage.total_tokens - self._start - self._counted)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # The first request was admitted with the run (some of the day was left); a later one only
        # while the day's count, with what the principal's other runs spent meanwhile, is under it.
        self._requests += 1
        if self._requests > 1 and await self._day_is_spent():
            raise RunFailure(FailureCode.QUOTA_EXCEEDED)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        await self._count(response.usage.total_tokens)
        return response

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        if isinstance(error, UsageLimitExceeded) and ctx.usage.total_tokens > self.limit:
            raise RunFailure(FailureCode.QUOTA_EXCEEDED) from error
        raise error

    async def _count(self, tokens: int) -> None:
        if tokens <= 0:
            return
        self._counted += tokens
        try:
            await self.quotas.spend_tokens(self.principal, tokens)
        except Exception:
            logger.warning("the model tokens of a run of %s were not counted", self.principal, exc_info=True)

    async def _day_is_spent(self) -> bool:
        try:
            used = await self.quotas.tokens_used(self.principal)
        except Exception:  # the count cannot be read: the run's own UsageLimits still bounds it
            logger.warning("the model tokens of %s could not be read", self.principal, exc_info=True)
            return False
        limit = self.quotas.limits.tokens_per_day
        return used is not None and limit is not None and used >= limit


@dataclass
class RunTokens(AbstractCapability[Any]):
    """Counts the tokens of every model response of one run, the model calls of its tools included
    (``ChatDeps.model_capabilities``): what the run's end line says it used, however it ended."""

    input: int = 0
    output: int = 0

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self.input += response.usage.input_tokens
        self.output += response.usage.output_tokens
        return response

    def note(self) -> str:
        """``N tokens (I in, O out)``."""
        return f"{self.input + self.output} tokens ({self.input} in, {self.output} out)"
