"""PopART's outlining of a recomputed node and its replay (``popart_api.outline``).

With ``SessionOptions.enableOutlining`` a recomputed node's program is one function,
called by the forward pass and again by the backward replay: the values are those of
no outlining and of no recomputation, and the code (stored once per function) is that
of no recomputation, where the un-outlined replay compiles it a second time.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import tiny_graph, variables
from test_memory_placement import data_at, interleaved_at
from test_popart_training import _deep_model, _device, _session

import popart_api as popart
from poplar_api import Engine
from poplar_api import program as prog

#: Memory categories that are code or per-program state (stored once per function).
CODE_CATEGORIES = (
    "controlCode",
    "vertexCode",
    "internalExchangeCode",
    "hostExchangeCode",
    "vertexInstanceState",
    "vectorListDescriptor",
    "copyDescriptor",
)


def test_function_variable_undefined_in_a_loop_is_not_held_over_the_loop():
    """A function's variable undefined before its call in a loop body keeps one range
    over its calls in an iteration, not the whole loop: y, written after the call (and
    undefined before it), reuses q's bytes; p, read and never undefined, stays live
    over the loop."""
    graph = tiny_graph()
    p, q, y = variables(graph, "pqy", 0)
    fn = graph.addFunction(prog.Copy(p, q))
    body = [prog.WriteUndef(q), prog.Call(fn), prog.WriteUndef(y), prog.Copy(p, y)]
    e = Engine(graph, prog.Repeat(2, prog.Sequence(body)))
    assert data_at(e, 0) == interleaved_at(p=0, q=16, y=16)


def _train(mode: str, outline: bool):
    """One step of the four-layer model of tests/test_popart_training.py: the loss,
    the weights after it and the bytes of each code category."""
    bd, loss, data = _deep_model(np.random.default_rng(0))
    opts = popart.SessionOptions()
    opts.autoRecomputation = popart.RecomputationType(mode)
    opts.enableOutlining = outline
    # only the recomputed nodes' functions: no repeated sequence is worth infinity
    opts.outlineThreshold = float("inf")
    # without in-placing, whose choices depend on what is recomputed, the forward
    # programs are the same in every mode
    patterns = popart.Patterns().enablePattern("InPlace", False)
    s = _session(bd, loss, popart.ConstSGD(0.1), options=opts, device=_device(8), patterns=patterns)
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, anchors))
    s.weightsToHost()
    weights = {f"W{k}": np.zeros((64 if k == 0 else 128, 128), np.float32) for k in range(4)}
    s.readWeights(popart.PyWeightsIO(weights))
    cats = s.getGraphReport()["memory"]["byCategory"]
    code = {
        c: sum(sum(part) for region in cats[c].values() for part in region.values())
        for c in CODE_CATEGORIES
    }
    return anchors[loss], weights, code


def test_enable_outlining_is_on_by_default_as_in_popart():
    # PopART's SessionOptions: enableOutlining = true (willow/include/popart/sessionoptions.hpp)
    assert popart.SessionOptions().enableOutlining is True


@pytest.fixture(scope="module")
def runs():
    return {
        "none": _train("NoRecompute", False),
        "replayed": _train("Standard", False),
        "outlined": _train("Standard", True),
    }


def test_outlined_replay_gives_the_values_of_no_recomputation(runs):
    loss0, w0, _ = runs["none"]
    for key in ("replayed", "outlined"):
        loss, w, _ = runs[key]
        np.testing.assert_array_equal(loss, loss0)
        for k in w0:
            np.testing.assert_array_equal(w[k], w0[k])


def test_outlined_replay_adds_no_code(runs):
    """Code once: each code category of the outlined recomputation equals that of no
    recomputation; the un-outlined replay's steps add control code (its compute sets
    and exchanges are the forward pass's, stored once either way)."""
    none, replayed, outlined = (runs[k][2] for k in ("none", "replayed", "outlined"))
    assert outlined == none
    assert replayed["controlCode"] > none["controlCode"]
    assert {k: v for k, v in replayed.items() if k != "controlCode"} == {
        k: v for k, v in none.items() if k != "controlCode"
    }
