"""popops.rearrange.regroupIfBeneficial and scaledAddTo's regrouping, as Poplibs does them.

The rules restated here from graphcore/poplibs 7eac0f26 (``lib/popops/Rearrange.cpp``
``regroupIfBeneficial``, ``lib/popops/ScaledAdd.cpp`` ``scaledArithmetic``): ``B`` is
regrouped to ``A``'s grouping when both have one, their innermost groupings are of
different dimensions and both are multiples of 4 (2-byte types) or 2 (4-byte types).
Values are checked against numpy; the transpose estimates against Poplibs' formulas
(``popopsCycleEstimators.cpp`` at 18ee6463^) written out again below.
"""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import Harness

from poplar_api import BOOL, FLOAT, HALF, INT, popops
from poplar_api import program as prog
from poplar_api.errors import TensorError
from poplar_api.popops import rearrange as rr

TILES = 8  # the tiny IPU Model


def _laid_out(h: Harness, t, values: np.ndarray, name: str, dim: int, g: int):
    """A ``[R, C]`` tensor of ``values`` whose innermost grouping is ``(dim, g)``: its
    memory runs along ``dim``, ``g`` elements per tile before the next tile."""
    stored = values if dim == 1 else values.T.copy()
    var = h.graph.addVariable(t, list(stored.shape), name)
    h.graph.mapElements(var, ((np.arange(stored.size) // g) % TILES).reshape(stored.shape))
    h.graph.createHostWrite(f"w-{name}", var)
    h.values[f"w-{name}"] = stored.astype(t.numpy)
    return var if dim == 1 else var.transpose()


def _values(t, shape, seed):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(t.numpy)


def _want(t, a, b, scale):
    f = a.astype(np.float32) + np.float32(scale) * b.astype(np.float32)
    return f.astype(t.numpy)


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize(
    ("a_group", "b_group", "regroups"),
    [
        ((1, 8), (0, 8), True),  # different dimensions, both grouped: regrouped
        ((1, 8), (1, 8), False),  # the same grouping: added as it lies
        ((1, 8), (0, 3), False),  # B's grouping off the grain: added as it lies
    ],
)
def test_scaled_add_regroups_as_poplibs_and_adds_exactly(t, a_group, b_group, regroups):
    h = Harness()
    a, b = _values(t, (24, 32), 1), _values(t, (24, 32), 2)
    A = _laid_out(h, t, a, "A", *a_group)
    B = _laid_out(h, t, b, "B", *b_group)
    popops.scaledAddTo(h.graph, A, B, 0.5, h.seq)
    h.read(A, "A")
    out = h.run()["A"]
    np.testing.assert_array_equal(out, _want(t, a, b, 0.5))
    kinds = [type(p).__name__ for p in h.seq.programs]
    assert kinds == (["Copy", "Execute", "Execute"] if regroups else ["Execute"])
    assert any("Transpose" in n for n in h.vertex_names()) == regroups


@pytest.mark.parametrize("t", [FLOAT, HALF])
def test_regrouped_copy_has_the_reference_grouping_and_the_values(t):
    h = Harness()
    a, b = _values(t, (16, 40), 3), _values(t, (16, 40), 4)
    A = _laid_out(h, t, a, "A", 1, 8)
    B = _laid_out(h, t, b, "B", 0, 8)
    out = rr.regroupIfBeneficial(h.graph, B, A, h.seq, "rg")
    assert out.shape() == B.shape()
    assert rr.detectDimGroupings(h.graph, out)[0][0] == 1  # grouped along A's dimension
    h.read(out, "out")
    np.testing.assert_array_equal(h.run()["out"], b)


def _rule(t, frm, to) -> bool:
    """Poplibs' regroupIfBeneficial condition, written out from Rearrange.cpp."""
    grain = {2: 4, 4: 2}[t.size]
    return frm[0] != to[0] and frm[1] % grain == 0 and to[1] % grain == 0


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize(
    ("frm", "to"),
    [((0, 8), (1, 8)), ((0, 2), (1, 8)), ((0, 4), (1, 4)), ((0, 6), (1, 8)),
     ((0, 8), (1, 6)), ((0, 8), (0, 4)), ((1, 4), (1, 8)), ((1, 8), (0, 2))],
)  # fmt: skip
def test_condition_table_against_poplibs_rule(t, frm, to):
    h = Harness()
    B = _laid_out(h, t, _values(t, (24, 48), 5), "B", *frm)
    A = _laid_out(h, t, _values(t, (24, 48), 6), "A", *to)
    assert rr.detectDimGroupings(h.graph, B)[0] == frm
    assert rr.detectDimGroupings(h.graph, A)[0] == to
    seq = prog.Sequence()
    out = rr.regroupIfBeneficial(h.graph, B, A, seq)
    assert (out is not B) == _rule(t, frm, to)
    assert len(seq.programs) == (2 if _rule(t, frm, to) else 0)


def test_int_regroups_and_rank_one_or_bool_does_not():
    h = Harness()
    a = h.var(INT, np.arange(64).reshape(8, 8), "a")
    b = _laid_out(h, INT, np.arange(64).reshape(8, 8), "b", 0, 8)
    seq = prog.Sequence()
    assert rr.regroupIfBeneficial(h.graph, b, a, seq) is not b  # INT has transposes
    v = h.var(FLOAT, np.zeros(16), "v")
    assert rr.regroupIfBeneficial(h.graph, v, v, seq) is v
    p = h.var(BOOL, np.zeros((8, 8), bool), "p")
    q = _laid_out(h, BOOL, np.zeros((8, 8), bool), "q", 0, 8)
    assert rr.regroupIfBeneficial(h.graph, q, p, seq) is q
    assert len(seq.programs) == 2  # the INT regroup's Copy and Execute only


def test_shapes_must_match():
    h = Harness()
    a = h.var(FLOAT, np.zeros((4, 8)), "a")
    b = h.var(FLOAT, np.zeros((8, 4)), "b")
    with pytest.raises(TensorError, match="same shape"):
        rr.regroupIfBeneficial(h.graph, b, a, prog.Sequence())


def test_min_regroup_grain():
    assert rr.getMinimumRegroupGrainSize(HALF) == 4
    assert rr.getMinimumRegroupGrainSize(FLOAT) == 2


# -------------------------------------------------------------------- estimates
def _worker(r4, c4, m, split):
    """TransposeWorkerCycles (Poplibs), no pointer unpacking."""
    if r4 == 1 and c4 == 1:
        return 29 if m == 1 else 37 + (m - 2) * 4
    if c4 == 1:
        return 45 + 4 * (r4 - 2) if split else 27 + m * (35 + 4 * (r4 - 2))
    if split:
        return 27 + r4 * (12 + 4 * (c4 - 2))
    return 29 + m * (18 + r4 * (12 + 4 * (c4 - 2)))


@pytest.mark.parametrize(
    ("t", "rows", "cols", "m", "want"),
    [
        # float fast path: 27 + m * (11 + rows/2 * (6 + 3 * (cols/2 - 1)))
        (FLOAT, 8, 6, 3, 27 + 3 * (11 + 4 * (6 + 3 * 2))),
        # float slow path (odd rows): 13 + m * (8 + cols * (5 + rows * 4 / 2))
        (FLOAT, 3, 4, 2, 13 + 2 * (8 + 4 * (5 + 6))),
        # half fast path, >= 8 columns: 39 + m * (12 + rows/4 * (15 + 4 * (cols/4 - 2)))
        (HALF, 8, 16, 5, 39 + 5 * (12 + 2 * (15 + 8))),
        # half 4x4: 34 + 15 m
        (HALF, 4, 4, 7, 34 + 15 * 7),
        # half N x 4: 30 + m * (17 + 20 + 4 * (rows/4 - 2))
        (HALF, 12, 4, 2, 30 + 2 * (37 + 4)),
        # half slow path: 15 + m * (8 + cols * (5 + rows * 5 / 2))
        (HALF, 6, 6, 1, 15 + 8 + 6 * (5 + 15)),
    ],
)
def test_transpose_2d_estimate(t, rows, cols, m, want):
    assert rr.transpose_cycles("Transpose2D", t, rows, cols, m, 6) == want


@pytest.mark.parametrize(("rows", "cols", "m"), [(4, 4, 1), (4, 4, 3), (16, 4, 2), (8, 32, 5)])
def test_one_d_transpose_estimates(rows, cols, m):
    r4, c4 = rows // 4, cols // 4
    assert rr.transpose_cycles("Transpose1DSingleWorker", HALF, rows, cols, m, 6) == _worker(
        r4, c4, m, False
    )
    per = 1 if m <= 6 else -(-m // 6)
    one_d = rr.transpose_cycles("Transpose1D", HALF, rows, cols, m, 6)
    assert one_d == 7 + 6 * (_worker(r4, c4, per, False) - 7)


def test_split_transpose_estimate_uses_the_first_work_item():
    # 2 matrices of 8 x 32 halves over 6 workers: 3 workers each, rows/4 = 2 split
    # ceil(2/3) = 1 row block per worker, 2 workers used, 1 worker per column range.
    got = rr.transpose_cycles("SplitTranspose1D", HALF, 8, 32, 2, 6)
    assert got == 7 + 6 * (_worker(1, 8, 1, True) - 7)


def test_vertex_estimates_of_a_regroup_match_the_formulas():
    # 64 x 64 halves grouped 16 along each dimension: 16 transpositions of 16 x 16. On
    # the tiny target (8 tiles, 6 workers) updateGrouping keeps them whole (16 of them
    # are already above 8 tiles times min(ceil(negativeStride(16) / 512), 6) = 8), two
    # land on each tile, and 2 divides the 6 workers: one SplitTranspose1D per tile.
    # Its work list: 3 workers per matrix, 4 row blocks -> 2 per worker, 2 workers
    # used, 1 worker per column range of 4 blocks; the first item is 2 x 4 blocks.
    h = Harness()
    t = HALF
    A = _laid_out(h, t, _values(t, (64, 64), 7), "A", 1, 16)
    B = _laid_out(h, t, _values(t, (64, 64), 8), "B", 0, 16)
    seq = prog.Sequence()
    rr.regroupIfBeneficial(h.graph, B, A, seq)
    state = h.graph._state
    verts = [state.vertices[i] for i in seq.programs[1].computeSet.vertices]
    assert [v.vtype.name for v in verts] == ["poplar_rt::SplitTranspose1D<half>"] * TILES
    assert [v.perf_estimate for v in verts] == [7 + 6 * (_worker(2, 4, 1, True) - 7)] * TILES
