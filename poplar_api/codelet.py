"""Codelets: vertex classes, their checked descriptions and batched kernel execution.

A codelet is a subclass of :class:`Vertex` (one worker thread per vertex) or
:class:`MultiVertex` (runs on every worker of its tile) with field declarations and a
``compute`` staticmethod that Numba compiles, the way ``addCodelets`` compiles C++
codelets on Poplar::

    class SumVertex(Vertex):
        in_ = Input(Vector(FLOAT))
        out = Output(FLOAT)

        @staticmethod
        def compute(in_, out):
            s = 0.0
            for i in range(in_.shape[0]):
                s += in_[i]
            out[0] = s
            return True

:func:`vertex_type` checks a class once and returns its :class:`VertexType`;
:func:`execute` runs the kernel of every vertex of a compute set from packed
:class:`~poplar_api.fields.FieldBatch` arrays through one compiled driver loop.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import inspect
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from numbers import Integral
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numba
import numpy as np
from numba.core import errors as numba_errors
from numba.core import types as nb_types
from numba.extending import overload
from numba.typed import List

from poplar_api.errors import CodeletError, GraphError, TypeMismatchError
from poplar_api.fields import (
    FieldBatch,
    FieldSpec,
    InOut,
    Input,
    Output,
    Vector,
    VectorList,
    is_field_like,
    resolve_field,
)

__all__ = [
    "FieldBatch",
    "FieldSpec",
    "InOut",
    "Input",
    "MultiVertex",
    "Output",
    "Vector",
    "VectorList",
    "Vertex",
    "VertexType",
    "collect_codelets",
    "execute",
    "vertex_type",
]


class Vertex:
    """Base class of codelets whose ``compute(*fields)`` runs once per vertex.

    Set ``typeName = "..."`` on a subclass to register it under another name than
    its class name (not inherited by further subclasses).
    """

    typeName: ClassVar[str | None] = None


class MultiVertex(Vertex):
    """Base class of codelets run by every worker: ``compute(worker_id, num_workers, *fields)``."""


_BASES = (Vertex, MultiVertex)


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
        Whether it is a :class:`MultiVertex`.
    fields
        Field specs in declaration order (the kernel's argument order).
    kernel
        The Numba dispatcher of ``compute``; None when the class defines
        ``computeBatch`` instead (a vectorised implementation run once for every
        vertex of the type, used by library vertices).
    """

    name: str
    cls: type
    is_multi: bool
    fields: tuple[FieldSpec, ...]
    kernel: Any = dataclass_field(compare=False, repr=False, default=None)

    @property
    def field_names(self) -> tuple[str, ...]:
        """Poplar names of the fields, in declaration order."""
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> FieldSpec:
        """Return the field called ``name`` (Poplar name, e.g. ``"in"``).

        Raises
        ------
        GraphError
            No such field; the message lists the fields and the closest name.
        """
        for spec in self.fields:
            if spec.name == name:
                return spec
        names = self.field_names
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise GraphError(
            f"vertex type {self.name!r} has no field {name!r}; its fields are "
            f"{', '.join(repr(n) for n in names) or '(none)'}{hint}"
        )

    @property
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
        if isinstance(result, bool) or not isinstance(result, Integral) or result < 0:
            raise CodeletError(
                f"vertex type {self.name!r}: getCycleEstimate returned {result!r} "
                f"({type(result).__name__}) for sizes={dict(sizes)}; it must return a "
                f"non-negative int number of cycles; hint: use // or int(...)"
            )
        return int(result)


_VERTEX_TYPES: dict[type, VertexType] = {}
_KERNELS: dict[Callable[..., Any], Any] = {}
_DRIVERS: dict[type, Any] = {}


def vertex_type(cls: type) -> VertexType:
    """Check a codelet class and return its (cached) :class:`VertexType`.

    Raises
    ------
    CodeletError
        ``cls`` is not a Vertex subclass, ``compute`` is missing or not a
        staticmethod, its parameters do not match the fields, a field declaration is
        wrong, two fields share a name, or ``typeName``/``getCycleEstimate`` is invalid.
    """
    cached = _VERTEX_TYPES.get(cls) if isinstance(cls, type) else None
    if cached is not None:
        return cached
    if not isinstance(cls, type) or not issubclass(cls, Vertex) or cls in _BASES:
        raise CodeletError(
            f"{cls!r} is not a codelet; hint: subclass poplar_api.codelet.Vertex or "
            f"MultiVertex and define fields and a compute staticmethod"
        )
    name = cls.__dict__.get("typeName")
    if name is None:
        name = cls.__name__
    if not isinstance(name, str) or not name:
        raise CodeletError(f"vertex class {cls.__name__!r}: typeName must be a non-empty str")
    fields = _collect_fields(cls)
    is_multi = issubclass(cls, MultiVertex)
    batch = inspect.getattr_static(cls, "computeBatch", None)
    if batch is not None and not isinstance(batch, classmethod):
        raise CodeletError(
            f"vertex class {cls.__name__!r}: computeBatch must be a classmethod taking "
            f"(cls, batches, num_vertices, num_workers)"
        )
    kernel = None if batch is not None else _kernel_of(cls, fields, is_multi)
    _check_estimator(cls)
    vtype = VertexType(name=name, cls=cls, is_multi=is_multi, fields=fields, kernel=kernel)
    _VERTEX_TYPES[cls] = vtype
    return vtype


