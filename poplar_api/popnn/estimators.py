"""Cycle estimators of the popnn vertices.

The formula sheet (``poplibs_estimators.md``) gives the popops elementwise formulas but
none for popnn's own vertices, so these are derived from it and stated here:

* **Non-linearity (forward)**, a MultiVertex over the elements of one tile: the
  ``UnaryOp1D`` shape ``(base + unaryLoop(iceil(N, W))) x W + 9 + 11`` (base 17,
  in place 55), with the popops unary op table entries for RELU
  ``{3, false, VW}``, SIGMOID (float ``{12, false, 2}``, half ``{6, false, 4}``) and
  TANH (float ``{12, false, 2}``, half ``{4, false, 4}``). GELU has no entry: it is the
  tanh approximation, i.e. TANH plus a cube, three multiplies and two adds on a
  vector, so TANH's cycles per loop + 6.
* **Non-linearity gradient**, a MultiVertex with two inputs: the ``BinaryOp1D`` shape
  ``W x (base + iceil(iceil(N, W), VW) x cpl) + 11`` (base float 29, half 26), cpl =
  the vector ops of the derivative at 1 cycle each plus the 2-cycle loop overhead of
  the natural-width binary ops: RELU (compare, select) 2 + 2, SIGMOID/TANH
  (``g·y·(1-y)``, ``g·(1-y²)``: 3 ops) 3 + 2, GELU (recomputes the tanh) TANH + 8.
* **Softmax of one row** (worker vertex): prologue 20 (as ``UnaryOp2D``) + one
  reciprocal (float DIVIDE, 10) + per 64-bit vector: max 3 (stable only, MAXIMUM),
  subtract 1 (stable only), EXPONENT (float 6, half 4), accumulate 1, scale 1.
* **Softmax gradient of one row** (worker vertex): 20 + per vector: dot product
  (multiply-accumulate 2), then ``y·(g - dot)`` (subtract, multiply: 2).
* **Loss of one row** (worker vertex): 20 + per vector: subtract the one-hot 1, scale
  1 (cross entropy) or square-accumulate 2 (sum squared) + LOGARITHM of the label's
  probability (float 12, half 4; cross entropy only) + 5 to store the loss.
* **Arg-max correctness of one row** (worker vertex): 20 + per vector: MAXIMUM 3 + 5
  to compare with the label and store.
"""

from __future__ import annotations

__all__ = [
    "argmax_row",
    "iceil",
    "loss_row",
    "nonlinearity_1d",
    "nonlinearity_grad_1d",
    "softmax_grad_row",
    "softmax_row",
    "unary_loop",
]

#: Forward cycles per loop (float, half); a loop handles one 64-bit vector (VW elements).
FORWARD_CPL: dict[str, tuple[int, int]] = {
    "RELU": (3, 3),
    "SIGMOID": (12, 6),
    "TANH": (12, 4),
    "GELU": (12 + 6, 4 + 6),
}

#: Gradient cycles per vector (float, half).
GRAD_CPL: dict[str, tuple[int, int]] = {
    "RELU": (2 + 2, 2 + 2),
    "SIGMOID": (3 + 2, 3 + 2),
    "TANH": (3 + 2, 3 + 2),
    "GELU": (12 + 8, 4 + 8),
}


def iceil(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(-int(a) // int(b))


def unary_loop(n: int, cycles_per_loop: int, unroll: int) -> int:
    """popops ``unaryLoop`` for a non-natural op: ``iceil(n, unroll) x cpl``."""
    return iceil(n, unroll) * cycles_per_loop


def nonlinearity_1d(op: str, n: int, *, half: bool, workers: int, in_place: bool) -> int:
    """Tile cycles of a forward non-linearity over ``n`` elements of one tile."""
    cpl = FORWARD_CPL[op][1 if half else 0]
    vw = 4 if half else 2
    base = 55 if in_place else 17
    return (base + unary_loop(iceil(n, workers), cpl, vw)) * workers + 9 + 11


def nonlinearity_grad_1d(op: str, n: int, *, half: bool, workers: int) -> int:
    """Tile cycles of a non-linearity gradient over ``n`` elements of one tile."""
    cpl = GRAD_CPL[op][1 if half else 0]
    vw = 4 if half else 2
    base = 26 if half else 29
    return workers * (base + iceil(iceil(n, workers), vw) * cpl) + 11


def softmax_row(n: int, *, half: bool, stable: bool) -> int:
    """Thread cycles of the softmax of one row of ``n`` elements."""
    vw = 4 if half else 2
    per_vector = (3 + 1 if stable else 0) + (4 if half else 6) + 1 + 1
    return 20 + 10 + iceil(n, vw) * per_vector


def softmax_grad_row(n: int, *, half: bool) -> int:
    """Thread cycles of the softmax input gradient of one row."""
    vw = 4 if half else 2
    return 20 + iceil(n, vw) * (2 + 2)


def loss_row(n: int, *, half: bool, cross_entropy: bool) -> int:
    """Thread cycles of the loss and deltas of one row of ``n`` outputs."""
    vw = 4 if half else 2
    if cross_entropy:
        return 20 + iceil(n, vw) * (1 + 1) + (4 if half else 12) + 5
    return 20 + iceil(n, vw) * (1 + 2) + 5


def argmax_row(n: int, *, half: bool) -> int:
    """Thread cycles of the arg-max correctness flag of one row."""
    vw = 4 if half else 2
    return 20 + iceil(n, vw) * 3 + 5
