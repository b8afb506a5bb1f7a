"""Stream-copy merging (``opt.maxCopyMergeSize``): adjacent host copies of one direction
share one host sync, so n small copies cost n - 1 host syncs less; the option limits
the bytes of a merged copy; not set (or ``0``) nothing is merged. Values are
unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import tiny_device

from ipusim.sync.controller import relative_sync_delays
from poplar_api import FLOAT, Engine, Graph
from poplar_api import program as prog

N = 5
ELEMS = 8  # floats per copy, one on each tile: 32 bytes


def _run(options: dict[str, str], interleave: bool = False):
    device = tiny_device()
    g = Graph(device.getTarget())
    progs = []
    for k in range(N):
        t = g.addVariable(FLOAT, [ELEMS], f"t{k}")
        for i in range(ELEMS):  # one element per tile: every tile equally busy
            g.setTileMapping(t[i], i)
        src = g.addHostToDeviceFIFO(f"in{k}", FLOAT, ELEMS)
        dst = g.addDeviceToHostFIFO(f"out{k}", FLOAT, ELEMS)
        progs.append((prog.Copy(src, t), prog.Copy(t, dst)))
    if interleave:  # in0, out0, in1, out1, ...: no two neighbours of one direction
        seq = [p for pair in progs for p in pair]
    else:  # every input, then every output
        seq = [p for p, _ in progs] + [q for _, q in progs]
    e = Engine(g, prog.Sequence(seq), options)
    e.load(device)
    outs = {k: np.zeros(ELEMS, np.float32) for k in range(N)}
    for k in range(N):
        e.connectStream(f"in{k}", np.full(ELEMS, k + 1, np.float32))
        e.connectStream(f"out{k}", outs[k])
    e.run(0)
    for k in range(N):
        np.testing.assert_array_equal(outs[k], np.full(ELEMS, k + 1, np.float32))
    steps = e.getExecutionProfile()["simulation"]["steps"]
    # the host syncs of the copies (not the internal sync that ends the run)
    syncs = [s for s in steps if s["type"] == "Sync" and s["name"].endswith("/HostSync")]
    return e, steps, syncs


def _host_sync_cycles(cfg) -> int:
    """A host sync's length once every tile has arrived: the host's part and the
    slowest tile's sync delay (ipusim/sync/controller.py, docs/machine.md)."""
    slowest = int(relative_sync_delays(cfg).max(initial=0))
    return cfg.sync.host_sync_cycles + cfg.sync.min_sync_delay_cycles + slowest


def test_adjacent_copies_share_one_host_sync():
    _, steps, syncs = _run({"opt.maxCopyMergeSize": str(1 << 20)})
    _, plain_steps, plain_syncs = _run({})
    assert len(plain_syncs) == 2 * N  # not set: one per copy
    assert len(_run({"opt.maxCopyMergeSize": "0"})[2]) == 2 * N
    assert len(syncs) == 2  # one per direction
    cfg = tiny_device().getTarget().config
    saved = plain_steps[-1]["cyclesTo"] - steps[-1]["cyclesTo"]
    assert saved == 2 * (N - 1) * _host_sync_cycles(cfg)
    # every copy still moves its data: the same stream copies and exchanges
    kinds = ("StreamCopy", "DoExchange")
    assert [s["name"] for s in steps if s["type"] in kinds] == [
        s["name"] for s in plain_steps if s["type"] in kinds
    ]


@pytest.mark.parametrize(
    ("limit", "syncs_per_direction"), [("64", 3), ("95", 3), ("96", 2), ("32", 5), ("31", 5)]
)
def test_the_option_limits_the_bytes_of_a_merged_copy(limit, syncs_per_direction):
    # five copies of 32 bytes: 64 or 95 bytes merge two at a time (2 + 2 + 1), 96
    # three (3 + 2), 32 bytes one at a time; a copy larger than the limit never merges
    _, _, syncs = _run({"opt.maxCopyMergeSize": limit})
    assert len(syncs) == 2 * syncs_per_direction


def test_copies_of_other_directions_are_not_merged():
    _, _, syncs = _run({"opt.maxCopyMergeSize": str(1 << 20)}, interleave=True)
    assert len(syncs) == 2 * N
