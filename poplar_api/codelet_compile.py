"""Compiling vertex code and running it: a codelet's ``compute`` compiled by Numba into
one driver loop over every vertex of a compute set, run from packed field batches.

:func:`execute` runs the kernel of every vertex of a compute set from packed
:class:`~poplar_api.fields.FieldBatch` arrays; :func:`execute_lowered` does the same for
fields the graph's lowering laid out (inputs read in place from device memory). The
driver loop of a vertex type is generated Python source compiled with Numba, with the
kernel inlined into it when Numba can (else called from it), and kept on disk for later
processes (:mod:`poplar_api.driver_cache`). A kernel that indexes a
field out of bounds is re-run in Python on guarded copies of its data, so that the
:class:`~poplar_api.codelet_base.VertexError` names the field, the index and its size.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numba
import numpy as np
from numba.core import errors as numba_errors
from numba.core import types as nb_types
from numba.extending import overload
from numba.typed import List

from poplar_api.codelet_base import (
    DEFAULT_NUM_WORKERS,
    RUN_CHECKS_BOUNDS,
    RUN_NUM_WORKERS,
    VertexError,
    VertexType,
)
from poplar_api.codelet_kernels import _copy_function, _worker_globals, compile_kernel
from poplar_api.driver_cache import compile_for, jit_source
from poplar_api.errors import CodeletError, GraphError, TypeMismatchError
from poplar_api.fields import FieldBatch, FieldSpec

_DRIVERS: dict[tuple[type, bool, int | None], Any] = {}
#: Whether each compiled driver has its kernel inlined.
_INLINED: dict[Any, bool] = {}
#: drivers that have run once (compiled for the arguments lowering passes them)
_RAN: set[Any] = set()


# --------------------------------------------------------------------------- execution
def _as_ok(result: Any) -> bool:
    """Vertex result of a kernel return value (None counts as success)."""
    return result is None or bool(result)


@overload(_as_ok)
def _as_ok_typed(result):  # numba requires the same, unannotated, parameter names
    if isinstance(result, nb_types.NoneType):
        return lambda result: True
    if isinstance(result, nb_types.Boolean | nb_types.Integer):
        return lambda result: bool(result)
    if isinstance(result, nb_types.Optional) and isinstance(
        result.type, nb_types.Boolean | nb_types.Integer
    ):

        def impl(result):
            if result is None:
                return True
            return bool(result)

        return impl
    raise numba_errors.TypingError(
        f"compute returns {result}; it must return True, False or nothing"
    )


def _driver_source(vtype: VertexType, counted: bool = False) -> str:
    """Python source of the loop that runs ``kernel`` over all vertices.

    Before each call the loop stores the vertex (and worker) in ``where``, so that an
    exception raised inside the kernel can be traced to the vertex that raised it.
    ``counted``: the kernel takes the block counters of each execution (a row of
    ``counts``: vertex ``v``, or worker ``w`` of multi-vertex ``v`` at ``v * W + w``).
    """
    params = ["num_vertices", "num_workers", "ok", "where"] + (["counts"] if counted else [])
    body = ["    for v in range(num_vertices):", "        where[0] = v"]
    for i, spec in enumerate(vtype.fields):
        if spec.kind == "vectorlist":
            params += [f"d{i}", f"o{i}", f"n{i}"]
            body += [
                f"        a{i} = List()",
                f"        for j in range(o{i}[v], o{i}[v + 1]):",
                f"            a{i}.append(d{i}[n{i}[j]:n{i}[j + 1]])",
            ]
        else:  # vertex v's elements: d[b[v]:e[v]] (packed batches: b, e = offsets)
            params += [f"d{i}", f"b{i}", f"e{i}"]
            body.append(f"        a{i} = d{i}[b{i}[v]:e{i}[v]]")
    args = ", ".join(f"a{i}" for i in range(len(vtype.fields)))
    sep = ", " if args else ""
    if vtype.kind == "multi":
        head = "w, num_workers" if vtype.passes_num_workers else "w"
        tail = ", counts[v * num_workers + w]" if counted else ""
        body += [
            "        r = True",
            "        for w in range(num_workers):",
            "            where[1] = w",
            f"            if not _as_ok(kernel({head}{sep}{args}{tail})):",
            "                r = False",
            "        ok[v] = r",
        ]
    else:
        tail = (", " if args else "") + "counts[v]" if counted else ""
        body.append(f"        ok[v] = _as_ok(kernel({args}{tail}))")
    return f"def driver({', '.join(params)}):\n" + "\n".join(body) + "\n"


def _uses_num_workers(vtype: VertexType) -> bool:
    """Whether the kernel is compiled per worker count (it calls ``numWorkers()``)."""
    kernel = vtype.kernel
    return (
        vtype.kind == "multi"
        and kernel is not None
        and _worker_globals(kernel.py_func, DEFAULT_NUM_WORKERS) is not None
    )


def _driver(vtype: VertexType, checked: bool, num_workers: int, inline: bool = True) -> Any:
    """The compiled driver loop of ``vtype`` (bounds-checked kernel or not).

    The kernel of a ``compute`` given as a plain function is compiled into the loop
    (``inline``); one the user compiled with Numba is called as it is. ``inline=False``
    replaces the cached driver by one that calls the kernel (the fallback when Numba
    cannot inline a kernel).
    """
    per_count = _uses_num_workers(vtype)
    key = (vtype.cls, checked, num_workers if per_count else None)
    driver = _DRIVERS.get(key)
    if driver is None or not inline:
        kernel = vtype.kernel
        raw = inspect.getattr_static(vtype.cls, "compute").__func__
        users_own = isinstance(raw, numba.core.dispatcher.Dispatcher)
        inline = inline and not users_own
        if not users_own:
            kernel = compile_kernel(
                raw, checked=checked, num_workers=num_workers if per_count else None,
                inline=inline,
            )  # fmt: skip
        namespace = {"kernel": kernel, "List": List, "_as_ok": _as_ok}
        text = f"# driver of vertex type {vtype.name}\n{_driver_source(vtype)}"
        # an inlined kernel is compiled with the loop's flags; on disk when it can be
        boundscheck = (checked or None) if inline else None
        driver = jit_source(text, "driver", namespace, namespace.values(), boundscheck=boundscheck)
        _DRIVERS[key] = driver
        _INLINED[driver] = inline
    return driver


def _offsets(arr: Any, what: str, length: int, limit: int) -> np.ndarray:
    """Check an offsets array (int64, given length, non-decreasing, within limit)."""
    offsets = np.asarray(arr)
    if offsets.ndim != 1 or offsets.shape[0] != length or offsets.dtype.kind not in "iu":
        raise GraphError(
            f"{what}: must be a 1-D integer array of length {length}, got "
            f"{offsets.dtype} array of shape {offsets.shape}"
        )
    offsets = offsets.astype(np.int64, copy=False)
    if length and (offsets[0] < 0 or offsets[-1] > limit or np.any(np.diff(offsets) < 0)):
        raise GraphError(f"{what}: must be non-decreasing within [0, {limit}], got {offsets}")
    return offsets


def _driver_args(
    vtype: VertexType, batches: Mapping[str, FieldBatch], num_vertices: int
) -> list[np.ndarray]:
    """Check the batches against the fields and return the driver's array arguments.

    Input fields are passed as read-only views, so a kernel writing one fails to compile.
    """
    names = set(vtype.field_names)
    if set(batches) != names:
        raise GraphError(
            f"vertex type {vtype.name!r}: batches for fields {sorted(batches)} given, "
            f"fields are {sorted(names)}"
        )
    args: list[np.ndarray] = []
    for spec in vtype.fields:
        batch = batches[spec.name]
        what = f"vertex type {vtype.name!r} field {spec.name!r}"
        data = batch.data
        if not isinstance(data, np.ndarray) or data.ndim != 1:
            raise GraphError(f"{what}: batch data must be a 1-D numpy array, got {data!r}")
        if data.dtype != spec.kernel_dtype:
            raise TypeMismatchError(
                f"{what}: batch data has dtype {data.dtype}, the kernel needs "
                f"{spec.kernel_dtype} for element type {spec.element_type.name}; hint: "
                f"convert with data.astype({spec.kernel_dtype}) and write results back"
            )
        if spec.writes and not data.flags.writeable:
            raise GraphError(f"{what}: batch data of an {spec.direction} field is read-only")
        if spec.kind == "vectorlist":
            if batch.inner_offsets is None or len(batch.inner_offsets) < 1:
                raise GraphError(f"{what}: a vector-list batch needs inner_offsets (at least [0])")
            inner = _offsets(
                batch.inner_offsets,
                f"{what} inner_offsets",
                len(batch.inner_offsets),
                data.shape[0],
            )
            offsets = _offsets(
                batch.offsets, f"{what} offsets", num_vertices + 1, inner.shape[0] - 1
            )
        else:
            offsets = _offsets(batch.offsets, f"{what} offsets", num_vertices + 1, data.shape[0])
            if spec.kind == "scalar" and np.any(np.diff(offsets) != 1):
                raise GraphError(f"{what}: a scalar field needs exactly 1 element per vertex")
        if not spec.writes:
            data = data.view()
            data.flags.writeable = False
        if spec.kind == "vectorlist":
            args += [data, offsets, inner]
        else:
            args += [data, offsets[:-1], offsets[1:]]
    return args


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _numba_summary(exc: Exception) -> str:
    """The useful lines of a Numba compile error: the reason and the kernel source line."""
    lines = [
        line.rstrip()
        for line in _ANSI.sub("", str(exc)).splitlines()
        if line.strip() and not line.startswith("Failed in nopython mode pipeline")
    ]
    stop = next(
        (i for i, ln in enumerate(lines) if ln.startswith(("During: Pass", "During: resolving"))),
        len(lines),
    )
    lines = lines[:stop]
    reason = [lines[0]] if lines else [str(exc)]
    for i, line in enumerate(lines[:-1]):
        if "raised a specific error" in line:
            reason = [lines[i + 1].strip()]
    if len(reason[0]) < 40 and len(lines) > 1 and "specific error" not in "".join(lines):
        reason = lines[:6]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("File ") and ", line " in ln]
    source = lines[starts[0] : starts[0] + 4] if starts else []
    return "\n    ".join(reason + source)


def _compile_error(vtype: VertexType, exc: Exception) -> CodeletError:
    """A CodeletError naming the vertex type with the useful part of Numba's message."""
    text = _numba_summary(exc)
    args = ", ".join(f"{f.attribute}: {f.describe()} -> {_kernel_view(f)}" for f in vtype.fields)
    hint = (
        "Input fields are read-only inside compute; declare the field InOut to write it"
        if "Cannot modify readonly array" in text
        else f"compute runs in Numba nopython mode; it receives ({args})"
    )
    return CodeletError(
        f"vertex type {vtype.name!r}: compute does not compile:\n    {text}\nhint: {hint}"
    )


