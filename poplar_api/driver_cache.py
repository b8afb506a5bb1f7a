"""A disk cache of generated Numba functions (the driver loops of compute sets).

Running a compute set calls a *driver*: generated Python source, one loop over the
compute set's vertices that calls (or inlines) the vertex type's ``compute``
(:mod:`poplar_api.codelet_compile`). Numba compiles each driver the first time it
runs, about 0.5-1 s of CPU per vertex type, and every new process (a script, a
notebook kernel, a sweep or Dask worker, a test's subprocess) paid it again.

This module keeps the drivers on disk so that a later process loads their machine
code instead of compiling them:

* A driver's source is written (atomically, :mod:`ipusim.files`) to
  ``<cache dir>/drv_<key>.py`` and compiled from there with Numba's own
  ``cache=True``, whose files go to ``<cache dir>/__pycache__``.
* ``<key>`` hashes the file's text *and* everything compiled into it that Numba's
  cache does not look at: the bytecode, constants, defaults and closure values of the
  kernel and of every function, dispatcher, module attribute and global value it
  reaches (recursively), every ``@overload`` registered outside Numba, the compile
  options of each dispatcher, the Python, Numba, llvmlite and NumPy versions, Numba's
  optimisation settings and the CPU (Numba's ``magic_tuple``: target triple, CPU name
  and features). A codelet whose code or
  constants change gets a new key, so stale machine code is never run; an object
  that cannot be fingerprinted (one Numba could only use through an extension this
  module does not know) leaves its driver uncached, compiled in memory as before.
* Two processes writing the same entry write the same text; Numba writes its index
  and data files atomically too. An entry that cannot be read (a truncated or
  corrupt file) is removed and the driver compiled again, never an error.

Where: ``$IPUSIM_CACHE_DIR/numba`` when ``IPUSIM_CACHE_DIR`` is set, else
``$XDG_CACHE_HOME/ipusim/numba`` (``~/.cache/ipusim/numba``). ``IPUSIM_DRIVER_CACHE=0``
(or ``off``, ``false``, ``no``) turns the cache off; a directory that cannot be
created or written turns it off too. Deleting the directory is always safe.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import importlib.metadata
import os
import shutil
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba.core import errors as numba_errors
from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher

from ipusim.files import write_text

__all__ = [
    "CACHE_DIR_ENV",
    "SWITCH_ENV",
    "Uncacheable",
    "cache_directory",
    "clear",
    "compile_for",
    "fingerprint",
    "forget",
    "jit_source",
    "side_file",
]

#: Environment variable naming the root of ipusim's caches (drivers go to ``numba/``).
CACHE_DIR_ENV = "IPUSIM_CACHE_DIR"
#: Environment variable turning the driver cache off (``0``, ``off``, ``false``, ``no``).
SWITCH_ENV = "IPUSIM_DRIVER_CACHE"
#: Bumped when the layout of an entry changes (old entries are then never looked up).
_FORMAT = 1
#: Packages whose functions are fingerprinted by name and the package's version only.
_VERSIONED = frozenset({"numpy", "numba", "llvmlite", "scipy"})

#: Numba's own source directory (functions Numba made with ``exec`` have no module).
_NUMBA_DIR = os.path.dirname(numba.__file__) + os.sep
#: Disk-cached dispatchers and the entry file each was compiled from.
_ENTRIES: dict[Any, Path] = {}


class Uncacheable(Exception):
    """A value reached from a driver that cannot be fingerprinted."""


# ----------------------------------------------------------------------------- where
def cache_directory() -> Path | None:
    """The directory of the driver cache, or None when the cache is off.

    Read from the environment on every call (cheap), so that a test or a program can
    point it elsewhere or turn it off at run time.
    """
    switch = os.environ.get(SWITCH_ENV, "").strip().lower()
    if switch in ("0", "off", "false", "no") or numba.config.DISABLE_JIT:
        return None
    root = os.environ.get(CACHE_DIR_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "ipusim"
    return _usable(base / "numba")


@functools.lru_cache(maxsize=16)
def _usable(directory: Path) -> Path | None:
    """``directory`` (created) when a file can be written in it, else None."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return directory


