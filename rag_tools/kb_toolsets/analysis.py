"""The analysis toolset: a model writes Python for a task; it runs in the sandbox, never in-process.

``analyze(task, document_name?)`` asks a code-writing agent (``config.model``, else the run's own
model) for a program. The program runs in ``rag_tools.sandbox`` (Monty: no files, network,
processes or environment; time, memory, recursion, call and wall-clock limits) and reaches the
knowledge base only through the ``kb`` object whose calls this process answers:
``kb.search(query, limit=5)`` and ``kb.get_document(name)``, both already restricted by the
session's filters. A failing program goes back to the writer with its error (pydantic-ai output
retries) a few times.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import Agent, FunctionToolset, ModelRetry, RunContext
from pydantic_ai.models import Model

from ..config import RagConfig
from ..filters import build_document_filter, combine_filters, get_session_filter
from ..kb import Document, FilterLike, SearchHit, as_filter
from ..kb.reranking import counting_usage
from ..models import model_run_options
from ..offline_model import is_extractive_model
from ..progress import report_progress
from ..sandbox import SANDBOX_MODULES, SandboxLimits, SandboxResult, run_sandboxed
from ._common import deps_of, document_name_argument

__all__ = ["AnalysisResult", "AnalysisSource", "create_analysis_toolset"]

WRITER_INSTRUCTIONS = f"""\
Write one Python 3 program that performs the task. It runs in Monty, a sandboxed subset of Python:
no files, network, processes or environment variables, and only these modules:
{", ".join(SANDBOX_MODULES)}.
Monty lacks some of Python: there is no statistics, numpy or heapq (compute means, medians and
deviations by hand with sum, sorted and math.sqrt); classes work, but without inheritance or
@property/@staticmethod/@classmethod; there are no generators (`yield`) and no `del` statement
(use dict.pop); methods are called, not passed as values (key=lambda s: s.lower(), not
key=str.lower).
The knowledge base is available as `kb`:
  kb.search(query: str, limit: int = 5) -> list of {{"title", "uri", "text", "score"}}
  kb.get_document(name: str) -> {{"title", "uri", "content"}} or None
Print what a reader should see, and put the final answer in a variable named `result`
(JSON-compatible). Reply with the code only, without Markdown fences."""


# Errors of the program that a rewrite can fix go back to the writer; a hit limit, a crash or an
# unavailable sandbox end the call with the error.
_RETRIED_ERRORS = ("exception", "blocked", "recursion")


class AnalysisSource(BaseModel):
    """A document the program read (through ``kb.search`` or ``kb.get_document``)."""

    document_id: str
    title: str
    uri: str


class AnalysisResult(BaseModel):
    """What ``analyze`` returns: the program, its output and value, the documents it read (so a
    reader sees where the figures came from, and a thread withholds the result from a reader who
    may no longer read one of them), and any errors."""

    task: str
    code: str = ""
    output: str = ""
    value: Any = None
    sources: list[AnalysisSource] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


def _strip_fences(code: str) -> str:
    lines = code.strip().splitlines()
    if lines and lines[0].startswith("```"):
        lines = lines[1:]
    if lines and lines[-1].strip().startswith("```"):
        lines = lines[:-1]
    return "\n".join(lines)


def create_analysis_toolset(
    config: RagConfig,
    base_filter: FilterLike | None = None,
    tool_name: str = "analyze",
    *,
    model: Model | str | None = None,
    limits: SandboxLimits | None = None,
    max_attempts: int = 3,
) -> FunctionToolset[Any]:
    """A toolset with ``analyze(task, document_name?)`` returning an ``AnalysisResult``."""
    base_filter = as_filter(base_filter)  # a bad one fails here, not at the model's first call
    toolset: FunctionToolset[Any] = FunctionToolset(id=f"rag-{tool_name}")
    sandbox_limits = limits or SandboxLimits()

    async def analyze(ctx: RunContext[Any], task: str, document_name: str | None = None) -> AnalysisResult:
        """Compute something over the documents by writing and running a Python program.

        Args:
            task: What to compute, e.g. "count how often each product is mentioned".
            document_name: Work only with this document (part of its title or uri).
        """
        writer_model = model if model is not None else (config.model or ctx.model)
        if writer_model is None or is_extractive_model(writer_model):
            return AnalysisResult(task=task, errors=["analysis needs a chat model that can write code"])

        deps = deps_of(ctx)
        document_name = document_name_argument(document_name)
        restriction = get_session_filter(deps.tool_context, base_filter)
        if document_name:
            restriction = combine_filters(restriction, build_document_filter(document_name))

        # what each attempt's program read, by document id (a rewrite starts afresh)
        read: dict[str, AnalysisSource] = {}

        def note(found: SearchHit | Document) -> None:
            read.setdefault(
                found.document_id,
                AnalysisSource(document_id=found.document_id, title=found.title, uri=found.uri),
            )

        async def search(query: str, limit: int = 5) -> list[dict[str, Any]]:
            with counting_usage(ctx.usage):  # a model that reranks counts in this run
                hits = await deps.client.search(
                    str(query), limit=max(1, min(int(limit), 20)), filter=restriction
                )
            for h in hits:
                note(h)
            return [{"title": h.title, "uri": h.uri, "text": h.text, "score": h.score} for h in hits]

        async def get_document(name: str) -> dict[str, Any] | None:
            doc = await deps.client.get_document(str(name), filter=restriction)
            if doc is None:
                return None
            note(doc)
            return {"title": doc.title, "uri": doc.uri, "content": doc.content}

        runs: list[tuple[str, SandboxResult, list[AnalysisSource]]] = []
        writer = Agent(
            writer_model,
            instructions=WRITER_INSTRUCTIONS,
            output_type=str,
            retries={"output": max_attempts - 1},
        )

        @writer.output_validator
        async def run_program(code: str) -> str:
            program = _strip_fences(code)
            await report_progress(ctx, "Running the analysis program", done=len(runs), total=max_attempts)
            read.clear()
            outcome = await run_sandboxed(
                program, limits=sandbox_limits, bridge={"search": search, "get_document": get_document}
            )
            runs.append((program, outcome, list(read.values())))
            if outcome.error and outcome.error_kind in _RETRIED_ERRORS:
                raise ModelRetry(f"The program failed: {outcome.error}\nOutput:\n{outcome.output[-2000:]}")
            return program

        errors: list[str] = []
        try:
            await writer.run(
                task if not document_name else f"{task}\n(Work with the document: {document_name})",
                **model_run_options(ctx.deps, ctx),
            )
        except Exception as exc:  # the writer gave up (retries exhausted) or the model failed
            errors.append(f"no working program: {exc}")
        if not runs:
            return AnalysisResult(task=task, errors=errors or ["the model wrote no program"])
        program, outcome, sources = runs[-1]
        if outcome.error:
            errors.append(outcome.error)
        return AnalysisResult(
            task=task,
            code=program,
            output=outcome.output,
            value=outcome.value,
            sources=sources,
            errors=errors,
        )

    toolset.add_function(analyze, name=tool_name)
    return toolset
