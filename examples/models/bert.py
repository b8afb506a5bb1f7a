"""A BERT encoder layer as an ONNX model built with ``onnx.helper``.

One encoder layer of BERT (Devlin et al., 2018): multi-head self-attention with a
residual connection and layer normalisation, then a two-layer feed-forward network
with GELU (the exact, erf form), a residual connection and layer normalisation.
BERT-base is ``hidden=768, heads=12, ffn=3072`` at sequence 128.

The model uses plain ONNX ops only (opset 17: MatMul, Add, Reshape, Transpose, Div,
Softmax, Erf, Mul, LayerNormalization, ReduceMean), so ``onnx.reference`` evaluates
the same ModelProto the session runs. For training the model also outputs
``loss = mean(y * t)`` with a fixed random target ``t``: a scalar whose gradient
reaches every weight and is easy to check by a directional finite difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["BERT_BASE", "BERT_TINY", "BertConfig", "build_bert_layer"]

OPSET = 17


@dataclass(frozen=True)
class BertConfig:
    """Size of one encoder layer.

    Attributes
    ----------
    seq, hidden, heads, ffn, batch
        Sequence length, hidden size, attention heads, feed-forward width, batch.
    """

    seq: int = 128
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    batch: int = 1

    @property
    def head_size(self) -> int:
        """Hidden size of one head (``hidden // heads``)."""
        return self.hidden // self.heads


#: BERT-base: sequence 128, hidden 768, 12 heads, FFN 3072.
BERT_BASE = BertConfig()
#: A scaled-down layer of the same structure, for the default tests.
BERT_TINY = BertConfig(seq=8, hidden=32, heads=4, ffn=64)


@dataclass
class BertModel:
    """An encoder layer ModelProto and the names a session needs.

    Attributes
    ----------
    proto
        The ONNX model.
    x, y, loss
        Input (``[batch, seq, hidden]``), layer output and the scalar loss (None
        without ``loss``).
    weights
        Initializer name -> value.
    """

    proto: onnx.ModelProto
    x: str
    y: str
    loss: str | None
    weights: dict[str, np.ndarray]


def build_bert_layer(cfg: BertConfig, seed: int = 0, loss: bool = False) -> BertModel:
    """One BERT encoder layer of size ``cfg`` with random weights drawn from ``seed``.

    Parameters
    ----------
    cfg
        Layer size.
    seed
        Seed of the weights (numpy ``default_rng``); weights ~ N(0, 0.02) as BERT's
        initialiser, biases and layer-norm shifts small, scales near 1.
    loss
        Add a scalar ``loss = mean(y * target)`` output (for training).
    """
    if cfg.hidden % cfg.heads:
        raise ValueError(
            f"BertConfig: hidden={cfg.hidden} must be a multiple of heads={cfg.heads}; "
            "hint: hidden 768 with 12 heads gives 64 per head"
        )
    rng = np.random.default_rng(seed)
    b, s, h, nh, dh, f = cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.head_size, cfg.ffn
    weights: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], std: float = 0.02, mean: float = 0.0):
        weights[name] = (mean + std * rng.standard_normal(shape)).astype(np.float32)
        return name

    def const(name: str, value: np.ndarray) -> str:
        nodes.append(
            helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
        )
        return name

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, n_in: int, n_out: int, name: str) -> str:
        w = weight(f"{name}.weight", (n_in, n_out))
        bias = weight(f"{name}.bias", (n_out,), std=0.01)
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), bias], f"{name}.out")

    def layer_norm(x: str, name: str) -> str:
        scale = weight(f"{name}.scale", (h,), std=0.05, mean=1.0)
        shift = weight(f"{name}.shift", (h,), std=0.01)
        return node("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=1e-5)

    x = "x"
    split_shape = const("split_shape", np.array([b, s, nh, dh], np.int64))
    merge_shape = const("merge_shape", np.array([b, s, h], np.int64))

    def heads_of(t: str, name: str, perm: list[int]) -> str:
        r = node("Reshape", [t, split_shape], f"{name}.split")
        return node("Transpose", [r], f"{name}.heads", perm=perm)

    q = heads_of(linear(x, h, h, "attn.q"), "attn.q", [0, 2, 1, 3])  # [b, nh, s, dh]
    k = heads_of(linear(x, h, h, "attn.k"), "attn.k", [0, 2, 3, 1])  # [b, nh, dh, s]
    v = heads_of(linear(x, h, h, "attn.v"), "attn.v", [0, 2, 1, 3])  # [b, nh, s, dh]
    scores = node("MatMul", [q, k], "attn.scores")
    sqrt_dh = const("attn.sqrt_dh", np.array(np.sqrt(dh), np.float32))
    scaled = node("Div", [scores, sqrt_dh], "attn.scaled")
    probs = node("Softmax", [scaled], "attn.probs", axis=-1)
    context = node("MatMul", [probs, v], "attn.context")  # [b, nh, s, dh]
    merged = node(
        "Reshape",
        [node("Transpose", [context], "attn.context_t", perm=[0, 2, 1, 3]), merge_shape],
        "attn.merged",
    )
    attn_out = linear(merged, h, h, "attn.out")
    ln1 = layer_norm(node("Add", [x, attn_out], "attn.residual"), "attn.norm")
    inner = linear(ln1, h, f, "ffn.in")
    # GELU, exact form: 0.5 x (1 + erf(x / sqrt(2)))
    root2 = const("ffn.root2", np.array(np.sqrt(2.0), np.float32))
    half = const("ffn.half", np.array(0.5, np.float32))
    one = const("ffn.one", np.array(1.0, np.float32))
    erf = node("Erf", [node("Div", [inner, root2], "ffn.gelu_scaled")], "ffn.gelu_erf")
    gelu = node(
        "Mul",
        [node("Mul", [inner, half], "ffn.gelu_half"), node("Add", [erf, one], "ffn.gelu_1p")],
        "ffn.gelu",
    )
    ffn_out = linear(gelu, f, h, "ffn.out")
    y = layer_norm(node("Add", [ln1, ffn_out], "ffn.residual"), "y")

    outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, [b, s, h])]
    loss_name = None
    if loss:
        target = const("target", rng.standard_normal((b, s, h)).astype(np.float32))
        loss_name = node("ReduceMean", [node("Mul", [y, target], "loss.prod")], "loss", keepdims=0)
        outputs.append(helper.make_tensor_value_info(loss_name, TensorProto.FLOAT, []))
    graph = helper.make_graph(
        nodes,
        "bert_encoder_layer",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, s, h])],
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(proto)
    return BertModel(proto, x, y, loss_name, weights)
