"""Gradients of the ops lowered in :mod:`popart_api.ops`.

Each follows the op's derivative, written with the same Poplibs calls as the forward
ops (``popops`` elementwise and reductions, ``popnn.nonLinearityInputGradient``,
``poplin.matMul``), so a training profile shows the vertices Poplibs would run.
"""

from __future__ import annotations

import numpy as np

from popart_api import ops
from popart_api.autodiff import GradContext, Grads, register_grad, unbroadcast
from poplar_api import Tensor, popnn, popops
from poplar_api.popnn import NonLinearityType
from poplar_api.popops import Operation


def _operand(g: GradContext, i: int) -> Tensor:
    """Forward input ``i`` as a Tensor (a build-time constant becomes a constant)."""
    like = g.grad_output(0)
    return ops.tensor(g.graph, g.inputs[i], g.name, like)


# --------------------------------------------------------------- elementwise
@register_grad("Add")
def _add_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    return [
        unbroadcast(g.graph, dy, ops.value_shape(g.inputs[i]), g.prog, f"{g.name}/{i}")
        if g.needs_grad(i)
        else None
        for i in range(2)
    ]


@register_grad("Sub")
def _sub_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    da = (
        unbroadcast(g.graph, dy, ops.value_shape(g.inputs[0]), g.prog, f"{g.name}/a")
        if g.needs_grad(0)
        else None
    )
    db = None
    if g.needs_grad(1):
        db = unbroadcast(g.graph, dy, ops.value_shape(g.inputs[1]), g.prog, f"{g.name}/b")
        db = popops.neg(g.graph, db, g.prog, f"{g.name}/neg")
    return [da, db]


@register_grad("Mul")
def _mul_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    out: list[Tensor | None] = [None, None]
    for i in range(2):
        if g.needs_grad(i):
            other = _operand(g, 1 - i)
            prod = popops.mul(g.graph, dy, other, g.prog, f"{g.name}/{i}")
            out[i] = unbroadcast(
                g.graph, prod, ops.value_shape(g.inputs[i]), g.prog, f"{g.name}/{i}"
            )
    return out


@register_grad("Div")
def _div_grad(g: GradContext) -> Grads:
    """``d(a/b) = da/b - db·a/b²`` = ``dy/b`` and ``-dy·y/b``."""
    dy = g.grad_output(0)
    b = _operand(g, 1)
    da = db = None
    q = popops.div(g.graph, dy, b, g.prog, f"{g.name}/dyOverB")
    if g.needs_grad(0):
        da = unbroadcast(g.graph, q, ops.value_shape(g.inputs[0]), g.prog, f"{g.name}/a")
    if g.needs_grad(1):
        t = popops.mul(g.graph, q, g.outputs[0], g.prog, f"{g.name}/b")
        t = popops.neg(g.graph, t, g.prog, f"{g.name}/neg")
        db = unbroadcast(g.graph, t, ops.value_shape(g.inputs[1]), g.prog, f"{g.name}/b")
    return [da, db]


@register_grad("Sqrt")
def _sqrt_grad(g: GradContext) -> Grads:
    """``dy / (2·sqrt(x))``."""
    two_y = popops.mul(g.graph, g.outputs[0], 2.0, g.prog, f"{g.name}/twoY")
    return [popops.div(g.graph, g.grad_output(0), two_y, g.prog, g.name)]


@register_grad("Exp")
def _exp_grad(g: GradContext) -> Grads:
    return [popops.mul(g.graph, g.grad_output(0), g.outputs[0], g.prog, g.name)]


@register_grad("Log")
def _log_grad(g: GradContext) -> Grads:
    return [popops.div(g.graph, g.grad_output(0), g.inputs[0], g.prog, g.name)]


@register_grad("Scale", domain="ai.graphcore")
def _scale_grad(g: GradContext) -> Grads:
    return [popops.mul(g.graph, g.grad_output(0), float(g.attrs["scale"]), g.prog, g.name)]


def _nonlinearity_grad(kind: NonLinearityType):
    def grad(g: GradContext) -> Grads:
        return [
            popnn.nonLinearityInputGradient(
                g.graph, kind, g.outputs[0], g.grad_output(0), g.prog, g.name
            )
        ]

    return grad


register_grad("Relu")(_nonlinearity_grad(NonLinearityType.RELU))
register_grad("Sigmoid")(_nonlinearity_grad(NonLinearityType.SIGMOID))
register_grad("Tanh")(_nonlinearity_grad(NonLinearityType.TANH))


# ------------------------------------------------------------------- softmax
def softmax_grad_last(g: GradContext, y: Tensor, dy: Tensor, name: str) -> Tensor:
    """Gradient of a softmax along the last dimension: ``y·(dy - sum(dy·y))``."""
    prod = popops.mul(g.graph, dy, y, g.prog, f"{name}/dyY")
    last = y.rank() - 1
    total = popops.reduce(g.graph, prod, [last], Operation.ADD, g.prog, f"{name}/sum")
    total = total.expand([last])
    diff = popops.sub(g.graph, dy, total, g.prog, f"{name}/sub")
    return popops.mul(g.graph, diff, y, g.prog, f"{name}/mulY")