def _kernel_view(spec: FieldSpec) -> str:
    array = f"{spec.kernel_dtype}[:]"
    return {"scalar": f"{array} of 1", "vector": array, "vectorlist": f"List[{array}]"}[spec.kind]


def execute(
    vtype: VertexType,
    batches: Mapping[str, FieldBatch],
    num_vertices: int,
    num_workers: int = 6,
    *,
    check_bounds: bool | None = None,
    vertex_ids: np.ndarray | None = None,
    tiles: np.ndarray | None = None,
) -> np.ndarray:
    """Run the kernel of every vertex, in vertex order, in place on ``batches``.

    Parameters
    ----------
    vtype
        The vertex type (from :func:`vertex_type`).
    batches
        One :class:`FieldBatch` per field name; outputs are written into
        ``batch.data``.
    num_vertices
        Number of vertices (``len(offsets) - 1`` of every batch).
    num_workers
        Workers per tile; a MultiVertex kernel runs once per worker id.
    check_bounds
        Whether indexing past a field raises :class:`VertexError` (kernels compiled
        with Numba's ``boundscheck``). None uses the current setting of
        :func:`vertex_bounds_checks` (on by default).
    vertex_ids, tiles
        Graph vertex id and tile of each of the ``num_vertices`` vertices, used only
        to name the vertex in error messages.

    Returns
    -------
    numpy.ndarray
        ``bool[num_vertices]``: True where the kernel returned True or nothing
        (a MultiVertex succeeds when every worker does).

    Raises
    ------
    VertexError
        With checks on: a kernel indexed a field out of bounds (names vertex, field,
        index and size).
    CodeletError
        The kernel does not compile or raised another exception.
    GraphError, TypeMismatchError
        The batches do not match the fields.
    """
    if isinstance(num_vertices, bool) or not isinstance(num_vertices, Integral):
        raise GraphError(f"num_vertices must be an int, got {num_vertices!r}")
    if num_vertices < 0:
        raise GraphError(f"num_vertices must be >= 0, got {num_vertices}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, Integral) or num_workers < 1:
        raise GraphError(f"num_workers must be a positive int, got {num_workers!r}")
    args = _driver_args(vtype, batches, int(num_vertices))
    return _run_driver(
        vtype,
        lambda: batches,
        args,
        int(num_vertices),
        int(num_workers),
        check_bounds,
        vertex_ids,
        tiles,
    )


@dataclass(frozen=True)
class InPlaceField:
    """An input field read where it lies in device memory: vertex ``v``'s elements are
    ``data[begin[v]:end[v]]`` (``data`` is a whole memory image, read-only)."""

    data: np.ndarray
    begin: np.ndarray
    end: np.ndarray

    def packed(self) -> FieldBatch:
        """The same elements packed vertex after vertex (a copy)."""
        lengths = self.end - self.begin
        offsets = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        at = np.arange(int(offsets[-1]), dtype=np.int64)
        at -= np.repeat(offsets[:-1] - self.begin, lengths)
        return FieldBatch(self.data[at], offsets)


def execute_lowered(
    vtype: VertexType,
    fields: Mapping[str, FieldBatch | InPlaceField],
    num_vertices: int,
    num_workers: int,
    *,
    vertex_ids: np.ndarray,
    tiles: np.ndarray,
) -> np.ndarray:
    """:func:`execute` for fields that the graph's lowering laid out.

    Their offsets come from the graph's own connections and their data from device
    memory in the field's kernel dtype, so the checks :func:`execute` makes of a
    caller's batches are not repeated on every run of a compute set. Input fields may
    be given in place (:class:`InPlaceField`) when the type has a compiled kernel.
    """
    args, batches = _lowered_args(vtype, fields)
    return _run_driver(vtype, batches, args, num_vertices, num_workers, None, vertex_ids, tiles)


def _lowered_args(
    vtype: VertexType, fields: Mapping[str, FieldBatch | InPlaceField]
) -> tuple[list[np.ndarray], Callable[[], dict[str, FieldBatch]]]:
    """The driver's arguments of lowered fields, and a function packing the fields."""
    args: list[np.ndarray] = []
    for spec in vtype.fields:
        field = fields[spec.name]
        data = field.data
        if isinstance(field, InPlaceField):  # an input: read-only, as every input is
            if data.flags.writeable:
                data = data.view()
                data.flags.writeable = False
            args += [data, field.begin, field.end]
            continue
        if not spec.writes:
            data = data.view()
            data.flags.writeable = False
        if spec.kind == "vectorlist":
            args += [data, field.offsets, field.inner_offsets]
        else:
            args += [data, field.offsets[:-1], field.offsets[1:]]

    def batches() -> dict[str, FieldBatch]:
        return {k: f.packed() if isinstance(f, InPlaceField) else f for k, f in fields.items()}

    return args, batches


def _first_call(
    driver: Any, num_vertices: int, num_workers: int, ok: np.ndarray, where: np.ndarray,
    args: list[np.ndarray],
) -> None:  # fmt: skip
    """Call ``driver`` for the first time (it compiles)."""
    with warnings.catch_warnings():
        # A kernel that cannot be cached on disk still runs; do not bother users.
        warnings.filterwarnings(
            "ignore", message="Cannot cache compiled function", category=Warning
        )
        call = (num_vertices, num_workers, ok, where, *args)
        compile_for(driver, call)  # loaded from the disk cache when it is there
        driver(*call)


def _run_driver(
    vtype: VertexType,
    batches: Callable[[], Mapping[str, FieldBatch]],
    args: list[np.ndarray],
    num_vertices: int,
    num_workers: int,
    check_bounds: bool | None,
    vertex_ids: np.ndarray | None,
    tiles: np.ndarray | None,
) -> np.ndarray:
    """Run the compiled driver of ``vtype`` over checked arguments (see :func:`execute`);
    ``batches()`` gives the fields packed (for Python batch vertices and errors)."""
    ok = np.empty(num_vertices, dtype=np.bool_)
    ok.fill(True)  # (np.ones is slower by half a microsecond, on every run of a set)
    if num_vertices == 0:
        return ok
    token = RUN_NUM_WORKERS.set(num_workers)
    try:
        if vtype.kernel is None:
            result = vtype.cls.computeBatch(dict(batches()), num_vertices, num_workers)
            if result is not None:
                ok &= np.asarray(result, dtype=np.bool_).reshape(-1)
            return ok
        checked = RUN_CHECKS_BOUNDS.get() if check_bounds is None else bool(check_bounds)
        driver = _driver(vtype, checked, num_workers)
        where = np.array((-1, -1), np.int64)
        try:
            if driver in _RAN:  # compiled already: nothing to warn about
                driver(num_vertices, num_workers, ok, where, *args)
            else:
                try:
                    _first_call(driver, num_vertices, num_workers, ok, where, args)
                except numba_errors.NumbaError:
                    if not _INLINED.get(driver):
                        raise
                    # Numba could not inline the kernel: call it instead (a kernel
                    # that does not compile fails here again, with its own error)
                    driver = _driver(vtype, checked, num_workers, inline=False)
                    _first_call(driver, num_vertices, num_workers, ok, where, args)
                _RAN.add(driver)
        except numba_errors.NumbaError as exc:
            raise _compile_error(vtype, exc) from None
        except IndexError as exc:
            v, w = int(where[0]), int(where[1])
            raise _bounds_error(
                vtype, batches(), v, w, num_workers, vertex_ids, tiles, exc
            ) from None
        except Exception as exc:
            v = int(where[0])
            raise CodeletError(
                f"vertex type {vtype.name!r}: compute raised {type(exc).__name__}: {exc} "
                f"(in {_vertex_label(vtype, v, vertex_ids, tiles)}, running {num_vertices} "
                f"vertices)"
            ) from exc
        return ok
    finally:
        RUN_NUM_WORKERS.reset(token)


# ------------------------------------------------------------------ bounds errors


def _vertex_label(
    vtype: VertexType, v: int, vertex_ids: np.ndarray | None, tiles: np.ndarray | None
) -> str:
    """``vertex 12 (type 'X', tile 3)``, or the position in the batch without ids."""
    kind = f"type {vtype.name!r}"
    if v < 0:
        return f"vertex type {vtype.name!r}"
    parts = [kind]
    if tiles is not None and v < len(tiles):
        parts.append(f"tile {int(tiles[v])}")
    if vertex_ids is not None and v < len(vertex_ids):
        return f"vertex {int(vertex_ids[v])} ({', '.join(parts)})"
    return f"vertex #{v} of the batch ({', '.join(parts)})"


class _OutOfBounds(Exception):
    """Raised by :class:`_GuardedArray` in the pure-Python re-run of a failing vertex."""

    def __init__(self, field: str, index: int, size: int, write: bool) -> None:
        super().__init__(field, index, size, write)
        self.field, self.index, self.size, self.write = field, index, size, write


class _GuardedArray(np.ndarray):
    """A 1-D field array that reports an out-of-bounds index with its field's name."""

    field_name: str = "?"

    def __array_finalize__(self, obj: Any) -> None:
        self.field_name = getattr(obj, "field_name", "?")

    def _check(self, key: Any, write: bool) -> None:
        if isinstance(key, tuple) and len(key) == 1:
            key = key[0]
        if isinstance(key, Integral) and not isinstance(key, bool):
            size = self.shape[0] if self.ndim else 0
            if not -size <= int(key) < size:
                raise _OutOfBounds(self.field_name, int(key), size, write)

    def __getitem__(self, key: Any) -> Any:
        self._check(key, False)
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check(key, True)
        super().__setitem__(key, value)


class _GuardedList(list):
    """A vector-list field whose out-of-range vector index names the field."""

    field_name: str = "?"

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Integral) and not -len(self) <= int(key) < len(self):
            raise _OutOfBounds(self.field_name, int(key), len(self), False)
        return super().__getitem__(key)


