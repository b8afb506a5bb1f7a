"""Fingerprints of compiled code: everything Numba compiles into a kernel, hashed.

Numba compiles into a kernel not only the kernel's own bytecode but every compiled
function, module attribute, constant and closure value it reaches, and every
``@overload`` registered outside Numba. Its on-disk cache looks at none of these: an
entry is reused while the file of the kernel itself is unchanged. Two caches of ipusim
need more than that, and both describe what a kernel reaches with :class:`Hasher`:

* :mod:`poplar_api.driver_cache` keys the generated driver loops of compute sets;
* :mod:`ipusim.kernel_cache` stamps the entries of the package's own ``cache=True``
  kernels, so that a kernel calling a function of another file is compiled again when
  that file changes.

Functions of NumPy, Numba, llvmlite, SciPy and the standard library are described by
their names only (their versions are part of the caches' environment).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os
import sys
import types
from typing import Any

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher

__all__ = [
    "Hasher",
    "Uncacheable",
    "file_digest",
    "registered_overloads",
    "source_file_digest",
]

#: Packages whose functions are fingerprinted by name and the package's version only.
_VERSIONED = frozenset({"numpy", "numba", "llvmlite", "scipy"})

#: Numba's own source directory (functions Numba made with ``exec`` have no module).
_NUMBA_DIR = os.path.dirname(numba.__file__) + os.sep


class Uncacheable(Exception):
    """A value reached from compiled code that cannot be fingerprinted."""


def _top_package(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _is_versioned(module: str | None) -> bool:
    """Whether ``module`` is the standard library's or one of :data:`_VERSIONED`."""
    top = _top_package(module)
    return top in _VERSIONED or top in sys.stdlib_module_names or top == "builtins"


