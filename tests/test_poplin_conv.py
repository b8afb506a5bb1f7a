"""poplin convolutions: forward, backward-data and weight-update values against numpy,
vertex names, the planner's choices and bad input.

The reference applies Poplar's ConvParams semantics literally with numpy (truncate,
dilate, pad, flip the input and the kernel; slide; truncate, stride and pad the
output). The backward passes are checked against the transposed Jacobian of that
reference, built column by column from basis vectors, so they share nothing with the
gradient parameters the library derives.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError, PoplarError, TensorError

# ----------------------------------------------------------------------------- reference


def _transform(a: np.ndarray, axis: int, tl, tu, dil, pl, pu, flip) -> np.ndarray:
    n = a.shape[axis]
    a = np.take(a, np.arange(tl, n - tu), axis=axis)
    kept = a.shape[axis]
    shape = list(a.shape)
    shape[axis] = 0 if kept == 0 else (kept - 1) * dil + 1
    d = np.zeros(shape, a.dtype)
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(0, None, dil)
    d[tuple(idx)] = a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (pl, pu)
    d = np.pad(d, pad)
    return np.flip(d, axis) if flip else d


def ref_conv(x: np.ndarray, w: np.ndarray, p: poplin.ConvParams) -> np.ndarray:
    """Poplar's convolution of ``x`` [B, G*Ci, *F] with ``w`` [G, Co, Ci, *K], float64."""
    nd = p.getNumFieldDims()
    g, ci, co = p.numConvGroups, p.inputChannelsPerConvGroup, p.outputChannelsPerConvGroup
    xt = x.astype(np.float64).reshape(x.shape[0], g, ci, *x.shape[2:])
    wt = w.astype(np.float64)
    it, kt, ot = p.inputTransform, p.kernelTransform, p.outputTransform
    for d in range(nd):
        xt = _transform(xt, 3 + d, it.truncationLower[d], it.truncationUpper[d], it.dilation[d],
                        it.paddingLower[d], it.paddingUpper[d], it.flip[d])  # fmt: skip
        wt = _transform(wt, 3 + d, kt.truncationLower[d], kt.truncationUpper[d], kt.dilation[d],
                        kt.paddingLower[d], kt.paddingUpper[d], kt.flip[d])  # fmt: skip
    ksz = wt.shape[3:]
    win = np.lib.stride_tricks.sliding_window_view(xt, ksz, axis=tuple(range(3, 3 + nd)))
    # win [B, G, Ci, *U, *K]
    letters = "uvw"[:nd]
    kl = "klm"[:nd]
    y = np.einsum(f"bgc{letters}{kl},goc{kl}->bgo{letters}", win, wt)
    for d in range(nd):
        ax = 3 + d
        n = y.shape[ax]
        y = np.take(y, np.arange(ot.truncationLower[d], n - ot.truncationUpper[d], ot.stride[d]),
                    axis=ax)  # fmt: skip
        pad = [(0, 0)] * y.ndim
        pad[ax] = (ot.paddingLower[d], ot.paddingUpper[d])
        y = np.pad(y, pad)
    return y.reshape(y.shape[0], g * co, *y.shape[3:])


def jacobians(x, w, p):
    """``(Jx, Jw)``: d out / d x and d out / d w of the reference, as matrices."""
    y0 = ref_conv(x, w, p).size
    jx = np.zeros((y0, x.size))
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = 1
        jx[:, i] = ref_conv(e.reshape(x.shape), w, p).reshape(-1)
    jw = np.zeros((y0, w.size))
    for i in range(w.size):
        e = np.zeros(w.size)
        e[i] = 1
        jw[:, i] = ref_conv(x, e.reshape(w.shape), p).reshape(-1)
    return jx, jw


#: Poplibs plan constraints: the AMP method, no expandDims transform.
NO_EXPAND_AMP = {"planConstraints": '{"method": "AMP", "transform": {"expandDims": []}}'}