def _collect_fields(cls: type) -> tuple[FieldSpec, ...]:
    """Field declarations of ``cls`` and its bases, base fields first."""
    decls: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass in _BASES:
            continue
        for attr, value in vars(klass).items():
            if is_field_like(value):
                decls[attr] = value
            else:
                decls.pop(attr, None)
    specs = tuple(resolve_field(cls.__name__, attr, decl) for attr, decl in decls.items())
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            raise CodeletError(
                f"vertex class {cls.__name__!r}: fields {seen[spec.name]!r} and "
                f"{spec.attribute!r} are both called {spec.name!r}; hint: rename one or "
                f"give it another name= keyword"
            )
        seen[spec.name] = spec.attribute
    return specs


def _kernel_of(cls: type, fields: tuple[FieldSpec, ...], is_multi: bool) -> Any:
    """Check ``cls.compute`` and return its Numba dispatcher."""
    where = f"vertex class {cls.__name__!r}"
    expected = (["worker_id", "num_workers"] if is_multi else []) + [f.attribute for f in fields]
    wanted = f"@staticmethod\n    def compute({', '.join(expected)})"
    raw = inspect.getattr_static(cls, "compute", None)
    if raw is None:
        raise CodeletError(f"{where} has no compute; hint: define\n    {wanted}")
    if not isinstance(raw, staticmethod):
        raise CodeletError(
            f"{where}: compute is a {type(raw).__name__}, it must be a staticmethod; "
            f"hint: define\n    {wanted}"
        )
    func = raw.__func__
    is_dispatcher = isinstance(func, numba.core.dispatcher.Dispatcher)
    py_func = func.py_func if is_dispatcher else func
    if not inspect.isfunction(py_func):
        raise CodeletError(f"{where}: compute must be a plain function, got {py_func!r}")
    params = list(inspect.signature(py_func).parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != len(expected) or any(p.kind not in plain for p in params):
        kind = "MultiVertex" if is_multi else "Vertex"
        raise CodeletError(
            f"{where}: compute takes ({', '.join(str(p) for p in params)}) but a {kind} "
            f"with fields {[f.name for f in fields]} needs {len(expected)} positional "
            f"parameters; hint: define\n    {wanted}"
        )
    if is_dispatcher:
        return func
    kernel = _KERNELS.get(py_func)
    if kernel is None:
        try:
            kernel = numba.njit(cache=_cacheable(py_func))(py_func)
        except RuntimeError:  # no cache locator: exec'd code, some REPLs
            kernel = numba.njit(py_func)
        _KERNELS[py_func] = kernel
    return kernel


def _cacheable(py_func: Callable[..., Any]) -> bool:
    """Whether a kernel may be cached on disk.

    Numba keys its cache by source file but records the module name; a kernel
    cached while its file was loaded under one name (a script run as ``__main__``,
    a file loaded by path under an alias) breaks a later process that loads the same
    file under another name. So only kernels of modules importable by their own name
    from that same file are cached.
    """
    name = getattr(py_func, "__module__", None)
    if not name or name == "__main__":
        return False
    try:
        parent, _, _ = name.rpartition(".")
        search = None
        if parent:  # a submodule: look in its package's path
            search = getattr(importlib.import_module(parent), "__path__", None)
            if search is None:
                return False
        # the path finder ignores sys.modules, where an alias may have been put
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        source = inspect.getsourcefile(py_func)
    except (ImportError, ValueError, TypeError):
        return False
    if spec is None or spec.origin is None or source is None:
        return False
    return Path(spec.origin).resolve() == Path(source).resolve()


def _check_estimator(cls: type) -> None:
    raw = inspect.getattr_static(cls, "getCycleEstimate", None)
    if raw is not None and not isinstance(raw, classmethod | staticmethod):
        raise CodeletError(
            f"vertex class {cls.__name__!r}: getCycleEstimate must be a classmethod, got "
            f"a {type(raw).__name__}; hint: decorate it with @classmethod and take "
            f"(cls, sizes, target)"
        )


def collect_codelets(obj: Any) -> list[type[Vertex]]:
    """Return the codelet classes in ``obj``, for ``graph.addCodelets(obj)``.

    Parameters
    ----------
    obj
        A Vertex subclass, a module (every Vertex subclass defined in it whose name
        does not start with ``_``; imported classes are skipped) or a list/tuple of
        classes and modules.

    Raises
    ------
    CodeletError
        ``obj`` (or an item) is none of these, or a module defines no codelet.
    """
    found: list[type[Vertex]] = []
    for cls in _iter_codelets(obj):
        if cls not in found:
            found.append(cls)
    return found


def _iter_codelets(obj: Any) -> Iterable[type[Vertex]]:
    if isinstance(obj, type) and issubclass(obj, Vertex) and obj not in _BASES:
        yield obj
    elif isinstance(obj, ModuleType):
        classes = [
            v
            for k, v in vars(obj).items()
            if isinstance(v, type)
            and issubclass(v, Vertex)
            and v not in _BASES
            and v.__module__ == obj.__name__
            and not k.startswith("_")
        ]
        if not classes:
            raise CodeletError(
                f"module {obj.__name__!r} defines no Vertex subclasses; hint: pass the "
                f"module that defines the codelets, or the classes themselves"
            )
        yield from classes
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _iter_codelets(item)
    else:
        raise CodeletError(
            f"cannot add codelets from {obj!r} ({type(obj).__name__}); hint: pass a Vertex "
            f"subclass, a module defining Vertex subclasses, or a list of them"
        )


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


def _driver_source(vtype: VertexType) -> str:
    """Python source of the loop that runs ``kernel`` over all vertices."""
    params = ["num_vertices", "num_workers", "ok"]
    body = ["    for v in range(num_vertices):"]
    for i, spec in enumerate(vtype.fields):
        if spec.kind == "vectorlist":
            params += [f"d{i}", f"o{i}", f"n{i}"]
            body += [
                f"        a{i} = List()",
                f"        for j in range(o{i}[v], o{i}[v + 1]):",
                f"            a{i}.append(d{i}[n{i}[j]:n{i}[j + 1]])",
            ]
        else:
            params += [f"d{i}", f"o{i}"]
            body.append(f"        a{i} = d{i}[o{i}[v]:o{i}[v + 1]]")
    args = ", ".join(f"a{i}" for i in range(len(vtype.fields)))
    if vtype.is_multi:
        body += [
            "        r = True",
            "        for w in range(num_workers):",
            f"            if not _as_ok(kernel(w, num_workers{', ' if args else ''}{args})):",
            "                r = False",
            "        ok[v] = r",
        ]
    else:
        body.append(f"        ok[v] = _as_ok(kernel({args}))")
    return f"def driver({', '.join(params)}):\n" + "\n".join(body) + "\n"


def _driver(vtype: VertexType) -> Any:
    driver = _DRIVERS.get(vtype.cls)
    if driver is None:
        namespace = {"kernel": vtype.kernel, "List": List, "_as_ok": _as_ok}
        code = compile(_driver_source(vtype), f"<driver of vertex type {vtype.name}>", "exec")
        exec(code, namespace)
        driver = numba.njit(namespace["driver"])
        _DRIVERS[vtype.cls] = driver
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
        args += [data, offsets] + ([inner] if spec.kind == "vectorlist" else [])
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

    Returns
    -------
    numpy.ndarray
        ``bool[num_vertices]``: True where the kernel returned True or nothing
        (a MultiVertex succeeds when every worker does).

    Raises
    ------
    CodeletError
        The kernel does not compile or raised an exception.
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
    ok = np.ones(int(num_vertices), dtype=np.bool_)
    if num_vertices == 0:
        return ok
    if vtype.kernel is None:
        result = vtype.cls.computeBatch(dict(batches), int(num_vertices), int(num_workers))
        if result is not None:
            ok &= np.asarray(result, dtype=np.bool_).reshape(-1)
        return ok
    driver = _driver(vtype)
    try:
        with warnings.catch_warnings():
            # A kernel that cannot be cached on disk still runs; do not bother users.
            warnings.filterwarnings(
                "ignore", message="Cannot cache compiled function", category=Warning
            )
            driver(int(num_vertices), int(num_workers), ok, *args)
    except numba_errors.NumbaError as exc:
        raise _compile_error(vtype, exc) from None
    except Exception as exc:
        raise CodeletError(
            f"vertex type {vtype.name!r}: compute raised {type(exc).__name__}: {exc} "
            f"while running {num_vertices} vertices"
        ) from exc
    return ok