# ----------------------------------------------------------------------- fingerprint
@functools.lru_cache(maxsize=1)
def _environment() -> bytes:
    """Versions, optimisation settings and the CPU that compiled code depends on."""
    from numba.core.registry import cpu_target

    magic = cpu_target.target_context.codegen().magic_tuple()
    parts = [
        f"format {_FORMAT}",
        sys.version,
        f"numba {numba.__version__}",
        f"numpy {np.__version__}",
        f"llvmlite {importlib.metadata.version('llvmlite')}",
        f"opt {numba.config.OPT} boundscheck {numba.config.BOUNDSCHECK}",
        f"fastmath {numba.config.FASTMATH if hasattr(numba.config, 'FASTMATH') else ''}",
        repr(magic),
    ]
    return "\n".join(parts).encode()


def _top_package(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _is_versioned(module: str | None) -> bool:
    """Whether ``module`` is the standard library's or one of :data:`_VERSIONED`."""
    top = _top_package(module)
    return top in _VERSIONED or top in sys.stdlib_module_names or top == "builtins"


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _source_file_digest(func: types.FunctionType) -> str:
    """Hash of the file defining ``func`` (its ``@overload`` implementations too)."""
    path = func.__code__.co_filename
    try:
        stat = os.stat(path)
    except OSError:
        raise Uncacheable(f"{func.__qualname__}: source file {path!r} not found") from None
    return _file_digest(path, stat.st_mtime_ns, stat.st_size)


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


def _registered_overloads() -> list[types.FunctionType]:
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


class _Hasher:
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
            self.text("file", _source_file_digest(func))
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


def fingerprint(text: str, objects: Iterable[Any]) -> str:
    """The cache key of a driver: ``text`` (its file) and everything ``objects``
    reach, with the compile environment (:func:`_environment`) and the overloads
    registered outside Numba (:func:`_registered_overloads`).

    Raises
    ------
    Uncacheable
        Something reached cannot be described (the driver is then compiled in memory).
    """
    hasher = _Hasher()
    hasher._hash.update(_environment())
    hasher.text(text)
    for obj in objects:
        hasher.value(obj, set())
    for func in _registered_overloads():
        hasher.text("overload")
        hasher.value(func, set())
    return hasher.hexdigest()


# ---------------------------------------------------------------------- compiling
def _entry_module(path: Path, text: str, namespace: dict[str, Any]) -> types.ModuleType:
    """The module of entry ``path`` holding ``text``, executed over ``namespace``.

    The file is (re)written when it is missing or holds other text (a partial copy,
    an edit). The module is registered in ``sys.modules``: Numba's cache imports it
    by name when it rebuilds the driver's environment.
    """
    name = f"_ipusim_driver_{path.stem}"
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(path):
        return module
    try:
        current = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        current = None
    if current != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text, what="Numba driver cache entry")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(namespace)
    exec(compile(text, str(path), "exec"), module.__dict__)
    sys.modules[name] = module
    return module


def _in_memory(text: str, name: str, namespace: dict[str, Any], options: dict[str, Any]) -> Any:
    """``name`` of ``text`` compiled with ``numba.njit(**options)``, not cached on disk."""
    scope = dict(namespace)
    exec(compile(text, f"<generated {name}>", "exec"), scope)
    return numba.njit(**options)(scope[name])