def _guard(data: np.ndarray, name: str) -> _GuardedArray:
    arr = np.array(data, copy=True).view(_GuardedArray)
    arr.field_name = name
    return arr


def _rerun_in_python(
    vtype: VertexType, batches: Mapping[str, FieldBatch], v: int, w: int, num_workers: int
) -> _OutOfBounds | None:
    """Run vertex ``v`` (worker ``w``) once more in plain Python on copies of its data
    and return the out-of-bounds access it makes (None when it makes none)."""
    kernel = vtype.kernel
    py_func = getattr(kernel, "py_func", None)
    if py_func is None:
        return None
    bound = _worker_globals(py_func, num_workers) if vtype.kind == "multi" else None
    if bound is not None:  # its compiled numWorkers() stand-ins run from Python too
        py_func = _copy_function(py_func, bound, "")
    call: list[Any] = []
    for spec in vtype.fields:
        batch = batches[spec.name]
        a, b = int(batch.offsets[v]), int(batch.offsets[v + 1])
        if spec.kind == "vectorlist":
            inner = batch.inner_offsets
            items = _GuardedList(
                _guard(batch.data[inner[j] : inner[j + 1]], f"{spec.name}[{j - a}]")
                for j in range(a, b)
            )
            items.field_name = spec.name
            call.append(items)
        else:
            call.append(_guard(batch.data[a:b], spec.name))
    if vtype.kind == "multi":
        head = [max(w, 0), num_workers] if vtype.passes_num_workers else [max(w, 0)]
        call = head + call
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            py_func(*call)
    except _OutOfBounds as oob:
        return oob
    except Exception:
        return None
    return None


