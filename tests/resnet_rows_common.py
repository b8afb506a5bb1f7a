"""The 3x3 ResNet-like convolutions of docs/planner.md's second table (rows 16 and 18)
and the target of a preset, shared by the tests of the restated Poplibs convolution
models (``test_poplibs_conv2d_model``, ``test_poplibs_conv2d_forms``)."""

from __future__ import annotations

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.device import Target

#: Row 16: 1 x 56 x 56, 3 x 3 kernel padded by 1, 64 -> 64 channels, HALF (Mk2).
ROW16 = poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 64, 64, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
#: Row 18: batch 4 of 28 x 28, 3 x 3 kernel padded by 1, 128 -> 128 channels, HALF (Mk1).
ROW18 = poplin.ConvParams(HALF, 4, [28, 28], [3, 3], 128, 128, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip


def preset_target(preset: str) -> Target:
    """The target of a graph on a device of the named IPU Model preset."""
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()