@functools.lru_cache(maxsize=256)
def file_digest(path: str, mtime_ns: int, size: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def source_file_digest(func: types.FunctionType) -> str:
    """Hash of the file defining ``func`` (its ``@overload`` implementations too)."""
    path = func.__code__.co_filename
    try:
        stat = os.stat(path)
    except OSError:
        raise Uncacheable(f"{func.__qualname__}: source file {path!r} not found") from None
    return file_digest(path, stat.st_mtime_ns, stat.st_size)


def _code_names(code: types.CodeType) -> set[str]:
    """Global and attribute names used by ``code`` and the code nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _numba_wrapped_function(obj: Any) -> types.FunctionType | None:
    """The Python function a Numba object was made from (``@intrinsic``'s definition,
    ``@vectorize``'s and ``@cfunc``'s function), or None for any other object."""
    if _top_package(type(obj).__module__) != "numba" or isinstance(obj, Dispatcher | type):
        return None
    for attr in ("_defn", "_pyfunc", "__wrapped__"):
        func = getattr(obj, attr, None)
        if isinstance(func, types.FunctionType):
            return func
    return None


def _project_function(func: Any) -> bool:
    """Whether ``func`` is a Python function of neither Numba nor another versioned
    package (a function Numba got from ``exec`` has no module: its file tells)."""
    if not isinstance(func, types.FunctionType):
        return False
    if func.__module__ is None:
        return not func.__code__.co_filename.startswith(_NUMBA_DIR)
    return not _is_versioned(func.__module__)


def registered_overloads() -> list[types.FunctionType]:
    """The implementations of every ``@overload``, ``@overload_method``,
    ``@overload_attribute`` and ``@register_jitable`` registered so far by code outside
    Numba and the versioned packages, in a stable order.

    Numba finds an overload through its registry, not through the kernel's globals, so
    an overload of a NumPy function (or of a function defined in another file) would
    otherwise change without changing any key.
    """
    from numba.core.typing import templates

    found: dict[tuple[str, str, str, int], types.FunctionType] = {}
    stack = [templates._OverloadFunctionTemplate, templates._OverloadAttributeTemplate]
    seen: set[type] = set()
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            stack.append(sub)
            impl = vars(sub).get("_overload_func")
            impl = getattr(impl, "__func__", impl)
            if not isinstance(impl, types.FunctionType):
                continue
            # register_jitable wraps the user's function in one of Numba's
            cells = [c.cell_contents for c in impl.__closure__ or () if _cell_is_set(c)]
            for func in [impl, *cells]:
                if _project_function(func):
                    code = func.__code__
                    key = (str(func.__module__), func.__qualname__, code.co_filename)
                    found[(*key, code.co_firstlineno)] = func
    return [found[k] for k in sorted(found)]


def _cell_is_set(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError for an empty cell
    except ValueError:
        return False
    return True


class Hasher:
    """Feeds a canonical description of values into one SHA-256."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._seen: dict[int, int] = {}
        self._keep: list[Any] = []  # objects in _seen stay alive (ids stay unique)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def text(self, *parts: str) -> None:
        for part in parts:
            data = part.encode("utf-8", "surrogatepass")
            self._hash.update(len(data).to_bytes(8, "little"))
            self._hash.update(data)

    def _once(self, obj: Any) -> bool:
        """Whether ``obj`` is new (else a back reference is written)."""
        known = self._seen.get(id(obj))
        if known is not None:
            self.text("ref", str(known))
            return False
        self._seen[id(obj)] = len(self._seen)
        self._keep.append(obj)
        return True

    def value(self, obj: Any, names: set[str]) -> None:
        """Add ``obj``; ``names``: attribute names the referring code uses (to
        follow ``module.attr`` and ``Class.attr`` into the values it reaches)."""
        if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
            self.text(type(obj).__name__, repr(obj))
        elif isinstance(obj, enum.Enum):
            self.text("enum", type(obj).__module__, type(obj).__qualname__, repr(obj.value))
        elif isinstance(obj, tuple | list | frozenset | set):
            items = sorted(obj, key=repr) if isinstance(obj, frozenset | set) else obj
            self.text(type(obj).__qualname__, str(len(items)))
            for item in items:
                self.value(item, names)
        elif isinstance(obj, np.ndarray):
            self.text("ndarray", obj.dtype.str, repr(obj.shape))
            self._hash.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, np.generic):
            self.text("npscalar", obj.dtype.str, obj.tobytes().hex())
        elif isinstance(obj, np.dtype):
            self.text("dtype", obj.str)
        elif isinstance(obj, numba.core.types.Type):
            self.text("nbtype", repr(obj))
        elif isinstance(obj, Dispatcher):
            if self._once(obj):
                options = sorted((k, repr(v)) for k, v in obj.targetoptions.items())
                self.text("dispatcher", type(obj).__qualname__, repr(options))
                self.function(obj.py_func)
        elif isinstance(obj, types.FunctionType):
            if self._once(obj):
                self.function(obj, plain=True)
        elif isinstance(obj, types.ModuleType):
            self.module(obj, names)
        elif isinstance(obj, type):
            self.cls(obj, names)
        elif (wrapped := _numba_wrapped_function(obj)) is not None:
            # an intrinsic, a vectorized or a C callback function: its repr does not
            # describe its code, the Python function it was made from does
            self.text("numba wrapper", type(obj).__module__, type(obj).__qualname__)
            self.value(wrapped, names)
        elif isinstance(obj, types.BuiltinFunctionType | np.ufunc):
            module = getattr(obj, "__module__", None) or "builtins"
            if not _is_versioned(module) and not isinstance(obj, np.ufunc):
                raise Uncacheable(f"built-in {obj!r} of module {module!r}")
            self.text("builtin", module, getattr(obj, "__qualname__", obj.__name__))
        else:
            module = type(obj).__module__
            if not _is_versioned(module):
                raise Uncacheable(f"a {type(obj).__qualname__} ({module})")
            # an object of a library Numba knows (an intrinsic, a typed container type)
            self.text("object", module, type(obj).__qualname__, repr(obj))

    def module(self, module: types.ModuleType, names: set[str]) -> None:
        name = getattr(module, "__name__", "?")
        if _is_versioned(name) or not self._once(module):
            self.text("module", name)
            return
        self.text("module", name)
        space = vars(module)
        for attr in sorted(names & space.keys()):
            self.text("attr", attr)
            self.value(space[attr], names)

    def cls(self, cls: type, names: set[str]) -> None:
        self.text("class", cls.__module__, cls.__qualname__)
        if _is_versioned(cls.__module__) or not self._once(cls):
            return
        for attr in sorted(names):
            for klass in cls.__mro__:
                if attr in vars(klass) and klass is not object:
                    self.text("attr", attr)
                    raw = vars(klass)[attr]
                    self.value(getattr(raw, "__func__", raw), names)
                    break

    def function(self, func: types.FunctionType, plain: bool = False) -> None:
        """Bytecode, constants, defaults, closure and reached globals of ``func``.

        ``plain``: a function Numba reaches without a dispatcher, compiled through an
        ``@overload`` registered somewhere: its whole source file is added too.
        """
        module = getattr(func, "__module__", None)
        if _is_versioned(module):
            self.text("libfunc", str(module), func.__qualname__)
            return
        if plain:
            self.text("file", source_file_digest(func))
        code = func.__code__
        # not the module's name: one file imported under two names (a script run as
        # ``__main__`` and imported, an example a test loads by path) compiles to the
        # same machine code, so its drivers share one entry
        self.text("function", func.__qualname__)
        self.code(code)
        names = _code_names(code)
        self.value(func.__defaults__, names)
        self.value(sorted((func.__kwdefaults__ or {}).items()), names)
        for cell in func.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                self.text("empty cell")
                continue
            self.value(contents, names)
        glob = func.__globals__
        for name in sorted(names & glob.keys()):
            self.text("global", name)
            self.value(glob[name], names)

    def code(self, code: types.CodeType) -> None:
        self.text(
            "code",
            code.co_code.hex(),
            repr(code.co_names),
            repr(code.co_varnames),
            repr(code.co_freevars),
            repr(code.co_cellvars),
            repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)),
            str(code.co_flags),
        )
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self.code(const)
            else:
                self.value(const, set())
