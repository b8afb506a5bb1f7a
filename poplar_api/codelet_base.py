"""The base classes of codelets, the checked description of a codelet class
(:class:`VertexType`) and the settings a run of vertex code reads (worker count, bounds
checks).

Users import these names from :mod:`poplar_api.codelet`; this module is the bottom of
the codelet modules (:mod:`poplar_api.codelet_compile` compiles and runs the kernels,
:mod:`poplar_api.codelet` checks codelet classes and loads codelet files).
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from numbers import Integral
from typing import Any, ClassVar

from poplar_api.errors import CodeletError, GraphError
from poplar_api.fields import FieldSpec

#: Worker contexts of every IPU so far (Mk1, Mk2, Bow): ``numWorkers()`` outside a run.
DEFAULT_NUM_WORKERS = 6

#: Worker contexts of the run in progress (what ``numWorkers()`` returns); set by the
#: driver of a compute set around its kernel calls.
RUN_NUM_WORKERS: contextvars.ContextVar[int] = contextvars.ContextVar(
    "ipusim_num_workers", default=DEFAULT_NUM_WORKERS
)
#: Replicas whose copies of the same vertices make up the batch of the kernel call in
#: progress, replica after replica (vertex ``v`` of replica ``r`` at ``r * n // R + v``,
#: each reading its own replica's data); set by a replicated compute set's runner. A
#: Python ``computeBatch`` may plan from replica 0's vertices and run every replica at
#: once, as long as what it plans from is equal in every replica.
RUN_REPLICAS: contextvars.ContextVar[int] = contextvars.ContextVar("ipusim_replicas", default=1)
#: Whether vertex code now runs bounds-checked (:func:`vertex_bounds_checks`).
RUN_CHECKS_BOUNDS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ipusim_check_vertex_bounds", default=True
)


class VertexError(CodeletError, IndexError):
    """A vertex's ``compute`` indexed a field outside its elements.

    The message names the vertex (type, id and tile when known), the field, the
    index and the field's size. ``vertex``, ``field``, ``index`` and ``size`` hold the
    same facts (None when they could not be found).
    """

    def __init__(
        self,
        message: str,
        *,
        vertex: int | None = None,
        field: str | None = None,
        index: int | None = None,
        size: int | None = None,
    ) -> None:
        super().__init__(message)
        self.vertex = vertex
        self.field = field
        self.index = index
        self.size = size


class CodeletFileError(CodeletError, FileNotFoundError):
    """A codelet file given to ``graph.addCodelets(path)`` does not exist."""


@contextlib.contextmanager
def vertex_bounds_checks(enabled: bool) -> Iterator[None]:
    """Turn the bounds checks of vertex code on or off inside a ``with`` block.

    The Engine enters this around every run with its option
    ``debug.checkVertexBounds`` (an ipusim extension, default true).
    """
    token = RUN_CHECKS_BOUNDS.set(bool(enabled))
    try:
        yield
    finally:
        RUN_CHECKS_BOUNDS.reset(token)


#: Whether a vertex that writes NaN or an infinity stops the run
#: (:func:`floating_point_exceptions`).
RUN_FP_EXCEPTIONS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ipusim_fp_exceptions", default=False
)


@contextlib.contextmanager
def floating_point_exceptions(enabled: bool) -> Iterator[None]:
    """Stop a run when a vertex writes NaN or an infinity into a FLOAT or HALF field,
    inside a ``with`` block. The Engine enters this around every run with its option
    ``debug.floatingPointExceptions`` (an ipusim extension, default false)."""
    token = RUN_FP_EXCEPTIONS.set(bool(enabled))
    try:
        yield
    finally:
        RUN_FP_EXCEPTIONS.reset(token)


def checking_bounds() -> bool:
    """Whether vertex code now runs bounds-checked (see :func:`vertex_bounds_checks`)."""
    return RUN_CHECKS_BOUNDS.get()


def numWorkers() -> int:
    """Number of worker contexts that run a :class:`MultiVertex` (Poplar's ``numWorkers()``).

    Inside a MultiVertex ``compute`` (compiled by Numba) the call is replaced by the
    worker count of the machine running it; in Python it is the count of the run in
    progress, else :data:`DEFAULT_NUM_WORKERS`.
    """
    return RUN_NUM_WORKERS.get()


class Vertex:
    """Base class of codelets whose ``compute(*fields)`` runs once per vertex.

    Set ``typeName = "..."`` on a subclass to register it under another name than
    its class name (not inherited by further subclasses).
    """

    typeName: ClassVar[str | None] = None


class MultiVertex(Vertex):
    """Base class of codelets run by every worker of the tile, as Poplar's ``MultiVertex``.

    ``compute(workerId, *fields)`` is called once per worker ``0 .. numWorkers() - 1``
    (call ``numWorkers()`` from :mod:`poplar_api.codelet`, or ``MyVertex.numWorkers()``,
    inside compute); ``compute(worker_id, num_workers, *fields)`` also works. A vertex
    succeeds when every worker does. Its cycle estimate is in tile cycles and it
    occupies every worker context of its tile (``vertex_multi`` in the IR).
    """

    @staticmethod
    def numWorkers() -> int:
        """Number of workers that run ``compute`` (6 on every IPU so far)."""
        return numWorkers()


class SupervisorVertex(Vertex):
    """Base class of codelets run once in the supervisor context, as Poplar's ``SupervisorVertex``.

    ``compute(*fields)`` runs once per vertex. Like a MultiVertex its cycle estimate is
    in tile cycles and it occupies all worker contexts of its tile while it runs
    (``vertex_multi`` in the IR).
    """


#: The codelet base classes themselves (not codelets).
BASE_CLASSES = (Vertex, MultiVertex, SupervisorVertex)


@dataclass(frozen=True)
class VertexType:
    """The checked description of one codelet class; build it with :func:`vertex_type`.

    Attributes
    ----------
    name
        Poplar vertex type name (``typeName`` or the class name).
    cls
        The codelet class.
    is_multi
        Whether its estimate is in tile cycles and it occupies every worker context
        (a :class:`MultiVertex` or :class:`SupervisorVertex`; ``vertex_multi`` in the IR).
    fields
        Field specs in declaration order (the kernel's argument order).
    kernel
        The Numba dispatcher of ``compute`` (bounds-checked); None when the class
        defines ``computeBatch`` instead (a vectorised implementation run once for
        every vertex of the type, used by library vertices).
    kind
        ``"worker"`` (:class:`Vertex`), ``"multi"`` (:class:`MultiVertex`) or
        ``"supervisor"`` (:class:`SupervisorVertex`).
    passes_num_workers
        MultiVertex only: whether ``compute`` takes ``(worker_id, num_workers, ...)``
        rather than Poplar's ``(workerId, ...)``.
    """

    name: str
    cls: type
    is_multi: bool
    fields: tuple[FieldSpec, ...]
    kernel: Any = dataclass_field(compare=False, repr=False, default=None)
    kind: str = "worker"
    passes_num_workers: bool = False

    @property
    def field_names(self) -> tuple[str, ...]:
        """Poplar names of the fields, in declaration order."""
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def field_map(self) -> dict[str, FieldSpec]:
        """Field specs by Poplar name (one look-up per connection while building)."""
        return {f.name: f for f in self.fields}

    def field(self, name: str) -> FieldSpec:
        """Return the field called ``name`` (Poplar name, e.g. ``"in"``).

        Raises
        ------
        GraphError
            No such field; the message lists the fields and the closest name.
        """
        spec = self.field_map.get(name) if isinstance(name, str) else None
        if spec is not None:
            return spec
        names = self.field_names
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise GraphError(
            f"vertex type {self.name!r} has no field {name!r}; its fields are "
            f"{', '.join(repr(n) for n in names) or '(none)'}{hint}"
        )

    @functools.cached_property
    def has_estimator(self) -> bool:
        """Whether the class defines ``getCycleEstimate``."""
        return inspect.getattr_static(self.cls, "getCycleEstimate", None) is not None

    def estimate(self, sizes: Mapping[str, int | list[int]], target: Any) -> int:
        """Call the class's cycle estimator and check its result.

        Parameters
        ----------
        sizes
            Field name -> number of elements (scalar and vector fields) or list of
            inner vector lengths (vector-list fields).
        target
            Passed through unchanged (the graph's target).

        Raises
        ------
        CodeletError
            The class has no estimator, the estimator raised, or its result is not a
            non-negative integer.
        """
        if not self.has_estimator:
            raise CodeletError(
                f"vertex type {self.name!r} has no getCycleEstimate; hint: define the "
                f"classmethod getCycleEstimate(cls, sizes, target) or set a perf estimate"
            )
        missing = set(self.field_names) - set(sizes)
        if missing:
            raise GraphError(
                f"vertex type {self.name!r}: estimator sizes lack field(s) "
                f"{sorted(missing)}; every field needs an entry"
            )
        try:
            result = self.cls.getCycleEstimate(dict(sizes), target)
        except Exception as exc:
            raise CodeletError(
                f"vertex type {self.name!r}: getCycleEstimate raised {type(exc).__name__}: "
                f"{exc} (sizes={dict(sizes)})"
            ) from exc
        if type(result) is int and result >= 0:
            return result
        if isinstance(result, bool) or not isinstance(result, Integral) or result < 0:
            raise CodeletError(
                f"vertex type {self.name!r}: getCycleEstimate returned {result!r} "
                f"({type(result).__name__}) for sizes={dict(sizes)}; it must return a "
                f"non-negative int number of cycles; hint: use // or int(...)"
            )
        return int(result)


__all__ = [
    "BASE_CLASSES",
    "DEFAULT_NUM_WORKERS",
    "RUN_CHECKS_BOUNDS",
    "RUN_FP_EXCEPTIONS",
    "RUN_NUM_WORKERS",
    "RUN_REPLICAS",
    "CodeletFileError",
    "MultiVertex",
    "SupervisorVertex",
    "Vertex",
    "VertexError",
    "VertexType",
    "checking_bounds",
    "floating_point_exceptions",
    "numWorkers",
    "vertex_bounds_checks",
]
