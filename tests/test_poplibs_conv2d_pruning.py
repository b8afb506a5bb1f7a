"""The restated Poplibs convolution model's searches cost fewer partitions than exist
(:func:`~poplar_api.poplin.poplibs_conv2d_model.family_plan` prunes by a lower bound,
:func:`~poplar_api.poplin.poplibs_conv2d_forms.amp_floors`' serial floors share the
estimates of equal iterations): their results are those of costing every partition,
computed here by :func:`~poplar_api.poplin.poplibs_conv2d_model.family_costs` of all of
them, on small convolutions."""

from __future__ import annotations

import numpy as np
import pytest
from resnet_rows_common import preset_target

from poplar_api import HALF, poplin
from poplar_api.poplin import poplibs_conv2d_model
from poplar_api.poplin.poplibs_conv2d_forms import _SERIAL_SKIP, _Iterations
from poplar_api.poplin.poplibs_conv2d_model import (
    AMP_GROUPINGS,
    SLIC_CHANS,
    _partitions,
    family_costs,
    family_plan,
    partial_sums,
)

_CONVS = [
    poplin.ConvParams(HALF, 1, [30, 20], [5, 3], 40, 24),
    poplin.ConvParams(HALF, 2, [12, 12], [3, 3], 64, 32, paddingLower=[1, 1], paddingUpper=[1, 1]),
]


def _every_partition(params, target, method: str, proportion: float):
    """The family's least ``(cycles, bytes)``, its tie count and the first partition of
    it, every partition of every grouping costed."""
    bound = int(target.getBytesPerTile() * proportion)
    best = None
    groupings = AMP_GROUPINGS if method == "AMP" else [(SLIC_CHANS, SLIC_CHANS)]
    for groups in groupings:
        splits = _partitions(params, target, method, groups)
        c = family_costs(params, target, method, groups, splits)
        fit = np.flatnonzero(c["ok"] & (c["bytes"] <= bound))
        if not fit.size:
            continue
        cost = min(zip(c["cycles"][fit].tolist(), c["bytes"][fit].tolist(), strict=True))
        if best is None or cost < best[0]:
            same = [i for i in fit if (c["cycles"][i], c["bytes"][i]) == cost]
            best = (cost, len(same), {k: int(v[same[0]]) for k, v in splits.items()})
    return best


def _cases() -> list:
    """Every (first, proportion, method, convolution); the AMP cases of the 5x3 kernel and
    those costing 64 partitions first take 3-5 s of CPU each (every partition costed for
    the reference), so they run with the slow tests; the 3x3 AMP cases costing one
    partition first (the most pruning) and every SLIC case run by default."""
    out = []
    for first in (1, 64):
        for proportion in (0.6, 0.05):
            for method in ("AMP", "SLIC"):
                for name, params in zip(("5x3", "3x3"), _CONVS, strict=True):
                    heavy = method == "AMP" and (name == "5x3" or first == 64)
                    marks = [pytest.mark.slow] if heavy else []
                    out.append(
                        pytest.param(
                            params,
                            method,
                            proportion,
                            first,
                            marks=marks,
                            id=f"{first}-{proportion}-{method}-{name}",
                        )
                    )
    return out


@pytest.mark.parametrize("params,method,proportion,first", _cases())
def test_family_plan_is_that_of_every_partition(
    params, method, proportion, first, monkeypatch
) -> None:
    """Whether 1 or 64 partitions are costed first (the least found then prunes)."""
    monkeypatch.setattr(poplibs_conv2d_model, "_FIRST", first)
    t = preset_target("mk2-ipumodel")
    want = _every_partition(params, t, method, proportion)
    if want is None:
        with pytest.raises(ValueError, match=r"no .* partition"):
            family_plan(params, t, method, proportion)
        return
    got = family_plan(params, t, method, proportion)
    assert (got["cost"], got["ties"], got["splits"]) == (want[0], want[1], want[2])


@pytest.mark.parametrize("kind", ["in", "out"])
def test_serial_iterations_are_family_costs_at_every_cap(kind) -> None:
    """The same :class:`_Iterations` asked for rising and falling caps gives
    :func:`family_costs`' costed partitions and cycles at each cap."""
    t = preset_target("mk2-ipumodel")
    sub = _CONVS[1]
    groups = (16, 8)
    it = _Iterations(sub, t, groups, kind)
    parts = _partitions(sub, t, "AMP", groups)
    for cap in (3000.0, 1500.0, 6000.0, 2500.5, -1.0):
        c = family_costs(sub, t, "AMP", groups, parts, cap, _SERIAL_SKIP[kind])
        costed, cycles = it.costs(cap)
        np.testing.assert_array_equal(costed, c["costed"])
        np.testing.assert_array_equal(cycles, c["cycles"])


def test_partial_sums_are_each_partitions_tile_estimate() -> None:
    """:func:`partial_sums` (the partial-sum term alone, which the serial floors add to
    the other terms they have) is the ``ConvPartialnx1`` planner estimate of each
    partition's tile, its sizes worked out here, and :func:`family_costs`' ``compute``."""
    from poplar_api.poplin.poplibs_amp_estimates import (
        COEFF_LOAD_BYTES_PER_CYCLE,
        nx1_partial_cycles,
    )

    t = preset_target("mk2-ipumodel")
    p, (icg, ocg) = _CONVS[1], (16, 8)  # (batch 2: never ConvPartial1x1Out)
    splits = {k: v[::37] for k, v in _partitions(p, t, "AMP", (icg, ocg)).items()}
    got = partial_sums(p, t, "AMP", (icg, ocg), splits)
    np.testing.assert_array_equal(got, family_costs(p, t, "AMP", (icg, ocg), splits)["compute"])
    up = lambda a, b: -(-a // b)  # noqa: E731
    for i in range(got.size):
        s = {k: int(v[i]) for k, v in splits.items()}
        want = nx1_partial_cycles(
            batch=up(2, s["batchSplit"]),
            field_shape=(up(12, s["fieldSplit[0]"]), up(12, s["fieldSplit[1]"])),
            kernel_shape=(up(3, s["kernelSplit[0]"]), 3), filter_height=1, conv_groups=1,
            in_groups=up(64 // icg, s["inChanSplit.parallel"]),
            out_groups=up(32 // ocg, s["outChanSplit.parallel"]), out_chans_per_group=ocg,
            num_conv_units=8, weight_bytes_per_conv_unit=32,
            coeff_load_bytes_per_cycle=COEFF_LOAD_BYTES_PER_CYCLE, workers=6,
            float_activations=False, float_partials=True,
        )  # fmt: skip
        assert got[i] == want, s
    with pytest.raises(ValueError, match=r"partial_sums: AMP grouped \(2, 8\)"):
        partial_sums(p, t, "AMP", (2, 8), splits)
