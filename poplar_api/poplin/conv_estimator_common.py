"""Shared parts of the Poplibs convolution vertex estimators: the source commit, the
target constants assumed, argument checks and output zeroing.

Source: graphcore/poplibs at :data:`POPLIBS_COMMIT`, ``lib/poplin/PerformanceEstimation.hpp``
(``getZeroSupervisorVertexCycleEstimate``, ``zeroPartialsRetentionSavings``). The
vertex families' estimators are in :mod:`poplar_api.poplin.conv_estimators` (AMP nx1,
and the public import path of all of them) and :mod:`poplar_api.poplin.mac_estimators`
(HMAC, VMAC).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence

__all__ = [
    "AMP_CHAIN_LENGTH",
    "AMP_COEFF_LOAD_BYTES_PER_CYCLE",
    "AMP_NUM_CONV_UNITS",
    "DATA_PATH_WIDTH_BITS",
    "NUM_WORKER_CONTEXTS",
    "POPLIBS_COMMIT",
    "VECTOR_WIDTH",
    "VMAC_CONV_GROUPS_PER_GROUP",
    "zero_partials_retention_savings",
    "zero_supervisor_cycles",
    "zero_worklist",
]

#: Poplibs commit the estimators are taken from.
POPLIBS_COMMIT = "7eac0f266ced5b064b3284a3cd90d491745b387c"
#: ``Target::getDataPathWidth()`` in bits (ipu2).
DATA_PATH_WIDTH_BITS = 64
#: ``Target::getVectorWidth(type)``: elements per 64-bit data path.
VECTOR_WIDTH = {"float": 2, "half": 4}
#: ``Target::getNumWorkerContexts()`` (ipu2).
NUM_WORKER_CONTEXTS = 6
#: ``getConvUnitMaxPipelineDepth`` (AMP chain length) on ipu2.
AMP_CHAIN_LENGTH = 4
#: ``getConvUnitCoeffLoadBytesPerCycle`` with 128-bit loads (halved without).
AMP_COEFF_LOAD_BYTES_PER_CYCLE = 16
#: AMP conv units a ``ConvPartialnx1`` instantiation may use.
AMP_NUM_CONV_UNITS = (8, 16)
#: VMAC ``convGroupsPerGroup`` instantiations.
VMAC_CONV_GROUPS_PER_GROUP = (4, 8, 16)

# zeroing
_ZERO_WORKER_OVERHEAD = {True: 14, False: 15}  # float, half partials


# ------------------------------------------------------------------------- validation
def _at_least(name: str, value: int, lo: int) -> None:
    if int(value) != value or value < lo:
        raise ValueError(f"{name}={value}: must be an integer >= {lo}")


def _counts(name: str, counts: Sequence[int]) -> list[int]:
    plain = type(counts) is list and all(type(n) is int for n in counts)
    if plain and (not counts or min(counts) >= 0):  # the planner's lists
        return list(counts)
    out = []
    for i, n in enumerate(counts):
        if int(n) != n or n < 0:
            raise ValueError(f"{name}[{i}]={n}: counts must be integers >= 0")
        out.append(int(n))
    return out


class CountLists(list):
    """``partitions[context][k]``: lists of entry counts already known to be valid
    (non-negative ints), as the planner's tile geometry makes them; the estimators
    check their shape but not each entry again (tens of thousands per plan). They are
    read, never changed, so what an estimator derives from them alone may be kept with
    them (:attr:`derived`)."""

    @functools.cached_property
    def derived(self) -> dict:
        """Values an estimator derived from these lists alone, by the estimator's key
        (a plan's candidates estimate the same tile geometry many times)."""
        return {}


def _partitions_3d(
    name: str,
    partitions: Sequence[Sequence[Sequence[int]]],
    kernel_size: int,
    num_worker_contexts: int,
) -> list[list[list[int]]]:
    """Check ``partitions[context][k][entry]``: at most ``W`` contexts, ``kernel_size``
    kernel positions each, counts >= 0."""
    if len(partitions) > num_worker_contexts:
        raise ValueError(
            f"{name} has {len(partitions)} worker contexts; required at most "
            f"num_worker_contexts={num_worker_contexts}"
        )
    out = []
    trusted = isinstance(partitions, CountLists)
    for c, per_k in enumerate(partitions):
        if trusted and len(per_k) == kernel_size:  # (lists: no number test, an ABC's)
            out.append(per_k)
            continue
        if isinstance(per_k, numbers.Number) or len(per_k) != kernel_size:
            got = "a number" if isinstance(per_k, numbers.Number) else f"{len(per_k)} lists"
            raise ValueError(
                f"{name}[{c}] has {got}; required one list of entry counts per kernel "
                f"position ({kernel_size})"
            )
        rows = []
        for k, entries in enumerate(per_k):
            if isinstance(entries, numbers.Number):
                raise ValueError(f"{name}[{c}][{k}]={entries}: required a list of entry counts")
            rows.append(_counts(f"{name}[{c}][{k}]", entries))
        out.append(rows)
    return out


def _balance(per_worker: Sequence[int], num_worker_contexts: int) -> tuple[int, int]:
    """``(max, lo)`` of ``W * worker`` cycles; ``lo`` is 0 with fewer than ``W`` contexts
    (Poplibs' ``minWorkerCycles`` starts at 0 then)."""
    scaled = [num_worker_contexts * c for c in per_worker]
    hi = max(scaled, default=0)
    lo = min(scaled) if len(scaled) >= num_worker_contexts and scaled else 0
    return hi, lo


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------- zeroing
def zero_partials_retention_savings(float_partials: bool) -> int:
    """``zeroPartialsRetentionSavings``: 9 float / 10 half partials."""
    return 9 if float_partials else 10


def zero_worklist(zeros_info: int, num_worker_contexts: int) -> list[int]:
    """The per-worker zeroing worklist the vertex estimators build: ``ceil(zerosInfo /
    W)`` elements for each of the ``W`` workers."""
    _at_least("zeros_info", zeros_info, 0)
    _at_least("num_worker_contexts", num_worker_contexts, 1)
    return [_ceil_div(zeros_info, num_worker_contexts)] * num_worker_contexts


def zero_supervisor_cycles(
    worker_elems: Sequence[int],
    num_groups: int,
    data_path_width: int,
    num_worker_contexts: int,
    float_partials: bool,
) -> int:
    """``getZeroSupervisorVertexCycleEstimate``: zero ``num_groups`` partials vectors.

    Parameters
    ----------
    worker_elems
        Partials elements each worker zeroes per group (one count per context).
    num_groups
        Output vectors zeroed (``numOutGroups * numConvGroups`` in the callers).
    data_path_width
        Bits per load/store (64): ``data_path_width / 32`` float or ``/ 16`` half
        elements per cycle.
    num_worker_contexts
        ``W``: the slowest worker's cycles are multiplied by it.
    float_partials
        Partials are FLOAT rather than HALF.

    Returns
    -------
    int
        ``num_groups * W * max_c (ceil(n_c / vectorWidth) + (14|15) - (9|10))``.
    """
    elems = _counts("worker_elems", worker_elems)
    _at_least("num_groups", num_groups, 0)
    _at_least("num_worker_contexts", num_worker_contexts, 1)
    bits = 32 if float_partials else 16
    if int(data_path_width) != data_path_width or data_path_width < bits:
        raise ValueError(
            f"data_path_width={data_path_width}: must be an integer >= {bits} bits (one "
            f"{'float' if float_partials else 'half'} partial)"
        )
    width = data_path_width // bits
    worst = max(
        (
            _ceil_div(n, width)
            + _ZERO_WORKER_OVERHEAD[bool(float_partials)]
            - zero_partials_retention_savings(float_partials)
            for n in elems
        ),
        default=0,
    )
    return worst * num_worker_contexts * num_groups
