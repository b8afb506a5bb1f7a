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

Replicated graphs
-----------------
Every replica has its own host ends (:meth:`HostStreams.select` picks the one the
data plane is serving): its own buffer position, callback, prefetched data and
remote buffer contents. A ``REPLICATE`` stream is served separately for each
replica, in replica order; ``engine.connectStream(handle, buffer)`` splits the
buffer replica-major (replica ``k`` uses the ``k``-th of ``r`` equal parts, each a
circular buffer of its own), ``connectStream(handle, index, buffer)`` connects one
replica, and ``connectStreamToCallback(handle, callback)`` connects the same
callback to every replica (called once per replica and copy) while
``connectStreamToCallback(handle, index, callback)`` connects one. A ``BROADCAST``
stream is served once per copy, from replica 0's connection, and every replica
receives that data. A stream of a non-replicated graph (the parent of
``createReplicatedGraph``) has one host end, replica 0's.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from poplar_api.errors import EngineError, StreamCallbackError
from poplar_api.lowering.emission import HostIO, prefetch_option

__all__ = [
    "HostStreams",
    "LegacyStreamCallback",
    "StreamCallback",
    "StreamCallbackError",
    "as_stream_callback",
    "check_replica_index",
    "connect_callback_args",
    "prefetch_option",
]


def check_replica_index(index: Any, replicas: int, what: str, name: str = "replica index") -> int:
    """A replica index: an int in ``[0, replicas)``.

    Raises
    ------
    EngineError
        Naming the index, the replica count and the valid range.
    """
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise EngineError(
            f"{what}: {name} {index!r} must be an int in [0, {replicas}) (the graph has "
            f"{replicas} replica(s))"
        )
    if not 0 <= int(index) < replicas:
        hint = (
            "the graph is not replicated, so it must be 0"
            if replicas == 1
            else f"replicas are numbered 0..{replicas - 1}"
        )
        raise EngineError(
            f"{what}: {name} {int(index)} is out of range; the graph has {replicas} "
            f"replica(s) ({hint})"
        )
    return int(index)


def connect_callback_args(
    args: tuple[Any, ...], what: str, replicas: int = 1
) -> tuple[int | None, Any]:
    """``(index, callback)`` of ``connectStreamToCallback(handle, [index,] callback)``;
    ``index`` is None when not given (every replica).

    Raises
    ------
    EngineError
        A wrong number of arguments, or a replica index out of ``[0, replicas)``.
    """
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        index, callback = args
        return check_replica_index(index, replicas, what), callback
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

    def fetch(self, buffer: np.ndarray) -> Any:
        return self.function(buffer)  # checked by HostStreams (host-to-device: None)

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


