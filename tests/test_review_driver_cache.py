"""The driver cache's key covers the code of Numba objects a kernel reaches.

An ``@intrinsic`` or ``@vectorize`` function in a codelet file is a Numba object whose
``repr`` names it but does not describe its code; editing it must give its driver a
new key, or a later run loads the machine code compiled from the old definition.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.test_driver_cache import CALLER, DATA, _load, _run, _write, cache  # noqa: F401

#: The codelet of :data:`tests.test_driver_cache.CALLER` (vertex ``Caller``), its
#: ``out[i]`` the expression ``call`` of ``in_[i]`` and a ``factor`` defined above it.
SCALE = CALLER.replace("{imports}", "")

INTRINSIC = """
from numba.core import types as nbt
from numba.extending import intrinsic


@intrinsic
def factor(typingctx):
    def codegen(context, builder, signature, args):
        return context.get_constant(nbt.float32, {factor})
    return nbt.float32(), codegen
""" + SCALE.replace("{call}", "in_[i] * factor()")

VECTORIZE = """
import numba


@numba.vectorize(["float32(float32)"])
def factor(x):
    return x * {factor}
""" + SCALE.replace("{call}", "factor(in_[i])")


@pytest.mark.parametrize("source", [INTRINSIC, VECTORIZE], ids=["intrinsic", "vectorize"])
def test_an_edited_numba_helper_is_not_run_stale(
    cache: Path,  # noqa: F811
    tmp_path: Path,
    source: str,
) -> None:
    path = tmp_path / "numba_helper.py"
    for factor in (2.0, 5.0, 2.0):
        _write(path, source.format(factor=factor))
        out, _ = _run(_load(path, "r7_numba_helper").Caller, DATA)
        np.testing.assert_array_equal(out, DATA * np.float32(factor))
    # one entry per definition: the first is found again for the third run
    assert len(list(cache.glob("drv_*.py"))) == 2
