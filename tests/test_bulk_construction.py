"""Library calls that build or compile large graphs run with Python's cyclic garbage
collector paused and resume it as it was: enabled again after the call (also after an
exception), left alone when the caller had paused it."""

from __future__ import annotations

import gc

import pytest

from poplar_api import poplin, popnn
from poplar_api.executable import compile_programs
from poplar_api.graph_bulk import bulk_construction


@bulk_construction
def _report() -> bool:
    return gc.isenabled()


@bulk_construction
def _fail() -> None:
    raise ValueError("inside")


@pytest.fixture
def collector():
    """The collector's state is restored whatever a test does."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_during_the_call_and_resumed_after(collector):
    gc.enable()
    assert _report() is False
    assert gc.isenabled()


def test_resumed_after_an_exception(collector):
    gc.enable()
    with pytest.raises(ValueError, match="inside"):
        _fail()
    assert gc.isenabled()


def test_a_caller_that_paused_it_keeps_it_paused(collector):
    gc.disable()
    assert _report() is False
    assert not gc.isenabled()


@pytest.mark.parametrize(
    "fn",
    [
        poplin.convolution,
        poplin.calculateWeightDeltas,
        poplin.matMul,
        popnn.pooling.pool,
        popnn.nonLinearityInputGradient,
        compile_programs,
    ],
)
def test_the_large_library_calls_pause_it(fn):
    assert getattr(fn, "__wrapped__", None) is not None, fn.__name__
    assert fn.__wrapped__.__name__ == fn.__name__
