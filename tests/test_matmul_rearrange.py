"""matMul's rearrangement of its operands before the exchange, as Poplibs' does it.

The rules (graphcore/poplibs 7eac0f26, ``lib/poplin/Convolution.cpp``): an operand is
copied into the plan's layout in the weight-update passes, when it is broadcast to more
than 7 tiles (activations: the output-channel split; weights: batch times field split),
and when the plan groups input channels and the operand's innermost dimension has no
grouping (``detectInnermostGrouping``, ``lib/poputil/VarStructure.cpp``). The tests
write the rules out again from the plan's partition and check which copies the product
makes, the values against numpy, and the fully-connected workload's two runs.

A copy Poplibs makes is left out where Poplar elides it (``Convolution.cpp``: "elided if
the inputs already use the expected memory layout and tile mapping"; the condition as
``lib/popops/DynamicSlice.cpp``'s ``regroupBaseTensor`` checks it): the tests restate it
tile by tile (:func:`layouts_agree`) and the padding that prevents it
(:func:`pads_channels`: ``convolutionPreprocess`` pads channels to the vertex groupings
before the copy).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ipusim.runner import run_workload
from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.poplin import conv as conv_module
from poplar_api.poplin import conv_rearrange
from poplar_api.poplin import matmul as matmul_module
from poplar_api.poplin.conv_rearrange import detect_innermost_grouping, pads_operand, same_layout
from tests.test_poplin import run_product

RNG = np.random.default_rng(28)
FC = str(Path(__file__).resolve().parents[1] / "examples/calibration/fc_fully_connected.py")


def _graph(preset: str = "tiny") -> tuple[object, Graph]:
    device = IPUModel(preset).createDevice()
    return device, Graph(device.getTarget())


# ------------------------------------------------------------ detectInnermostGrouping
def test_grouping_of_a_row_in_runs_of_eight():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [3, 32], "t")
    # each row: 4 runs of 8 on tiles 0..3
    graph.mapElements(t, np.tile(np.repeat(np.arange(4), 8), 3))
    assert detect_innermost_grouping(graph, t) == math.gcd(8, 32)


def test_grouping_of_a_transposed_view_is_one():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [16, 32], "t")
    graph.setTileMapping(t, 0)
    assert detect_innermost_grouping(graph, t) == 32  # whole rows on one tile
    assert detect_innermost_grouping(graph, t.transpose()) == 1  # a column: stride 32


def test_grouping_that_does_not_divide_the_row_is_one():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [2, 12], "t")
    # row 0: runs of 5, 5, 2 -> gcd(5, 12) = 1
    graph.mapElements(t, np.concatenate([[0] * 5, [1] * 5, [2] * 2, [3] * 12]))
    assert detect_innermost_grouping(graph, t) == 1


def test_grouping_counts_only_the_graphs_own_tiles():
    """A stretch of the row on tiles outside a virtual graph is no interval of its
    mapping, even when two such tiles follow each other; an element not mapped raises."""
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [48], "t")
    graph.mapElements(t, np.repeat([0, 1, 2, 3], [12, 12, 8, 16]))
    assert detect_innermost_grouping(graph, t) == math.gcd(16, 48)  # 12 + 12 on 0, 1
    upper = graph.createVirtualGraph(2, 4)  # tiles 0 and 1 are outside: 24 in a row
    assert detect_innermost_grouping(upper, t) == math.gcd(16, 48)
    u = graph.addVariable(FLOAT, [8], "u")
    graph.mapElements(u[0:4], 0)
    with pytest.raises(GraphError, match="element 4 of tensor 'u' is not mapped"):
        detect_innermost_grouping(graph, u)


# ------------------------------------------------------------ when a copy is elided
def layouts_agree(graph: Graph, src, dst) -> bool:
    """Poplar's condition for eliding ``Copy(src, dst)``, tile by tile: the same flat
    positions on each tile, in the same memory (element id) order, cut into the same runs
    of consecutive positions and ids (a plain loop, apart from the library's)."""
    s_ids, d_ids = src.flat_index(), dst.flat_index()
    if len(set(s_ids.tolist())) != s_ids.size:
        return False
    s_map = graph.getTileMapping(src, throwOnUnmapped=False)
    d_map = graph.getTileMapping(dst, throwOnUnmapped=False)
    for s_ivs, d_ivs in zip(s_map, d_map, strict=True):
        s_pos = [p for iv in s_ivs for p in range(iv.begin(), iv.end())]
        d_pos = [p for iv in d_ivs for p in range(iv.begin(), iv.end())]
        if sorted(s_pos) != sorted(d_pos):
            return False
        regions = []
        for ids in (s_ids, d_ids):
            order = sorted(s_pos, key=ids.__getitem__)
            runs, prev = [], None
            for p in order:
                if prev is not None and p == prev + 1 and ids[p] == ids[prev] + 1:
                    runs[-1][1] = p + 1
                else:
                    runs.append([p, p + 1])
                prev = p
            regions.append(runs)
        if regions[0] != regions[1]:
            return False
    covered = sum(iv.size() for ivs in s_map for iv in ivs)
    return covered == src.numElements()


def pads_channels(params, plan, acts: bool) -> bool:
    """Whether the operand's channels are not whole groups of the plan's vertex."""
    ocg = plan.out_chans_per_group if plan.method == "AMP" else 1
    if params.inputChannelsPerConvGroup % plan.in_chans_per_group:
        return True
    return not acts and params.outputChannelsPerConvGroup % ocg != 0


class Spy:
    """The rearranging copies a build decides on (``rearranged``'s calls), each with its
    source and destination (or the function making it), and whether it was padded."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, object, object, bool]] = []
        real = matmul_module.rearranged

        def spy(graph, src, dst, prog_, name, padded=False, layout=None):
            self.calls.append((name, src, dst, padded))
            return real(graph, src, dst, prog_, name, padded, layout)

        monkeypatch.setattr(matmul_module, "rearranged", spy)
        monkeypatch.setattr(conv_module, "rearranged", spy)

    def decided(self) -> set[str]:
        return {name for name, *_ in self.calls}

    def kept(self, graph: Graph) -> set[str]:
        """The copies left once Poplar's elision is applied, by the tests' own layout
        rule (the padding flag is the library's, checked against the groupings by
        ``test_pads_operand_against_the_groupings``)."""
        return {n for n, src, dst, padded in self.calls
                if padded or not layouts_agree(graph, src, dst() if callable(dst) else dst)
                }  # fmt: skip


# ------------------------------------------------------------ which operands are copied
def _copies(preset, a_shape, b_shape, opts, lhs_view=None, in_type=FLOAT, spy=None):
    """Build ``A x B`` and return (plan, names of the rearranging copies, graph)."""
    _, graph = _graph(preset)
    m, k = a_shape
    n = b_shape[1]
    if lhs_view == "created":
        A = poplin.createMatMulInputLHS(graph, in_type, [m, k], [k, n], "A", opts)
        B = poplin.createMatMulInputRHS(graph, in_type, [m, k], [k, n], "B", opts)
    else:
        A = graph.addVariable(in_type, [m, k], "A")
        Bt = graph.addVariable(in_type, [n, k], "Bt")  # B as a transposed view
        poputil_map(graph, A)
        poputil_map(graph, Bt)
        B = Bt.transpose()
    seq = prog.Sequence()
    poplin.matMul(graph, A, B, seq, "mm", opts)
    plan = poplin.getPlan(graph, (1, m, k, n), in_type, in_type, opts)
    names = {c.debugName for c in seq.programs if isinstance(c, prog.Copy)}
    return plan, names, graph


def poputil_map(graph: Graph, t) -> None:
    from poplar_api import poputil

    poputil.mapTensorLinearly(graph, t)


def _expected(plan, wu: bool, a_grouped: bool, b_grouped: bool) -> set[str]:
    """The rule, from the plan's partition ``(G, B, field, Co, Ci)``; with swapped
    operands the convolution's activations are ``B^T`` and its weights ``A``."""
    if plan.swapped:
        a_grouped, b_grouped = b_grouped, a_grouped
    acts = wu or plan.parts[-2] > 7 or (plan.in_chans_per_group > 1 and not a_grouped)
    weights = (
        wu or plan.parts[1] * plan.parts[2] > 7 or (plan.in_chans_per_group > 1 and not b_grouped)
    )
    return {n for n, on in (("mm/actsRearranged", acts), ("mm/weightsRearranged", weights)) if on}


def test_created_operands_of_a_wide_product_elide_the_broadcast_copy(monkeypatch):
    """Poplibs copies the broadcast operand; Poplar elides it, since the created operand
    already lies as the copy's destination (and 32 input channels are whole groups)."""
    spy = Spy(monkeypatch)
    plan, names, graph = _copies("mk2", (64, 32), (32, 4000), None, "created", HALF)
    assert plan.parts[-2] > 7  # the output channels are split over more than 7 tiles
    assert spy.decided() == _expected(plan, False, True, True)
    assert "mm/actsRearranged" in spy.decided()
    assert not any(padded for *_, padded in spy.calls)
    assert spy.kept(graph) == set()
    assert names == set()


def test_created_operands_whose_channels_are_padded_keep_the_copy(monkeypatch):
    """40 HALF input channels are not whole groups of 16: Poplibs pads them before the
    copy, whose source then holds the padding, so Poplar cannot elide it."""
    spy = Spy(monkeypatch)
    plan, names, graph = _copies("mk2", (64, 40), (40, 4000), None, "created", HALF)
    assert 40 % plan.in_chans_per_group  # padded
    assert "mm/actsRearranged" in spy.decided()
    assert "mm/actsRearranged" in names
    assert names == spy.kept(graph)


def test_linearly_mapped_operands_of_a_wide_product_copy_the_broadcast_one(monkeypatch):
    spy = Spy(monkeypatch)
    plan, names, graph = _copies("mk2", (64, 32), (32, 4000), UNSWAPPED, None, HALF)
    assert plan.parts[-2] > 7
    assert "mm/actsRearranged" in spy.decided()
    assert "mm/actsRearranged" in names  # spread linearly, not as the plan lays it out
    assert names == spy.kept(graph)


def test_weight_update_pass_decides_both_copies_and_elides_created_ones(monkeypatch):
    opts = {"fullyConnectedPass": "TRAINING_WU"}
    spy = Spy(monkeypatch)
    plan, names, graph = _copies("tiny", (16, 8), (8, 16), opts, "created")
    assert spy.decided() == {"mm/actsRearranged", "mm/weightsRearranged"}
    assert spy.decided() == _expected(plan, True, True, True)
    assert names == spy.kept(graph)


def test_weight_update_pass_copies_linearly_mapped_operands(monkeypatch):
    opts = {"fullyConnectedPass": "TRAINING_WU"}
    spy = Spy(monkeypatch)
    _, names, graph = _copies("mk2", (64, 48), (48, 96), opts, None)
    assert spy.decided() == {"mm/actsRearranged", "mm/weightsRearranged"}
    assert names == spy.kept(graph)
    assert names  # at least one operand does not lie as the plan lays it out


def test_same_layout_on_hand_made_tensors():
    """The library's check against the tests' loop on tensors whose answer is known."""
    _, graph = _graph()
    src = graph.addVariable(FLOAT, [4, 8], "src")
    graph.mapElements(src, np.repeat(np.arange(4), 8))  # one row per tile
    same = graph.addVariable(FLOAT, [4, 8], "same")
    graph.mapElements(same, np.repeat(np.arange(4), 8))
    moved = graph.addVariable(FLOAT, [4, 8], "moved")
    graph.mapElements(moved, np.repeat([0, 1, 3, 2], 8))  # rows 2 and 3 swap tiles
    col = graph.addVariable(FLOAT, [8, 4], "col")  # the same tiles, memory column-major
    graph.mapElements(col, np.tile(np.arange(4), 8))
    halves = [graph.addVariable(FLOAT, [4, 4], f"half{i}") for i in range(2)]
    for h in halves:
        graph.mapElements(h, np.repeat(np.arange(4), 4))
    cut = poplin_concat(halves[1], halves[0])  # each row two runs, the second half first
    bcast = src[0:1].broadcast(4, 0)  # row 0 four times
    # one tile, the source's first element twice, the destination in the same order
    pair, three = graph.addVariable(FLOAT, [2], "pair"), graph.addVariable(FLOAT, [3], "three")
    graph.setTileMapping(pair, 5)
    graph.setTileMapping(three, 5)
    twice = poplin_concat(pair[0:1], pair[1:2], pair[0:1], dim=0)
    in_its_order = poplin_concat(three[0:1], three[2:3], three[1:2], dim=0)
    cases = {
        "same": (src, same, True),
        "moved": (src, moved, False),
        "column-major": (src, col.transpose(), False),
        "two runs a row": (src, cut, False),
        "an element twice": (bcast, same, False),
        "an element twice, in the destination's order": (twice, in_its_order, False),
    }
    for what, (a, b, want) in cases.items():
        assert layouts_agree(graph, a, b) is want, what
        assert same_layout(graph, a, b) is want, what


def test_same_layout_needs_every_element_on_the_graphs_tiles():
    """An element not mapped yet, or mapped to a tile outside the (virtual) graph asked,
    has no tile there: no elision, even where both operands agree element by element."""
    _, graph = _graph()
    a, b = (graph.addVariable(FLOAT, [2, 4], n) for n in ("a", "b"))
    graph.mapElements(a, np.repeat([0, 1], 4))
    assert not same_layout(graph, a, b)  # b unmapped
    graph.mapElements(b, np.repeat([0, 1], 4))
    assert same_layout(graph, a, b)
    upper = graph.createVirtualGraph(1, 4)  # tiles 1..3: a's and b's first rows are outside
    assert not same_layout(upper, a, b)
    assert same_layout(upper, a[1], b[1])  # the second rows lie on its tile 0


def test_same_layout_of_large_tensors_checks_past_the_first_elements():
    """Tensors longer than the elements compared first (conv_rearrange._PROBE): a
    difference at the start or only at the end, an element not mapped at either end."""
    _, graph = _graph()
    n = 3 * conv_rearrange._PROBE + 5
    tiles = np.repeat(np.arange(8), -(-n // 8))[:n]
    a, b, c, d = (graph.addVariable(FLOAT, [n], name) for name in "abcd")
    for t in (a, b, c):
        graph.mapElements(t, tiles)
    assert same_layout(graph, a, b)
    graph.mapElements(c[n - 1 :], 0)  # the last element moves
    assert not same_layout(graph, a, c)
    graph.mapElements(d[1:], tiles[1:])  # d's first element not mapped
    assert not same_layout(graph, a, d)
    assert not same_layout(graph, d, a)
    graph.mapElements(d[0:1], tiles[0:1])
    assert same_layout(graph, a, d)
    e = graph.addVariable(FLOAT, [n], "e")
    graph.mapElements(e[: n - 1], tiles[: n - 1])  # e's last element not mapped
    assert not same_layout(graph, e, a)
    assert not same_layout(graph, a, e)
    assert not same_layout(graph.createVirtualGraph(1, 8), a, b)  # a[0] on tile 0: outside


def test_the_elements_compared_first_are_a_prefix():
    """conv_rearrange._leading: a view of the first flat elements (1 to limit of them),
    for consecutive tensors and transposed views, whatever the shape."""
    _, graph = _graph()
    v = graph.addVariable(FLOAT, [6, 7, 300], "v")
    for t in (v, v.dimShuffle([2, 0, 1]), v.dimShuffle([1, 2, 0])[2:], v.flatten()):
        for limit in (1, 299, 300, 1000, 5000, 20000):
            head = conv_rearrange._leading(t, limit).flat_index()
            assert 1 <= head.size <= limit
            np.testing.assert_array_equal(head, t.flat_index()[: head.size])
            assert head.size == min(limit, t.numElements()) or t.rank() > 1


def test_a_large_layout_is_checked_past_its_first_elements():
    """rearranged with a destination's layout (memory position per element, tile per
    position) on an operand longer than the elements compared first: elided only when
    every element agrees, the destination made only for a copy that stays."""
    _, graph = _graph()
    n = 3 * conv_rearrange._PROBE + 5
    tiles = np.repeat(np.arange(8), -(-n // 8))[:n]
    src = graph.addVariable(FLOAT, [n], "src")
    graph.mapElements(src, tiles)
    made = []

    def dst():
        made.append(graph.addVariable(FLOAT, [n], "dst"))
        graph.mapElements(made[-1], 0)
        return made[-1]

    seq = prog.Sequence()
    ids = np.arange(n, dtype=np.int64)
    assert conv_rearrange.rearranged(graph, src, dst, seq, "same", layout=(ids, tiles)) is src
    moved = tiles.copy()
    moved[-1] = (moved[-1] + 1) % 8  # the last element's position on another tile
    kept = conv_rearrange.rearranged(graph, src, dst, seq, "moved", layout=(ids, moved))
    assert made and kept is made[-1]
    first = tiles.copy()
    first[0] = 7  # the first element's position elsewhere
    again = conv_rearrange.rearranged(graph, src, dst, seq, "first", layout=(ids, first))
    assert len(made) == 2 and again is made[-1]


def poplin_concat(*parts, dim: int = 1):
    from poplar_api.tensor import concat

    return concat(list(parts), dim)


def test_pads_operand_against_the_groupings():
    """Channels that are not whole groups of the plan's vertex are padded (and so never
    elided); the table mixes AMP groupings with the MAC's one partial channel."""
    _, graph = _graph("mk2")
    seen = set()
    table = [((64, 32, 48), HALF), ((4, 1000, 1000), HALF), ((16, 64, 48), FLOAT),
             ((1, 40, 48), HALF)]  # fmt: skip
    for (m, k, n), t in table:
        for opts in (None, UNSWAPPED):
            plan = poplin.getPlan(graph, (1, m, k, n), t, t, opts)
            field, co = (n, m) if plan.swapped else (m, n)
            params = poplin.ConvParams(t, 1, [field], [1], k, co, 1)
            for acts in (True, False):
                padded = pads_operand(params, plan, acts)
                assert padded == pads_channels(params, plan, acts), (m, k, n, opts, acts)
                seen.add(padded)
    assert seen == {True, False}


#: Plan constraints that keep a product unswapped (Poplibs' ``0.transform.swapOperands``).
UNSWAPPED = {"planConstraints": '{"0": {"transform": {"swapOperands": false}}}'}


def test_transposed_weights_are_copied_when_the_plan_groups_channels(monkeypatch):
    spy = Spy(monkeypatch)
    plan, names, graph = _copies("mk2", (32, 64), (64, 48), UNSWAPPED, None, HALF)
    assert plan.in_chans_per_group > 1 and not plan.swapped
    assert "mm/weightsRearranged" in names  # B's innermost (K) has stride N in memory
    assert spy.decided() == _expected(plan, False, True, False)
    assert names == spy.kept(graph)


def test_bad_fully_connected_pass_is_named():
    _, graph = _graph()
    A = graph.addVariable(FLOAT, [4, 4], "A")
    graph.setTileMapping(A, 0)
    with pytest.raises(GraphError, match="fullyConnectedPass='TRAINING'"):
        poplin.matMul(graph, A, A, prog.Sequence(), "mm", {"fullyConnectedPass": "TRAINING"})


# ------------------------------------------------------------ values
@pytest.mark.parametrize("fc_pass", ["TRAINING_WU", "TRAINING_BWD", "NONE"])
def test_rearranged_products_match_numpy(fc_pass):
    a = RNG.uniform(-1, 1, (24, 20)).astype(np.float32)
    bt = RNG.uniform(-1, 1, (12, 20)).astype(np.float32)

    def linear_with_transposed_b(graph):
        A = graph.addVariable(FLOAT, [24, 20], "A")
        Bt = graph.addVariable(FLOAT, [12, 20], "Bt")
        poputil_map(graph, A)
        poputil_map(graph, Bt)
        return A, Bt.transpose(), [(A, a), (Bt, bt)]

    opts = {"fullyConnectedPass": fc_pass}
    c, _, _ = run_product("tiny", None, None, make=linear_with_transposed_b, opts=opts)
    ref = a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ the fully-connected tool
def test_fully_connected_workload_runs_forward_then_backward():
    res = run_workload(FC, "tiny", {"batch": 4, "input_size": 32, "output_size": 16})
    assert len(res.traces) == 2  # the tool's engine.run(fwd), engine.run(bwd)
    total = sum(t.total_cycles for t in res.traces)
    assert res.metrics["total_cycles"] == total
    names = [r.name for r in res.traces[1].records]
    # the weight update copies both operands into its plan's layout first
    assert any(n.startswith("fc/wu/actsRearranged") for n in names)
    assert any(n.startswith("fc/wu/weightsRearranged") for n in names)
    assert not any(n.startswith("fc/fwd") for n in names)
