"""``popnn``/``poplin``/``poprand``/``popops`` ``addCodelets``: registration by Poplar
name, idempotence, and a clear error for a bad graph argument."""

from __future__ import annotations

import pytest

from poplar_api import Graph, IPUModel, popnn, poprand
from poplar_api.errors import GraphError
from poplar_api.poplin import codelets as poplin_codelets

LIBS = {
    "popnn": (popnn.addCodelets, ["popnn::MaxPooling<float>", "popnn::SumPooling<half>",
                                  "popnn::MaxPoolingGrad<float>",
                                  "popnn::MaxPoolingGradientScale<half>",
                                  "popnn::SelectiveScaling<float>"]),
    "poplin": (poplin_codelets.addCodelets, []),
    "poprand": (poprand.addCodelets, ["poprand::Uniform<float>", "poprand::Normal<half>",
                                      "poprand::Dropout<float>", "poprand::SetSeed"]),
}  # fmt: skip


@pytest.mark.parametrize("lib", sorted(LIBS))
def test_add_codelets_registers_by_name_and_is_idempotent(lib):
    add, names = LIBS[lib]
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    before = set(graph._state.codelets)
    add(graph)
    after = set(graph._state.codelets)
    assert after > before
    add(graph)  # again: same classes, no error, nothing new
    assert set(graph._state.codelets) == after
    prefix = f"{lib}::"
    assert all(n.startswith(prefix) for n in after - before)
    for name in names:
        assert name in after
    cs = graph.addComputeSet("cs")
    if names:
        graph.addVertex(cs, names[0])  # addable by its Poplar name


@pytest.mark.parametrize("lib", sorted(LIBS))
def test_add_codelets_rejects_a_non_graph(lib):
    add, _ = LIBS[lib]
    with pytest.raises(
        GraphError, match=rf"{lib}.addCodelets: graph must be a poplar_api Graph, got int"
    ):
        add(3)
