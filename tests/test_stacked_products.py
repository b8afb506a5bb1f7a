"""What the replicated convolution partials rely on: a ``matmul`` over stacked operands
(a leading replica axis, then vertices) gives each slice the bits of the same product
computed alone.

``poplar_api.poplin.conv_vertices._run_class`` computes a class's products on
``[replicas, vertices, rows, channels]`` stacks, and a one-replica run computes the same
vertex's product on its own; numpy runs a stacked ``matmul`` as one BLAS call per slice
with the slice's own shape and strides, so the two agree bit for bit. Stacking the
replicas' rows into one taller product does not give that guarantee (BLAS may choose
another kernel, or another order of summation, for the taller shape), which is why the
partials keep one product per vertex and replica.
"""

from __future__ import annotations

import numpy as np
import pytest


def _shapes(seed: int, count: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    picked = [(int(rng.integers(1, 40)), int(rng.integers(1, 40)), int(rng.integers(1, 300)))
              for _ in range(count)]  # fmt: skip
    # single rows or columns (BLAS gemv/dot), and the MLP step's partial shapes
    return [*picked, (1, 1, 16), (1, 8, 8), (8, 1, 8), (9, 8, 8), (2, 2, 16), (1, 128, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_stacked_matmul_gives_every_slice_the_bits_of_its_own_call(dtype):
    rng = np.random.default_rng(1)
    replicas, vertices = 3, 4
    for m, n, k in _shapes(2, 60):
        x = rng.standard_normal((replicas, vertices, m, k)).astype(dtype)
        w = rng.standard_normal((replicas, vertices, n, k)).astype(dtype)
        stacked = x @ w.swapaxes(-1, -2)  # transposed weights, as the partials read them
        for r in range(replicas):
            for v in range(vertices):
                alone = x[r, v] @ w[r, v].T
                assert np.array_equal(stacked[r, v].view(np.uint8), alone.view(np.uint8)), (
                    f"shape {(m, n, k)} {np.dtype(dtype).name}: replica {r}, vertex {v}"
                )


def test_a_stacked_matmul_of_half_values_widened_to_float32_is_exact_per_slice():
    rng = np.random.default_rng(3)
    for m, n, k in _shapes(4, 20):
        x = rng.standard_normal((2, 5, m, k)).astype(np.float16).astype(np.float32)
        w = rng.standard_normal((2, 5, n, k)).astype(np.float16).astype(np.float32)
        stacked = x @ w.swapaxes(-1, -2)
        alone = np.stack([[x[r, v] @ w[r, v].T for v in range(5)] for r in range(2)])
        np.testing.assert_array_equal(stacked.view(np.uint32), alone.view(np.uint32))
