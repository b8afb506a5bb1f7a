"""Stream callbacks are wrapped like vertex code: a failure names the stream, the
callback, the copy and the run; a wrong return value or a changed buffer is an error.

The graph is tests/test_stream_callbacks.py's: ``copies`` times, stream 'in' -> x ->
stream 'out' (N floats per copy).
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import Engine
from poplar_api.device import Device
from poplar_api.errors import EngineError
from poplar_api.streams import StreamCallbackError
from tests.conftest import build_config
from tests.test_stream_callbacks import N, Recorder, device, echo_graph, run


def engine_with(callback, copies: int = 3, out=None, options=None, dev=None) -> Engine:
    dev = dev or device()
    g, p = echo_graph(dev, copies)
    engine = Engine(g, p, options or {})
    engine.load(dev)
    engine.connectStreamToCallback("in", callback)
    engine.connectStreamToCallback("out", out or (lambda b: None))
    return engine


# ------------------------------------------------------------------- exceptions
def test_a_raising_function_is_named_with_its_stream_copy_and_run():
    calls = []

    def fill(buffer):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("no more data")
        buffer[:] = 1.0

    with pytest.raises(StreamCallbackError) as info:
        run(3, fill)
    text = str(info.value)
    assert "stream 'in' (host-to-device)" in text
    assert (
        "callback 'test_a_raising_function_is_named_with_its_stream_copy_and_run.<locals>.fill'"
        in text
    )
    assert "for copy 2 of the stream in run 1 of the engine (program 0" in text
    assert "raised ValueError: no more data" in text
    assert isinstance(info.value.__cause__, ValueError)  # the callback's own traceback
    assert isinstance(info.value, EngineError)  # callers catching EngineError still do
    assert (info.value.stream, info.value.method) == ("in", "fetch")


class Failing(Recorder):
    """A Recorder whose ``method`` raises at its ``at``-th call."""

    def __init__(self, method: str, at: int = 1) -> None:
        super().__init__()
        self.method, self.at, self.count = method, at, 0

    def _maybe_fail(self, name: str) -> None:
        if name == self.method:
            self.count += 1
            if self.count == self.at:
                raise RuntimeError(f"{name} broke")

    def prefetch(self, buffer):
        self._maybe_fail("prefetch")
        return super().prefetch(buffer)

    def fetch(self, buffer):
        self._maybe_fail("fetch")
        super().fetch(buffer)

    def complete(self):
        self._maybe_fail("complete")
        super().complete()

    def invalidatePrefetched(self):
        self._maybe_fail("invalidatePrefetched")
        super().invalidatePrefetched()


@pytest.mark.parametrize("method", ["fetch", "complete", "prefetch", "invalidatePrefetched"])
def test_every_protocol_method_is_wrapped(method):
    with pytest.raises(StreamCallbackError) as info:
        run(2, Failing(method))
    text = str(info.value)
    assert f"{method} of callback Failing" in text and f"RuntimeError: {method} broke" in text
    assert "stream 'in'" in text
    assert info.value.method == method and info.value.callback == "Failing"


def test_the_run_number_counts_the_engine_runs():
    engine = engine_with(
        Failing("fetch", at=2), copies=1, options={"exchange.enablePrefetch": "false"}
    )
    engine.run(0)
    with pytest.raises(StreamCallbackError, match=r"copy 1 of the stream in run 2 of the engine"):
        engine.run(0)


def test_a_device_to_host_callback_is_wrapped_too():
    def take(buffer):
        raise KeyError("full")

    with pytest.raises(StreamCallbackError) as info:
        engine_with(Recorder(), copies=2, out=take).run(0)
    assert "stream 'out' (device-to-host)" in str(info.value)
    assert "call of callback" in str(info.value) and "KeyError" in str(info.value)


def test_the_cpu_device_wraps_the_same_way():
    dev = Device.createCPUDevice(build_config())
    with pytest.raises(StreamCallbackError, match=r"stream 'in'.*RuntimeError: fetch broke"):
        engine_with(Failing("fetch"), dev=dev).run(0)


def test_a_failed_invalidation_does_not_hide_the_runs_own_error():
    """The run fails in a device-to-host callback while 'in' holds prefetched data whose
    invalidation fails too: the run's error comes out, the other is noted on it."""

    def take(buffer):
        raise ValueError("consumer failed")

    engine = engine_with(Failing("invalidatePrefetched"), copies=2, out=take)
    with pytest.raises(StreamCallbackError, match="consumer failed") as info:
        engine.run(0)
    notes = getattr(info.value, "__notes__", [])
    assert any("invalidatePrefetched of callback Failing" in n for n in notes)


# ------------------------------------------------------------- return values, fills
@pytest.mark.parametrize(
    ("returned", "shown"),
    [(np.ones(N, np.float32), f"returned ndarray of {N} element(s)"), (True, "returned bool")],
)
def test_a_host_to_device_fetch_must_fill_in_place_and_return_none(returned, shown):
    with pytest.raises(StreamCallbackError) as info:
        run(1, lambda buffer: returned)
    text = str(info.value)
    assert shown in text and "returns None" in text and "buffer[:] = data" in text
    assert f"the buffer has {N} element(s) of float32" in text


def test_a_device_to_host_function_may_return_anything():
    """A consumer such as `lambda v: (a.append(v), b.append(v))` returns a value that
    means nothing: it is not an error."""
    seen = []
    engine = engine_with(Recorder(), copies=2, out=lambda b: (seen.append(float(b[0])), 42))
    engine.run(0)
    assert seen == [0.0, 1.0]


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda b: setattr(b, "shape", (2, N // 2)), f"shape (2, {N // 2}) of float32"),
        (lambda b: setattr(b, "dtype", np.int32), f"shape ({N},) of int32"),
    ],
)
def test_a_buffer_changed_in_place_is_refused(change, found):
    with pytest.raises(StreamCallbackError) as info:
        run(1, change)
    text = str(info.value)
    assert f"changed its buffer to {found}" in text
    assert f"required ({N},) of float32" in text


def test_a_prefetch_that_reshapes_its_buffer_is_refused():
    class Reshaping(Recorder):
        def prefetch(self, buffer):
            result = super().prefetch(buffer)
            buffer.shape = (N, 1)
            return result

    with pytest.raises(
        StreamCallbackError, match=r"prefetch of callback Reshaping.*changed its buffer"
    ):
        run(2, Reshaping())


def test_prefetch_result_error_names_the_run():
    class Bad(Recorder):
        def prefetch(self, buffer):
            return "yes"

    with pytest.raises(StreamCallbackError, match=r"returned 'yes'.*run 1 of the engine"):
        run(2, Bad())


def test_correct_callbacks_still_serve_every_copy():
    """The wrapping changes nothing for callbacks that follow the protocol."""
    cb = Recorder()
    _, seen = run(3, cb)
    assert seen == [0.0, 1.0, 2.0]
    assert cb.calls.count("invalidatePrefetched") == 1


def test_a_failing_invalidation_at_the_end_of_a_run_names_the_stream_and_run():
    engine = engine_with(Failing("invalidatePrefetched"), copies=1)
    with pytest.raises(
        StreamCallbackError,
        match=r"stream 'in': invalidatePrefetched of callback Failing at the end of run 1 of "
        r"the engine \(program 0\) raised RuntimeError",
    ):
        engine.run(0)  # the end of the run invalidates the prefetch no copy used
