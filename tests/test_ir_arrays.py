"""IR arrays (``ipusim.ir._array``): a flat read-only array of the IR's dtype, equal to
numpy's conversion of the values, never sharing memory with a writable input (a
caller may change it after the step is made), and not copied again when the input is
a read-only contiguous flat array of that dtype already."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from ipusim.errors import IRValidationError


def _inputs(rng: np.random.Generator):
    n = int(rng.integers(0, 40))
    base = rng.integers(-50, 50, 2 * n + 4)
    yield base[:n].tolist()
    yield base[:n].astype(np.int64)
    yield base[:n].astype(np.int32)
    yield base[:n].astype(np.float64)  # whole numbers
    yield base[: 2 * (n // 2)].astype(np.int64).reshape(2, -1)
    yield base[: 2 * n : 2].astype(np.int64)  # not contiguous
    yield base[:n].astype(np.int64) != 0
    frozen = base[:n].astype(np.int64)
    frozen.flags.writeable = False
    yield frozen
    yield frozen[::2]  # read-only, not contiguous


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", [np.int64, np.bool_])
def test_ir_arrays_equal_numpys_conversion_and_never_share_a_writable_input(seed, dtype):
    rng = np.random.default_rng(seed)
    for values in _inputs(rng):
        want = np.array(np.asarray(values), dtype=dtype).reshape(-1)
        got = ir._array(values, dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tolist() == want.tolist()
        assert not got.flags.writeable and got.flags.c_contiguous
        if isinstance(values, np.ndarray) and values.flags.writeable:
            assert not np.shares_memory(got, values)
            values[...] = 1 if values.dtype != bool else ~values
            assert got.tolist() == want.tolist()  # (unchanged by the caller's write)


def test_a_read_only_flat_array_of_the_dtype_is_kept_itself():
    values = np.arange(10, dtype=np.int64)
    values.flags.writeable = False
    assert ir._array(values, np.int64) is values
    assert ir._array(values, np.bool_) is not values
    strided = values[::3]
    assert ir._array(strided, np.int64) is not strided


def test_a_fraction_is_refused():
    with pytest.raises(IRValidationError, match="not a whole number"):
        ir._array(np.array([1.0, 2.5]), np.int64)
