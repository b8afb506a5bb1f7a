"""Codelets: vertex classes, their checked descriptions and batched kernel execution.

A codelet is a subclass of :class:`Vertex` (one worker thread per vertex),
:class:`MultiVertex` (runs on every worker of its tile) or :class:`SupervisorVertex`
(runs once in the supervisor context) with field declarations and a ``compute``
staticmethod that Numba compiles, the way ``addCodelets`` compiles C++ codelets on
Poplar::

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

Vertex code is bounds-checked by default: kernels are compiled with Numba's
``boundscheck=True``, and an index past a field raises :class:`VertexError` naming the
vertex, the field, the index and the field's size (never a silent read of a
neighbour's data). :func:`vertex_bounds_checks` (or the ipusim engine option
``debug.checkVertexBounds=false``) turns the checks off for speed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numba

from poplar_api.codelet_base import (
    BASE_CLASSES,
    DEFAULT_NUM_WORKERS,
    CodeletFileError,
    MultiVertex,
    SupervisorVertex,
    Vertex,
    VertexError,
    VertexType,
    checking_bounds,
    numWorkers,
    vertex_bounds_checks,
)
from poplar_api.codelet_compile import InPlaceField, compile_kernel, execute, execute_lowered
from poplar_api.errors import CodeletError
from poplar_api.fields import (
    FieldBatch,
    FieldSpec,
    InOut,
    Input,
    Output,
    Vector,
    VectorLayout,
    VectorList,
    VectorListLayout,
    is_field_like,
    resolve_field,
)

__all__ = [
    "DEFAULT_NUM_WORKERS",
    "CodeletFileError",
    "FieldBatch",
    "FieldSpec",
    "InOut",
    "InPlaceField",
    "Input",
    "MultiVertex",
    "Output",
    "SupervisorVertex",
    "Vector",
    "VectorLayout",
    "VectorList",
    "VectorListLayout",
    "Vertex",
    "VertexError",
    "VertexType",
    "checking_bounds",
    "collect_codelets",
    "execute",
    "execute_lowered",
    "load_codelet_file",
    "numWorkers",
    "vertex_bounds_checks",
    "vertex_type",
]

_VERTEX_TYPES: dict[type, VertexType] = {}
_CODELET_FILES: dict[tuple[str, int], ModuleType] = {}


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
    if not isinstance(cls, type) or not issubclass(cls, Vertex) or cls in BASE_CLASSES:
        raise CodeletError(
            f"{cls!r} is not a codelet; hint: subclass poplar_api.codelet.Vertex or "
            f"MultiVertex and define fields and a compute staticmethod"
        )
    name = cls.__dict__.get("typeName")
    if name is None:
        name = cls.__name__
    if not isinstance(name, str) or not name:
        raise CodeletError(f"vertex class {cls.__name__!r}: typeName must be a non-empty str")
    if issubclass(cls, MultiVertex) and issubclass(cls, SupervisorVertex):
        raise CodeletError(
            f"vertex class {cls.__name__!r} derives from both MultiVertex and "
            f"SupervisorVertex; hint: choose one base class"
        )
    fields = _collect_fields(cls)
    kind = (
        "multi"
        if issubclass(cls, MultiVertex)
        else "supervisor"
        if issubclass(cls, SupervisorVertex)
        else "worker"
    )
    batch = inspect.getattr_static(cls, "computeBatch", None)
    if batch is not None and not isinstance(batch, classmethod):
        raise CodeletError(
            f"vertex class {cls.__name__!r}: computeBatch must be a classmethod taking "
            f"(cls, batches, num_vertices, num_workers)"
        )
    kernel, passes = None, False
    if batch is None:
        kernel, passes = _kernel_of(cls, fields, kind)
    _check_estimator(cls)
    vtype = VertexType(
        name=name,
        cls=cls,
        is_multi=kind != "worker",
        fields=fields,
        kernel=kernel,
        kind=kind,
        passes_num_workers=passes,
    )
    _VERTEX_TYPES[cls] = vtype
    return vtype


def _collect_fields(cls: type) -> tuple[FieldSpec, ...]:
    """Field declarations of ``cls`` and its bases, base fields first."""
    decls: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass in BASE_CLASSES:
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


def _kernel_of(cls: type, fields: tuple[FieldSpec, ...], kind: str) -> tuple[Any, bool]:
    """Check ``cls.compute``; return its bounds-checked Numba dispatcher and, for a
    MultiVertex, whether it takes ``num_workers`` as second parameter."""
    where = f"vertex class {cls.__name__!r}"
    names = [f.attribute for f in fields]
    poplar_style = ["workerId", *names]
    legacy = ["worker_id", "num_workers", *names]
    expected = poplar_style if kind == "multi" else names
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
    counts = [len(expected)] + ([len(legacy)] if kind == "multi" else [])
    if len(params) not in counts or any(p.kind not in plain for p in params):
        label = {"multi": "MultiVertex", "supervisor": "SupervisorVertex"}.get(kind, "Vertex")
        also = f" (or {len(legacy)}: compute({', '.join(legacy)}))" if kind == "multi" else ""
        raise CodeletError(
            f"{where}: compute takes ({', '.join(str(p) for p in params)}) but a {label} "
            f"with fields {[f.name for f in fields]} needs {len(expected)} positional "
            f"parameters{also}; hint: define\n    {wanted}"
        )
    passes = kind == "multi" and len(params) == len(legacy)
    if is_dispatcher:
        return func, passes
    return compile_kernel(py_func, checked=True, num_workers=None), passes


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
        does not start with ``_``; imported classes are skipped), the path of a Python
        file defining codelets (str or :class:`os.PathLike`, see
        :func:`load_codelet_file`) or a list/tuple of these.

    Raises
    ------
    CodeletError
        ``obj`` (or an item) is none of these, or a module or file defines no codelet.
    CodeletFileError
        A path that does not exist.
    """
    found: list[type[Vertex]] = []
    for cls in _iter_codelets(obj):
        if cls not in found:
            found.append(cls)
    return found


