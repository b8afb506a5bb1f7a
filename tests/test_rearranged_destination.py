"""An elided rearranging copy makes no destination (``conv_rearrange.rearranged``).

Poplar elides a rearranging ``Copy`` whose source already lies as its destination
(graphcore/poplibs 7eac0f26, ``convolutionImpl``'s comment on ``convolutionPreprocess``),
so the destination is the source itself and holds no memory of its own: ipusim decides
the elision on the layout the destination would have (``input_layout``,
``weights_layout``) and adds the variable only for a copy that stays. The tests check
those layouts against the tensors ``grouped_input`` / ``grouped_weights`` make, that an
elided copy leaves no variable and no tile memory behind, and that a kept one still has
its destination."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError, TensorError
from poplar_api.poplin import conv_rearrange
from poplar_api.poplin.conv import _plan
from poplar_api.poplin.conv_layout import grouped_input, grouped_weights
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import parse_options
from poplar_api.poplin.conv_rearrange import input_layout, weights_layout


def _graph(preset: str = "tiny") -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


def _tiles(graph: Graph, t) -> np.ndarray:
    """The tile of each flat element of ``t`` (a plain loop over the mapping)."""
    out = np.full(t.numElements(), -1)
    for tile, intervals in enumerate(graph.getTileMapping(t)):
        for iv in intervals:
            out[iv.begin() : iv.end()] = tile
    return out


CONVS = [
    ConvParams(HALF, 1, [40], [1], 32, 24, 1, outputType=HALF),  # a matMul's 1x1
    ConvParams(FLOAT, 2, [9, 7], [3, 3], 8, 16, 1, outputType=FLOAT),
    ConvParams(HALF, 1, [12], [3], 20, 6, 2, outputType=HALF),  # groups, 20 % 16 != 0
]


@pytest.mark.parametrize("params", CONVS)
def test_layouts_are_those_of_the_tensors_made(params) -> None:
    """The layout tested is the made tensor's: each element's memory position (its id less
    the variable's first) and tile."""
    graph = _graph()
    plan = _plan(graph, params, parse_options({}, "t"))
    for make, layout in ((grouped_input, input_layout), (grouped_weights, weights_layout)):
        made = make(graph, params, plan, "t")
        ids, tiles = layout(params, plan)
        assert tuple(ids.shape) == tuple(made.shape())
        flat = made.flat_index()
        assert np.array_equal(flat - flat.min(), ids.reshape(-1))
        assert np.array_equal(_tiles(graph, made), tiles[ids.reshape(-1)])


def _build(preset: str, m: int, k: int, n: int, created: bool, in_type=HALF, opts=None):
    graph = _graph(preset)
    if created:
        a = poplin.createMatMulInputLHS(graph, in_type, [m, k], [k, n], "A", opts)
        b = poplin.createMatMulInputRHS(graph, in_type, [m, k], [k, n], "B", opts)
    else:
        from poplar_api import poputil

        a = graph.addVariable(in_type, [m, k], "A")
        b = graph.addVariable(in_type, [k, n], "B")
        poputil.mapTensorLinearly(graph, a)
        poputil.mapTensorLinearly(graph, b)
    seq = prog.Sequence()
    poplin.matMul(graph, a, b, seq, "mm", options=opts)
    names = {v.name for v in graph.getVariables()}
    copies = {c.debugName for c in seq.programs if isinstance(c, prog.Copy)}
    return graph, seq, names, copies


def test_an_elided_copy_makes_no_destination() -> None:
    """A wide product of operands made by createMatMulInputLHS/RHS: the broadcast operand's
    copy is decided and elided, and no ``mm/actsRearranged`` variable exists; with linearly
    mapped operands the copy stays and its destination does."""
    _, _, names, copies = _build("mk2", 64, 32, 4000, created=True)
    assert copies == set()
    assert not any("Rearranged" in n for n in names), names
    _, _, names, copies = _build("mk2", 64, 32, 4000, created=False)
    assert "mm/actsRearranged" in copies
    assert any(n.startswith("mm/actsRearranged") for n in names), names


def test_an_elided_copy_holds_no_tile_memory(monkeypatch) -> None:
    """The weight-update pass on the 8-tile target rearranges both operands, which
    createMatMulInputLHS/RHS made as the plan lays them out: both copies are elided and
    the variables are the operands and the output only. Made the earlier way (the
    destination added first, then found unused), the same build's variables hold the two
    destinations' bytes more (16 x 8 and 8 x 16 FLOAT elements: 1,024 B over the tiles, the
    memory report's ``variable`` category); the placement let those never-live blocks share
    addresses with others, so the tiles' occupied bytes are the same either way here."""
    opts = {"fullyConnectedPass": "TRAINING_WU"}

    def run():
        graph, seq, names, copies = _build("tiny", 16, 8, 16, True, FLOAT, opts)
        engine = Engine(graph, seq)
        report = engine.memory
        return names, copies, int(report.by_category["variable"].sum()), report.by_tile["total"]

    names, copies, now, occupied = run()
    assert copies == set() and not any("Rearranged" in n for n in names)
    real = conv_rearrange.rearranged

    def made_first(graph, src, dst, prog_, name, padded=False, layout=None):
        return real(graph, src, dst() if callable(dst) else dst, prog_, name, padded)

    from poplar_api.poplin import matmul as matmul_module

    monkeypatch.setattr(matmul_module, "rearranged", made_first)
    names_then, copies_then, then, occupied_then = run()
    assert copies_then == set()
    assert {"mm/actsRearranged", "mm/weightsRearranged"} <= {n.split("[")[0] for n in names_then}
    assert then - now == (16 * 8 + 8 * 16) * 4
    assert np.array_equal(occupied, occupied_then)


def test_a_kept_copy_lays_out_its_destination_once(monkeypatch) -> None:
    """A convolution of linearly mapped operands keeps both rearranging copies: the tiles
    of each destination are made once, by the layout test, and the destination variable
    is mapped by them (its elements, in memory order, on the tiles made). Checked to fail
    (two calls each) with the tiles not passed to ``grouped_input`` / ``grouped_weights``."""
    from poplar_api import poputil
    from poplar_api.poplin import conv_layout

    made: list[tuple[str, np.ndarray]] = []
    reals = {n: getattr(conv_layout, n) for n in ("input_tiles_in_memory_order",
                                                  "weight_tiles_in_memory_order")}  # fmt: skip

    def spy(name):
        def counted(plan, params):
            made.append((name, reals[name](plan, params)))
            return made[-1][1]

        return counted

    for module in (conv_layout, conv_rearrange):
        for name in reals:
            monkeypatch.setattr(module, name, spy(name))
    graph = _graph()
    a = graph.addVariable(FLOAT, [2, 8, 9, 7], "in")
    w = graph.addVariable(FLOAT, [1, 16, 8, 3, 3], "w")
    poputil.mapTensorLinearly(graph, a)
    poputil.mapTensorLinearly(graph, w)
    seq = prog.Sequence()
    poplin.convolution(graph, a, w, CONVS[1], False, seq, "c")
    kept = {c.debugName: c.dst for c in seq.programs if isinstance(c, prog.Copy)}
    assert set(kept) == {"c/actsRearranged", "c/weightsRearranged"}
    assert sorted(name for name, _ in made) == sorted(reals)
    for (_, tiles), key in zip(sorted(made, key=lambda m: m[0]), sorted(kept), strict=True):
        dst = kept[key]  # a view of the whole destination variable: memory order by id
        in_memory_order = _tiles(graph, dst)[np.argsort(dst.flat_index())]
        assert np.array_equal(in_memory_order, tiles.reshape(-1))


def test_tiles_of_another_size_are_refused() -> None:
    """``grouped_input`` given tiles for fewer elements than its variable names both."""
    params = CONVS[1]
    graph = _graph()
    plan = _plan(graph, params, parse_options({}, "t"))
    _, tiles = input_layout(params, plan)
    with pytest.raises(TensorError, match=r"'x': 1007 tiles given .*\(1008 elements\)"):
        grouped_input(graph, params, plan, "x", tiles=tiles[:-1])


WEIGHT_CONVS = [
    *CONVS,
    ConvParams(FLOAT, 1, [14, 14], [14, 14], 32, 16, 1, outputType=FLOAT),  # a weight update's
    ConvParams(HALF, 4, [10, 6], [3, 1], 16, 32, 1, outputType=HALF),
    ConvParams(FLOAT, 3, [7], [2], 5, 7, 3, outputType=FLOAT),  # groups, odd channels
]


@pytest.mark.parametrize("params", WEIGHT_CONVS)
def test_weights_made_from_their_positions_are_the_derived_view(params) -> None:
    """``grouped_weights`` given its layout's memory positions makes the view the
    variable's ``dimShuffle`` and ``reshape`` give: the same ids in the same shape, on
    the same tiles; positions of another shape are refused."""
    graph = _graph()
    plan = _plan(graph, params, parse_options({}, "t"))
    ids, tiles = weights_layout(params, plan)
    derived = grouped_weights(graph, params, plan, "a", tiles)
    made = grouped_weights(graph, params, plan, "b", tiles, ids)
    assert made.shape() == derived.shape()
    a, b = derived.flat_index(), made.flat_index()
    assert np.array_equal(b - b.min(), a - a.min())
    assert np.array_equal(_tiles(graph, made), _tiles(graph, derived))
    with pytest.raises(TensorError, match="'c': memory positions of shape"):
        grouped_weights(graph, params, plan, "c", tiles, ids.reshape(-1))


def _random_conv(rng: np.random.Generator) -> tuple[ConvParams, tuple[int, ...] | None]:
    """A small FLOAT convolution of random field, kernel, strides, dilations and padding,
    and a random set of its dimensions to expand (None: all)."""
    nd = int(rng.integers(1, 3))
    field = [int(x) for x in rng.integers(1, 7, nd)]
    kernel = [int(rng.integers(1, f + 2)) for f in field]
    pads = [[int(x) for x in rng.integers(0, 2, nd)] for _ in range(2)]
    ints = lambda lo, hi: [int(x) for x in rng.integers(lo, hi, nd)]  # noqa: E731
    try:
        params = ConvParams(
            FLOAT, int(rng.integers(1, 3)), field, kernel, int(rng.integers(1, 3)), 2,
            int(rng.integers(1, 3)), stride=ints(1, 4), dilation=ints(1, 3),
            inputDilation=ints(1, 3), paddingLower=pads[0], paddingUpper=pads[1],
            outputType=FLOAT,
        )  # fmt: skip
        if min(params.getOutputFieldShape()) < 1:
            return _random_conv(rng)
    except GraphError:  # (a field the kernel does not fit)
        return _random_conv(rng)
    dims = None if rng.random() < 0.5 else (int(rng.integers(0, nd)),)
    return params, dims


def test_expanded_input_repeats_is_whether_the_ids_hold_one_twice() -> None:
    """Fuzz: ``expanded_input_repeats`` says whether the expanded input of an input of
    distinct ids holds one id twice once its zeros are one constant's (as the convolution
    makes them), found by counting the ids themselves; both answers occur."""
    from poplar_api.poplin.conv_params import expanded_input_index, expanded_input_repeats

    rng = np.random.default_rng(26)
    seen = set()
    for _ in range(300):
        params, dims = _random_conv(rng)
        g, b, c = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
        shape = [g, b, c, *params.inputFieldShape]
        ids = rng.permutation(int(np.prod(shape))).reshape(shape)
        expanded = expanded_input_index(params, ids, dims)
        expanded = np.where(expanded < 0, ids.size, expanded)  # (one zero constant)
        want = np.unique(expanded).size < expanded.size
        assert expanded_input_repeats(params, dims) == want, (params, dims)
        seen.add(want)
    assert seen == {False, True}


def test_an_expanded_input_holding_an_element_twice_is_copied_untested(monkeypatch) -> None:
    """An expanded plan's input read by overlapping windows (a 3x3 kernel, stride 1) holds
    elements twice, which Poplar never elides: the copy is made without its layout being
    tested (no ``input_layout``), and the program, the copy's source and destination and
    the destination's tiles are those of the test made first (checked to fail with the
    test left in: ``input_layout`` then runs)."""
    from poplar_api import poputil
    from poplar_api.poplin import conv as conv_module

    params = ConvParams(FLOAT, 2, [8, 8], [3, 3], 8, 8, 1, paddingLower=[1, 1],
                        paddingUpper=[1, 1], outputType=FLOAT)  # fmt: skip
    opts = {"planConstraints": '{"transform": {"expandDims": [0, 1]}}'}

    def build():
        graph = _graph()
        a = graph.addVariable(FLOAT, [2, 8, 8, 8], "in")
        w = graph.addVariable(FLOAT, [1, 8, 8, 3, 3], "w")
        poputil.mapTensorLinearly(graph, a)
        poputil.mapTensorLinearly(graph, w)
        seq = prog.Sequence()
        poplin.convolution(graph, a, w, params, False, seq, "c", options=opts)
        copy = next(c for c in seq.programs if getattr(c, "debugName", "") == "c/actsRearranged")
        return graph, seq, copy

    tested = []
    real = conv_rearrange.input_layout
    monkeypatch.setattr(conv_module, "input_layout", lambda *a: tested.append(1) or real(*a))
    graph, seq, copy = build()
    assert copy.src.numElements() > np.unique(copy.src.flat_index()).size  # (repeats)
    assert tested == []
    monkeypatch.setattr(conv_module, "expanded_input_repeats", lambda *a: False)
    graph_then, seq_then, copy_then = build()
    assert tested == [1]
    kinds = [type(p).__name__ for p in seq.programs]
    assert kinds == [type(p).__name__ for p in seq_then.programs]
    for now, then in ((copy.src, copy_then.src), (copy.dst, copy_then.dst)):
        assert np.array_equal(now.flat_index(), then.flat_index())
    assert np.array_equal(_tiles(graph, copy.dst), _tiles(graph_then, copy_then.dst))
    assert graph.getNumVertices() == graph_then.getNumVertices()
