"""The delta engine against ``jsonpatch.make_patch`` on RAG-shaped states.

    python -m bench.delta [--repeat 30]

States of about 25 KB, 300 KB and 2.6 MB (citations, searches with hits, QA history) are built
with ``ToolContext`` exactly as the server builds them, then changed four ways: one new citation,
a new search with 10 hits, a scalar change, a QA-history append. For each (before, after) pair the
table gives the median time of ``make_patch`` from this engine, of ``StateTracker.update`` (the
engine plus the delta-or-snapshot decision the server makes), and of ``jsonpatch.make_patch``,
with the ratio and the patch sizes. Snapshot building (``build_state_snapshot``) is timed too: it
is the other half of the server's work per change.

"Cold" rows diff deep copies that share nothing, the worst case for the engine's identity
pruning; the server never produces such pairs, but they bound the engine from below.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
from pydantic import BaseModel

from rag_tools.state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SearchHitSummary,
    SearchState,
    SessionState,
    StateTracker,
    ToolContext,
    encoded_size,
    make_patch,
    prepare_context,
)

from ._util import median, table

PASSAGE = (
    "Hybrid search fuses a vector ranking and a full-text ranking with reciprocal rank fusion, "
    "so a passage that matches the words of a question and one that matches its meaning both surface. "
) * 4
ANSWER = "The server streams the answer token by token and cites each sentence with its source [1][2]. " * 5


class AppStatus(BaseModel):
    """A small namespace with scalars, as apps add next to the RAG ones."""

    status: str = "idle"
    turn: int = 0


def _build(citations: int, searches: int, answers: int) -> ToolContext:
    ctx = prepare_context(ToolContext(), ["search", "qa"])
    ctx.register("app", AppStatus())
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    for i in range(citations):
        session.cite(
            chunk_id=f"chunk-{i:06d}",
            document_id=f"doc-{i % 40:03d}",
            title=f"Guide page {i % 40}",
            uri=f"file:///srv/docs/guide/page-{i % 40}.md",
            headings=["User guide", f"Section {i % 7}"],
            text=PASSAGE,
            limit=10**6,
        )
    search_state = ctx.get(SEARCH_NAMESPACE, SearchState)
    for s in range(searches):
        hits = [
            SearchHitSummary(citation=(s * 10 + k) % citations + 1, title="Guide page", score=0.5)
            for k in range(10)
        ]
        search_state.add_search(f"how does feature {s} work with the streaming server", hits, limit=10**6)
    qa = ctx.get(QA_NAMESPACE, QASessionState)
    for q in range(answers):
        qa.add_entry(
            {
                "question": f"What does setting {q} do?",
                "answer": ANSWER,
                "confidence": 0.8,
                "citations": (1, 2),
            },
            None,
            limit=10**6,
        )
    for namespace in (SESSION_NAMESPACE, SEARCH_NAMESPACE, QA_NAMESPACE):
        ctx.mark_changed(namespace)
    return ctx


def _add_citation(ctx: ToolContext, n: int) -> None:
    ctx.get(SESSION_NAMESPACE).cite(
        chunk_id=f"new-{n}",
        document_id="doc-new",
        title="New page",
        uri="file:///srv/new.md",
        text=PASSAGE,
        limit=10**6,
    )
    ctx.mark_changed(SESSION_NAMESPACE)


def _new_search(ctx: ToolContext, n: int) -> None:
    session = ctx.get(SESSION_NAMESPACE)
    hits = []
    for k in range(10):
        index = session.cite(
            chunk_id=f"search-{n}-{k}",
            document_id="doc-new",
            title="New",
            uri="file:///srv/n.md",
            text=PASSAGE,
            limit=10**6,
        )
        hits.append(SearchHitSummary(citation=index, title="New", score=0.9 - k / 100))
    ctx.get(SEARCH_NAMESPACE).add_search(f"new question {n}", hits, limit=10**6)
    ctx.mark_changed(SESSION_NAMESPACE)
    ctx.mark_changed(SEARCH_NAMESPACE)


def _scalar(ctx: ToolContext, n: int) -> None:
    app = ctx.get("app")
    app.status = f"searching ({n})"
    app.turn += 1
    ctx.mark_changed("app")


def _append(ctx: ToolContext, n: int) -> None:
    ctx.get(QA_NAMESPACE).add_entry(
        {"question": f"Follow-up {n}?", "answer": ANSWER, "confidence": 0.7, "citations": (3,)},
        None,
        limit=10**6,
    )
    ctx.mark_changed(QA_NAMESPACE)


MUTATIONS: dict[str, Callable[[ToolContext, int], None]] = {
    "add a citation": _add_citation,
    "new search, 10 hits": _new_search,
    "scalar change": _scalar,
    "QA history append": _append,
}
SIZES = {"25 KB": (16, 5, 5), "300 KB": (175, 75, 75), "2.6 MB": (1550, 650, 650)}


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    rows = []
    for size_label, shape in SIZES.items():
        ctx = _build(*shape)
        for n, (label, mutate) in enumerate(MUTATIONS.items()):
            before = ctx.build_state_snapshot()
            mutate(ctx, n)
            changed = [
                name for name in ctx.namespaces if before.keys() & set(type(ctx.get(name)).model_fields)
            ]

            def rebuild(names: list[str] = changed, ctx: ToolContext = ctx) -> dict[str, Any]:
                for name in names:  # what the server re-dumps after a tool call: every RAG namespace
                    ctx.mark_changed(name)
                return ctx.build_state_snapshot()

            build_ms, after = _timed(rebuild, args.repeat)
            size = encoded_size(before)
            engine_ms, ops = _timed(lambda b=before, a=after: make_patch(b, a), args.repeat)
            tracker_ms, update = _timed(
                lambda b=before, a=after, n=size: StateTracker(b, baseline_size=n).update(a), args.repeat
            )
            reference_ms, reference = _timed(
                lambda b=before, a=after: jsonpatch.make_patch(b, a), args.repeat
            )
            assert jsonpatch.apply_patch(before, ops) == after
            cold_before, cold_after = copy.deepcopy(before), copy.deepcopy(after)
            cold_ms, _ = _timed(lambda b=cold_before, a=cold_after: make_patch(b, a), args.repeat)
            cold_ref_ms, _ = _timed(
                lambda b=cold_before, a=cold_after: jsonpatch.make_patch(b, a), args.repeat
            )
            rows.append(
                (
                    size_label,
                    f"{encoded_size(after) / 1000:.0f} KB",
                    label,
                    engine_ms,
                    tracker_ms,
                    reference_ms,
                    f"{reference_ms / engine_ms:.0f}x",
                    f"{cold_ref_ms / cold_ms:.0f}x",
                    encoded_size(ops),
                    encoded_size(list(reference)),
                    build_ms,
                    update.kind,
                )
            )
    print(
        table(
            [
                "state",
                "size",
                "mutation",
                "engine ms",
                "tracker ms",
                "jsonpatch ms",
                "speed-up",
                "speed-up cold",
                "patch B",
                "jsonpatch B",
                "snapshot build ms",
                "sent",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
