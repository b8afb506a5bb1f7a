"""Compiling a codelet's ``compute`` with Numba: the kernel of a vertex type.

A kernel is compiled once per bounds-check setting (and per worker count when it
calls ``numWorkers()``, a value Numba freezes at compile time). The driver loops of
:mod:`poplar_api.codelet_compile` inline it, or call it when Numba cannot inline it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba

from poplar_api.codelet_base import MultiVertex

_KERNELS: dict[tuple[Callable[..., Any], bool, int | None, bool], Any] = {}


def _worker_globals(py_func: Callable[..., Any], num_workers: int) -> dict[str, Any] | None:
    """Globals of ``py_func`` with ``numWorkers`` bound to ``num_workers``, or None.

    Numba freezes globals at compile time, so a kernel calling ``numWorkers()`` or
    ``SomeMultiVertex.numWorkers()`` is compiled once per worker count with those
    names replaced by a compiled constant function (a module stand-in for a class).
    """
    code_names = set(py_func.__code__.co_names)
    glob = py_func.__globals__
    const = numba.njit(lambda: num_workers)
    rebound: dict[str, Any] = {}
    for name in code_names:
        value = glob.get(name)
        if name == "numWorkers" and callable(value):
            rebound[name] = const
        elif isinstance(value, type) and issubclass(value, MultiVertex):
            shim = types.ModuleType(f"{value.__name__}<numWorkers={num_workers}>")
            shim.numWorkers = const  # type: ignore[attr-defined]
            rebound[name] = shim
    if not rebound:
        return None
    return {**glob, **rebound}


def compile_kernel(
    py_func: Callable[..., Any], *, checked: bool, num_workers: int | None, inline: bool = False
) -> Any:
    """The (cached) Numba dispatcher of ``py_func`` with or without bounds checks.

    Numba's disk cache does not key on ``boundscheck``, so the checked kernel is
    compiled from a copy of the function with its own qualified name (and so its own
    cache files). Kernels whose ``numWorkers`` was bound are not cached on disk.

    ``inline``: a kernel for a driver loop, compiled into the loop's own code (Numba
    inlines it before typing, so the caller's ``boundscheck`` applies): a call per
    vertex to separately compiled code costs several times a small vertex's work.
    """
    bound = _worker_globals(py_func, num_workers) if num_workers is not None else None
    key = (py_func, checked, num_workers if bound is not None else None, inline)
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel
    if inline:  # not cached on disk: compiled as part of its loop
        func = py_func if bound is None else _copy_function(py_func, bound, "")
        kernel = _KERNELS[key] = numba.njit(inline="always")(func)
        return kernel
    func = py_func
    if checked or bound is not None:
        func = _copy_function(py_func, bound, "__boundscheck" if checked else "")
    cache = bound is None and _cacheable(py_func)
    try:
        kernel = numba.njit(cache=cache, boundscheck=checked or None)(func)
    except RuntimeError:  # no cache locator: exec'd code, some REPLs
        kernel = numba.njit(boundscheck=checked or None)(func)
    _KERNELS[key] = kernel
    return kernel


def _copy_function(
    py_func: Callable[..., Any], bound: dict[str, Any] | None, suffix: str
) -> Callable[..., Any]:
    """A copy of ``py_func`` with globals ``bound`` (None: its own) and ``suffix``
    added to its qualified name (Numba compiles and caches the copy on its own)."""
    func = types.FunctionType(
        py_func.__code__,
        bound if bound is not None else py_func.__globals__,
        py_func.__name__,
        py_func.__defaults__,
        py_func.__closure__,
    )
    func.__qualname__ = py_func.__qualname__ + suffix
    func.__module__ = py_func.__module__
    return func


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


__all__ = ["compile_kernel"]
