"""Remote buffers: regions of Streaming Memory, outside the IPU, reached by copies.

``graph.addRemoteBuffer(handle, elementType, numElements, repeats=1,
rearrangeOnHost=False, optimiseMemory=False)`` makes a buffer of ``repeats`` rows of
``numElements`` elements. ``program.Copy(tensor, buffer[, offset])`` writes rows of it
and ``program.Copy(buffer, tensor[, offset])`` reads them: ``offset`` is an integral
tensor of row (repeat) indices read on the device when the copy runs, one per row of
``tensor`` (``tensor`` has ``len(offset) * numElements`` elements); without it the
copy moves row 0. The host reads and writes rows with
``engine.copyToRemoteBuffer(array, handle, repeatIndex)`` and
``engine.copyFromRemoteBuffer(handle, array, repeatIndex)``.

In a replicated graph every replica has its own contents of each remote buffer
(device copies use their replica's); the host picks one with the last argument,
``replicationIndex`` (default 0), of ``copyToRemoteBuffer`` and
``copyFromRemoteBuffer``.

The copies are timed by the ``remote`` timing component (docs/machine.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.errors import EngineError, GraphError, TypeMismatchError
from poplar_api.types import Type

__all__ = [
    "RemoteBuffer",
    "add_remote_buffer",
    "copy_from_remote",
    "copy_to_remote",
    "remote_buffers",
]


class RemoteBuffer:
    """A remote buffer made by ``graph.addRemoteBuffer`` (Poplar's ``RemoteBuffer``)."""

    def __init__(
        self,
        graph_state: Any,
        handle: str,
        element_type: Type,
        num_elements: int,
        repeats: int,
        rearrange_on_host: bool,
        optimise_memory: bool,
    ) -> None:
        self.graph = graph_state
        self._handle = handle
        self._type = element_type
        self._n = num_elements
        self._repeats = repeats
        self._rearrange = rearrange_on_host
        self._optimise = optimise_memory

    def handle(self) -> str:
        """The handle the host uses (``copyToRemoteBuffer``, ``copyFromRemoteBuffer``)."""
        return self._handle

    def elementType(self) -> Type:
        """Type of the buffer's elements."""
        return self._type

    def numElements(self) -> int:
        """Elements of one row (repeat)."""
        return self._n

    def getRepeats(self) -> int:
        """Number of rows."""
        return self._repeats

    def isRearrangeOnHost(self) -> bool:
        """The ``rearrangeOnHost`` flag (accepted; changes nothing in the simulator)."""
        return self._rearrange

    def isOptimisedForMemory(self) -> bool:
        """The ``optimiseMemory`` flag (accepted; changes nothing in the simulator)."""
        return self._optimise

    def __repr__(self) -> str:
        return (
            f"RemoteBuffer('{self._handle}', {self._type}, numElements={self._n}, "
            f"repeats={self._repeats})"
        )


def remote_buffers(graph_state: Any) -> dict[str, RemoteBuffer]:
    """The remote buffers of a graph (kept with the graph's shared state)."""
    table = vars(graph_state).get("remote_buffers")
    if table is None:
        table = vars(graph_state)["remote_buffers"] = {}
    return table


def _count(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise GraphError(f"{what} is {value!r}; it must be an int >= {minimum}")
    return int(value)


def add_remote_buffer(
    graph_state: Any,
    handle: str,
    elementType: Type,
    numElements: int,
    repeats: int = 1,
    rearrangeOnHost: bool = False,
    optimiseMemory: bool = False,
) -> RemoteBuffer:
    """Make a remote buffer of ``repeats`` rows of ``numElements`` elements.

    Raises
    ------
    GraphError
        The handle is already used (by a remote buffer or a stream), or a size is not
        an int >= 1.
    TypeMismatchError
        ``elementType`` is not a poplar_api type.
    """
    what = f"addRemoteBuffer('{handle}')"
    if not isinstance(handle, str) or not handle:
        raise GraphError(f"addRemoteBuffer: handle {handle!r} must be a non-empty str")
    table = remote_buffers(graph_state)
    if handle in table or handle in graph_state.streams:
        used = "a remote buffer" if handle in table else "a stream"
        raise GraphError(
            f"{what}: handle '{handle}' is already used by {used}; hint: give every "
            "remote buffer and stream its own handle"
        )
    if not isinstance(elementType, Type):
        raise TypeMismatchError(
            f"{what}: elementType {elementType!r} is not a poplar_api Type; hint: FLOAT, INT, ..."
        )
    n = _count(numElements, f"{what}: numElements", 1)
    rows = _count(repeats, f"{what}: repeats", 1)
    buffer = RemoteBuffer(
        graph_state, handle, elementType, n, rows, bool(rearrangeOnHost), bool(optimiseMemory)
    )
    table[handle] = buffer
    return buffer


def _host_row(
    graph_state: Any, host: Any, handle: str, repeat: Any, replica: Any, what: str
) -> tuple[RemoteBuffer, np.ndarray, int]:
    """The buffer, its contents and the checked row index of a host access."""
    table = remote_buffers(graph_state)
    buffer = table.get(handle)
    if buffer is None:
        raise EngineError(
            f"{what}: unknown remote buffer handle '{handle}' (known: "
            f"{sorted(table) or 'none'}); hint: graph.addRemoteBuffer('{handle}', ...)"
        )
    rows = buffer.getRepeats()
    if isinstance(repeat, bool) or not isinstance(repeat, int | np.integer):
        raise EngineError(f"{what}: repeatIndex {repeat!r} must be an int in [0, {rows})")
    if not 0 <= repeat < rows:
        raise EngineError(
            f"{what}: repeatIndex {int(repeat)} is out of range; remote buffer '{handle}' "
            f"has {rows} repeat(s), so it must be in [0, {rows}); hint: make the buffer "
            "with more repeats"
        )
    from poplar_api.graph import replication_factor
    from poplar_api.streams import check_replica_index

    k = check_replica_index(replica, replication_factor(graph_state), what, "replicationIndex")
    return buffer, host.remote_data(buffer, k), int(repeat)


def numeric_buffer(buffer: Any, what: str, target: str, typ: Type) -> np.ndarray:
    """A host buffer written to ``target`` (a tensor or remote buffer of element type
    ``typ``, as the error names it) as a numpy array, checked to hold numbers.

    Raises
    ------
    EngineError
        A buffer whose dtype is not numeric (bool, int, unsigned or float); ``what`` is
        the call the message names.
    """
    arr = np.asarray(buffer)
    if arr.dtype.kind not in "biuf":
        raise EngineError(
            f"{what}: buffer of dtype {arr.dtype} cannot be written to {target} ({typ}); "
            f"hint: pass numbers, e.g. a numpy array of dtype {typ.numpy}"
        )
    return arr


def copy_to_remote(
    graph_state: Any, host: Any, src: Any, handle: str, repeat: Any, replica: Any = 0
) -> None:
    """``engine.copyToRemoteBuffer``: write row ``repeat`` of ``handle`` from ``src``.

    Raises
    ------
    EngineError
        Unknown handle, row or replica out of range, ``src`` not of ``numElements``
        numbers, or values that do not fit the element type.
    """
    from poplar_api.engine import fit_values

    what = f"copyToRemoteBuffer(..., '{handle}', {repeat!r})"
    buffer, data, row = _host_row(graph_state, host, handle, repeat, replica, what)
    arr = numeric_buffer(src, what, f"remote buffer '{handle}'", buffer.elementType())
    n = buffer.numElements()
    if arr.size != n:
        raise EngineError(
            f"{what}: buffer has {arr.size} elements (shape {list(arr.shape)}); one row of "
            f"remote buffer '{handle}' has numElements {n}; they must be equal"
        )
    data[row] = fit_values(arr.reshape(-1), buffer.elementType(), f"{what}: '{handle}'")


def copy_from_remote(
    graph_state: Any, host: Any, handle: str, dst: Any, repeat: Any, replica: Any = 0
) -> np.ndarray:
    """``engine.copyFromRemoteBuffer``: read row ``repeat`` of ``handle`` into ``dst``.

    Raises
    ------
    EngineError
        Unknown handle, row or replica out of range, or ``dst`` not a writable numpy
        array of ``numElements`` elements whose dtype holds the element type's values.
    """
    what = f"copyFromRemoteBuffer('{handle}', ..., {repeat!r})"
    buffer, data, row = _host_row(graph_state, host, handle, repeat, replica, what)
    values = data[row]
    if not isinstance(dst, np.ndarray) or not dst.flags.writeable:
        raise EngineError(
            f"{what}: the destination must be a writable numpy array, got "
            f"{type(dst).__name__}; hint: np.empty({buffer.numElements()}, "
            f"np.{values.dtype.name})"
        )
    if dst.size != values.size:
        raise EngineError(
            f"{what}: the destination has {dst.size} elements (shape {list(dst.shape)}); "
            f"one row of remote buffer '{handle}' has numElements {values.size}; they "
            "must be equal"
        )
    if not np.can_cast(values.dtype, dst.dtype, "safe"):
        raise EngineError(
            f"{what}: destination dtype {dst.dtype} cannot hold the values of remote buffer "
            f"'{handle}' ({buffer.elementType()}, dtype {values.dtype}) without loss; hint: "
            f"use an array of dtype {values.dtype}"
        )
    dst[...] = values.reshape(dst.shape)
    return dst
