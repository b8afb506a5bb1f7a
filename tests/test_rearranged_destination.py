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