class _HostEnds:
    """The host ends of one replica: buffers, positions, callbacks, prefetched data and
    remote buffer contents."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}
        self.positions: dict[str, int] = {}
        self.callbacks: dict[str, StreamCallback] = {}
        #: stream handle -> data a successful prefetch filled for the stream's next copy
        self.pending: dict[str, np.ndarray] = {}
        #: remote buffer handle -> its contents, [repeats, numElements]
        self.remote: dict[str, np.ndarray] = {}


class HostStreams(HostIO):
    """Host ends of one engine's streams and remote buffers, one set per replica.

    Parameters
    ----------
    prefetch
        The engine option ``exchange.enablePrefetch``: ask callbacks to prefetch.
    replicas
        Replicas of the graph; :meth:`select` picks the replica served.
    """

    def __init__(self, prefetch: bool = True, replicas: int = 1) -> None:
        self.prefetch_enabled = prefetch
        self.replicas = int(replicas)
        self.ends = [_HostEnds() for _ in range(self.replicas)]
        #: the replica served now
        self.replica = 0
        #: stream handle -> data of a BROADCAST stream's copy, pulled by replica 0
        self.broadcast: dict[str, np.ndarray] = {}
        #: runs of the engine that have ended (the current run is number runs_ended + 1)
        self.runs_ended = 0
        #: what the engine said it runs now (:meth:`begin_run`), for error messages
        self.run_label = ""
        #: (replica, stream handle) -> copies served in the current run
        self.copies: dict[tuple[int, str], int] = {}
        #: stream handle -> the ``[replicas, size]`` array whose rows were connected as
        #: the replicas' buffers (:meth:`join_rows`), and those buffers
        self.joined: dict[str, tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}

    def begin_run(self, index: int, name: str = "") -> None:
        """The engine starts running program ``index`` (named in callback errors)."""
        self.run_label = f"program {index}" + (f" '{name}'" if name else "")

    # ------------------------------------------------------------- callbacks
    def _where(self, stream: Any, cb: StreamCallback, method: str, copy: int | None) -> str:
        """``stream 'in' (host-to-device, replica 0): fetch of callback 'fill' for copy 3
        of the stream in run 2 of the engine (program 0)``."""
        direction = "host-to-device" if getattr(stream, "toDevice", True) else "device-to-host"
        replica = self.replica if getattr(stream, "perReplica", False) else 0
        reps = f", replica {replica}" if self.replicas > 1 else ""
        name = callback_name(cb)
        what = "call" if isinstance(cb, LegacyStreamCallback) else method
        copy_text = f" for copy {copy} of the stream" if copy is not None else ""
        run = f"run {self.runs_ended + 1} of the engine"
        if self.run_label:
            run += f" ({self.run_label})"
        return (
            f"stream '{stream.handle}' ({direction}{reps}): {what} of callback {name}"
            f"{copy_text} in {run}"
        )

    def _call(self, stream: Any, cb: StreamCallback, method: str, *args: Any) -> Any:
        """``cb.method(*args)``; an exception of the callback comes out as a
        :class:`StreamCallbackError` naming the stream, the callback and the run."""
        copy = self.copies.get((self._replica_of(stream), stream.handle)) if args else None
        try:
            return getattr(cb, method)(*args)
        except Exception as exc:
            where = self._where(stream, cb, method, copy)
            raise StreamCallbackError(
                f"{where} raised {type(exc).__name__}: {exc}; hint: the callback's own "
                "traceback is this error's __cause__",
                stream.handle,
                callback_name(cb),
                method,
            ) from exc

    def _replica_of(self, stream: Any) -> int:
        return self.replica if getattr(stream, "perReplica", False) else 0

    def _count_copy(self, stream: Any) -> None:
        key = (self._replica_of(stream), stream.handle)
        self.copies[key] = self.copies.get(key, 0) + 1

    def _check_fill(
        self, stream: Any, cb: StreamCallback, method: str, buffer: np.ndarray, returned: Any
    ) -> None:
        """After ``fetch``/``prefetch`` of a host-to-device stream: the buffer is still
        ``numElements`` elements of the stream's type, and ``fetch`` returned None."""
        n, dtype = stream.numElements, np.dtype(stream.elementType.numpy)
        copy = self.copies.get((self._replica_of(stream), stream.handle))
        problem = ""
        if method == "fetch" and returned is not None:
            size = getattr(returned, "size", None)
            sized = f" of {size} element(s)" if isinstance(size, int) else ""
            problem = (
                f"returned {type(returned).__name__}{sized}; a callback fills the buffer it "
                f"is given and returns None; hint: buffer[:] = data (the buffer has {n} "
                f"element(s) of {dtype})"
            )
        elif buffer.shape != (n,) or buffer.dtype != dtype:
            problem = (
                f"changed its buffer to shape {buffer.shape} of {buffer.dtype}; required "
                f"({n},) of {dtype}, the stream's numElements and type; hint: fill it in "
                "place with buffer[:] = data, without resizing, reshaping or retyping it"
            )
        if problem:
            where = self._where(stream, cb, method, copy)
            raise StreamCallbackError(
                f"{where}: {problem}", stream.handle, callback_name(cb), method
            )

    def select(self, replica: int) -> None:
        """Serve replica ``replica`` from now on."""
        self.replica = replica

    def _ends(self, stream: Any) -> _HostEnds:
        """The host ends serving ``stream`` now: the current replica's, or replica 0's
        for a stream that is not per replica (BROADCAST, or of a non-replicated graph)."""
        if getattr(stream, "perReplica", False):
            return self.ends[self.replica]
        return self.ends[0]

    @property
    def buffers(self) -> dict[str, np.ndarray]:
        return self.ends[self.replica].buffers

    @property
    def positions(self) -> dict[str, int]:
        return self.ends[self.replica].positions

    @property
    def callbacks(self) -> dict[str, StreamCallback]:
        return self.ends[self.replica].callbacks

    @property
    def pending(self) -> dict[str, np.ndarray]:
        return self.ends[self.replica].pending

    @property
    def remote(self) -> dict[str, np.ndarray]:
        return self.ends[self.replica].remote

    # ------------------------------------------------------------- connection
    def connect_buffer(self, handle: str, buffer: np.ndarray, replica: int = 0) -> None:
        """Serve stream ``handle`` of ``replica`` from ``buffer`` (circularly) from now on."""
        ends = self.ends[replica]
        self._disconnect(handle, ends)
        ends.buffers[handle] = buffer
        ends.positions[handle] = 0

    def connect_callback(self, handle: str, callback: StreamCallback, replica: int = 0) -> None:
        """Serve stream ``handle`` of ``replica`` with ``callback`` from now on."""
        ends = self.ends[replica]
        self._disconnect(handle, ends)
        ends.callbacks[handle] = callback

    def _disconnect(self, handle: str, ends: _HostEnds) -> None:
        if handle in ends.pending:  # prefetched data of the old callback is void
            ends.pending.pop(handle)
            _invalidate(ends.callbacks[handle], handle, "when the stream was connected again")
        ends.buffers.pop(handle, None)
        ends.positions.pop(handle, None)
        ends.callbacks.pop(handle, None)
        self.joined.pop(handle, None)  # (a replica's own connection: the rows part)

    def _unconnected(self, stream: Any) -> EngineError:
        if getattr(stream, "perReplica", False):
            k = self.replica
            return EngineError(
                f"stream '{stream.handle}' is not connected for replica {k} (of "
                f"{stream.replicationFactor}); hint: engine.connectStream('{stream.handle}', "
                "buffer) with one part per replica, connectStream(handle, replicaIndex, "
                "buffer) or connectStreamToCallback before engine.run"
            )
        return EngineError(
            f"stream '{stream.handle}' is not connected; hint: engine.connectStream"
            f"('{stream.handle}', buffer) or connectStreamToCallback before engine.run"
        )

    # ------------------------------------------------------------- transfers
    def pull(self, stream: Any) -> np.ndarray:
        """The data of one copy from host-to-device ``stream`` (a fetch or the data a
        prefetch filled); call :meth:`pulled` once it is on the device. A BROADCAST
        stream is pulled once, by replica 0; the other replicas get the same data."""
        handle, n = stream.handle, stream.numElements
        shared = getattr(stream, "broadcast", False) and self.replicas > 1
        if shared and self.replica > 0 and handle in self.broadcast:
            return self.broadcast[handle]
        ends = self._ends(stream)
        cb = ends.callbacks.get(handle)
        self._count_copy(stream)
        if cb is not None:
            data = ends.pending.pop(handle, None)
            if data is None:
                data = np.zeros(n, stream.elementType.numpy)
                returned = self._call(stream, cb, "fetch", data)
                self._check_fill(stream, cb, "fetch", data, returned)
        else:
            if handle not in ends.buffers:
                raise self._unconnected(stream)
            data = _from_buffer(ends, handle, n)
        if shared:
            self.broadcast[handle] = data
        return data

    def pulled(self, stream: Any) -> None:
        """The data of ``stream``'s copy is on the device: ``complete()``, then (with
        prefetch enabled) ``prefetch`` the next copy's data (for a BROADCAST stream,
        once, after replica 0)."""
        if getattr(stream, "broadcast", False) and self.replica > 0:
            return
        ends = self._ends(stream)
        cb = ends.callbacks.get(stream.handle)
        if cb is None:
            return
        self._call(stream, cb, "complete")
        if not self.prefetch_enabled:
            return
        data = np.zeros(stream.numElements, stream.elementType.numpy)
        result = self._call(stream, cb, "prefetch", data)
        if result is StreamCallback.Result.Success:
            self._check_fill(stream, cb, "prefetch", data, None)
            ends.pending[stream.handle] = data
        elif result is not StreamCallback.Result.NotAvailable:
            copy = self.copies.get((self._replica_of(stream), stream.handle))
            raise StreamCallbackError(
                f"stream '{stream.handle}': prefetch of {type(cb).__name__} returned "
                f"{result!r}; it must return StreamCallback.Result.Success (the buffer is "
                "filled) or StreamCallback.Result.NotAvailable ("
                f"{self._where(stream, cb, 'prefetch', copy)})",
                stream.handle,
                callback_name(cb),
                "prefetch",
            )

    def prefetched(self, stream: Any) -> bool:
        """Whether the data of ``stream``'s next copy is ready on the host now (a
        successful prefetch, or a connected array, whose data is always ready)."""
        if not self.prefetch_enabled:
            return False
        ends = self._ends(stream)
        if stream.handle in ends.callbacks:
            return stream.handle in ends.pending
        return stream.handle in ends.buffers

    def push(self, stream: Any, values: np.ndarray) -> None:
        """Hand the data of one copy to device-to-host ``stream``."""
        ends = self._ends(stream)
        cb = ends.callbacks.get(stream.handle)
        self._count_copy(stream)
        if cb is not None:
            self._call(stream, cb, "fetch", values.copy())
            self._call(stream, cb, "complete")
            return
        if stream.handle not in ends.buffers:
            raise self._unconnected(stream)
        _to_buffer(ends, stream.handle, values)

    # ------------------------------------------------- every replica in one effect
    def plain_replicas(self, stream: Any) -> bool:
        """Whether every replica's end of per-replica ``stream`` is a connected array
        (no callback), so that serving them one after another in one effect
        (:meth:`pull_replica`, :meth:`push_replica`) does what serving each replica
        selected in turn does: only its own buffer and position change, nothing is
        called."""
        if self.replicas < 2 or not getattr(stream, "perReplica", False):
            return False
        handle = stream.handle
        return all(
            handle not in ends.callbacks and ends.buffers.get(handle, _EMPTY).size
            for ends in self.ends
        )

    def join_rows(self, handle: str, parts: np.ndarray) -> None:
        """Note that replica ``k``'s buffer of stream ``handle`` was just connected as
        row ``k`` of ``parts`` (``[replicas, size]``), so that while it is, copies at
        one position in every replica are one block of ``parts`` (:meth:`pull_rows`)."""
        self.joined[handle] = (parts, tuple(ends.buffers[handle] for ends in self.ends))

    def _joined(self, stream: Any) -> tuple[np.ndarray, int] | None:
        """``(parts, position)`` when every replica's buffer of ``stream`` is still its
        row of the joined array, each at one position, and a copy does not wrap."""
        handle = stream.handle
        found = self.joined.get(handle)
        if found is None:
            return None
        parts, rows = found
        pos = self.ends[0].positions.get(handle)
        if pos is None or pos + stream.numElements > parts.shape[1]:
            return None
        for ends, row in zip(self.ends, rows, strict=True):
            if ends.buffers.get(handle) is not row or ends.positions[handle] != pos:
                return None
        return parts, pos

    def _moved_on(self, stream: Any, parts: np.ndarray, pos: int) -> slice:
        """Every replica's position of ``stream`` moved on by one copy, the copy
        counted; the copy's columns of the joined array."""
        handle, n = stream.handle, stream.numElements
        after = (pos + n) % parts.shape[1]
        for k, ends in enumerate(self.ends):
            ends.positions[handle] = after
            self.copies[(k, handle)] = self.copies.get((k, handle), 0) + 1
        return slice(pos, pos + n)

    def pull_rows(self, stream: Any) -> np.ndarray | None:
        """Every replica's :meth:`pull_replica` at once, ``[replicas, numElements]`` (a
        view of the joined array), when :meth:`plain_replicas` and every replica's
        buffer is its row of one joined array at one position; else None, nothing
        done."""
        found = self._joined(stream)
        if found is None:
            return None
        parts, pos = found
        return parts[:, self._moved_on(stream, parts, pos)]

    def push_rows(self, stream: Any, values: np.ndarray) -> bool:
        """Every replica's :meth:`push_replica` of its row of ``values`` at once, on the
        terms of :meth:`pull_rows`; whether it was done."""
        found = self._joined(stream)
        if found is None:
            return False
        parts, pos = found
        parts[:, self._moved_on(stream, parts, pos)] = values
        return True

    def pull_replica(self, stream: Any, replica: int) -> np.ndarray:
        """:meth:`pull` of replica ``replica`` when :meth:`plain_replicas` (its
        :meth:`pulled` calls nothing)."""
        key = (replica, stream.handle)
        self.copies[key] = self.copies.get(key, 0) + 1
        return _from_buffer(self.ends[replica], stream.handle, stream.numElements)

    def push_replica(self, stream: Any, replica: int, values: np.ndarray) -> None:
        """:meth:`push` of replica ``replica`` when :meth:`plain_replicas`."""
        key = (replica, stream.handle)
        self.copies[key] = self.copies.get(key, 0) + 1
        _to_buffer(self.ends[replica], stream.handle, values)

    def end_run(self) -> None:
        """The run is over: prefetched data no copy used is invalidated."""
        self.broadcast.clear()
        run = f"at the end of run {self.runs_ended + 1} of the engine"
        if self.run_label:
            run += f" ({self.run_label})"
        self.runs_ended += 1
        self.run_label = ""
        self.copies.clear()
        failure: StreamCallbackError | None = None
        for ends in self.ends:
            pending, ends.pending = ends.pending, {}
            for handle in pending:
                try:
                    _invalidate(ends.callbacks[handle], handle, run)
                except StreamCallbackError as exc:  # tell every callback, then raise
                    failure = failure or exc
        if failure is None:
            return
        in_flight = sys.exc_info()[1]  # end_run runs in the engine's `finally`
        if in_flight is not None:  # the run's own error comes first; this one is noted
            in_flight.add_note(f"also: {failure}")
            return
        raise failure

    # ---------------------------------------------------------- remote buffers
    def remote_data(self, buffer: Any, replica: int | None = None) -> np.ndarray:
        """The contents of remote buffer ``buffer`` in ``replica`` (default: the one
        served now): [repeats, numElements], zeros at first."""
        ends = self.ends[self.replica if replica is None else replica]
        data = ends.remote.get(buffer.handle())
        if data is None:
            shape = (buffer.getRepeats(), buffer.numElements())
            data = ends.remote[buffer.handle()] = np.zeros(shape, buffer.elementType().numpy)
        return data

    def print(self, text: str) -> None:
        sys.stdout.write(text + "\n")