# ----------------------------------------------------------------------------- running
def run_passes(p, x, w, dy, preset="ipu2", options=None, passes=("fwd", "bwd", "wu")):
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    X = poplin.createInput(graph, p, "x", options)
    W = poplin.createWeights(graph, p, "w", options)
    seq = prog.Sequence()
    reads = {}
    if "fwd" in passes:
        reads["y"] = poplin.convolution(graph, X, W, p, False, seq, "fwd", options)
    DY = graph.addVariable(p.outputType, p.outputShape(), "dy")
    poplar_map_linear(graph, DY)
    if "bwd" in passes:
        bp = poplin.getGradientParams(p)
        reads["dx"] = poplin.convolution(graph, DY, W, bp, True, seq, "bwd", options)
    if "wu" in passes:
        reads["dw"] = poplin.calculateWeightDeltas(graph, DY, X, p, seq, "wu", options)
    for name, t in (("x", X), ("w", W), ("dy", DY)):
        graph.createHostWrite(name, t)
    for name, t in reads.items():
        graph.createHostRead(name, t)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("x", x)
    engine.writeTensor("w", w)
    engine.writeTensor("dy", dy)
    engine.run(0)
    return {k: engine.readTensor(k) for k in reads}, engine, graph


def poplar_map_linear(graph, t):
    n = graph.getTarget().getNumTiles()
    flat = t.flatten()
    size = flat.numElements()
    for i in range(min(n, size)):
        lo, hi = i * size // min(n, size), (i + 1) * size // min(n, size)
        graph.setTileMapping(flat.slice(lo, hi), i)


def random_operands(
    p: poplin.ConvParams,
    rng: np.random.Generator,
    dtype: type = np.float32,
    gradient: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, w, dy)`` for ``p``: standard normal input and weights, drawn in that order,
    then the output gradient, standard normal too or zeros when ``gradient`` is false
    (a forward-only run, which draws nothing for it)."""
    x = rng.standard_normal(p.inputShape()).astype(dtype)
    w = rng.standard_normal(p.weightsShape()).astype(dtype)
    if gradient:
        dy = rng.standard_normal(p.outputShape()).astype(dtype)
    else:
        dy = np.zeros(p.outputShape(), dtype)
    return x, w, dy


def assert_passes_equal_numpy(out, x, w, dy, p, rtol=1e-5, atol=1e-4, err_msg=""):
    """Each pass :func:`run_passes` read (``y``, ``dx``, ``dw``) against the reference:
    ``y`` against :func:`ref_conv`, ``dx`` and ``dw`` against its transposed Jacobians
    applied to ``dy``."""
    assert out and set(out) <= {"y", "dx", "dw"}, sorted(out)
    tol = dict(rtol=rtol, atol=atol, err_msg=err_msg)
    if "y" in out:
        np.testing.assert_allclose(out["y"], ref_conv(x, w, p), **tol)
    if "dx" in out or "dw" in out:
        jx, jw = jacobians(x, w, p)
        if "dx" in out:
            np.testing.assert_allclose(out["dx"], (jx.T @ dy.reshape(-1)).reshape(x.shape), **tol)
        if "dw" in out:
            np.testing.assert_allclose(out["dw"], (jw.T @ dy.reshape(-1)).reshape(w.shape), **tol)


def forward_equals_numpy(
    p: poplin.ConvParams,
    rng: np.random.Generator,
    preset: str = "ipu2",
    options=None,
    dtype: type = np.float32,
    rtol: float = 1e-5,
    atol: float = 1e-4,
) -> Graph:
    """Run ``p``'s forward pass on random operands (:func:`random_operands`) and check
    it against :func:`ref_conv`; return the graph, for checks of its vertices."""
    x, w, dy = random_operands(p, rng, dtype, gradient=False)
    out, _, graph = run_passes(p, x, w, dy, preset=preset, options=options, passes=("fwd",))
    np.testing.assert_allclose(out["y"], ref_conv(x, w, p), rtol=rtol, atol=atol)
    return graph


def random_params(rng, dtype=FLOAT):
    nd = int(rng.integers(1, 3))
    field = [int(rng.integers(3, 9)) for _ in range(nd)]
    kernel = [int(rng.integers(1, 4)) for _ in range(nd)]
    dil = [int(rng.integers(1, 3)) for _ in range(nd)]
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    pad_l = [int(rng.integers(0, 3)) for _ in range(nd)]
    pad_u = [int(rng.integers(0, 3)) for _ in range(nd)]
    for d in range(nd):
        while field[d] + pad_l[d] + pad_u[d] < ext[d]:
            pad_u[d] += 1
    return poplin.ConvParams(
        dtype,
        int(rng.integers(1, 3)),
        field,
        kernel,
        int(rng.integers(1, 5)),
        int(rng.integers(1, 5)),
        int(rng.integers(1, 3)),
        stride=[int(rng.integers(1, 3)) for _ in range(nd)],
        paddingLower=pad_l,
        paddingUpper=pad_u,
        dilation=dil,
    )


EXPAND = {
    "planner": None,
    "direct": {"planConstraints": '{"transform": {"expandDims": []}}'},
    "im2col": {"planConstraints": '{"transform": {"expandDims": [0]}}'},
}


@pytest.mark.parametrize("layout", sorted(EXPAND))
@pytest.mark.parametrize("seed", range(8))
def test_all_passes_equal_numpy_on_random_shapes(seed, layout):
    """Every pass, with the planner's choice, forced direct and forced im2col plans."""
    rng = np.random.default_rng(seed)
    p = random_params(rng)
    x, w, dy = random_operands(p, rng)
    out, _, _ = run_passes(p, x, w, dy, preset="ipu1", options=EXPAND[layout])
    assert_passes_equal_numpy(out, x, w, dy, p, err_msg=str(p))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"inputTransform": {"dilation": [2], "truncationLower": [1], "flip": [True]}},
        {"kernelTransform": {"flip": [True], "paddingLower": [1], "truncationUpper": [1]}},
        {
            "outputTransform": {
                "paddingLower": [2],
                "paddingUpper": [1],
                "truncationLower": [1],
                "stride": [2],
            }
        },
    ],
)
def test_forward_transforms_equal_numpy(kwargs):
    p = poplin.ConvParams(FLOAT, 2, [9], [3], 3, 4, 1, **kwargs)
    forward_equals_numpy(p, np.random.default_rng(5), preset="ipu1")


