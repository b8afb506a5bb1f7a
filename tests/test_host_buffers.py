"""Host buffers of readTensor, writeTensor and connectStream: dtypes, sizes, views, values.

Every buffer is either copied correctly or refused with an error naming the handle or
stream, what was found and what was required; never left unfilled.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import BOOL, CHAR, FLOAT, HALF, INT, UNSIGNED_CHAR, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError


def device():
    return IPUModel("tiny").createDevice()


def engine_for(typ, n=6, stream=False):
    g = Graph(device().getTarget())
    t = g.addVariable(typ, [2, n // 2], "t")
    g.setTileMapping(t, 1)
    g.createHostWrite("t-w", t)
    g.createHostRead("t-r", t)
    programs = [prog.Sequence()]
    if stream:
        s_in = g.addHostToDeviceFIFO("in", typ, n)
        s_out = g.addDeviceToHostFIFO("out", typ, n)
        programs = [prog.Copy(s_in, t), prog.Copy(t, s_out)]
    e = Engine(g, programs)
    e.load(device())
    return e


# ----------------------------------------------------------------- readTensor


def test_read_into_non_contiguous_view_fills_it():
    e = engine_for(FLOAT)
    e.writeTensor("t-w", np.arange(6, dtype=np.float32))
    host = np.full((2, 6), -1.0, np.float32)
    view = host[:, ::2]  # every other column: a strided view
    e.readTensor("t-r", view)
    assert host[:, ::2].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert (host[:, 1::2] == -1).all()  # the other columns are untouched


def test_read_into_wider_dtype_is_exact():
    e = engine_for(HALF)
    e.writeTensor("t-w", np.array([0.5, 1.5, -2, 3, 4, 65504], np.float32))
    out = np.zeros(6, np.float64)
    e.readTensor("t-r", out)
    assert out.tolist() == [0.5, 1.5, -2.0, 3.0, 4.0, 65504.0]


def test_read_errors_name_handle_found_and_required():
    e = engine_for(FLOAT)
    with pytest.raises(EngineError, match=r"readTensor\('t-r'\).*dtype int32.*'t'.*float32"):
        e.readTensor("t-r", np.zeros(6, np.int32))
    with pytest.raises(EngineError, match=r"readTensor\('t-r'\): buffer has 5 elements.*has 6"):
        e.readTensor("t-r", np.zeros(5, np.float32))
    ro = np.zeros(6, np.float32)
    ro.flags.writeable = False
    with pytest.raises(EngineError, match="read-only"):
        e.readTensor("t-r", ro)
    with pytest.raises(EngineError, match="must be a numpy array, got list"):
        e.readTensor("t-r", [0.0] * 6)


# ---------------------------------------------------------------- writeTensor


def test_write_from_view_and_other_dtypes_copies_values():
    e = engine_for(INT)
    src = np.arange(12, dtype=np.int64).reshape(2, 6)[:, ::2]  # 0 2 4 / 6 8 10
    e.writeTensor("t-w", src)
    assert e.readTensor("t-r").tolist() == [[0, 2, 4], [6, 8, 10]]
    e.writeTensor("t-w", [1.0, -2.0, 3.0, 4.0, 5.0, 2.0**31 - 1])  # integral floats fit
    assert e.readTensor("t-r").reshape(-1).tolist() == [1, -2, 3, 4, 5, 2**31 - 1]


@pytest.mark.parametrize(
    ("typ", "values", "found"),
    [
        (CHAR, [1, 2, 300, 4, 5, 6], r"value 300 at element 2 is outside the range -128\.\.127"),
        (UNSIGNED_CHAR, [1, -1, 3, 4, 5, 6], r"value -1 at element 1 is outside .*0\.\.255"),
        (INT, [1.0, 2.0, np.nan, 4, 5, 6], r"value nan at element 2 is not an integer"),
        (INT, [1.5, 2, 3, 4, 5, 6], r"value 1\.5 at element 0 is not an integer"),
        (BOOL, [0, 1, 2, 1, 0, 1], r"value 2 at element 2 is not 0 or 1"),
        (HALF, [1, 2, 3, 70000, 5, 6], r"value 70000(\.0)? at element 3 overflows half"),
        (FLOAT, [1, 2, 3, 4, 5, 1e300], r"value 1e\+300 at element 5 overflows float"),
    ],
)
def test_values_that_do_not_fit_name_tensor_and_value(typ, values, found):
    e = engine_for(typ)
    with pytest.raises(EngineError, match=r"writeTensor\('t-w'\): tensor 't'.*" + found):
        e.writeTensor("t-w", np.asarray(values))


def test_write_errors_name_handle():
    e = engine_for(FLOAT)
    with pytest.raises(EngineError, match=r"writeTensor\('t-w'\): buffer has 4 elements"):
        e.writeTensor("t-w", np.zeros(4, np.float32))
    with pytest.raises(EngineError, match=r"writeTensor\('t-w'\): buffer of dtype <U1"):
        e.writeTensor("t-w", np.array(list("abcdef")))


def test_nan_and_inf_are_valid_floats():
    e = engine_for(FLOAT)
    e.writeTensor("t-w", np.array([np.nan, np.inf, -np.inf, 0, 1, 2], np.float64))
    got = e.readTensor("t-r").reshape(-1)
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf


# ---------------------------------------------------------------- connectStream


def test_stream_buffers_round_trip():
    e = engine_for(INT, stream=True)
    e.connectStream("in", np.array([5, 6, 7, 8, 9, 10], np.int32))
    out = np.zeros((2, 3), np.int32)  # any C-contiguous shape
    e.connectStream("out", out)
    e.run(0)
    e.run(1)
    assert out.tolist() == [[5, 6, 7], [8, 9, 10]]


def test_stream_buffer_errors_name_stream_found_and_required():
    e = engine_for(INT, stream=True)
    with pytest.raises(
        EngineError, match=r"connectStream\('in'\): buffer has dtype int64.*int \(dtype int32\)"
    ):
        e.connectStream("in", np.arange(6))
    with pytest.raises(EngineError, match=r"connectStream\('out'\).*float32.*read the converted"):
        e.connectStream("out", np.zeros(6, np.float32))
    with pytest.raises(EngineError, match=r"connectStream\('out'\): buffer is a non-contiguous"):
        e.connectStream("out", np.zeros(12, np.int32)[::2])
    with pytest.raises(EngineError, match=r"connectStream\('in'\): buffer has 4 elements.*6"):
        e.connectStream("in", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match=r"connectStream\('in'\): needs a non-empty numpy"):
        e.connectStream("in", [1, 2, 3, 4, 5, 6])
