"""Fast paths of building convolutions and PopART graphs, each checked against the plain
computation it replaces (numpy written out in the test, or the slower library path)."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.poplin import conv_layout, conv_reduce
from poplar_api.poplin.conv import _plan, _ranges, getConvPlan, parse_options
from poplar_api.poplin.conv_ids import separable_ids
from poplar_api.poplin.conv_layout import (
    GroupedView,
    grouped_ids,
    grouped_input,
    grouped_output,
    grouped_partials,
    grouped_separable,
    grouped_tiles,
)
from poplar_api.poplin.conv_reduce import reduce_partials
from tests.test_poplin_conv import assert_passes_equal_numpy, random_operands, run_passes


def _graph(preset: str = "ipu1") -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


# ------------------------------------------------------------------ partials' view ids
@pytest.mark.parametrize(
    "shape,perm",
    [
        ((8, 1, 4, 8, 32, 32, 16), [0, 1, 3, 4, 5, 2, 6]),  # [pci, G, Co/cpg, B, H, W, cpg]
        ((3, 2, 3, 2, 5, 4, 2), [0, 1, 3, 4, 5, 2, 6]),
        ((2, 1, 1, 3, 7, 1), [0, 1, 3, 4, 2, 5]),  # one field dimension, cpg 1
        ((4, 2, 5, 3, 6), [1, 0, 3, 2, 4]),  # any order of the leading dimensions
    ],
)
def test_grouped_ids_equal_a_transposed_arange_with_its_last_two_dimensions_merged(shape, perm):
    start = 1234
    plain = (np.arange(np.prod(shape)) + start).reshape(shape).transpose(perm)
    plain = plain.reshape(*plain.shape[:-2], -1)
    got = grouped_ids(start, shape, perm)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, plain)


@pytest.mark.parametrize(
    "shape,perm",
    [((8, 1, 4, 8, 3, 5, 16), [0, 1, 3, 4, 5, 2, 6]), ((2, 1, 1, 3, 7, 1), [0, 1, 3, 4, 2, 5])],
)
def test_grouped_tables_are_those_found_in_the_ids(shape, perm):
    """The tables written out for a grouped view are those :func:`separable_ids` finds
    in its array of ids (so the blocks' computed ids are the same either way)."""
    made = grouped_separable(77, shape, perm)
    found = separable_ids(grouped_ids(77, shape, perm))
    assert found is not None and made.shape == found.shape
    for a, b in zip(made.tables, found.tables, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(made.flat(), grouped_ids(77, shape, perm).reshape(-1))


def _reduction_fields(partials_as_view: bool, params, preset: str = "ipu2") -> list:
    """Each reduction vertex's tile and fields, the partials given as a
    :class:`GroupedView` or as a tensor of their ids (the fields computed from the
    ids' tables or gathered from the ids as ``TABLES_MIN_ELEMENTS`` decides)."""
    graph = _graph(preset)
    plan = _plan(graph, params, parse_options(None, "t"))
    pci = plan.parts[-1]
    assert pci > 1
    co = params.outputChannelsPerConvGroup
    field = params.getOutputFieldShape()
    _, out_var = grouped_output(graph, FLOAT, [], 1, params.batchSize, field, co, 4, "out")
    _, view = grouped_partials(graph, FLOAT, [pci], 1, params.batchSize, field, co, 4, "p")
    assert isinstance(view, GroupedView)
    partials = view if partials_as_view else view.tensor()
    first = graph.getNumVertices()
    reduce_partials(graph, partials, out_var, plan, _ranges(plan, params), prog.Sequence(), "r")
    out = []
    for vid in range(first, graph.getNumVertices()):
        inst = graph._state.vertices[vid]
        fields = {k: [np.asarray(v) for v in (f if isinstance(f, list) else [f])]
                  for k, f in inst.fields.items()}  # fmt: skip
        out.append((inst.tile, fields))
    return out


@pytest.mark.parametrize(
    "params",
    [
        poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 512, 16, 1),
        poplin.ConvParams(FLOAT, 2, [6, 5], [1, 1], 256, 24, 1),
    ],
)
def test_reduction_from_the_partials_tables_equals_the_one_from_their_ids(params, monkeypatch):
    monkeypatch.setattr(conv_reduce, "TABLES_MIN_ELEMENTS", 0)  # every group from tables
    by_tables = _reduction_fields(True, params)
    monkeypatch.setattr(conv_reduce, "TABLES_MIN_ELEMENTS", 1 << 62)  # from the ids
    by_ids = _reduction_fields(False, params)
    assert len(by_tables) == len(by_ids) > 0
    for (t1, f1), (t2, f2) in zip(by_tables, by_ids, strict=True):
        assert t1 == t2 and f1.keys() == f2.keys()
        for k in f1:
            assert len(f1[k]) == len(f2[k])
            for a, b in zip(f1[k], f2[k], strict=True):
                np.testing.assert_array_equal(a, b)


def test_a_convolution_makes_no_array_of_its_partials_ids(monkeypatch):
    """A pass whose input channels are split over tiles plans its partial and
    reduction vertices from the partials' tables: no array of every partial's id."""
    made = []
    array = conv_layout.SeparableIds.array

    def recorded(self):
        made.append(self.shape)
        return array(self)

    def refuse(self):
        raise AssertionError("the partials' view was made a tensor")

    monkeypatch.setattr(conv_layout.GroupedView, "tensor", refuse)
    monkeypatch.setattr(conv_layout.SeparableIds, "array", recorded)
    monkeypatch.setattr(conv_reduce, "TABLES_MIN_ELEMENTS", 0)  # (a small convolution)
    params = poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 512, 16, 1)
    graph = _graph("ipu2")
    pci = getConvPlan(graph, params).parts[-1]
    assert pci > 1
    # the input on one tile, not in createInput's layout, so that its rearranging copy
    # stays (an elided copy makes no destination, and no view of its tables)
    x = graph.addVariable(FLOAT, params.inputShape(), "x")
    graph.setTileMapping(x, 0)
    w = poplin.createWeights(graph, params, "w")
    y = poplin.convolution(graph, x, w, params, False, prog.Sequence(), "c")
    assert y.shape() == params.outputShape()
    assert made  # (the rearranged input's view is made from its tables)
    assert (pci, 1, 1, 4, 4, 16) not in made


