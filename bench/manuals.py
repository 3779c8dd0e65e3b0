"""``ragstream eval`` on real manuals Debian ships as HTML, each ingested once into a cached knowledge base.

    python -m bench.manuals [--manual python|postgres|sqlite|all] [--answers] [--modes hybrid,vector,text]
                            [--report-dir DIR] [--embedder NAME] [--chunk-max-chars N] [--no-progress]
                            [--check-labels]
                            [--rerankers none,cohere:rerank-v3.5,model]

The manuals (``bench/setup-manuals.sh`` installs the Debian packages when missing; the pages are
never committed): the Python 3.11 documentation, PostgreSQL 15's and SQLite's. Their labelled
questions are ``bench/questions/<manual>.jsonl`` (the schema: ``rag_tools/evaluation/questions.py``
and the README's ``ragstream eval``); ``sqlite`` is the held-out set, not to tune on.

Each manual's HTML pages (``**/*.html`` under its folder, so a page's uri is its path relative to
it) are ingested into ``$RAGSTREAM_BENCH_CACHE`` (default ``~/.cache/ragstream-bench``) under a key
of the pages (paths, sizes, times), the embedder, the chunk size, the source of the ingestion code
(``rag_tools/kb`` but its read side, ``search.py`` and ``documents.py``; the embedders) and LanceDB's
version: a later run with the same key reuses it and
reports the pages/s measured when it was built; a changed key ingests anew (and drops the stale
copy). Then the evaluation prints its figures per search mode, as ``ragstream eval`` does, and
writes an HTML report per manual into ``--report-dir`` when given.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from tqdm import tqdm

from rag_tools.config import RagConfig
from rag_tools.embeddings import DEFAULT_EMBEDDER, embedder_name, resolve_embedding_model
from rag_tools.evaluation import (
    LabelledQuestion,
    contains_fact,
    evaluate,
    evaluation_steps,
    load_questions,
    render_html,
)
from rag_tools.kb import IngestProgress, KnowledgeBase
from rag_tools.kb.reranking import resolve_reranker

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = Path(__file__).resolve().parent / "questions"
SETUP = Path(__file__).resolve().parent / "setup-manuals.sh"
_CODE = [
    ROOT / "rag_tools" / "kb",
    ROOT / "rag_tools" / "embeddings.py",
    ROOT / "rag_tools" / "minilm_onnx.py",
]
# modules of rag_tools/kb that only read what was ingested: changing them (say the fusion in
# search.py) keeps the cached knowledge bases
_READ_SIDE = {"search.py", "documents.py", "fusion.py", "reranking.py"}


@dataclass(frozen=True)
class Manual:
    name: str
    package: str
    folder: Path


MANUALS = {
    "python": Manual("python", "python3.11-doc", Path("/usr/share/doc/python3.11/html")),
    "postgres": Manual("postgres", "postgresql-doc-15", Path("/usr/share/doc/postgresql-doc-15/html")),
    "sqlite": Manual("sqlite", "sqlite3-doc", Path("/usr/share/doc/sqlite3")),
}


def cache_root() -> Path:
    return Path(os.environ.get("RAGSTREAM_BENCH_CACHE", "~/.cache/ragstream-bench")).expanduser()


def pages(manual: Manual) -> list[Path]:
    """The manual's HTML pages, sorted."""
    return sorted(p for p in manual.folder.rglob("*.html") if p.is_file())