@register_grad("Softmax")
def _softmax_grad(g: GradContext) -> Grads:
    y = g.outputs[0]
    dy = g.grad_output(0)
    rank = y.rank()
    shape = y.shape()
    if g.opset < 13:
        axis = int(g.attrs.get("axis", 1)) % max(rank, 1)
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        cols = int(np.prod(shape[axis:], dtype=np.int64))
        dx = softmax_grad_last(g, y.reshape([rows, cols]), dy.reshape([rows, cols]), g.name)
        return [dx.reshape(shape)]
    axis = int(g.attrs.get("axis", -1)) % max(rank, 1)
    last = rank - 1
    if axis != last:
        y = y.dimShufflePartial([axis], [last])
        dy = dy.dimShufflePartial([axis], [last])
    dx = softmax_grad_last(g, y, dy, g.name)
    return [dx.dimShufflePartial([last], [axis]) if axis != last else dx]


# -------------------------------------------------------------------- matmul
def _transpose_last(t: Tensor) -> Tensor:
    r = t.rank()
    return t.dimShufflePartial([r - 1], [r - 2]) if r >= 2 else t


@register_grad("MatMul")
def _matmul_grad(g: GradContext) -> Grads:
    """``dA = dY·Bᵀ``, ``dB = Aᵀ·dY`` (batch dimensions summed where broadcast)."""
    a, b = _operand(g, 0), _operand(g, 1)
    dy = g.grad_output(0)
    a2 = a.expand([0]) if a.rank() == 1 else a
    b2 = b.expand([1]) if b.rank() == 1 else b
    dy2 = dy
    if a.rank() == 1:
        dy2 = dy2.expand([dy2.rank() - 1])
    if b.rank() == 1:
        dy2 = dy2.expand([dy2.rank()])
    out: list[Tensor | None] = [None, None]
    if g.needs_grad(0):
        da = ops.matmul(g.graph, dy2, _transpose_last(b2), g.prog, f"{g.name}/dA")
        out[0] = unbroadcast(g.graph, da, a2.shape(), g.prog, f"{g.name}/dA").reshape(a.shape())
    if g.needs_grad(1) and b2.rank() == 2 and a2.rank() > 2 and 0 not in b2.shape():
        # a weight shared by every batch row (PopART's MatMulRhsGradOp): one matmul
        # of the flattened rows, [K, B·M] x [B·M, N], instead of B products summed
        k, n = a2.shape()[-1], dy2.shape()[-1]
        rows_a = a2.reshape([a2.numElements() // k, k])
        rows_dy = dy2.reshape([dy2.numElements() // n, n])
        db = ops.matmul(g.graph, rows_a.transpose(), rows_dy, g.prog, f"{g.name}/dB")
        out[1] = db.reshape(b.shape())
    elif g.needs_grad(1):
        db = ops.matmul(g.graph, _transpose_last(a2), dy2, g.prog, f"{g.name}/dB")
        out[1] = unbroadcast(g.graph, db, b2.shape(), g.prog, f"{g.name}/dB").reshape(b.shape())
    return out


@register_grad("Gemm")
def _gemm_grad(g: GradContext) -> Grads:
    """``Y = alpha·op(A)·op(B) + beta·C``: ``dop(A) = alpha·dY·op(B)ᵀ``,
    ``dop(B) = alpha·op(A)ᵀ·dY``, ``dC = beta·dY`` summed over broadcast dimensions."""
    a, b = _operand(g, 0), _operand(g, 1)
    trans_a, trans_b = int(g.attrs.get("transA", 0)), int(g.attrs.get("transB", 0))
    alpha = float(g.attrs.get("alpha", 1.0))
    beta = float(g.attrs.get("beta", 1.0))
    op_a = a.transpose() if trans_a else a
    op_b = b.transpose() if trans_b else b
    dy = g.grad_output(0)
    dy_a = popops.mul(g.graph, dy, alpha, g.prog, f"{g.name}/alpha") if alpha != 1.0 else dy
    out: list[Tensor | None] = [None, None, None]
    if g.needs_grad(0):
        if trans_a:  # dA = (dY·op(B)ᵀ)ᵀ = op(B)·dYᵀ
            out[0] = ops.matmul(g.graph, op_b, dy_a.transpose(), g.prog, f"{g.name}/dA")
        else:
            out[0] = ops.matmul(g.graph, dy_a, op_b.transpose(), g.prog, f"{g.name}/dA")
    if g.needs_grad(1):
        if trans_b:  # dB = (op(A)ᵀ·dY)ᵀ = dYᵀ·op(A)
            out[1] = ops.matmul(g.graph, dy_a.transpose(), op_a, g.prog, f"{g.name}/dB")
        else:
            out[1] = ops.matmul(g.graph, op_a.transpose(), dy_a, g.prog, f"{g.name}/dB")
    if len(g.inputs) > 2 and g.needs_grad(2):
        dc = unbroadcast(g.graph, dy, ops.value_shape(g.inputs[2]), g.prog, f"{g.name}/dC")
        if beta != 1.0:
            dc = popops.mul(g.graph, dc, beta, g.prog, f"{g.name}/beta")
        out[2] = dc
    return out


# --------------------------------------------------------------------- views
@register_grad("Identity")
def _identity_grad(g: GradContext) -> Grads:
    return [g.grad_output(0)]


@register_grad("Reshape")
def _reshape_grad(g: GradContext) -> Grads:
    return [g.grad_output(0).reshape(ops.value_shape(g.inputs[0])), None]


@register_grad("Transpose")
def _transpose_grad(g: GradContext) -> Grads:
    rank = len(ops.value_shape(g.inputs[0]))
    perm = [int(p) for p in g.attrs.get("perm", list(range(rank))[::-1])]
    inverse = list(np.argsort(perm))
    return [g.grad_output(0).dimShuffle([int(p) for p in inverse])]


__all__ = ["softmax_grad_last"]