def _bounds_error(
    vtype: VertexType,
    batches: Mapping[str, FieldBatch],
    v: int,
    w: int,
    num_workers: int,
    vertex_ids: np.ndarray | None,
    tiles: np.ndarray | None,
    exc: Exception,
) -> VertexError:
    """The :class:`VertexError` of an IndexError raised inside a kernel."""
    label = _vertex_label(vtype, v, vertex_ids, tiles)
    worker = f" worker {w}" if vtype.kind == "multi" and w >= 0 else ""
    hint = (
        "hint: loop up to the field's length (e.g. range(in_.shape[0])), check the "
        "connected tensor's size, or use setFieldSize for the intended size; bounds "
        "checks can be turned off with the ipusim engine option "
        "debug.checkVertexBounds=false"
    )
    vid = None if vertex_ids is None or not 0 <= v < len(vertex_ids) else int(vertex_ids[v])
    oob = _rerun_in_python(vtype, batches, v, w, num_workers) if v >= 0 else None
    if oob is None:
        sizes = {
            spec.name: (
                int(batches[spec.name].offsets[v + 1] - batches[spec.name].offsets[v])
                if v >= 0
                else -1
            )
            for spec in vtype.fields
        }
        return VertexError(
            f"{label}{worker}: compute indexed a field out of bounds ({exc}); field sizes "
            f"(elements, or vectors for a VectorList): {sizes}; {hint}",
            vertex=vid,
        )
    access = "wrote" if oob.write else "read"
    return VertexError(
        f"{label}{worker}: compute {access} field {oob.field!r} at index {oob.index}, but "
        f"the field has {oob.size} element(s) (valid indices 0..{oob.size - 1}); {hint}",
        vertex=vid,
        field=oob.field,
        index=oob.index,
        size=oob.size,
    )


__all__ = ["InPlaceField", "compile_kernel", "execute", "execute_lowered"]