def cache_key(manual: Manual, embedder: str, chunk_max_chars: int) -> str:
    """What the cached knowledge base depends on: the pages, the embedder, the ingestion code."""
    digest = hashlib.sha256(f"{embedder}\n{chunk_max_chars}\nlancedb {version('lancedb')}\n".encode())
    for page in pages(manual):
        stat = page.stat()
        digest.update(f"{page.relative_to(manual.folder)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    sources = (f for path in _CODE for f in ([path] if path.is_file() else path.rglob("*.py")))
    for source in sorted(f for f in sources if f.name not in _READ_SIDE):
        digest.update(source.relative_to(ROOT).as_posix().encode() + b"\n" + source.read_bytes())
    return digest.hexdigest()[:16]


def _chunk_size(home: Path) -> int | None:
    """The chunk size a cached knowledge base was ingested with; ``None`` for an unfinished one."""
    stamp = home / "ingest.json"
    if not stamp.exists():
        return None
    return int(json.loads(stamp.read_text()).get("chunk_max_chars", RagConfig().chunk_max_chars))


def ensure_installed(manual: Manual) -> None:
    """Install the manual's Debian package when its folder is missing (``bench/setup-manuals.sh``)."""
    if not manual.folder.is_dir():
        subprocess.run(["bash", str(SETUP), manual.package], check=True)


async def cached_kb(
    manual: Manual, embedder: str, *, progress: bool, chunk_max_chars: int = RagConfig().chunk_max_chars
) -> tuple[KnowledgeBase, dict[str, float]]:
    """The manual's knowledge base, ingested now or reused; and its ingest figures."""
    ensure_installed(manual)
    model = resolve_embedding_model(embedder)
    key = cache_key(manual, embedder_name(model), chunk_max_chars)
    home = cache_root() / f"{manual.name}-{key}"  # one per chunk size: the sizes are compared side by side
    stamp = home / "ingest.json"
    if not stamp.exists():
        for stale in cache_root().glob(f"{manual.name}-*"):
            if _chunk_size(stale) in (None, chunk_max_chars):  # other sizes stay, to compare with
                shutil.rmtree(stale, ignore_errors=True)
        kb = KnowledgeBase(home / "kb", embedder=model, chunk_max_chars=chunk_max_chars)
        bar = tqdm(
            total=0, unit="chunk", desc=f"ingesting {manual.name}", disable=not progress, file=sys.stderr
        )

        def advance(state: IngestProgress) -> None:
            bar.total, bar.n = state.chunks_total, state.chunks_done
            bar.refresh()

        started = time.perf_counter()
        report = await kb.ingest_paths([f"{manual.folder}/**/*.html"], on_progress=advance)
        seconds = time.perf_counter() - started
        bar.close()
        if report.errors:
            print(f"{len(report.errors)} pages failed: {report.errors[:3]}", file=sys.stderr)
        figures = {
            "pages": report.count("added") + report.count("updated"),
            "chunks": await kb.count_chunks(),
            "seconds": round(seconds, 1),
            "chunk_max_chars": chunk_max_chars,
        }
        figures["pages_per_second"] = round(figures["pages"] / seconds, 2)
        stamp.write_text(json.dumps(figures, indent=1))
        kb.close()
    figures = json.loads(stamp.read_text())
    kb = KnowledgeBase(home / "kb", embedder=model)
    await kb.open()
    return kb, figures


async def check_labels(kb: KnowledgeBase, questions: list[LabelledQuestion]) -> list[str]:
    """What is wrong with the labels as the knowledge base holds the pages: a page it does not hold,
    a fact no passage (chunk) of a labelled page states."""
    problems = []
    for q in questions:
        passages: list[str] = []
        for page in q.pages:
            document = await kb.get_document(page, with_content=False)
            if document is None or document.uri != page:
                problems.append(f"{q.id}: {page} is not in the knowledge base")
                continue
            passages += [chunk.text for chunk in await kb.get_chunks(document.document_id)]
        if q.fact and passages and not any(contains_fact(text, q.fact) for text in passages):
            problems.append(f"{q.id}: no passage of {', '.join(q.pages)} states {q.fact!r}")
    return problems


async def compare_rerankers(kb: KnowledgeBase, questions: list[LabelledQuestion], specs: list[str]) -> None:
    """Hybrid search's figures and time per question with each reranker (``RAGSTREAM_RERANKER``'s
    values; ``model`` ranks with ``RAGSTREAM_MODEL``), the same questions in the same run."""
    print("| reranker | recall@1 | recall@5 | MRR@10 | fact@5 | ms per question |")
    print("|---|---|---|---|---|---|")
    for spec in specs:
        kb.reranker = resolve_reranker(spec, chat_model=RagConfig().model)
        await evaluate(kb, questions[:3], modes=["hybrid"])  # warm: model loads, caches
        started = time.perf_counter()
        report = await evaluate(kb, questions, modes=["hybrid"])
        ms = (time.perf_counter() - started) * 1000 / len(questions)
        f = report.modes[0].figures
        print(
            f"| {spec} | {f['recall@1']:.3f} | {f['recall@5']:.3f} | {f['MRR@10']:.3f} | "
            f"{f['fact@5']:.3f} | {ms:.0f} |",
            flush=True,
        )
    kb.reranker = None


async def run(manual: Manual, args: argparse.Namespace) -> int:
    questions = load_questions(QUESTIONS / f"{manual.name}.jsonl")
    kb, ingest = await cached_kb(
        manual, args.embedder, progress=not args.no_progress, chunk_max_chars=args.chunk_max_chars
    )
    if args.check_labels:
        problems = await check_labels(kb, questions)
        kb.close()
        print(f"{manual.name}: {len(questions)} questions, {len(problems)} label problems")
        for problem in problems:
            print(f"  {problem}")
        return 1 if problems else 0
    if args.rerankers:
        await compare_rerankers(kb, questions, args.rerankers.split(","))
        kb.close()
        return 0
    modes = args.modes.split(",")
    with tqdm(
        total=evaluation_steps(questions, modes, args.answers),
        desc=f"evaluating {manual.name}",
        disable=args.no_progress,
        file=sys.stderr,
    ) as bar:
        report = await evaluate(kb, questions, modes=modes, answers=args.answers, on_step=bar.update)  # type: ignore[arg-type]
    kb.close()
    print(f"\n## {manual.name} ({manual.package}, {manual.folder})\n")
    print(
        f"ingest: {ingest['pages']} pages, {ingest['chunks']} chunks in {ingest['seconds']} s, "
        f"{ingest['pages_per_second']} pages/s (when the cached knowledge base was built)\n"
    )
    print(report.text())
    if args.report_dir:
        out = Path(args.report_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{manual.name}.html").write_text(
            render_html(report, title=f"ragstream eval: {manual.name} manual")
        )
        (out / f"{manual.name}.json").write_text(report.model_dump_json(indent=1))
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--manual", choices=[*MANUALS, "all"], default="all")
    parser.add_argument("--answers", action="store_true", help="also ask the offline chat agent")
    parser.add_argument("--modes", default="hybrid,vector,text")
    parser.add_argument("--report-dir", help="write <manual>.html and <manual>.json here")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument(
        "--chunk-max-chars",
        type=int,
        default=RagConfig().chunk_max_chars,
        help="the chunk size to ingest with (each size is cached on its own)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--rerankers",
        help="compare hybrid search with each of these RAGSTREAM_RERANKER values (comma-separated, "
        "e.g. none,cohere:rerank-v3.5,model) instead of the modes",
    )
    parser.add_argument(
        "--check-labels",
        action="store_true",
        help="only check the labels: each page ingested, each fact stated by a passage of its pages",
    )
    args = parser.parse_args()
    status = 0
    for name in MANUALS if args.manual == "all" else [args.manual]:
        status |= await run(MANUALS[name], args)
    return status


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
