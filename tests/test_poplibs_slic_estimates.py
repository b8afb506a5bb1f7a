"""Poplibs' planner estimate of the SLIC vertices' partial sums
(:mod:`poplar_api.poplin.poplibs_slic_estimates`), written out here from
``PerformanceEstimation.hpp`` (graphcore/poplibs 7eac0f26) for HALF inputs with FLOAT
partials on 2 conv-unit chains."""

from __future__ import annotations

import pytest

from poplar_api.poplin.poplibs_slic_estimates import (
    slic_inner_cycles,
    slic_partial_cycles,
    slic_weight_load_cycles,
)

#: The worker preamble of getConvPartialSlicSupervisorInnerLoopCycleEstimateHalfFloat
#: (get worker id 2, output pointers 3, input pointer 1, DeltaN 2 + 4, base 2, divide 2,
#: implicit-zero flag 1).
PREAMBLE = 2 + 3 + 1 + 2 + 4 + 2 + 2 + 1


def _row(n: int, zeroing: bool) -> int:
    """A row of ``n >= 5`` elements: 10 (+1 zeroing) + 3 (FLOAT partials) + 2 passes of
    ``15 + (n - 5) - 1``."""
    return 10 + int(zeroing) + 3 + 2 * (15 + (n - 5) - 1)


def test_inner_loop_written_out() -> None:
    lists = [[5], [], [7, 9], [], [], []]
    for zeroing in (False, True):
        slowest = PREAMBLE + _row(7, zeroing) + _row(9, zeroing)
        assert slic_inner_cycles(lists, 6, 2, 1, True, zeroing) == slowest * 6
    # short rows: 1 element not zeroing 7 + 6, zeroing 10 + 3; 3 elements not zeroing
    # 7 + 1 + 2 + 2 + 1 + 2 + 2 + 3, each one less with FLOAT partials
    assert slic_inner_cycles([[1]], 1, 2, 1, True, False) == PREAMBLE + 10 + 3 + 2 * 12
    assert slic_inner_cycles([[1]], 1, 2, 1, True, True) == PREAMBLE + 11 + 3 + 2 * 12
    assert slic_inner_cycles([[3]], 1, 2, 1, True, False) == PREAMBLE + 10 + 3 + 2 * 19


def test_weight_loads() -> None:
    assert slic_weight_load_cycles(1, 4, 6) == 6 + 6 + 6 + 16
    assert slic_weight_load_cycles(2, 2, 6) == 9 + 6 + 12 * 6 + 6 + 16
    assert slic_weight_load_cycles(4, 1, 6) == 9 + 6 + 10 * 6 + 6 + 16


def test_outer_loop_written_out() -> None:
    """A tile of 1 x 30 outputs (5 a worker, one row each) and a 3 x 3 kernel: 3 sub-kernels
    of a 1 x 4 window; the supervisor's preamble 28, its group loop 15 + 1, its sub-kernel
    loop ``3 (34 + 3 + 2 + 1 + 6 + 1 + 6 + 1) + 6 x 2 + 1``, the workers' first pass
    zeroing and two more not."""
    zero = (PREAMBLE + _row(5, True)) * 6
    plain = (PREAMBLE + _row(5, False)) * 6
    expected = 28 + 15 + 1 + 3 * (34 + 3 + 2 + 1 + 6 + 1 + 6 + 1) + 13 + zero + 2 * plain
    assert slic_partial_cycles(1, (1, 30), (3, 3), 1, 1, 4, 6) == expected


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="8 conv groups a group"):
        slic_inner_cycles([[5]], 1, 2, 8, True, False)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        slic_partial_cycles(1, (30,), (3,), 1, 1, 4, 6)
