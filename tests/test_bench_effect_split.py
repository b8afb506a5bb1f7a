"""``benchmarks/bench_multi_ipu.py --split``: where a later run of the MLP step's CPU goes.

The split's parts must add up (the effects and the rest make the run, the effects by
name make the effects), name the step's compute sets and collectives, time the
convolution partials' compiled pass where the step uses it, and leave the engine's
effects and the pass as they were.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_multi_ipu as bench  # noqa: E402

from poplar_api.poplin import conv_chain  # noqa: E402


def test_split_adds_up_and_puts_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:
    made: dict = {}
    build = bench._mlp_engine

    def keep(*args, **kwargs):
        made.update(build(*args, **kwargs))
        made["effects"] = list(made["engine"]._lowered.effects)
        return made

    monkeypatch.setattr(bench, "_mlp_engine", keep)
    pass_run = conv_chain._run
    split = bench.effect_split(2, batch=16, hidden=128, runs=2, warm=1)

    assert split["replicas"] == 2 and split["cycles"] > 0
    assert split["effects"] + split["rest"] == pytest.approx(split["run"])
    assert sum(split["by_effect"].values()) == pytest.approx(split["effects"])
    assert min(split["by_effect"].values()) >= 0 and split["rest"] > 0
    for name in ("dense1/Convolve", "dense1/wgrad/Convolve", "w1/update", "gradients/allReduce"):
        assert name in split["by_effect"]
    times = list(split["by_effect"].values())
    assert times == sorted(times, reverse=True)
    # hidden 128: the first layer's partials are 8x8 groups, computed by the pass
    assert 0 < split["pass"] < split["effects"]
    assert conv_chain._run is pass_run
    restored = made["engine"]._lowered.effects
    assert len(restored) == len(made["effects"])
    assert all(a is b for a, b in zip(restored, made["effects"], strict=True))
