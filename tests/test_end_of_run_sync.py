"""Every run ends with an internal sync of all tiles, and the IPU Model presets take the
IPU Model's default sync settings.

The sync's cost is worked out here from the sync controller's rule (docs/machine.md,
"Sync"): the last tile to arrive releases every tile ``min_sync_delay_cycles +
relative_delay[tile]`` later, so a run's total grows by the sync delay of its farthest
tile, and by nothing when both delays are off (``minIPUSyncDelay = 0``, ``NO_DELAY``).
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Bump, mapped

from ipusim.config import load_config
from ipusim.sync.controller import relative_sync_delays
from poplar_api import INT, Engine, Graph, IPUModel, SyncDelayType
from poplar_api import program as prog
from poplar_api.lowering.emit import END_OF_RUN_SYNC

ESTIMATE = 7  # thread cycles of the one vertex


def _engine(delay: int | None, relative: SyncDelayType | None) -> Engine:
    """One compute set of one local vertex on tile 2 of the tiny machine, run once."""
    model = IPUModel("tiny")
    model.minIPUSyncDelay = delay
    model.relativeSyncDelay = relative
    device = model.createDevice()
    g = Graph(device.getTarget())
    g.addCodelets(Bump)
    c = mapped(g, INT, [], "c", tile=2)
    cs = g.addComputeSet("bump")
    v = g.addVertex(cs, Bump, {"c": c})
    g.setTileMapping(v, 2)
    g.setPerfEstimate(v, ESTIMATE)
    e = Engine(g, prog.Execute(cs))
    e.load(device)
    e.run(0)
    return e


def auto_sync(cfg):
    """The tiny preset's sync section with the relative delay ``auto``."""
    return cfg.sync.model_copy(update={"relative_delay": "auto"})


def _compute_cycles(e: Engine) -> int:
    """The cycle at which the compute set ends (before the run's last sync)."""
    return max(r.last_cycle for r in e.getTrace().records if r.name != END_OF_RUN_SYNC)


def test_the_run_ends_with_an_internal_sync_of_every_tile():
    e = _engine(0, SyncDelayType.NO_DELAY)
    last = e.getTrace().records[-1]
    assert (last.kind, last.name) == ("sync", END_OF_RUN_SYNC)
    assert last.step.sync_kind == "internal" and last.step.ipus is None
    assert last.tile_cycles.shape == (load_config("tiny").num_tiles,)
    # with the delays off it costs nothing: the total is where the compute set ends
    assert e.getTrace().total_cycles == _compute_cycles(e)


@pytest.mark.parametrize("delay", [1, 15, 222])
def test_the_last_sync_costs_the_farthest_tiles_delay(delay):
    cfg = load_config("tiny")
    flat = _engine(delay, SyncDelayType.NO_DELAY)
    assert flat.getTrace().total_cycles == _compute_cycles(flat) + delay
    auto = _engine(delay, SyncDelayType.AUTO)
    farthest = int(relative_sync_delays(cfg.model_copy(update={"sync": auto_sync(cfg)})).max())
    assert farthest > 0
    assert auto.getTrace().total_cycles == _compute_cycles(auto) + delay + farthest


def test_every_run_of_an_engine_ends_with_the_sync():
    e = _engine(0, SyncDelayType.NO_DELAY)
    e.run(0)
    names = [r.name for r in e.getTrace().records]
    assert names[-1] == END_OF_RUN_SYNC and names.count(END_OF_RUN_SYNC) == 1  # per trace


@pytest.mark.parametrize("preset", ["mk1-ipumodel", "mk2-ipumodel", "bow-ipumodel"])
def test_the_ipu_model_presets_take_the_default_sync_with_its_fit_recorded(preset):
    cfg = load_config(preset)
    assert cfg.sync.relative_delay == "auto"  # Poplar's IPUModel default, AUTO
    fit = cfg.provenance["sync_delay"]
    assert fit["after"] == {"sync.min_sync_delay_cycles": cfg.sync.min_sync_delay_cycles}
    assert fit["loss_after"] < fit["loss_before"]
    # a device made with the tutorials' settings has no delay at all
    model = IPUModel({"mk1-ipumodel": "ipu1", "mk2-ipumodel": "ipu2"}.get(preset, "ipu21"))
    model.minIPUSyncDelay = 0
    model.relativeSyncDelay = SyncDelayType.NO_DELAY
    tut = model.createDevice().getTarget().config
    assert tut.sync.min_sync_delay_cycles == 0
    assert not np.any(relative_sync_delays(tut))
