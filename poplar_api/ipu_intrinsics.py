"""IPU vector types and instructions for codelet kernels, counted as the instructions
they are.

A C++ codelet reaches instructions that scalar code cannot express through vector
types (``float2``, ``half4``: one 64-bit register pair each), the ``__builtin_ipu_*``
intrinsics of ``ipudef.h`` and inline assembly: 64-bit loads and stores, ``f32v2``
and ``f16v4`` arithmetic, the dual loads of ``ld2x64pace`` / ``ld2xst64pace``, the
zero-overhead ``rpt`` loop and the supervisor's ``delay``. The functions of this
module are those operations on the numpy arrays a kernel gets (Numba compiles them
into the kernel), so a Python codelet can be written as the measured C++ or assembly
codelet is. Counted execution (:mod:`poplar_api.counted`, docs/counted_cycles.md)
counts each call as one instruction of the class in :data:`INSTRUCTIONS`, priced by
the ``counted`` section of the machine config, instead of the scalar operations
inside it.

Vector values are tuples: a ``float2`` is ``(x, y)`` of float32, a ``half4`` four
values. HALF fields reach a kernel as float32 arrays (``poplar_api.fields``), so
``f16v4`` arithmetic computes in float32 and a result is rounded to half where it is
stored in the field, as a scalar kernel of HALF fields does. Indices of vector loads
and stores count vectors, not elements: ``load_float2(a, i)`` reads ``a[2i]`` and
``a[2i + 1]``; a vector outside the field raises ``IndexError`` (always checked, and
not counted: the check is the simulator's, not an instruction).

A loop over :func:`rpt` is a hardware repeat loop: its body runs as 64-bit bundles
(one main-pipeline and one floating-point instruction per thread cycle) with no
loop-step or branch cost, it may not branch, and its count is at most
:data:`RPT_MAX_COUNT` (the 12-bit ``CSR_W_REPEAT_COUNT`` of the Colossus ISA, as
Poplibs' ``CSR_W_REPEAT_COUNT__VALUE__MASK`` = 0x0FFF, graphcore/poplibs).

Sources of each instruction: Graphcore's *Tile Vertex ISA* (instruction names and
what one instruction does), ``ipudef.h``'s vector types, and the commented assembly of
simehaa/IPU ``STREAMTriad/codelets.cpp`` (``ld2xst64pace`` + ``f32v2axpy`` in one
bundle of an ``rpt`` body) and graphcore/poplibs ``tests/codelets/Delay1000.S``
(``delay 1000`` in a supervisor codelet).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = [
    "INSTRUCTIONS",
    "RPT_MAX_COUNT",
    "delay",
    "f16v4add",
    "f16v4mul",
    "f16v4sub",
    "f32v2add",
    "f32v2axpy",
    "f32v2mul",
    "f32v2sub",
    "ld2x64pace",
    "ld2xst64pace",
    "load_float2",
    "load_half4",
    "rpt",
    "store_float2",
    "store_half4",
]

#: Largest count of an ``rpt`` loop (12-bit repeat count register).
RPT_MAX_COUNT = 4095

# Cached on disk as the project's other kernels are: a kernel or driver that calls an
# intrinsic loads its machine code in a later process instead of compiling it again.
# Counted kernels, whose counting compilation is never cached, call them in every run.
_njit = numba.njit(cache=True, nogil=True)


# inlined into each intrinsic: called on its own, Numba would compile it once per
# constant ``count`` (each constant has its own literal type) and array flavour
@numba.njit(cache=False, inline="always")
def _check(a: Any, first: int, count: int) -> None:
    """Refuse a vector access outside the field (the kernel's own bounds checks do not
    reach into the intrinsics): elements ``first .. first + count - 1`` of ``a``."""
    if first < 0 or first + count > a.shape[0]:
        raise IndexError("ipu_intrinsics: vector load or store outside the field")


# ------------------------------------------------------------------ memory (main pipe)
@_njit
def load_float2(a: Any, i: int) -> tuple[Any, Any]:
    """``ld64``: the ``i``-th float2 of ``a`` (``a[2i]``, ``a[2i + 1]``)."""
    _check(a, 2 * i, 2)
    return (a[2 * i], a[2 * i + 1])


@_njit
def store_float2(a: Any, i: int, v: tuple[Any, Any]) -> None:
    """``st64``: write float2 ``v`` as the ``i``-th float2 of ``a``."""
    _check(a, 2 * i, 2)
    a[2 * i] = v[0]
    a[2 * i + 1] = v[1]


@_njit
def load_half4(a: Any, i: int) -> tuple[Any, Any, Any, Any]:
    """``ld64``: the ``i``-th half4 of ``a`` (``a[4i]`` … ``a[4i + 3]``)."""
    b = 4 * i
    _check(a, b, 4)
    return (a[b], a[b + 1], a[b + 2], a[b + 3])


@_njit
def store_half4(a: Any, i: int, v: tuple[Any, Any, Any, Any]) -> None:
    """``st64``: write half4 ``v`` as the ``i``-th half4 of ``a``."""
    b = 4 * i
    _check(a, b, 4)
    a[b] = v[0]
    a[b + 1] = v[1]
    a[b + 2] = v[2]
    a[b + 3] = v[3]


@_njit
def ld2x64pace(b: Any, c: Any, i: int) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """``ld2x64pace``: the ``i``-th float2 of ``b`` and of ``c`` in one instruction (two
    64-bit loads from two memory elements, post-incrementing packed addresses)."""
    _check(b, 2 * i, 2)
    _check(c, 2 * i, 2)
    return ((b[2 * i], b[2 * i + 1]), (c[2 * i], c[2 * i + 1]))


@_njit
def ld2xst64pace(
    b: Any, c: Any, i: int, a: Any, j: int, v: tuple[Any, Any]
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """``ld2xst64pace``: load the ``i``-th float2 of ``b`` and of ``c`` and store float2
    ``v`` as the ``j``-th of ``a``, in one instruction."""
    _check(b, 2 * i, 2)
    _check(c, 2 * i, 2)
    _check(a, 2 * j, 2)
    a[2 * j] = v[0]
    a[2 * j + 1] = v[1]
    return ((b[2 * i], b[2 * i + 1]), (c[2 * i], c[2 * i + 1]))


# ------------------------------------------------------------ arithmetic (float pipe)
@_njit
def f32v2add(x: tuple[Any, Any], y: tuple[Any, Any]) -> tuple[Any, Any]:
    """``f32v2add``: ``x + y`` element-wise on two float32."""
    return (np.float32(x[0] + y[0]), np.float32(x[1] + y[1]))


@_njit
def f32v2sub(x: tuple[Any, Any], y: tuple[Any, Any]) -> tuple[Any, Any]:
    """``f32v2sub``: ``x - y`` element-wise on two float32."""
    return (np.float32(x[0] - y[0]), np.float32(x[1] - y[1]))


@_njit
def f32v2mul(x: tuple[Any, Any], y: tuple[Any, Any]) -> tuple[Any, Any]:
    """``f32v2mul``: ``x * y`` element-wise on two float32."""
    return (np.float32(x[0] * y[0]), np.float32(x[1] * y[1]))


@_njit
def f32v2axpy(q: Any, x: tuple[Any, Any], y: tuple[Any, Any]) -> tuple[Any, Any]:
    """``f32v2axpy``: ``q * x + y`` on two float32 (the scalar ``q`` held in ``$TAS``,
    set once before the loop)."""
    s = np.float32(q)
    return (np.float32(s * x[0] + y[0]), np.float32(s * x[1] + y[1]))


@_njit
def f16v4add(x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """``f16v4add``: ``x + y`` element-wise on four halves."""
    return (x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3])


@_njit
def f16v4sub(x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """``f16v4sub``: ``x - y`` element-wise on four halves."""
    return (x[0] - y[0], x[1] - y[1], x[2] - y[2], x[3] - y[3])


@_njit
def f16v4mul(x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """``f16v4mul``: ``x * y`` element-wise on four halves."""
    return (x[0] * y[0], x[1] * y[1], x[2] * y[2], x[3] * y[3])


# ------------------------------------------------------------------------- control
@_njit
def rpt(count: int) -> range:
    """``rpt``: a hardware repeat loop of ``count`` iterations (``for i in rpt(n)``).

    Raises ``ValueError`` when ``count`` is negative or above :data:`RPT_MAX_COUNT`
    (split the loop, as Poplibs' assembly does).
    """
    if count < 0 or count > RPT_MAX_COUNT:
        raise ValueError("rpt: count out of 0 .. 4095 (the 12-bit repeat count)")
    return range(count)


@_njit
def delay(cycles: int) -> None:
    """``delay``: idle the supervisor for ``cycles`` tile cycles (a constant operand)."""
    return None


#: Intrinsic -> (ISA instruction, operation class of :data:`ipusim.tile.counted.OP_CLASSES`).
#: Each call is one instruction of its class; ``rpt`` also makes its loop's body run as
#: bundles without loop steps, and ``delay`` counts its operand in tile cycles.
INSTRUCTIONS: dict[Any, tuple[str, str]] = {
    load_float2: ("ld64", "load_64"),
    store_float2: ("st64", "store_64"),
    load_half4: ("ld64", "load_64"),
    store_half4: ("st64", "store_64"),
    ld2x64pace: ("ld2x64pace", "load_2x64"),
    ld2xst64pace: ("ld2xst64pace", "load_2x64_store_64"),
    f32v2add: ("f32v2add", "float2_arith"),
    f32v2sub: ("f32v2sub", "float2_arith"),
    f32v2mul: ("f32v2mul", "float2_arith"),
    f32v2axpy: ("f32v2axpy", "float2_arith"),
    f16v4add: ("f16v4add", "half4_arith"),
    f16v4sub: ("f16v4sub", "half4_arith"),
    f16v4mul: ("f16v4mul", "half4_arith"),
    rpt: ("rpt", "rpt"),
    delay: ("delay", "delay"),
}
