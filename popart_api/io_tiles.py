"""PopART's I/O tiles (``SessionOptions.numIOTiles``): a tile set of each IPU that holds
the streamed inputs and anchors and copies them to and from the host while the other
tiles compute.

What PopART does (graphcore/popart d2f20d78):

* ``willow/src/popx/irlowering.cpp`` (``IrLowering::prepareGraph``): with virtual
  graphs enabled and ``numIOTiles > 0`` (an even number, at least 32, below the tiles
  per IPU, else an error), each IPU's graph is split into a compute graph and an I/O
  graph, the I/O tiles ``gcl::perIPUTiles(graph, 0, numIOTiles)`` and the compute tiles
  the rest; ops run on the compute graph. Without virtual graphs the option does
  nothing.
* ``willow/src/transforms/iocomputetilecopy.cpp``: a tensor on the I/O tiles read by an
  op on the compute tiles (or the reverse) gets an ``IoTileCopyOp`` between the sets.
* ``willow/src/transforms/overlapio.cpp`` with ``ExchangeStrategy::OverlapInnerLoop``:
  the host loads of the next batch and the stores of the previous one run on the I/O
  tiles while the compute tiles process the current batch.

Here (:func:`split_graphs`, :func:`input_program`, :func:`overlapped_program`): the
I/O tiles of an IPU are its first ``numIOTiles`` tiles (our reading of
``gcl::perIPUTiles`` with offset 0), each input lands in a variable on them
(``<id>/ioTiles``, mapped linearly), each ``ALL`` anchor leaves from one, and the
inference step runs PopART's overlapped inner loop: a prologue loading batch 0, then
per batch ``[hand over the inputs to the compute tiles; load the next batch and store
the previous anchors on the I/O tiles; the forward pass on the compute tiles; hand the
anchors over to the I/O tiles]``, and an epilogue storing the last anchors. The forward
pass is one Poplar function called each batch (its code is compiled once). In the
simulator the I/O tiles' host copies leave the compute tiles free (their host sync and
copy involve the I/O tiles only; the syncs of exchanges among the compute tiles leave
the I/O tiles out: docs/machine.md, "I/O tiles"), so a batch lasts about
``hand-over + max(compute, host copies) + hand-over``.

Differences from PopART, stated: PopART puts a tensor on the I/O tiles only when its
``InputSettings``/``AnchorReturnType`` tile set is ``TileSet.IO`` and overlaps it by its
``ExchangeStrategy``; here ``numIOTiles > 0`` does both for every streamed input and
``ALL`` anchor of an inference session. A training session gets the split (inputs
land on the I/O tiles and are handed over before the batch) without the overlapped
loop. Anchors other than ``ALL``, replication and pipelining with I/O tiles are refused
by name.
"""

from __future__ import annotations

from typing import Any

from popart_api.errors import popart_exception
from popart_api.options import VirtualGraphMode
from poplar_api import Graph, Tensor
from poplar_api import program as pprog
from poplar_api.poputil import mapTensorLinearly

__all__ = ["input_program", "overlapped_program", "split_graphs"]


def split_graphs(session: Any, graph: Graph, tiles_per_ipu: int) -> list[Graph] | None:
    """The compute graph of each IPU when ``session.options.numIOTiles`` reserves I/O
    tiles (their graphs go to ``session.io_graphs``), else None (``io_graphs`` empty).

    Raises
    ------
    popart_exception
        ``numIOTiles`` odd, below 32, or not below the tiles per IPU (PopART's rules).
    """
    session.io_graphs = []
    n = session.options.numIOTiles
    if n == 0 or session.options.virtualGraphMode is VirtualGraphMode.Off:
        return None  # PopART reserves I/O tiles only with virtual graphs
    if n < 32 or n % 2:
        raise popart_exception(
            f"{session._kind}.prepareDevice: SessionOptions.numIOTiles = {n} is an invalid "
            "number of I/O tiles; it must be an even number >= 32 (PopART's rule); hint: "
            "32, 64, ... or 0 for none"
        )
    if n >= tiles_per_ipu:
        raise popart_exception(
            f"{session._kind}.prepareDevice: SessionOptions.numIOTiles = {n} leaves no "
            f"compute tiles on an IPU of {tiles_per_ipu} tiles; it must be below the tiles "
            "per IPU; hint: fewer I/O tiles or a device with more tiles per IPU"
        )
    if session.replicas > 1 or session.options.enablePipelining:
        raise popart_exception(
            f"{session._kind}.prepareDevice: SessionOptions.numIOTiles = {n} with "
            f"{'replication' if session.replicas > 1 else 'pipelining'} is not modelled; "
            "hint: numIOTiles = 0"
        )
    compute = []
    for ipu in range(max(session.ipus, 1)):
        whole = graph.createVirtualGraph(ipu * tiles_per_ipu, (ipu + 1) * tiles_per_ipu)
        compute.append(whole.createVirtualGraph(n, tiles_per_ipu))
        session.io_graphs.append(whole.createVirtualGraph(0, n))
    return compute


