"""Lowering paths for blocks of consecutive element ids agree with the general ones.

Copies whose element ids form one ascending block are lowered as block copies, and the
constants such a block overlaps are found from its bounds; copies of scattered ids
take the general path. Both must give the same values and the same errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import PoplarError
from poplar_api.tensor import concat


def _graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


@pytest.mark.parametrize("scattered", [False, True])
def test_stream_copy_into_a_constant_is_refused(scattered: bool) -> None:
    graph = _graph()
    v = graph.addVariable(FLOAT, [4], "v")
    c = graph.addConstant(FLOAT, [2], 1.0, "c")  # ids follow v's: [v, c] is one block
    w = graph.addVariable(FLOAT, [3], "w")
    for t in (v, c, w):
        graph.setTileMapping(t, 0)
    # one block of ids covering v and c, or the same elements out of order
    dst = concat([c, v]) if scattered else concat([v, c])
    stream = graph.addHostToDeviceFIFO("in", FLOAT, 6)
    with pytest.raises(PoplarError, match="constant 'c'"):
        Engine(graph, prog.Copy(stream, dst))
    ok = graph.addHostToDeviceFIFO("ok", FLOAT, 7)
    Engine(graph, prog.Copy(ok, concat([v, w])))  # v and w only: no constant


@pytest.mark.parametrize("reverse", [False, True])
def test_copies_of_blocks_and_scattered_ids_move_the_same_values(reverse: bool) -> None:
    graph = _graph()
    n = 300
    src = graph.addVariable(FLOAT, [n], "src")
    dst = graph.addVariable(FLOAT, [n], "dst")
    graph.setTileMapping(src, 0)
    for i in range(n):  # dst spread over tiles: the copy is an exchange
        graph.setTileMapping(dst[i], i % 7 + 1)
    s = src.reverse(0) if reverse else src
    inp = graph.addHostToDeviceFIFO("in", FLOAT, n)
    out = graph.addDeviceToHostFIFO("out", FLOAT, n)
    engine = Engine(
        graph, prog.Sequence([prog.Copy(inp, src), prog.Copy(s, dst), prog.Copy(dst, out)])
    )
    engine.load(IPUModel("ipu2").createDevice())
    values = np.arange(n, dtype=np.float32) * 0.5
    result = np.zeros(n, np.float32)
    engine.connectStream("in", values)
    engine.connectStream("out", result)
    engine.run(0)
    np.testing.assert_array_equal(result, values[::-1] if reverse else values)
