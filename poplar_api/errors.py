"""Errors raised by the Poplar-like layer.

Each names the tensor, vertex, field, program or stream at fault, the value found,
what was required and a hint, and subclasses :class:`PoplarError` and the matching
built-in exception.
"""

from __future__ import annotations

from ipusim.errors import RunAborted


class PoplarError(Exception):
    """Base class of every error raised by :mod:`poplar_api`."""


class TensorError(PoplarError, ValueError):
    """A tensor operation got an out-of-range index or incompatible shape."""


class TensorIndexError(PoplarError, IndexError):
    """A tensor index is outside the tensor."""


class TypeMismatchError(PoplarError, TypeError):
    """Element types do not match where they must."""


class GraphError(PoplarError, ValueError):
    """A graph construction call is invalid (unknown vertex type, field, ...)."""


class CodeletError(PoplarError, ValueError):
    """A codelet (vertex class) is declared wrongly or its kernel failed to compile."""


class GraphValidationError(PoplarError, ValueError):
    """A graph or program cannot be compiled; ``problems`` lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"graph cannot be compiled ({len(self.problems)} problem(s)):\n{lines}")


class EngineError(PoplarError, RuntimeError):
    """An Engine call is used wrongly (unknown handle, not loaded, bad buffer)."""


class StreamCallbackError(EngineError):
    """A stream callback failed: it raised, returned something it must not, or changed
    the shape or type of the buffer it was given.

    The message names the stream (handle, direction, replica), the callback and the
    method called, which copy of the stream and which run of the engine it was; the
    callback's own exception, if any, is the ``__cause__``.

    Attributes
    ----------
    stream
        The stream's handle.
    callback
        The callback's name (a function's qualified name, or the object's class).
    method
        ``fetch``, ``prefetch``, ``complete`` or ``invalidatePrefetched``.
    """

    def __init__(self, text: str, stream: str = "", callback: str = "", method: str = "") -> None:
        super().__init__(text)
        self.stream = stream
        self.callback = callback
        self.method = method


class FloatingPointException(EngineError):
    """A vertex wrote NaN or an infinity into a FLOAT or HALF field while the engine
    option ``debug.floatingPointExceptions`` was on (as an IPU whose floating-point
    exceptions are enabled stops).

    Attributes
    ----------
    compute_set, vertex, tile, field
        Where: the compute set's name, the vertex's id, its tile, the field's name.
    value
        The value written (NaN, inf or -inf).
    """

    def __init__(
        self, text: str, compute_set: str, vertex: int, tile: int, field: str, value: float
    ) -> None:
        super().__init__(text)
        self.compute_set, self.vertex, self.tile = compute_set, vertex, tile
        self.field, self.value = field, value


class ApplicationRuntimeError(EngineError, RunAborted):
    """A run stopped by the program itself (``Abort``, ``AbortOnCondition``,
    ``ErrorProgram``), as Poplar's ``poplar::application_runtime_error``.

    Attributes
    ----------
    message
        The program's message (empty when it gave none).
    program
        The program that stopped the run, e.g. ``"Abort#12 'check'"``.
    trace
        On an IPU Model, the trace of the run until it stopped (``complete`` False;
        also ``engine.getTrace()``); None on a CPU device.
    """

    def __init__(
        self, text: str, message: str = "", program: str = "", trace: object = None
    ) -> None:
        super().__init__(text, trace)
        self.message = message
        self.program = program


class OutOfMemoryError(PoplarError, MemoryError):
    """The graph does not fit in tile memory.

    ``report`` holds the memory report (per-tile use against capacity) so nothing is
    lost; compile with the engine option ``debug.allowOutOfMemory`` to get the engine
    and every profile anyway.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report
