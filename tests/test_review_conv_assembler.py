"""The convolution partials' field assembler (``poplar_api/poplin/conv_blocks.py``,
``Assembler``): every vertex's vector sizes are written, also for a shape whose pieces
hold no elements (a pattern of zero positions with one size-0 piece per vertex), as the
assembler did before it gathered rows in compiled passes."""

from __future__ import annotations

import numpy as np

from poplar_api.poplin.conv_blocks import Assembler


def test_pieces_without_elements_get_their_zero_sizes():
    asm = Assembler(4)
    source = np.arange(100, 120, dtype=np.int64)
    # vertices 0 and 2: two pieces (3 and 2 elements) gathered at bases 0 and 10
    asm.gather(np.array([0, 2]), source, np.array([0, 10]), np.arange(5), np.array([3, 2]))
    # vertices 1 and 3: one piece of no elements
    asm.gather(np.array([1, 3]), source, np.array([0, 0]), np.zeros(0, np.int64), np.array([0]))
    field = asm.field()
    # each vertex's vector sizes, written out from the calls above
    want_sizes = [3, 2, 0, 3, 2, 0]
    want_flat = [100, 101, 102, 103, 104, 110, 111, 112, 113, 114]
    assert field.vectors.tolist() == [2, 1, 2, 1]
    assert field.sizes.tolist() == want_sizes
    assert field.flat.tolist() == want_flat
