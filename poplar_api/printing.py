"""Text of a ``PrintTensor`` program, in the Poplar SDK 2.x format.

A 1-D tensor prints on one line, values separated by commas without spaces::

    v1-debug: {1,1.5,2,2.5}

A tensor of rank 2 or more prints one block per line, nested with one more space of
indentation per level, blocks separated by ``",\\n"``::

    v3: {
     {5,4.5},
     {4,3.5}
    }

    t: {
     {
      {0,1},
      {2,3}
     },
     {
      {4,5},
      {6,7}
     }
    }

A rank-0 tensor prints its value alone (``name: 3``); a block with no elements
prints ``{}``. Numbers print as C++ ``operator<<`` prints them at its default precision
of 6 significant digits (``printf("%g")``): ``1.5``, ``7``, ``0``, ``1e+06``,
``0.333333``, ``-0``, ``nan``, ``inf``. HALF values print the float value of the
float16 (``1/3`` stored as half prints ``0.333252``), integer types print as integers
and BOOL prints ``1`` or ``0`` (C++ streams bools as numbers by default).

The returned text has no trailing newline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.errors import TypeMismatchError
from poplar_api.types import Type

__all__ = ["format_number", "format_tensor"]


def _spec(dtype: np.dtype) -> tuple[str, np.dtype]:
    """The printf spec for a dtype and the dtype whose ``tolist()`` feeds it."""
    if dtype.kind == "f":
        return "%g", dtype
    if dtype.kind in "iu":
        return "%d", dtype
    if dtype.kind == "b":
        return "%d", np.dtype(np.uint8)
    raise TypeMismatchError(f"PrintTensor values must be float, integer or bool, got dtype {dtype}")


def format_number(x: Any, element_type: Type) -> str:
    """Format one value of ``element_type`` as C++ ``operator<<`` would.

    The value is first converted to the type's storage dtype, so a Python float
    given for HALF is rounded to float16 before printing.
    """
    if not isinstance(element_type, Type):
        raise TypeMismatchError(
            f"format_number: element_type must be a poplar_api.types.Type, got "
            f"{type(element_type).__name__} {element_type!r}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        stored = np.asarray(x).astype(element_type.numpy)
    if stored.ndim != 0:
        raise TypeMismatchError(f"format_number formats one value, got shape {stored.shape}")
    spec, dtype = _spec(stored.dtype)
    return spec % stored.astype(dtype).item()


def _template(shape: tuple[int, ...], spec: str, depth: int) -> str:
    """A printf template for a block of ``shape`` at nesting ``depth`` (indent)."""
    indent = " " * depth
    if len(shape) == 1:
        return indent + "{" + ",".join([spec] * shape[0]) + "}"
    if shape[0] == 0:
        return indent + "{}"
    child = _template(shape[1:], spec, depth + 1)
    return indent + "{\n" + ",\n".join([child] * shape[0]) + "\n" + indent + "}"


def format_tensor(name: str, values: np.ndarray, element_type: Type | None = None) -> str:
    """Return the ``PrintTensor`` text for ``values`` labelled ``name``.

    Parameters
    ----------
    name
        The label printed before the colon.
    values
        The tensor's values with its shape. Float arrays (float16 for HALF) print
        with ``%g``; integer arrays as integers; bool arrays as ``1``/``0``.
    element_type
        If given, ``values`` are first converted to this type's storage dtype.

    Notes
    -----
    The whole layout is built as one printf template from the shape and filled
    with a single ``%`` operation, so large tensors format without a Python loop
    over elements.
    """
    arr = np.asarray(values)
    if element_type is not None:
        if not isinstance(element_type, Type):
            raise TypeMismatchError(
                f"format_tensor({name!r}): element_type must be a poplar_api.types.Type, "
                f"got {type(element_type).__name__} {element_type!r}"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            arr = arr.astype(element_type.numpy)
    spec, dtype = _spec(arr.dtype)
    flat = arr.astype(dtype, copy=False).reshape(-1).tolist()
    template = spec if arr.ndim == 0 else _template(arr.shape, spec, 0)
    return f"{name}: " + template % tuple(flat)
