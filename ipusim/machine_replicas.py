"""Replicated programs on the machine: a step's costs on replica 0's tiles, repeated
for every replica and kept from run to run (a part of a run's state,
:class:`ipusim.machine.Machine`).

A replicated program's steps name replica 0's tiles (see :class:`ipusim.ir.Program`);
every replica runs the same steps on its own IPUs, so a local step's per-tile costs are
replica 0's repeated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipusim import ir
from ipusim.tile.compute import ComputeCost, compute_cost
from ipusim.trace import StepRecord

__all__ = ["KEPT_STEPS", "ReplicaSteps"]


class ReplicaSteps:
    """Costs of a replicated run's steps (the run provides the attributes below)."""

    cfg: Any
    one_ipu: bool
    replicas: int
    replica_tiles: int
    _replicas_of: dict[int, tuple[ir.Step, np.ndarray, np.ndarray | None]]
    _replica_costs: dict[int, tuple[ir.Step, ComputeCost]] | None
    _active_ipus: dict[int, tuple[np.ndarray, np.ndarray]]

    def _replica_cost(self, step: ir.Compute) -> ComputeCost:
        """A compute step's cost on replica 0's tiles only (its vertices are on them, and
        a tile's cycles depend on its own vertices only), so that a replicated program
        assigns its vertices once, not on every replica's tiles (kept per step)."""
        costs = self._replica_costs
        assert costs is not None
        hit = costs.get(id(step))
        if hit is not None and hit[0] is step:
            return hit[1]
        cost = compute_cost(
            self.cfg.tile, self.replica_tiles, step.vertex_tile, step.vertex_cycles,
            step.vertex_multi,
        )  # fmt: skip
        costs[id(step)] = (step, cost)
        return cost

    def _replicated(
        self, step: ir.Step, tile_cycles: np.ndarray, active: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A local step's per-tile cycles and active cycles for every replica (made once
        per step, as its costs are)."""
        hit = self._replicas_of.get(id(step))
        if hit is None or hit[0] is not step or hit[1].size != self.cfg.num_tiles:
            hit = (
                step,
                _read_only(self._replicate(tile_cycles)),
                None if active is None else _read_only(self._replicate(active)),
            )
            self._replicas_of[id(step)] = hit
        return hit[1], hit[2]

    def _ipu_takes_part(self, rec: StepRecord, ipu: int) -> bool:
        """Whether IPU ``ipu`` has a tile with cycles in a compute or exchange step.

        Only those IPUs place the step in time (its first and last cycle), so a step
        of one IPU is not stretched by another IPU's clock; a step with no cycles
        anywhere spans every IPU, as on a single IPU.
        """
        if self.one_ipu:  # a step with no cycles anywhere spans every IPU
            return True
        key = id(rec.tile_cycles)  # a local step's array is the same in every execution
        active = self._active_ipus.get(key)
        if active is None or active[0] is not rec.tile_cycles:
            cfg = self.cfg
            busy = rec.tile_cycles.reshape(cfg.num_ipus, cfg.tile.tiles_per_ipu).any(axis=1)
            if not busy.any():
                busy[:] = True
            active = self._active_ipus[key] = (rec.tile_cycles, busy)
        return bool(active[1][ipu])

    def _replicate(self, per_tile: np.ndarray) -> np.ndarray:
        """A per-tile array of replica 0 repeated for every replica (one broadcast copy:
        ``np.tile`` goes through ``repeat``, several times slower on 23,552 tiles)."""
        first = np.asarray(per_tile)[: self.replica_tiles]
        out = np.empty((self.replicas, first.size), first.dtype)
        out[...] = first
        return out.reshape(-1)


#: Steps whose replicated costs a machine keeps from run to run, at most.
KEPT_STEPS = 1 << 14


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values