def test_half_convolution_with_float_partials():
    p = poplin.ConvParams(HALF, 2, [8, 8], [3, 3], 16, 16, 1, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    forward_equals_numpy(p, np.random.default_rng(3), dtype=np.float16, rtol=2e-2, atol=5e-2)


def vertex_names(graph, cs_suffix):
    st = graph._state
    names = set()
    for cs in st.compute_sets:
        if cs.name.endswith(cs_suffix):
            names |= {st.vertices[v].vtype.name for v in cs.vertices}
    return names


def test_vertex_families_carry_poplibs_names():
    rng = np.random.default_rng(4)
    # 3x3 with 16 channels: AMP nx1
    p = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 16, 16, 1)
    graph = forward_equals_numpy(p, rng, options=NO_EXPAND_AMP)
    names = vertex_names(graph, "fwd/Convolve")
    assert names == {"poplin::ConvPartialnx1<float,float,true,true,8,2,false>"}
    # 1x1: ConvPartial1x1Out
    p1 = poplin.ConvParams(FLOAT, 1, [16], [1], 8, 8, 1)
    graph = forward_equals_numpy(p1, rng, options=NO_EXPAND_AMP)
    assert vertex_names(graph, "fwd/Convolve") == {
        "poplin::ConvPartial1x1Out<float,float,true,true,8,2,false>"
    }
    # one input channel, not expanded: the planner picks the horizontal MAC
    p2 = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 1, 4, 1)
    x2, w2, _ = random_operands(p2, rng, gradient=False)
    no_expand = {"planConstraints": '{"transform": {"expandDims": []}}'}
    out, _, graph = run_passes(p2, x2, w2, np.zeros(p2.outputShape(), np.float32),
                               passes=("fwd",), options=no_expand)  # fmt: skip
    assert vertex_names(graph, "fwd/Convolve") == {
        "poplin::ConvPartialHorizontalMac<float,float,true>"
    }
    np.testing.assert_allclose(out["y"], ref_conv(x2, w2, p2), rtol=1e-5, atol=1e-4)
    # expanded (im2col: 9 input channels, 1x1 kernel): ConvPartial1x1Out, same values
    expand = {"planConstraints": '{"method": "AMP", "transform": {"expandDims": [0, 1]}}'}
    out, _, graph = run_passes(p2, x2, w2, np.zeros(p2.outputShape(), np.float32),
                               passes=("fwd",), options=expand)  # fmt: skip
    assert poplin.getConvPlan(graph, p2, expand).expanded
    assert vertex_names(graph, "fwd/Convolve") == {
        "poplin::ConvPartial1x1Out<float,float,true,true,8,2,false>"
    }
    np.testing.assert_allclose(out["y"], ref_conv(x2, w2, p2), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("groups", [4, 16])
def test_depthwise_half_convolution_on_the_vertical_mac(groups):
    """One input and one output channel per group, HALF: Poplibs' VMAC vertex, with
    values equal to numpy in all three passes."""
    rng = np.random.default_rng(groups)
    p = poplin.ConvParams(HALF, 2, [6, 6], [3, 3], 1, 1, groups, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    x = rng.uniform(-1, 1, p.inputShape()).astype(np.float16)
    w = rng.uniform(-1, 1, p.weightsShape()).astype(np.float16)
    dy = rng.uniform(-1, 1, p.outputShape()).astype(np.float16)
    vmac = {"planConstraints": '{"method": "VMAC", "transform": {"expandDims": []}}'}
    out, _, graph = run_passes(p, x, w, dy, options=vmac, passes=("fwd",))
    cgpg = 16 if groups >= 16 else 8 if groups >= 8 else 4
    assert vertex_names(graph, "fwd/Convolve") == {
        f"poplin::ConvPartialVerticalMac<half,float,true,{cgpg}>"
    }
    np.testing.assert_allclose(out["y"], ref_conv(x, w, p), rtol=2e-2, atol=2e-2)


def test_vmac_constraint_on_a_convolution_it_does_not_fit_is_an_error():
    p = poplin.ConvParams(FLOAT, 1, [6], [3], 1, 1, 8)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    with pytest.raises(GraphError, match=r"VMAC does not apply.*HALF"):
        poplin.getConvPlan(graph, p, {"planConstraints": '{"method": "VMAC"}'})


def test_input_channel_split_reduces_partials():
    """A plan forced to few tiles' memory splits Ci; the ReduceAdd compute set sums it."""
    p = poplin.ConvParams(FLOAT, 1, [6], [1], 64, 8, 1)
    plan = poplin.getConvPlan(Graph(IPUModel("ipu2").createDevice().getTarget()), p)
    graph = forward_equals_numpy(p, np.random.default_rng(8))
    if plan.parts[-1] > 1:
        assert any(n.startswith("poplin::ReduceAdd") for n in vertex_names(graph, "fwd/Reduce"))


def _initial_values(graph, t):
    """Initial values of the constant elements of view ``t`` (from setInitialValue)."""
    ids = t.flat_index()
    out = np.full(ids.size, -1, np.int64)
    for type_, part_ids, vals in graph._state.initial_parts:
        if type_ != t.elementType():
            continue
        pos = {int(i): k for k, i in enumerate(part_ids)}
        for j, i in enumerate(ids):
            if int(i) in pos:
                out[j] = int(vals[pos[int(i)]])
    return out


def test_worklists_and_estimate_of_a_one_tile_conv():
    """1-D, 3 taps, 6 outputs on one tile: each of the 6 workers gets one output per
    kernel position (Poplibs' partitionConvPartialByWorker), entry (w, 1, w + k); the
    vertex estimate is the Poplibs nx1 estimator of exactly those partitions plus the
    zeroing of 6 x 8 partials."""
    from poplar_api.poplin import conv_estimators as ce

    p = poplin.ConvParams(FLOAT, 1, [8], [3], 8, 8, 1)
    device = IPUModel("ipu2").createDevice()
    g = Graph(device.getTarget())
    vg = g.createVirtualGraph(0, 1)
    opts = NO_EXPAND_AMP
    X = poplin.createInput(vg, p, "x", opts)
    W = poplin.createWeights(vg, p, "w", opts)
    poplin.convolution(vg, X, W, p, False, prog.Sequence(), "c", opts)
    st = g._state
    cs = next(c for c in st.compute_sets if c.name == "c/Convolve")
    (vid,) = cs.vertices
    v = st.vertices[vid]
    wls = [_initial_values(g, t) for t in v.tensor("worklists", st)]
    assert len(wls) == 3 * 6
    for k in range(3):
        for w in range(6):
            assert wls[k * 6 + w].tolist() == [w, 1, w + k]
    assert _initial_values(g, v.tensor("params", st)).tolist() == [1, 1, 1, 3, 8, 6, 1, 1]
    expected = ce.conv_partial_nx1_vertex_cycles(
        [[[1], [1], [1]] for _ in range(6)], 6 * 8, num_conv_groups=1, num_out_groups=1,
        num_in_groups=1, kernel_inner_elems=3, kernel_outer_elems=1, filter_height=1,
        in_chans_per_group=8, out_chans_per_group=8, weight_bytes_per_conv_unit=32,
        num_conv_units=8, coeff_load_bytes_per_cycle=16, num_worker_contexts=6,
        float_activations=True, float_partials=True,
    )  # fmt: skip
    assert v.perf_estimate == expected


# ----------------------------------------------------------------------------- bad input
def test_bad_input_names_the_argument():
    with pytest.raises(GraphError, match=r"kernel.*larger than the padded input"):
        poplin.ConvParams(FLOAT, 1, [4, 4], [5, 5], 1, 1)
    with pytest.raises(GraphError, match="stride"):
        poplin.ConvParams(FLOAT, 1, [4, 4], [3, 3], 1, 1, stride=[0, 1])
    with pytest.raises(GraphError, match="paddingLower"):
        poplin.ConvParams(FLOAT, 1, [4, 4], [3, 3], 1, 1, paddingLower=[-1, 0])
    with pytest.raises(GraphError, match="field dimension"):
        poplin.ConvParams(FLOAT, 1, [4, 4], [3, 3], 1, 1, stride=[1, 1, 1])
    p = poplin.ConvParams(FLOAT, 2, [6, 6], [3, 3], 3, 4)
    device = IPUModel("ipu1").createDevice()
    graph = Graph(device.getTarget())
    W = poplin.createWeights(graph, p, "w")
    bad = graph.addVariable(FLOAT, [2, 4, 6, 6], "bad")
    with pytest.raises(TensorError, match=r"in 'bad' has shape \[2, 4, 6, 6\].*\[2, 3, 6, 6\]"):
        poplin.convolution(graph, bad, W, p, False, prog.Sequence())
    with pytest.raises(GraphError, match=r"did you mean 'partialsType'"):
        poplin.convolution(graph, bad, W, p, False, prog.Sequence(), options={"partialType": "x"})
    with pytest.raises(PoplarError, match="ConvParams"):
        poplin.convolution(graph, bad, W, "params", False, prog.Sequence())


def test_matmul_after_add_codelets_uses_the_registered_vertex_classes():
    """addCodelets registers the conv vertices first; matMul must reuse those classes
    (one class per vertex name, however conv_vertex was asked)."""
    from poplar_api.poplin.conv_vertices import conv_vertex

    assert conv_vertex("AMP_1x1", FLOAT, FLOAT, True, 16, 2) is conv_vertex(
        "AMP_1x1", FLOAT, FLOAT, limited=True, num_conv_units=16, conv_input_load_elems=2
    )
    assert conv_vertex("HMAC", FLOAT, FLOAT, True, 16, 2) is conv_vertex("HMAC", FLOAT, FLOAT)
    g = Graph(IPUModel("tiny").createDevice().getTarget())
    poplin.addCodelets(g)
    a = g.addVariable(FLOAT, [4, 8], "a")
    b = g.addVariable(FLOAT, [8, 4], "b")
    g.setTileMapping(a, 0)
    g.setTileMapping(b, 1)
    seq = prog.Sequence()
    c = poplin.matMul(g, a, b, seq, "mm")
    g.createHostWrite("a", a)
    g.createHostWrite("b", b)
    g.createHostRead("c", c)
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((4, 8)), rng.standard_normal((8, 4))
    eng = Engine(g, seq)
    eng.load(IPUModel("tiny").createDevice())
    eng.writeTensor("a", av.astype(np.float32))
    eng.writeTensor("b", bv.astype(np.float32))
    eng.run()
    out = np.zeros((4, 4), np.float32)
    eng.readTensor("c", out)
    np.testing.assert_allclose(out, av @ bv, rtol=1e-5, atol=1e-5)


def test_planner_relaxes_the_memory_bound_as_poplibs_does() -> None:
    """No candidate within the bound: the bound doubles until one fits, up to twice
    the tile's bytes; past that every candidate may be taken (then the cheapest wins)."""
    import numpy as np

    from poplar_api.poplin.conv_planner import _fitting

    memory = np.array([900, 500, 3000])
    assert _fitting(memory, 1000, 10_000).tolist() == [True, True, False]
    assert _fitting(memory, 200, 10_000).tolist() == [False, True, False]  # bound 400, 800
    assert _fitting(np.array([900, 1500]), 100, 1_000).tolist() == [True, True]  # bound 1600
    assert _fitting(np.array([5000, 9000]), 100, 1_000).tolist() == [True, True]  # none fits
