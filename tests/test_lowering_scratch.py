"""Scratch maps the lowering keeps from one exchange's planning to the next (the
all-False id map of an element space that grouped copies mark, the tile-pair maps of
the planners) are let go when emission ends: liveness and memory placement, where a
large compile's host memory peaks, do not hold them."""

from __future__ import annotations

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.lowering import pieces, pipeline


def test_emission_scratch_is_let_go_before_memory_placement(monkeypatch) -> None:
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [32, 32], "a")
    b = graph.addVariable(FLOAT, [32, 32], "b")
    for row in range(32):
        graph.setTileMapping(a[row], row // 8)  # tiles 0-3
        graph.setTileMapping(b[row], 4 + row // 8)  # tiles 4-7
    given: list[dict] = []  # the maps flat_pieces was handed to keep
    real_flat = pieces.flat_pieces

    def flat_pieces(*args, **kwargs):
        found = real_flat(*args, **kwargs)
        marks = args[5] if len(args) > 5 else kwargs.get("marks")
        if marks:
            given.append(marks)
        return found

    monkeypatch.setattr(pieces, "flat_pieces", flat_pieces)
    held: list[tuple[dict, dict]] = []
    real_place = pipeline.place_memory

    def place_memory(state, live, records, timing, owners=None, index=None):
        held.append((dict(owners.marks), dict(owners.free_pairs)))
        return real_place(state, live, records, timing, owners, index)

    monkeypatch.setattr(pipeline, "place_memory", place_memory)
    engine = Engine(graph, prog.Copy(a.transpose(), b))  # one element per piece
    engine.load(device)
    assert given and all(not m.any() for marks in given for m in marks.values())
    assert held == [({}, {})]
