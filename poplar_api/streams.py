"""The host ends of data streams: circular buffers, stream callbacks and prefetch.

A host-to-device stream is served, at each ``Copy`` from it, by the array connected
with ``engine.connectStream`` (read circularly) or by a callback connected with
``engine.connectStreamToCallback``. A callback is either a plain function
``f(buffer)`` (Poplar's ``LegacyStreamCallback``: it fills ``buffer``, or reads it for
a device-to-host stream) or an object with Poplar's stream callback protocol
(:class:`StreamCallback`). The calls, for one host-to-device stream, in order:

1. at a copy: ``fetch(buffer)``, unless an earlier ``prefetch`` filled the data of
   this copy;
2. when the data has been written to the device: ``complete()``;
3. then, if the engine option ``exchange.enablePrefetch`` is true (the default):
   ``prefetch(buffer)`` for the stream's next copy; a ``Result.Success`` keeps the
   buffer for that copy (which then calls no ``fetch``), ``Result.NotAvailable``
   leaves the next copy to ``fetch``;
4. at the end of ``engine.run`` (or when it stops on an error): for a stream still
   holding prefetched data that no copy used, ``invalidatePrefetched()``, so the
   callback can hand the same data out again at the next run.

A device-to-host stream calls ``fetch(data)`` (or ``f(data)``) with a copy of the
data, then ``complete()``. A plain function is never asked to prefetch (Poplar's
legacy callbacks answer ``NotAvailable``), so its copies always fetch. A connected
array counts as prefetched data for the timing (its data is always ready).

Remote buffers keep their contents here too (one array of ``repeats`` rows per
buffer), written by device copies and ``engine.copyToRemoteBuffer``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from poplar_api.errors import EngineError
from poplar_api.lowering.emit import HostIO, prefetch_option

__all__ = [
    "HostStreams",
    "LegacyStreamCallback",
    "StreamCallback",
    "as_stream_callback",
    "connect_callback_args",
    "prefetch_option",
]


def connect_callback_args(args: tuple[Any, ...], what: str) -> Any:
    """The callback of ``connectStreamToCallback(handle, [index,] callback)``.

    Raises
    ------
    EngineError
        A wrong number of arguments, or a replica index other than 0 (the simulated
        graph has one replica).
    """
    if len(args) == 1:
        return args[0]
    if len(args) == 2:
        index, callback = args
        if isinstance(index, bool) or not isinstance(index, int | np.integer) or index != 0:
            raise EngineError(
                f"{what}: replica index {index!r} is out of range; the graph has 1 replica, "
                "so the index must be 0; hint: connectStreamToCallback(handle, callback)"
            )
        return callback
    raise EngineError(
        f"{what}: takes (handle, callback) or (handle, index, callback); got "
        f"{len(args) + 1} argument(s)"
    )


class StreamCallback:
    """Poplar's stream callback protocol; subclass it (or write any object with the
    same methods) and pass an instance to ``engine.connectStreamToCallback``.

    ``prefetch``, ``fetch`` and ``complete`` must be overridden;
    ``invalidatePrefetched`` does nothing unless overridden.
    """

    class Result(enum.Enum):
        """What ``prefetch`` reports: the buffer was filled, or no data is ready yet."""

        Success = "Success"
        NotAvailable = "NotAvailable"

    def prefetch(self, buffer: np.ndarray) -> StreamCallback.Result:
        """Fill ``buffer`` with the next copy's data ahead of time, if it is ready."""
        raise NotImplementedError(f"{type(self).__name__}.prefetch is not implemented")

    def fetch(self, buffer: np.ndarray) -> None:
        """Fill ``buffer`` now (host-to-device), or consume it (device-to-host)."""
        raise NotImplementedError(f"{type(self).__name__}.fetch is not implemented")

    def complete(self) -> None:
        """The data of the last fetch or used prefetch has been consumed."""
        raise NotImplementedError(f"{type(self).__name__}.complete is not implemented")

    def invalidatePrefetched(self) -> None:
        """The data of the last successful prefetch will not be used."""


class LegacyStreamCallback(StreamCallback):
    """A plain function ``f(buffer)`` as a stream callback: it never prefetches.

    Parameters
    ----------
    function
        Called with the stream's buffer at every copy (to fill it for a host-to-device
        stream, or to read the data of a device-to-host one).
    """

    def __init__(self, function: Callable[[np.ndarray], Any]) -> None:
        self.function = function

    def prefetch(self, buffer: np.ndarray) -> StreamCallback.Result:
        return StreamCallback.Result.NotAvailable

    def fetch(self, buffer: np.ndarray) -> None:
        self.function(buffer)

    def complete(self) -> None:
        return None


_PROTOCOL = ("prefetch", "fetch", "complete")


def as_stream_callback(callback: Any, what: str) -> StreamCallback:
    """``callback`` as an object with the stream callback protocol.

    An object with callable ``prefetch``, ``fetch`` and ``complete`` is used as it is
    (``invalidatePrefetched`` is optional); any other callable is a legacy function.

    Raises
    ------
    EngineError
        ``callback`` is neither, or has only part of the protocol.
    """
    has = [name for name in _PROTOCOL if callable(getattr(callback, name, None))]
    if len(has) == len(_PROTOCOL):
        return callback
    if has and not isinstance(callback, type):
        missing = [name for name in _PROTOCOL if name not in has]
        raise EngineError(
            f"{what}: the callback {type(callback).__name__} has {', '.join(has)} but not "
            f"{', '.join(missing)}; a stream callback object needs prefetch, fetch and "
            "complete (and may have invalidatePrefetched); hint: subclass "
            "poplar_api.StreamCallback, or pass a plain function f(buffer)"
        )
    if callable(callback):
        return LegacyStreamCallback(callback)
    raise EngineError(
        f"{what}: the callback is a {type(callback).__name__}, which is not callable and "
        "has no prefetch/fetch/complete; hint: pass a function f(buffer) or a "
        "poplar_api.StreamCallback"
    )