#: What :meth:`HostStreams.plain_replicas` takes for a stream not connected.
_EMPTY = np.zeros(0)


def _from_buffer(ends: _HostEnds, handle: str, n: int) -> np.ndarray:
    """The next ``n`` elements of connected array ``handle`` of ``ends`` (read
    circularly), its position moved on: a view where they do not wrap (every caller
    copies it at once), else a gather."""
    buf = ends.buffers[handle]
    pos = ends.positions[handle]
    ends.positions[handle] = (pos + n) % buf.size
    if pos + n > buf.size:
        return buf[(pos + np.arange(n)) % buf.size]
    return buf[pos : pos + n]


def _to_buffer(ends: _HostEnds, handle: str, values: np.ndarray) -> None:
    """Store ``values`` at the position of connected array ``handle`` of ``ends``
    (circularly), its position moved on."""
    buf = ends.buffers[handle]
    n = values.size
    pos = ends.positions[handle]
    if pos + n <= buf.size:  # no wrap: one slice
        buf[pos : pos + n] = values.reshape(-1)
    else:
        buf[(pos + np.arange(n)) % buf.size] = values
    ends.positions[handle] = (pos + n) % buf.size


def callback_name(callback: Any) -> str:
    """``'fill'`` for a function (its qualified name), ``Recorder`` for an object."""
    if isinstance(callback, LegacyStreamCallback):
        function = callback.function
        name = getattr(function, "__qualname__", None) or type(function).__name__
        return f"'{name}'"
    return type(callback).__name__


def _invalidate(callback: StreamCallback, handle: str, when: str) -> None:
    """``callback.invalidatePrefetched()``, its exception as a StreamCallbackError."""
    method = getattr(callback, "invalidatePrefetched", None)
    if not callable(method):
        return
    try:
        method()
    except Exception as exc:
        name = callback_name(callback)
        raise StreamCallbackError(
            f"stream '{handle}': invalidatePrefetched of callback {name} {when} raised "
            f"{type(exc).__name__}: {exc}",
            handle,
            name,
            "invalidatePrefetched",
        ) from exc