def jit_source(
    text: str,
    name: str,
    namespace: dict[str, Any],
    reached: Iterable[Any],
    **options: Any,
) -> Any:
    """Compile function ``name`` of Python source ``text`` with ``numba.njit(**options)``,
    its globals ``namespace``; cached on disk when possible.

    Parameters
    ----------
    text
        The generated source (a module defining ``name``).
    name
        The function to compile.
    namespace
        The globals the source uses (kernels, helpers).
    reached
        Everything compiled into the function besides ``text``: fingerprinted into
        the entry's key (normally the values of ``namespace``).
    options
        ``numba.njit`` options (part of the key).

    Returns
    -------
    numba.core.dispatcher.Dispatcher
        A dispatcher; compile it with :func:`compile_for` before its first call so
        that a bad entry is recompiled rather than raised.
    """
    directory = cache_directory()
    key = None
    if directory is not None:
        try:
            key = fingerprint(text, [*reached, sorted((k, repr(v)) for k, v in options.items())])
        except (Uncacheable, RecursionError):
            key = None
    if key is None:
        return _in_memory(text, name, namespace, options)
    path = directory / f"drv_{key[:40]}.py"
    try:
        module = _entry_module(path, text, namespace)
    except OSError:  # the directory went away or filled up
        return _in_memory(text, name, namespace, options)
    dispatcher = numba.njit(cache=True, **options)(getattr(module, name))
    _ENTRIES[dispatcher] = path
    return dispatcher


def _drop_entry(path: Path, cache_path: str | None) -> None:
    """Remove the files Numba cached for entry ``path`` in ``cache_path`` (its
    ``__pycache__``, or ``NUMBA_CACHE_DIR``'s folder); the source stays."""
    folder = Path(cache_path) if cache_path else path.parent / "__pycache__"
    for item in folder.glob(f"{path.stem}.*"):
        with contextlib.suppress(OSError):
            item.unlink()


def compile_for(dispatcher: Any, args: Iterable[Any]) -> None:
    """Compile ``dispatcher`` for a call with ``args`` (loaded from the disk cache when
    it holds the driver).

    A disk entry that cannot be loaded or saved (a corrupt, truncated or unreadable
    file; a full disk) is removed and the driver compiled in memory; Numba's own
    errors (a kernel that does not compile) are raised as they are.
    """
    path = _ENTRIES.get(dispatcher)
    if path is None:  # not on disk: its first call compiles it
        return
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    try:
        dispatcher.compile(sig)
    except numba_errors.NumbaError:
        raise
    except Exception:
        _drop_entry(path, getattr(dispatcher.stats, "cache_path", None))
        # Numba has no public switch to stop caching one dispatcher
        dispatcher._cache = NullCache()
        del _ENTRIES[dispatcher]
        dispatcher.compile(sig)


def side_file(dispatcher: Any, args: Iterable[Any], suffix: str) -> Path | None:
    """The file beside the disk entry of ``dispatcher`` for data derived from its
    compilation for a call with ``args`` (what Numba's cache does not keep, such as an
    analysis of the typed IR), or None when ``dispatcher`` is not cached on disk.

    Parameters
    ----------
    dispatcher
        A dispatcher made by :func:`jit_source`.
    args
        The arguments of the call (their Numba types name the file).
    suffix
        The end of the file's name (``"profile.npy"``).
    """
    path = _ENTRIES.get(dispatcher)
    if path is None:
        return None
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    digest = hashlib.sha256(repr(sig).encode()).hexdigest()[:16]
    return path.with_name(f"{path.stem}.{digest}.{suffix}")


def forget(dispatcher: Any) -> None:
    """Remove the machine code Numba cached on disk for ``dispatcher`` (made by
    :func:`jit_source`), so that its next compilation compiles (and caches again):
    for a caller that needs the compilation itself, not only its code."""
    path = _ENTRIES.get(dispatcher)
    if path is not None:
        _drop_entry(path, getattr(dispatcher.stats, "cache_path", None))


def clear(directory: Path | None = None) -> None:
    """Remove every entry of the cache (``directory``: default :func:`cache_directory`)."""
    target = directory if directory is not None else cache_directory()
    if target is not None and target.exists():
        shutil.rmtree(target, ignore_errors=True)
