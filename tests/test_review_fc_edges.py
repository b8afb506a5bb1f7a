"""The three fully-connected training passes (``fullyConnectedPass`` matMuls, planned
jointly or separately as ``poplin.fc_joint`` decides: on ``tiny`` only the last HALF
layer here gets a joint plan) at edge sizes: a batch of one, one input or output,
sizes that are no multiple of any grouping, several groups; values against numpy."""

from __future__ import annotations

import pytest
from test_fc_joint import check_fc_passes

from poplar_api import FLOAT, HALF


@pytest.mark.parametrize(
    "layer", [(1, 1, 3, 5), (1, 3, 17, 1), (1, 5, 1, 9), (3, 2, 7, 6), (1, 9, 33, 18)]
)
@pytest.mark.parametrize("in_type", [FLOAT, HALF])
def test_fc_passes_at_edge_sizes_match_numpy(in_type, layer) -> None:
    check_fc_passes(layer, in_type)