def input_program(
    session: Any, graph: Graph, tid: str, typ: Any, var: Tensor, ipu: int
) -> pprog.Sequence:
    """The program bringing input ``tid`` (device type ``typ``) into ``var``: a stream
    copy into ``var``, or with I/O tiles a copy into a landing variable on them and the
    hand-over to ``var`` (both also kept in ``session.io_loads`` and
    ``session.io_handovers`` for :func:`overlapped_program`)."""
    n = max(var.numElements(), 1)
    if not session.io_graphs:
        stream = graph.addHostToDeviceFIFO(f"input:{tid}", typ, n)
        copies = [pprog.Copy(stream, var)] if var.numElements() else []
        return pprog.Sequence(*copies, debugContext=f"input/{tid}")
    io = session.io_graphs[ipu]
    stream = io.addHostToDeviceFIFO(f"input:{tid}", typ, n)
    if not var.numElements():
        return pprog.Sequence(debugContext=f"input/{tid}")
    landing = io.addVariable(typ, var.shape(), f"{tid}/ioTiles")
    mapTensorLinearly(io, landing)
    loads = session.__dict__.setdefault("io_loads", {})
    handovers = session.__dict__.setdefault("io_handovers", {})
    loads[tid] = pprog.Copy(stream, landing)
    handovers[tid] = pprog.Copy(landing, var)
    return pprog.Sequence(loads[tid], handovers[tid], debugContext=f"input/{tid}")


def _ipu_of(session: Any, t: Tensor) -> int:
    """The IPU holding ``t``'s first mapped element (an anchor's I/O tiles are there)."""
    tiles = session.graph.getTarget().getTilesPerIPU()
    for tile, intervals in enumerate(session.graph.getTileMapping(t)):
        if len(intervals):
            return tile // tiles
    return 0


def overlapped_program(session: Any, values: dict) -> pprog.Program:
    """The inference step with PopART's overlapped inner loop on the I/O tiles (module
    docstring).

    Raises
    ------
    popart_exception
        An anchor whose return type is not ``ALL``.
    """
    from popart_api.training import transient_variables

    graph = session.graph
    hand_out, stores = [], []
    for aid in session.dataFlow.anchors():
        art = session.dataFlow.art(aid)
        if art.id() != "ALL":
            raise popart_exception(
                f"{session._kind}.prepareDevice: anchor '{aid}' has AnchorReturnType "
                f"{art.id()}; with SessionOptions.numIOTiles > 0 only ALL anchors are "
                "streamed from the I/O tiles here; hint: AnchorReturnType('ALL') or "
                "numIOTiles = 0"
            )
        t = session.anchor_tensor(aid, values)
        io = session.io_graphs[_ipu_of(session, t)]
        stream = io.addDeviceToHostFIFO(f"anchor:{aid}", t.elementType(), max(t.numElements(), 1))
        session.add_anchor(aid, art, t)
        if not t.numElements():
            continue
        landing = io.addVariable(t.elementType(), t.shape(), f"anchor/{aid}/ioTiles")
        mapTensorLinearly(io, landing)
        hand_out.append(pprog.Copy(t, landing))
        stores.append(pprog.Copy(landing, stream))
    undef = [
        pprog.WriteUndef(t) for t in transient_variables(graph, [session.lowered.forward_variables])
    ]
    forward = graph.addFunction(pprog.Sequence(*undef, *session.lowered.fwd_progs))
    loads = pprog.Sequence(*session.__dict__.get("io_loads", {}).values(), debugContext="ioLoad")
    hand_in = pprog.Sequence(
        *session.__dict__.get("io_handovers", {}).values(), debugContext="ioToCompute"
    )
    hand_out_p = pprog.Sequence(*hand_out, debugContext="computeToIo")
    store = pprog.Sequence(*stores, debugContext="ioStore")

    def batch(*io_work: pprog.Program) -> pprog.Sequence:
        return pprog.Sequence(hand_in, *io_work, pprog.Call(forward), hand_out_p)

    bps = session.dataFlow.batchesPerStep
    if bps == 1:
        return pprog.Sequence(loads, batch(), store, debugContext="main")
    steady = [pprog.Repeat(bps - 2, batch(loads, store))] if bps > 2 else []
    return pprog.Sequence(loads, batch(loads), *steady, batch(store), store, debugContext="main")
