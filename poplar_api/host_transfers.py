"""What the engine's host reads and writes cost on the machine.

``Engine.writeTensor`` and ``Engine.readTensor`` (and PopART's ``weightsFromHost`` and
``weightsToHost``, which call them) move a tensor's bytes between the host and the
tiles that hold it. On an IPU they are host exchanges like a stream copy: the IPUs sync
with the host, the bytes cross the host link, and each tile sends or receives its own
part at its exchange rate. :func:`host_transfer_program` builds that as a machine
program, which the engine runs on its device's machine after moving the values, so the
transfer takes simulated time on the host link (shared with nothing else: the engine
runs it between programs) and has a trace of its own (``Engine.getHostTransferTraces``).

A transfer larger than the host's largest single copy (``host.max_copy_bytes``) is
split into copies of whole tiles that each fit, as a runtime would split it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipusim import ir
from ipusim.machine import Machine
from ipusim.trace import Trace
from poplar_api.graph_state import is_nonreplicated
from poplar_api.lowering.context import split_wide

__all__ = ["host_transfer_program", "run_host_transfer"]


def run_host_transfer(
    machine: Machine, state: Any, t: Any, to_device: bool, name: str, replicas: int = 1
) -> Trace | None:
    """Run the host transfer of tensor ``t`` (of the graph ``state``) on ``machine``
    and return its trace, or None when the tensor has no elements. A non-replicated
    view (``getNonReplicatedTensor``) moves the elements of the replicas it names; any
    other tensor moves its elements in every replica."""
    typ = t.elementType()
    cfg = machine.config
    space = state.space(typ)
    if is_nonreplicated(t, state):  # elements of named replicas: machine-wide tiles
        replica, local = split_wide(t._id_index())
        tiles = space.tiles_of(local) + replica * (cfg.num_tiles // replicas)
        replicas = 1
    else:
        tiles = space.tiles_of(t._id_index())
    program = host_transfer_program(
        tiles, typ.size, to_device, name, cfg.num_tiles, cfg.host.max_copy_bytes, replicas
    )
    return None if program is None else machine.run(program)


def host_transfer_program(
    tiles: np.ndarray,
    element_bytes: int,
    to_device: bool,
    name: str,
    num_tiles: int,
    max_copy_bytes: int,
    replicas: int = 1,
) -> ir.Program | None:
    """The machine program of one host read or write, or None when nothing moves.

    Parameters
    ----------
    tiles
        int[elements]: the tile of each element moved (replica 0's tile ids).
    element_bytes
        Bytes of one element.
    to_device
        True for a write (host to tiles), False for a read.
    name
        Debug name of the steps (e.g. ``writeTensor('w')``).
    num_tiles
        Tiles of the machine (bounds the per-tile byte counts).
    max_copy_bytes
        The host's largest single copy; bigger transfers become several copies.
    replicas
        Replicas of the engine's program: each moves its own bytes.
    """
    per_tile = np.bincount(np.asarray(tiles, np.int64), minlength=num_tiles) * int(element_bytes)
    moved = np.flatnonzero(per_tile)
    if moved.size == 0:
        return None
    nbytes = per_tile[moved]
    # whole tiles per copy, each copy at most max_copy_bytes (a tile larger than that
    # alone in its copy: the machine then names the copy that is too large)
    group = np.zeros(moved.size, np.int64)
    total = 0
    current = 0
    for k, b in enumerate(nbytes.tolist()):
        if total and total + b > max_copy_bytes:
            current += 1
            total = 0
        total += b
        group[k] = current
    direction = ir.Direction.HOST_TO_DEVICE if to_device else ir.Direction.DEVICE_TO_HOST
    steps: list[ir.Node] = [ir.Sync(name=f"{name}/Sync", sync_kind=ir.SyncKind.HOST)]
    for g in range(current + 1):
        part = group == g
        steps.append(
            ir.StreamCopy(
                name=name if current == 0 else f"{name}/{g}",
                direction=direction,
                tile=moved[part],
                num_bytes=nbytes[part],
                stream=name,
            )
        )
    return ir.Program(entries=(ir.Sequence(steps, name=name),), replicas=replicas)