@pytest.mark.parametrize("lead,field,cpg", [([4], [5, 3], 8), ([2], [7], 1), ([3], [], 2)])
@pytest.mark.parametrize("dtype", [FLOAT, HALF])
def test_partials_view_has_the_ids_of_the_shuffled_variable(lead, field, cpg, dtype):
    graph = _graph()
    graph.addVariable(dtype, [17], "before")  # the partials' ids do not start at 0
    groups, batch, chans = 2, 3, 16
    var, view = grouped_output(graph, dtype, lead, groups, batch, field, chans, cpg, "p")
    nl, nd = len(lead), len(field)
    perm = [*range(nl), nl, nl + 2, *range(nl + 3, nl + 3 + nd), nl + 1, nl + 3 + nd]
    plain = var.dimShuffle(perm).reshape([*lead, groups, batch, *field, chans])
    assert view.shape() == plain.shape()
    assert view.elementType() == dtype and graph.owns(view)
    np.testing.assert_array_equal(view.index, plain.index)


@pytest.mark.parametrize(
    "field,kernel,chans,batch",
    [([9, 7], [3, 3], (16, 8), 2), ([12], [3], (6, 4), 3), ([5, 5], [1, 1], (32, 16), 1)],
)
def test_internal_input_view_has_the_ids_of_the_named_one(field, kernel, chans, batch):
    graph = _graph()
    params = poplin.ConvParams(FLOAT, batch, field, kernel, chans[0], chans[1], 1)
    plan = getConvPlan(graph, params)
    named = grouped_input(graph, params, plan, "x")
    internal = grouped_input(graph, params, plan, "y", internal=True)
    assert internal.shape() == named.shape() == [1, batch, chans[0], *field]
    # the second variable's ids follow the first's: the same layout, shifted
    offset = named.numElements()
    np.testing.assert_array_equal(internal.index, named.index + offset)
    np.testing.assert_array_equal(graph.elementTiles(internal), graph.elementTiles(named))


# ------------------------------------------------------------------ expanded inputs
EXPAND = {"planConstraints": '{"transform": {"expandDims": [0, 1]}}'}


@pytest.mark.parametrize(
    "params",
    [
        dict(field=[7, 6], kernel=[3, 2], chans=(3, 4), paddingLower=[1, 0], paddingUpper=[1, 1]),
        dict(field=[6, 5], kernel=[2, 3], chans=(2, 3), stride=[2, 1], dilation=[1, 2]),
    ],
)
def test_expanded_convolution_reads_its_input_ids_and_the_zero_constant(params):
    """An expanded (im2col) plan copies the input's ids and, for padding, a zero
    constant's: the passes still equal numpy's convolution and its gradient."""
    cin, cout = params.pop("chans")
    p = poplin.ConvParams(
        FLOAT, 2, params.pop("field"), params.pop("kernel"), cin, cout, 1, **params
    )
    graph = _graph()
    assert getConvPlan(graph, p, EXPAND).expanded
    x, w, dy = random_operands(p, np.random.default_rng(7))
    out, _, _ = run_passes(p, x, w, dy, preset="ipu1", options=EXPAND, passes=("fwd", "wu"))
    assert_passes_equal_numpy(out, x, w, dy, p)


