"""A big text file ingested as it goes: peak memory, an ingest killed mid-way, and its rerun.

    python -m bench.big_file [--mb 50] [--kill-at 0.5] [--embedder local:all-minilm-l6-v2-int8]

The file is ``--mb`` MB of generated paragraphs (``Paragraph n: ... marker<n> ...``). Its chunks are
counted first, as ingestion makes them. Then, each in a process of its own (``ragstream ingest``'s
work: ``KnowledgeBase.ingest_paths`` with the embedder loaded beforehand):

1. an ingest into a new knowledge base, killed (SIGKILL) once ``--kill-at`` of the chunks are in
   the chunks table: what a crash, an OOM kill or a power cut leaves;
2. the same ingest again, to the end.

Reported: each process's peak RSS (``wait4``; the process before the ingest, imports and model,
beside it), the chunks the killed run left (none published), the chunks the rerun embedded, its
time, and the check that every chunk is there once (ids unique, positions 0..n-1, the file's last
paragraph found by a search).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_WORDS = (
    "ledger shipment depot carton pallet invoice customs form freight route driver dock "
    "the a of to and in is for on with that this be are as by it at from or an"
).split()


def write_text(path: Path, megabytes: float, seed: int = 5) -> int:
    """Paragraphs of 60-160 words until ``megabytes`` MB; the number of paragraphs."""
    rng = random.Random(seed)
    size, n = 0, 0
    with path.open("w") as out:
        while size < megabytes * 2**20:
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(60, 160)))
            paragraph = f"Paragraph {n}: the ledger line marker{n} says {words}.\n\n"
            out.write(paragraph)
            size += len(paragraph)
            n += 1
    return n


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _child(kb_path: Path, file: Path, embedder: str) -> None:
    """One ingest, printing its JSON lines: ``ready`` (model loaded), then ``done``."""
    from pydantic_ai.embeddings.result import EmbedInputType

    from rag_tools.embeddings import VectorEmbeddingModel, resolve_embedding_model
    from rag_tools.kb import KnowledgeBase

    model = resolve_embedding_model(embedder)

    class Counting(VectorEmbeddingModel):
        """The embedder, under its own name, counting the texts it embeds."""

        texts = 0

        @property
        def model_name(self) -> str:
            return model.model_name

        @property
        def system(self) -> str:
            return model.system

        async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
            Counting.texts += len(texts)
            return [list(v) for v in (await model.embed(texts, input_type=input_type)).embeddings]

    await model.embed(["the model loads before the ingest"], input_type="document")
    print(json.dumps({"ready": _rss_mb()}), flush=True)
    async with KnowledgeBase(kb_path, embedder=Counting()) as kb:
        start = time.perf_counter()
        (outcome,) = (await kb.ingest_paths([file])).outcomes
        seconds = time.perf_counter() - start
    done = {"status": outcome.status, "chunks": outcome.chunks, "error": outcome.error}
    print(json.dumps({"done": {**done, "embedded": Counting.texts, "seconds": seconds}}), flush=True)


def _expected_chunks(file: Path) -> int:
    from rag_tools.kb.ingestion import PreparedDocument, prepare
    from rag_tools.kb.sources import Source, expand_sources

    (source,) = expand_sources([file])
    assert isinstance(source, Source)
    doc = prepare(source, None, max_chars=1200)
    assert isinstance(doc, PreparedDocument), doc
    count = len(doc.chunk_rows)
    while (rows := doc.next_rows()) is not None:
        count += len(rows)
    return count


def _stored(kb_path: Path) -> list[dict[str, Any]]:
    import lancedb

    if not (kb_path / "chunks.lance").exists():
        return []
    table = lancedb.connect(kb_path).open_table("chunks")
    return table.to_arrow().select(["chunk_id", "position"]).to_pylist()


def _count(kb_path: Path, table: str) -> int:
    import lancedb

    if not (kb_path / f"{table}.lance").exists():
        return 0
    return int(lancedb.connect(kb_path).open_table(table).count_rows())


def _run(kb_path: Path, file: Path, embedder: str, kill_after: int | None) -> dict[str, Any]:
    """One child process; killed once ``kill_after`` chunks are stored. Its lines and peak RSS."""
    command = [
        sys.executable,
        "-m",
        "bench.big_file",
        "--child",
        str(kb_path),
        str(file),
        "--embedder",
        embedder,
    ]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lines: dict[str, Any] = {}

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.update(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start = time.perf_counter()
    killed = False
    while kill_after is not None and child.poll() is None:
        time.sleep(1.0)
        if "ready" in lines and _count(kb_path, "chunks") >= kill_after:
            child.send_signal(signal.SIGKILL)
            killed = True
            break
    _, status, usage = os.wait4(child.pid, 0)
    reader.join(timeout=10)
    if not killed and status != 0:
        sys.exit(f"the ingest failed (status {status})")
    return {**lines, "killed": killed, "seconds": time.perf_counter() - start, "rss": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--kill-at", type=float, default=0.5, help="fraction of the chunks stored")
    parser.add_argument("--embedder", default="local:all-minilm-l6-v2-int8")
    parser.add_argument("--child", nargs=2, metavar=("KB", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from rag_tools.allocator import limit_arenas

        limit_arenas()  # as the ragstream command does first
        asyncio.run(_child(Path(args.child[0]), Path(args.child[1]), args.embedder))
        return
    from ._util import table

    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-big-"))
    try:
        file = work / "ledger.txt"
        paragraphs = write_text(file, args.mb)
        total = _expected_chunks(file)
        size = file.stat().st_size
        print(f"{file.name}: {size / 2**20:.1f} MB, {paragraphs:,} paragraphs, {total:,} chunks", flush=True)
        kb_path = work / "kb"
        first = _run(kb_path, file, args.embedder, kill_after=int(total * args.kill_at))
        kept = _stored(kb_path)
        published = _count(kb_path, "documents")
        print(
            f"killed after {first['seconds']:.0f} s: {len(kept):,} chunks stored, {published} documents",
            flush=True,
        )
        second = _run(kb_path, file, args.embedder, kill_after=None)
        done = second["done"]
        rows = _stored(kb_path)
        once = len({r["chunk_id"] for r in rows}) == len(rows) == done["chunks"] == total
        positions = sorted(r["position"] for r in rows) == list(range(total))
        found = asyncio.run(_last_paragraph_found(kb_path, paragraphs - 1, args.embedder))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        table(
            ["run", "chunks stored", "embedded", "seconds", "RSS before ingest MB", "peak RSS MB"],
            [
                [
                    "killed at " + f"{args.kill_at:.0%}",
                    f"{len(kept):,}",
                    "-",
                    f"{first['seconds']:.0f}",
                    f"{first['ready']:.0f}",
                    f"{first['rss']:.0f}",
                ],
                [
                    "rerun",
                    f"{len(rows):,}",
                    f"{done['embedded']:,}",
                    f"{done['seconds']:.0f}",
                    f"{second['ready']:.0f}",
                    f"{second['rss']:.0f}",
                ],
            ],
        )
    )
    print(
        f"\nrerun: {done['status']}, {done['chunks']:,} chunks; embedded {done['embedded']:,} = {total:,} - "
        f"{len(kept):,} kept: {done['embedded'] == total - len(kept)}; every chunk once: {once}; positions "
        f"0..{total - 1}: {positions}; documents published by the killed run: {published}; the last "
        f"paragraph found: {found}; peak RSS {max(first['rss'], second['rss']):.0f} MB (target < 500)"
    )


async def _last_paragraph_found(kb_path: Path, last: int, embedder: str) -> bool:
    from rag_tools.kb import KnowledgeBase

    async with KnowledgeBase(kb_path, embedder=embedder) as kb:
        hits = await kb.search(f"ledger line marker{last}", mode="text", limit=3)
    return any(f"marker{last} " in hit.text for hit in hits)


if __name__ == "__main__":
    main()
