"""The H blur workload's ``ipus`` parameter: the image on the first IPUs of a larger
device times as it does on a device of that many IPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipusim.config import load_config
from ipusim.runner import run_workload

H = str(Path(__file__).resolve().parents[1] / "examples" / "calibration" / "h_gaussian_blur.py")


def test_one_ipu_of_two_times_as_one_ipu() -> None:
    one = run_workload(H, "tiny", {"data_type": "half4"})
    part = run_workload(H, load_config("tiny", overrides={"num_ipus": 2}),
                        {"data_type": "half4", "ipus": 1})  # fmt: skip
    assert one.ok and part.ok
    for key in ("phase_cycles.exchange", "phase_cycles.compute", "phase_cycles.sync"):
        assert part.metrics[key] == one.metrics[key], key
    assert part.metrics["phase_cycles.globExchange"] == 0
    assert part.metrics["global_exchange_bytes"] == 0


def test_more_ipus_than_the_device_has_is_an_error() -> None:
    with pytest.raises(Exception, match="ipus=3"):
        run_workload(H, load_config("tiny", overrides={"num_ipus": 2}), {"ipus": 3})