def _iter_codelets(obj: Any) -> Iterable[type[Vertex]]:
    if isinstance(obj, type) and issubclass(obj, Vertex) and obj not in BASE_CLASSES:
        yield obj
    elif isinstance(obj, ModuleType):
        classes = [
            v
            for k, v in vars(obj).items()
            if isinstance(v, type)
            and issubclass(v, Vertex)
            and v not in BASE_CLASSES
            and v.__module__ == obj.__name__
            and not k.startswith("_")
        ]
        if not classes:
            raise CodeletError(
                f"module {obj.__name__!r} defines no Vertex subclasses; hint: pass the "
                f"module that defines the codelets, or the classes themselves"
            )
        yield from classes
    elif isinstance(obj, str | os.PathLike):
        yield from _iter_codelets(load_codelet_file(obj))
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _iter_codelets(item)
    else:
        raise CodeletError(
            f"cannot add codelets from {obj!r} ({type(obj).__name__}); hint: pass a Vertex "
            f"subclass, a module defining Vertex subclasses, the path of a .py file "
            f"defining them, or a list of these"
        )


def load_codelet_file(path: str | os.PathLike[str]) -> ModuleType:
    """Import a Python file of codelets, as ``graph.addCodelets("my_codelets.py")`` does.

    Poplar's ``addCodelets(path)`` compiles a C++ (or assembly) file; here the file is
    Python and is imported under a private module name (loading the same unchanged
    file again returns the same module, so its classes stay the same objects).

    Parameters
    ----------
    path
        Path of a ``.py`` file that defines :class:`Vertex`, :class:`MultiVertex` or
        :class:`SupervisorVertex` subclasses.

    Returns
    -------
    types.ModuleType
        The imported module.

    Raises
    ------
    CodeletFileError
        No file at ``path``.
    CodeletError
        The file is not Python (a C++ codelet), has a syntax error, raised while
        being imported (the message names the file and line) or defines no codelet.
    """
    file = Path(os.fspath(path)).expanduser()
    if not file.is_file():
        where = "is a directory" if file.is_dir() else "does not exist"
        raise CodeletFileError(
            f"addCodelets: codelet file {str(file)!r} {where} (resolved from the current "
            f"directory {os.getcwd()!r}); hint: pass the path of a .py file defining "
            f"Vertex subclasses"
        )
    if file.suffix != ".py":
        raise CodeletError(
            f"addCodelets: {str(file)!r} is a {file.suffix or 'suffix-less'} file; ipusim "
            f"runs codelets written in Python, not C++ or assembly; hint: port the codelet "
            f"to a Vertex subclass with a compute staticmethod in a .py file"
        )
    resolved = file.resolve()
    key = (str(resolved), resolved.stat().st_mtime_ns)
    module = _CODELET_FILES.get(key)
    if module is not None:
        return module
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"_ipusim_codelets_{re.sub(r'[^0-9A-Za-z_]', '_', resolved.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:  # pragma: no cover - .py files always have one
        raise CodeletError(f"addCodelets: cannot import {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise CodeletError(
            f"addCodelets: syntax error in codelet file {str(file)!r} line {exc.lineno}"
            f"{f', column {exc.offset}' if exc.offset else ''}: {exc.msg}"
            f"{f': {exc.text.strip()!r}' if exc.text else ''}"
        ) from None
    except Exception as exc:
        sys.modules.pop(name, None)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(resolved)]
        line = f" line {frames[-1].lineno}" if frames else ""
        raise CodeletError(
            f"addCodelets: importing codelet file {str(file)!r} raised "
            f"{type(exc).__name__} at{line or ' import'}: {exc}"
        ) from exc
    classes = [
        v
        for k, v in vars(module).items()
        if isinstance(v, type)
        and issubclass(v, Vertex)
        and v not in BASE_CLASSES
        and v.__module__ == name
        and not k.startswith("_")
    ]
    if not classes:
        sys.modules.pop(name, None)
        raise CodeletError(
            f"addCodelets: codelet file {str(file)!r} defines no Vertex, MultiVertex or "
            f"SupervisorVertex subclass; hint: define e.g. 'class MyVertex(Vertex):' with "
            f"fields and a compute staticmethod (imported classes are not registered)"
        )
    _CODELET_FILES[key] = module
    return module
