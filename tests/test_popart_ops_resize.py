"""popart_api's Resize and Upsample (popart_api/ops_resize.py): values against ONNX's
reference evaluator for each mode and coordinate transformation, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward, simulate

import popart_api as popart

OPSET13 = {"ai.onnx": 13, "ai.graphcore": 1}
X = np.arange(1, 21, dtype=np.float32).reshape(1, 1, 4, 5) * np.float32(0.37)


def _resize(scales=None, sizes=None, roi=None, **attrs):
    def build(b, ids):
        c = b.aiOnnx.constant
        inputs = [
            ids[0],
            c(np.asarray(roi if roi is not None else [], np.float32)),
            c(np.asarray(scales if scales is not None else [], np.float32)),
        ]
        if sizes is not None:
            inputs.append(c(np.asarray(sizes, np.int64)))
        return b.aiOnnx.resize(inputs, **attrs)

    return build


CASES = {
    "nearest_up": dict(scales=[1, 1, 2, 1.5], mode="nearest"),
    "nearest_ceil_sizes": dict(sizes=[1, 1, 7, 8], mode="nearest", nearest_mode="ceil"),
    "linear_down_align_corners": dict(
        scales=[1, 1, 0.6, 0.6], mode="linear", coordinate_transformation_mode="align_corners"
    ),
    "linear_up_half_pixel": dict(scales=[1, 1, 1.5, 2], mode="linear"),
    "cubic_exclude_outside": dict(
        scales=[1, 1, 1.75, 1.25], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1
    ),
    "cubic_asymmetric": dict(
        sizes=[1, 1, 6, 3], mode="cubic", coordinate_transformation_mode="asymmetric"
    ),
    "tf_crop_and_resize": dict(
        sizes=[1, 1, 3, 3],
        roi=[0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=10.0,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_resize_against_reference(case: str) -> None:
    check_forward(_resize(**CASES[case]), [X], opsets=OPSET13, rtol=1e-5)


def test_nearest_keeps_integers() -> None:
    x = np.arange(6, dtype=np.int32).reshape(1, 1, 2, 3)
    got = check_forward(_resize(scales=[1, 1, 2, 2], mode="nearest"), [x], opsets=OPSET13)
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))


def test_scales_and_sizes_together_are_refused() -> None:
    x = np.zeros([1, 1, 4, 5], np.float32)
    build = _resize(scales=[1, 1, 2, 2], sizes=[1, 1, 8, 10], mode="nearest")
    with pytest.raises(popart.popart_exception, match="scales"):
        simulate(build, [x], opsets=OPSET13, tiles=4)