class HostStreams(HostIO):
    """Host ends of one engine's streams and remote buffers.

    Parameters
    ----------
    prefetch
        The engine option ``exchange.enablePrefetch``: ask callbacks to prefetch.
    """

    def __init__(self, prefetch: bool = True) -> None:
        self.prefetch_enabled = prefetch
        self.buffers: dict[str, np.ndarray] = {}
        self.positions: dict[str, int] = {}
        self.callbacks: dict[str, StreamCallback] = {}
        #: stream handle -> data a successful prefetch filled for the stream's next copy
        self.pending: dict[str, np.ndarray] = {}
        #: remote buffer handle -> its contents, [repeats, numElements]
        self.remote: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------- connection
    def connect_buffer(self, handle: str, buffer: np.ndarray) -> None:
        """Serve stream ``handle`` from ``buffer`` (circularly) from now on."""
        self._disconnect(handle)
        self.buffers[handle] = buffer
        self.positions[handle] = 0

    def connect_callback(self, handle: str, callback: StreamCallback) -> None:
        """Serve stream ``handle`` with ``callback`` from now on."""
        self._disconnect(handle)
        self.callbacks[handle] = callback

    def _disconnect(self, handle: str) -> None:
        if handle in self.pending:  # prefetched data of the old callback is void
            self.pending.pop(handle)
            _invalidate(self.callbacks[handle])
        self.buffers.pop(handle, None)
        self.positions.pop(handle, None)
        self.callbacks.pop(handle, None)

    def _unconnected(self, stream: Any) -> EngineError:
        return EngineError(
            f"stream '{stream.handle}' is not connected; hint: engine.connectStream"
            f"('{stream.handle}', buffer) or connectStreamToCallback before engine.run"
        )

    # ------------------------------------------------------------- transfers
    def pull(self, stream: Any) -> np.ndarray:
        """The data of one copy from host-to-device ``stream`` (a fetch or the data a
        prefetch filled); call :meth:`pulled` once it is on the device."""
        handle, n = stream.handle, stream.numElements
        cb = self.callbacks.get(handle)
        if cb is not None:
            data = self.pending.pop(handle, None)
            if data is None:
                data = np.zeros(n, stream.elementType.numpy)
                cb.fetch(data)
            return data
        buf = self.buffers.get(handle)
        if buf is None:
            raise self._unconnected(stream)
        pos = self.positions[handle]
        idx = (pos + np.arange(n)) % buf.size
        self.positions[handle] = (pos + n) % buf.size
        return buf[idx]

    def pulled(self, stream: Any) -> None:
        """The data of ``stream``'s copy is on the device: ``complete()``, then (with
        prefetch enabled) ``prefetch`` the next copy's data."""
        cb = self.callbacks.get(stream.handle)
        if cb is None:
            return
        cb.complete()
        if not self.prefetch_enabled:
            return
        data = np.zeros(stream.numElements, stream.elementType.numpy)
        result = cb.prefetch(data)
        if result is StreamCallback.Result.Success:
            self.pending[stream.handle] = data
        elif result is not StreamCallback.Result.NotAvailable:
            raise EngineError(
                f"stream '{stream.handle}': prefetch of {type(cb).__name__} returned "
                f"{result!r}; it must return StreamCallback.Result.Success (the buffer is "
                "filled) or StreamCallback.Result.NotAvailable"
            )

    def prefetched(self, stream: Any) -> bool:
        """Whether the data of ``stream``'s next copy is ready on the host now (a
        successful prefetch, or a connected array, whose data is always ready)."""
        if not self.prefetch_enabled:
            return False
        if stream.handle in self.callbacks:
            return stream.handle in self.pending
        return stream.handle in self.buffers

    def push(self, stream: Any, values: np.ndarray) -> None:
        """Hand the data of one copy to device-to-host ``stream``."""
        cb = self.callbacks.get(stream.handle)
        if cb is not None:
            cb.fetch(values.copy())
            cb.complete()
            return
        buf = self.buffers.get(stream.handle)
        if buf is None:
            raise self._unconnected(stream)
        n = values.size
        pos = self.positions[stream.handle]
        buf[(pos + np.arange(n)) % buf.size] = values
        self.positions[stream.handle] = (pos + n) % buf.size

    def end_run(self) -> None:
        """The run is over: prefetched data no copy used is invalidated."""
        pending, self.pending = self.pending, {}
        for handle in pending:
            _invalidate(self.callbacks[handle])

    # ---------------------------------------------------------- remote buffers
    def remote_data(self, buffer: Any) -> np.ndarray:
        """The contents of remote buffer ``buffer``: [repeats, numElements], zeros at first."""
        data = self.remote.get(buffer.handle())
        if data is None:
            shape = (buffer.getRepeats(), buffer.numElements())
            data = self.remote[buffer.handle()] = np.zeros(shape, buffer.elementType().numpy)
        return data

    def print(self, text: str) -> None:
        import sys

        sys.stdout.write(text + "\n")


def _invalidate(callback: StreamCallback) -> None:
    method = getattr(callback, "invalidatePrefetched", None)
    if callable(method):
        method()
