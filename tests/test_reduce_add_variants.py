"""poplin ``ReduceAdd``'s variants: Poplibs' choice between the single-input and the
several-input vertex, and both vertices' sums through a matmul with a split ``K``.

The rule is ``reduce`` in ``lib/poplin/ConvReduce.cpp`` with
``checkPartialsSizeForSingleInputReduce`` (``ConvReducePlan.hpp``), graphcore/poplibs
7eac0f26: single input when the reduced elements are a multiple of 8 (HALF partials)
or 4 (FLOAT), and ``enableFastReduce`` is set or the exchanged partials, rounded up to
whole memory elements, take less than a sixteenth of the memory elements' span.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.errors import GraphError
from poplar_api.poplin.estimators import single_input_reduce
from poplar_api.poplin.vertices import reduce_add_vertex
from tests.test_poplin import run_product

KIB = 1024
MK2 = (16 * KIB, 624 * KIB)  # memory element, tile bytes: span 608 KiB, a 16th 38,912 B
MK1 = (16 * KIB, 256 * KIB)  # span 240 KiB, a 16th 15,360 B: one element is too many

# (elements reduced, depth, partials bytes, (element, tile), enableFastReduce, single?)
RULES = [
    (64, 4, 4, MK2, False, True),  # 768 B -> one element, 16,384 < 38,912
    (2000, 4, 4, MK2, False, True),  # 24,000 B -> two elements, 32,768 < 38,912
    (3000, 4, 4, MK2, False, False),  # 36,000 B -> three elements, 49,152: too many
    (3000, 4, 4, MK2, True, True),  # enableFastReduce lifts the size rule
    (13, 2, 4, MK2, True, False),  # 13 is not a multiple of 4: never single input
    (12, 2, 2, MK2, False, False),  # HALF partials need a multiple of 8
    (16, 2, 2, MK2, False, True),
    (64, 2, 4, MK1, False, False),  # 256 B still occupies 16,384 >= 15,360
    (64, 2, 4, MK1, True, True),
]


@pytest.mark.parametrize("n, depth, psz, mem, fast, want", RULES)
def test_single_input_choice_follows_poplibs(n, depth, psz, mem, fast, want) -> None:
    assert single_input_reduce(n, depth, psz, mem[0], mem[1], fast) is want


def test_single_input_choice_is_elementwise() -> None:
    got = single_input_reduce(np.array([64, 3000, 13]), 4, 4, *MK2, False)
    assert got.tolist() == [True, False, False]


def _product(opts: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str], Graph]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (8, 512)).astype(np.float32)
    b = rng.uniform(-1, 1, (512, 8)).astype(np.float32)
    c, _, graph = run_product("tiny", a, b, opts=opts)
    names = sorted({v.vtype.name for v in graph._state.vertices if "ReduceAdd" in v.vtype.name})
    return c, a.astype(np.float64) @ b, names, graph


@pytest.mark.parametrize(
    "opts, vertex",
    [
        # tiny: 64 KiB tiles, a 16th of the span is 3 KiB: the size rule never passes
        ({}, "poplin::ReduceAdd<float,float,false,false>"),
        ({"enableFastReduce": "true"}, "poplin::ReduceAdd<float,float,true,true>"),
    ],
)
def test_split_k_sums_with_either_vertex(opts, vertex) -> None:
    got, want, names, graph = _product(opts)
    plan = poplin.getPlan(graph, (1, 8, 512, 8), FLOAT, None, opts)
    assert plan.parts[-1] > 1  # K is split over tiles
    assert names == [vertex]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_planner_costs_the_variant_it_lowers() -> None:
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    slow = poplin.getPlan(graph, (1, 8, 512, 8), FLOAT, None, {})
    fast = poplin.getPlan(graph, (1, 8, 512, 8), FLOAT, None, {"enableFastReduce": "true"})
    assert not slow.fast_reduce and fast.fast_reduce
    if slow.parts == fast.parts:  # same split: the single-input reduction is cheaper
        assert fast.cost["reduce"] < slow.cost["reduce"]


def test_bad_fast_reduce_value_is_named() -> None:
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    with pytest.raises(GraphError, match="enableFastReduce='yes'; required 'true' or 'false'"):
        poplin.getPlan(graph, (1, 8, 512, 8), FLOAT, None, {"enableFastReduce": "yes"})


def test_constrained_partials_need_single_input() -> None:
    with pytest.raises(ValueError, match="constrain_partials=True needs single_input=True"):
        reduce_add_vertex(FLOAT, FLOAT, constrain_partials=True)