# ------------------------------------------------------------------ partials' tiles
@pytest.mark.parametrize("need_reduce", [True, False])
@pytest.mark.parametrize(
    "co_ranges,cpg",
    [
        ([(0, 8), (8, 16), (16, 24)], 4),  # block bounds on channel groups: broadcast
        ([(0, 6), (6, 16), (16, 24)], 4),  # a group across two blocks: the full array
        ([(0, 8), (8, 16)], 2),  # channels 16.. in no block (-1)
    ],
)
def test_grouped_tiles_are_the_last_block_of_each_element_in_memory_order(
    need_reduce, co_ranges, cpg
):
    from types import SimpleNamespace

    g_r, b_r, f_r = [(0, 1)], [(0, 2), (1, 3)], [(0, 3), (3, 5)]  # batch blocks overlap
    ci_r = [(0, 4), (4, 8)]
    rng = [g_r, b_r, f_r, co_ranges, ci_r]
    counts = [len(r) for r in rng]
    tiles = np.arange(np.prod(counts)).reshape(counts) * 3 + 1
    pci, co = len(ci_r), 24
    shape = [pci, 1, 3, 5, co] if need_reduce else [1, 3, 5, co]
    want = np.full(shape, -1, np.int64)  # in the view's order, block by block
    for ix in np.ndindex(*counts):
        box = [slice(*rng[d][ix[d]]) for d in range(4)]
        if need_reduce:
            want[(ix[4], *box)] = tiles[ix]
        elif ix[4] == 0:
            want[tuple(box)] = tiles[ix]
    got = grouped_tiles(SimpleNamespace(tiles=tiles), rng, shape, need_reduce, cpg)
    nl = 1 if need_reduce else 0
    mem = [*shape[: nl + 1], co // cpg, *shape[nl + 1 : -1], cpg]
    assert list(got.shape) == mem and got.dtype == np.int32
    perm = [*range(nl), nl, nl + 2, nl + 3, nl + 1, nl + 4]  # memory -> the view
    np.testing.assert_array_equal(got.transpose(perm).reshape(shape), want)


# ------------------------------------------------------------------ ConvParams copies
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(paddingLower=[1, 0], paddingUpper=[2, 1]),
        dict(stride=[2, 1], dilation=[1, 2], inputDilation=[2, 1]),
        dict(outputTransform={"truncationLower": [1, 0], "paddingUpper": [0, 3]}),
    ],
)
@pytest.mark.parametrize("chans", [(1, 1), (3, 40), (17, 2)])
def test_with_channels_equals_constructing_with_those_channels(kwargs, chans):
    base = poplin.ConvParams(FLOAT, 2, [9, 7], [3, 2], 5, 6, **kwargs)
    made = poplin.ConvParams(FLOAT, 2, [9, 7], [3, 2], *chans, **kwargs)
    copy = base.with_channels(*chans)
    assert copy == made and copy.key() == made.key() and hash(copy) == hash(made)
    assert copy.getOutputFieldShape() == made.getOutputFieldShape()
    assert base.inputChannelsPerConvGroup == 5 and base.outputChannelsPerConvGroup == 6


def test_output_field_shape_is_the_transforms_formula():
    # per dimension: ceil((in + padding - dilated kernel + 1 - output truncation) / stride)
    # + output padding
    p = poplin.ConvParams(FLOAT, 1, [11, 8], [3, 2], 2, 2, paddingLower=[1, 0],
                          paddingUpper=[2, 0], stride=[2, 3], dilation=[2, 1],
                          outputTransform={"truncationLower": [1, 0],
                                           "paddingUpper": [0, 2]})  # fmt: skip
    rows = -(-(11 + 3 - 5 + 1 - 1) // 2)
    cols = -(-(8 - 2 + 1) // 3) + 2
    assert p.getOutputFieldShape() == [rows, cols]
    assert [p.getOutputSize(d) for d in range(2)] == [rows, cols]
    shape = p.getOutputFieldShape()
    shape[0] = -1  # (a list of the caller's own)
    assert p.getOutputFieldShape() == [rows, cols]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_with_channels_refuses_a_channel_count_below_one(bad):
    base = poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 2, 2)
    with pytest.raises(Exception, match="with_channels: inputChannels"):
        base.with_channels(bad, 2)
