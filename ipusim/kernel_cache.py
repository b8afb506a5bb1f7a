"""Numba's on-disk cache of the package's own kernels, stamped with what they reach.

ipusim's compiled kernels (``@numba.njit(cache=True)`` in ``ipusim``, ``poplar_api``
and ``popart_api``) keep their machine code in ``__pycache__``. Numba reuses an entry
while the *kernel's own file* is unchanged: its index is stamped with a hash of that
one file. Many kernels call compiled functions of other files or read their constants
(``lowering/local_copy.py`` costs rows with ``ipusim/machine_copies.py``'s memcpy
estimate; ``lowering/strided.py`` walks pieces with ``lowering/pieces.py``), and Numba
compiles those into the kernel. Change such a callee alone (a ``git pull`` that touches
only ``machine_copies.py``, an edit of a formula) and the cached kernel kept running the
old code: cycle counts silently disagreed between the kernels that were compiled again
and those that were not.

Here the stamp of every entry of a package kernel is Numba's own (the hash of the
kernel's file) together with the fingerprint of everything the kernel reaches
(:class:`ipusim.kernel_fingerprint.Hasher`: the bytecode, constants and globals of every
compiled function, module attribute and closure value reached, recursively). A change
in any of them makes the entry stale, and Numba compiles the kernel again and replaces
it.

The fingerprint is taken when Numba first compares the stamp with the one stored
with the entries (a kernel's first call in a process, when every module it reaches has
been imported), not when the kernel is decorated. A kernel whose reach cannot be
described (:class:`~ipusim.kernel_fingerprint.Uncacheable`) keeps Numba's own stamp.

:func:`install` puts the locators first in Numba's list; importing this module calls
it. ``import ipusim`` imports it at once when Numba is loaded, else as soon as Numba's
package is (an import hook, so that the command line and configs do not load Numba);
``poplar_api`` imports ipusim before any of its modules, so every kernel of the
packages is decorated after it.
(Numba's ``numba_extensions`` entry points run only at the first compile, after the
kernels of the modules imported by then have chosen their locators.)
"""

from __future__ import annotations

import logging
import types
from pathlib import Path
from typing import Any

from numba.core import caching

from ipusim.kernel_fingerprint import Hasher, Uncacheable

__all__ = ["PACKAGE_DIRS", "install", "reach_fingerprint"]

_log = logging.getLogger(__name__)

#: Directories whose ``cache=True`` kernels are stamped with what they reach: the three
#: packages of the project (a test adds its own).
PACKAGE_DIRS: list[Path] = [
    Path(__file__).resolve().parent.parent / name for name in ("ipusim", "poplar_api", "popart_api")
]


def _in_packages(py_file: str) -> bool:
    path = Path(py_file).resolve()
    return any(path.is_relative_to(root) for root in PACKAGE_DIRS)


def reach_fingerprint(py_func: types.FunctionType) -> str:
    """Hex SHA-256 of everything compiled into a kernel made from ``py_func``.

    Unlike a driver's key, it leaves out the ``@overload`` implementations registered
    elsewhere: which are registered depends on what the process has imported by the
    kernel's first call, and would give one kernel other stamps in other programs (its
    entries compiled again each time). The packages register one overload, of a
    function of their own (``codelet_compile._as_ok``), which is reached as a plain
    function, its whole file hashed.

    Raises
    ------
    Uncacheable
        Something reached cannot be described.
    """
    hasher = Hasher()
    hasher.value(py_func, set())
    return hasher.hexdigest()


class _ReachStamp:
    """A source stamp compared as (Numba's file stamp, the reach fingerprint).

    The fingerprint is taken at the first comparison or pickling, when the kernel's
    callees exist; it pickles as a plain tuple, so the stored stamp needs no import.
    """

    __slots__ = ("_file_stamp", "_py_func", "_value")

    def __init__(self, file_stamp: Any, py_func: types.FunctionType) -> None:
        self._file_stamp = file_stamp
        self._py_func = py_func
        self._value: tuple[Any, str] | None = None

    def value(self) -> tuple[Any, str]:
        if self._value is None:
            try:
                reach = reach_fingerprint(self._py_func)
            except (Uncacheable, RecursionError) as error:
                _log.debug("%s: stamped with its file only (%s)", self._py_func, error)
                reach = "file only"
            self._value = (self._file_stamp, reach)
        return self._value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _ReachStamp):
            other = other.value()
        return self.value() == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type, tuple[tuple[Any, str]]]:
        return tuple, (self.value(),)


class _ReachStampMixin:
    """Gives a Numba locator the reach stamp for the packages' kernels only."""

    _py_func: types.FunctionType

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if not _in_packages(py_file):
            return None
        self = super().from_function(py_func, py_file)  # type: ignore[misc]
        if self is not None:
            self._py_func = py_func
        return self

    def get_source_stamp(self) -> _ReachStamp:
        return _ReachStamp(super().get_source_stamp(), self._py_func)  # type: ignore[misc]


class _InTreeLocator(_ReachStampMixin, caching.InTreeCacheLocator):
    """The kernel's ``__pycache__`` (Numba's default)."""


class _UserWideLocator(_ReachStampMixin, caching.UserWideCacheLocator):
    """The user's cache directory (a package installed where it cannot write)."""


class _UserProvidedLocator(_ReachStampMixin, caching.UserProvidedCacheLocator):
    """``NUMBA_CACHE_DIR``."""


#: In Numba's order: the directory a user names first, then the tree, then the user's.
_LOCATORS = (_UserProvidedLocator, _InTreeLocator, _UserWideLocator)


def install() -> None:
    """Put the reach-stamped locators first in Numba's list (idempotent).

    Numba's list of locator classes is a class attribute of its cache implementation;
    a Numba without it (another layout) keeps its own stamps, with a debug message.
    """
    # ``CacheImpl`` since Numba 0.61, ``_CacheImpl`` before
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        _log.debug("numba.core.caching has no locator list; kernels keep Numba's stamps")
        return
    if classes[: len(_LOCATORS)] != list(_LOCATORS):
        impl._locator_classes = [*_LOCATORS, *(c for c in classes if c not in _LOCATORS)]


install()
