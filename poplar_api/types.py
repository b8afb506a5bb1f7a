"""Element types of Poplar tensors.

A :class:`Type` records how an element is stored on the device (``size`` bytes,
``numpy`` storage dtype) and what a vertex kernel computes with (``kernel_numpy``).
HALF is the only type where the two differ: values are stored as IEEE float16, a
kernel reads them widened to float32, computes in float32 and the result is rounded
back to float16 when stored. This mirrors the IPU, whose half arithmetic keeps float32
precision inside the accumulators.

The constants are singletons; :func:`type_from_name` maps a Poplar spelling
(``"unsigned int"``) or a constant name (``"UNSIGNED_INT"``) to one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poplar_api.errors import GraphError, TypeMismatchError

__all__ = [
    "ALL_TYPES",
    "BOOL",
    "CHAR",
    "FLOAT",
    "HALF",
    "INT",
    "SHORT",
    "UNSIGNED_CHAR",
    "UNSIGNED_INT",
    "UNSIGNED_SHORT",
    "Type",
    "type_from_name",
]


@dataclass(frozen=True, eq=True, repr=False)
class Type:
    """One Poplar element type.

    Attributes
    ----------
    name
        Poplar's spelling, for example ``"float"`` or ``"unsigned int"``; also ``str()``.
    constant
        The Python constant name, for example ``"UNSIGNED_INT"``; also ``repr()``.
    size
        Bytes one element occupies in tile memory.
    numpy
        The numpy dtype the element is stored as (host buffers, device memory image).
    kernel_numpy
        The numpy dtype a vertex kernel computes with: float32 for HALF, otherwise
        the storage dtype.
    is_floating
        True for FLOAT and HALF.
    is_integral
        True for the signed and unsigned integer types (not BOOL, which is a
        truth value here even though C++ counts ``bool`` as integral).
    """

    name: str
    constant: str
    size: int
    numpy: np.dtype
    kernel_numpy: np.dtype
    is_floating: bool
    is_integral: bool

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.constant

    def toString(self) -> str:
        """Return Poplar's spelling of the type, as ``poplar::Type::toString``."""
        return self.name

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # Unpickling yields the module constant itself, so identity checks survive
        # a trip through multiprocessing.
        return (type_from_name, (self.constant,))


def _make(name: str, constant: str, size: int, storage: type, kernel: type | None = None) -> Type:
    dtype = np.dtype(storage)
    floating = bool(np.issubdtype(dtype, np.floating))
    integral = bool(np.issubdtype(dtype, np.integer))
    return Type(
        name=name,
        constant=constant,
        size=size,
        numpy=dtype,
        kernel_numpy=np.dtype(kernel) if kernel is not None else dtype,
        is_floating=floating,
        is_integral=integral,
    )


FLOAT = _make("float", "FLOAT", 4, np.float32)
HALF = _make("half", "HALF", 2, np.float16, np.float32)
INT = _make("int", "INT", 4, np.int32)
UNSIGNED_INT = _make("unsigned int", "UNSIGNED_INT", 4, np.uint32)
SHORT = _make("short", "SHORT", 2, np.int16)
UNSIGNED_SHORT = _make("unsigned short", "UNSIGNED_SHORT", 2, np.uint16)
CHAR = _make("char", "CHAR", 1, np.int8)
UNSIGNED_CHAR = _make("unsigned char", "UNSIGNED_CHAR", 1, np.uint8)
BOOL = _make("bool", "BOOL", 1, np.bool_)

#: Every element type, in the order Poplar's documentation lists them.
ALL_TYPES: tuple[Type, ...] = (
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    SHORT,
    UNSIGNED_SHORT,
    CHAR,
    UNSIGNED_CHAR,
    BOOL,
)

_BY_NAME: dict[str, Type] = {t.name: t for t in ALL_TYPES} | {t.constant: t for t in ALL_TYPES}


def type_from_name(name: str | Type) -> Type:
    """Return the element type called ``name``.

    Parameters
    ----------
    name
        A Poplar spelling (``"float"``, ``"unsigned int"``), a constant name
        (``"FLOAT"``, ``"UNSIGNED_INT"``) or a :class:`Type`, returned unchanged.

    Raises
    ------
    TypeMismatchError
        If ``name`` is neither a string nor a Type.
    GraphError
        If the string names no element type; the message lists the valid names.
    """
    if isinstance(name, Type):
        return name
    if not isinstance(name, str):
        raise TypeMismatchError(
            f"element type name must be a str or poplar_api.types.Type, "
            f"got {type(name).__name__} {name!r}"
        )
    found = _BY_NAME.get(name)
    if found is None:
        valid = ", ".join(repr(t.name) for t in ALL_TYPES)
        constants = ", ".join(t.constant for t in ALL_TYPES)
        raise GraphError(
            f"unknown element type {name!r}; valid Poplar names are {valid} "
            f"(or the constant names {constants})"
        )
    return found
