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

from ipusim.files import write_text
from ipusim.kernel_fingerprint import Hasher, Uncacheable, registered_overloads

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
#: Disk-cached dispatchers and the entry file each was compiled from.
_ENTRIES: dict[Any, Path] = {}


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


def fingerprint(text: str, objects: Iterable[Any]) -> str:
    """The cache key of a driver: ``text`` (its file) and everything ``objects``
    reach, with the compile environment (:func:`_environment`) and the overloads
    registered outside Numba (:func:`~ipusim.kernel_fingerprint.registered_overloads`).

    Raises
    ------
    Uncacheable
        Something reached cannot be described (the driver is then compiled in memory).
    """
    hasher = Hasher()
    hasher._hash.update(_environment())
    hasher.text(text)
    for obj in objects:
        hasher.value(obj, set())
    for func in registered_overloads():
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
