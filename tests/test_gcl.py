"""GCL collectives: every operator and replica grouping against numpy, the other
collectives, within-replica collectives, the IR they lower to, the popops aliases and
bad input.

Per-replica inputs are written replica-major with ``writeTensor``; each expected
value is computed with numpy over the replicas of each group.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from poplar_api import BOOL, FLOAT, INT, Device, Engine, Graph, IPUModel, gcl, popops
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.gcl import CollectiveOperator as Op
from poplar_api.gcl import CommGroup, CommGroupType

R = 4  # replicas
N = 10  # elements per tensor
TILES = 8  # per IPU (the tiny IPU Model)


def model(num_ipus: int = R) -> Device:
    m = IPUModel("tiny")
    m.numIPUs = num_ipus
    return m.createDevice()


def spread(g: Graph, t, tiles: int = TILES) -> None:
    """Map ``t``'s flat elements round-robin over the first ``tiles`` tiles."""
    n = t.numElements()
    owner = np.arange(n) % tiles
    g.setTileMapping(t, [[(int(e), int(e) + 1) for e in np.flatnonzero(owner == k)]
                         for k in range(tiles)])  # fmt: skip


def groups_of(group: CommGroup, replicas: int = R) -> list[list[int]]:
    """Replica groups, from the definitions (independent of CommGroup.groups)."""
    k = group.replicaGroupSize
    if group.type is CommGroupType.ALL or k == 0:
        return [list(range(replicas))]
    if group.type is CommGroupType.CONSECUTIVE:
        return [list(range(s, s + k)) for s in range(0, replicas, k)]
    m = replicas // k
    return [list(range(j, replicas, m)) for j in range(m)]


def numpy_reduce(op: Op, block: np.ndarray) -> np.ndarray:
    if op is Op.ADD:
        return block.sum(0)
    if op is Op.MEAN:
        return block.mean(0)
    if op is Op.MUL:
        return block.prod(0)
    if op is Op.MIN:
        return block.min(0)
    if op is Op.MAX:
        return block.max(0)
    if op is Op.SQUARE_ADD:
        return (block * block).sum(0)
    if op is Op.LOGICAL_AND:
        return np.logical_and.reduce(block != 0, 0)
    if op is Op.LOGICAL_OR:
        return np.logical_or.reduce(block != 0, 0)
    raise AssertionError(op)


GROUPS = [
    CommGroup(),
    CommGroup(CommGroupType.CONSECUTIVE, 2),
    CommGroup(CommGroupType.ORTHOGONAL, 2),
]


@pytest.mark.parametrize("group", GROUPS, ids=repr)
def test_every_collective_and_operator_against_numpy(group):
    device = model()
    g = Graph(device.getTarget(), replication_factor=R)
    seq = prog.Sequence()
    x = g.addVariable(FLOAT, [N], "x")
    flags = g.addVariable(BOOL, [N], "flags")
    for t in (x, flags):
        spread(g, t)
    g.createHostWrite("x", x)
    g.createHostWrite("flags", flags)
    results = {}
    for op in Op:
        if op in (Op.LOGICAL_AND, Op.LOGICAL_OR):
            results[op.name] = gcl.allReduceCrossReplica(g, flags, op, seq, group, op.name)
        else:
            results[op.name] = gcl.allReduceCrossReplica(g, x, op, seq, group, op.name)
    results["scatter"] = gcl.reduceScatterCrossReplica(g, x, Op.ADD, seq, group, "scatter")
    results["gather"] = gcl.allGatherCrossReplica(g, x, seq, group, "gather")
    results["broadcast"] = gcl.broadcastCrossReplica(g, x, seq, group, 1, "broadcast")
    for name, t in results.items():
        g.createHostRead(name, t)
    e = Engine(g, seq)
    e.load(device)
    rng = np.random.default_rng(7)
    xv = rng.uniform(0.5, 1.5, (R, N)).astype(np.float32)
    fv = rng.integers(0, 2, (R, N)).astype(bool)
    fv[:, 0] = True  # some all-true and some mixed positions
    e.writeTensor("x", xv)
    e.writeTensor("flags", fv)
    e.run(0)
    size = len(groups_of(group)[0])
    chunk = math.ceil(N / size)
    for members in groups_of(group):
        block = xv[members].astype(np.float64)
        for op in Op:
            got = e.readTensor(op.name)[members]
            if op is Op.LOCAL:
                np.testing.assert_array_equal(got, xv[members])
                continue
            data = fv[members] if op in (Op.LOGICAL_AND, Op.LOGICAL_OR) else block
            want = np.broadcast_to(numpy_reduce(op, data), got.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=op.name)
        padded = np.zeros(size * chunk)
        padded[:N] = block.sum(0)
        scatter = e.readTensor("scatter")
        for pos, k in enumerate(members):
            got = scatter[k]
            want = padded[pos * chunk : (pos + 1) * chunk]
            valid = min(chunk, max(0, N - pos * chunk))
            np.testing.assert_allclose(got[:valid], want[:valid], rtol=1e-6)
            np.testing.assert_array_equal(e.readTensor("gather")[k], xv[members])
            np.testing.assert_array_equal(e.readTensor("broadcast")[k], xv[members[1]])


def test_collective_step_carries_groups_and_bytes():
    """The IR of cross-replica collectives, on replicas of two IPUs each."""
    device = model(4)
    g = Graph(device.getTarget(), replication_factor=2)
    seq = prog.Sequence()
    x = g.addVariable(FLOAT, [12], "x")
    # 8 elements on IPU 0 (2 on each of tiles 0..3), 4 on IPU 1 (tile 9)
    g.setTileMapping(x, [[(0, 2)], [(2, 4)], [(4, 6)], [(6, 8)], [], [], [], [], [], [(8, 12)]])
    gcl.allReduceCrossReplica(g, x, Op.ADD, seq, "sum")
    gcl.allGatherCrossReplica(g, x, seq, "gather", {"method": "bidirectional_ring_pair"})
    e = Engine(g, seq)
    steps = [s for s in ir.iter_steps(e.ir_program) if isinstance(s, ir.Collective)]
    assert [s.op for s in steps] == ["all_reduce", "all_gather"]
    m = 2  # IPUs per replica: IPU j of replica k is k * m + j
    assert steps[0].groups == ((0 * m + 0, 1 * m + 0), (0 * m + 1, 1 * m + 1))
    assert steps[0].num_bytes == (8 * 4, 4 * 4)
    assert steps[0].max_tile_bytes == (2 * 4, 4 * 4)
    assert steps[0].member_tiles == (4, 1)  # tiles 0..3 on IPU 0, tile 9 on IPU 1
    assert steps[0].element_bytes == 4 and steps[0].algorithm == "ring"
    assert steps[1].num_bytes == (2 * 8 * 4, 2 * 4 * 4)  # gathered: two replicas' data
    assert steps[1].algorithm == "bidirectional_ring"
    g2 = Graph(model(4).getTarget(), replication_factor=4)
    y = g2.addVariable(INT, [3], "y")
    g2.setTileMapping(y, 5)
    s2 = prog.Sequence()
    gcl.allReduceInPlaceCrossReplica(g2, y, Op.MAX, s2, CommGroup(CommGroupType.ORTHOGONAL, 2))
    (step,) = [s for s in ir.iter_steps(Engine(g2, s2).ir_program) if isinstance(s, ir.Collective)]
    assert step.groups == ((0, 2), (1, 3)) and step.num_bytes == (12, 12)
    assert step.member_tiles == (1, 1)


def test_in_place_destination_and_lists():
    device = model()
    g = Graph(device.getTarget(), replication_factor=R)
    seq = prog.Sequence()
    a = g.addVariable(FLOAT, [3], "a")
    b = g.addVariable(FLOAT, [2, 2], "b")
    c = g.addVariable(INT, [5], "c")
    dest = g.addVariable(INT, [5], "dest")
    for t in (a, b, c, dest):
        spread(g, t)
    for name, t in (("a", a), ("b", b), ("c", c), ("dest", dest)):
        g.createHostWrite(name, t)
        g.createHostRead(name, t)
    gcl.allReduceInPlaceCrossReplica(g, [a, b], Op.ADD, seq, "pair")
    gcl.allReduceToDestinationCrossReplica(
        g, c, dest, Op.MUL, seq, CommGroup(CommGroupType.CONSECUTIVE, 2)
    )
    lists = gcl.allGatherCrossReplica(g, [a, b], seq)
    assert [t.shape() for t in lists] == [[R, 3], [R, 2, 2]]
    for name, t in zip(("ga", "gb"), lists, strict=True):
        g.createHostRead(name, t)
    e = Engine(g, seq)
    e.load(device)
    rng = np.random.default_rng(11)
    av, bv = (
        rng.normal(size=(R, 3)).astype(np.float32),
        rng.normal(size=(R, 2, 2)).astype(np.float32),
    )
    cv = rng.integers(-3, 4, (R, 5)).astype(np.int32)
    for name, v in (("a", av), ("b", bv), ("c", cv)):
        e.writeTensor(name, v)
    e.run(0)
    np.testing.assert_allclose(e.readTensor("a"), np.broadcast_to(av.sum(0), (R, 3)), rtol=1e-5)
    np.testing.assert_allclose(e.readTensor("b"), np.broadcast_to(bv.sum(0), (R, 2, 2)), rtol=1e-5)
    want = np.concatenate(
        [np.broadcast_to(cv[0] * cv[1], (2, 5)), np.broadcast_to(cv[2] * cv[3], (2, 5))]
    )
    np.testing.assert_array_equal(e.readTensor("dest"), want)
    np.testing.assert_array_equal(e.readTensor("c"), cv)  # the source is unchanged
    # the gather ran after the in-place sum: every replica sees the summed values
    np.testing.assert_allclose(e.readTensor("ga"), np.broadcast_to(av.sum(0), (R, R, 3)), rtol=1e-5)
    np.testing.assert_allclose(
        e.readTensor("gb"), np.broadcast_to(bv.sum(0), (R, R, 2, 2)), rtol=1e-5
    )


def test_within_replica_collectives():
    """Two replicas of two IPUs; data rows on the two IPUs of each replica."""
    device = model(4)
    g = Graph(device.getTarget(), replication_factor=2)
    seq = prog.Sequence()
    x = g.addVariable(FLOAT, [2, 6], "x")
    g.setTileMapping(x[0], 3)
    g.setTileMapping(x[1][:4], TILES + 5)  # row 1 on two tiles
    g.setTileMapping(x[1][4:], TILES + 6)
    g.createHostWrite("x", x)
    total = gcl.allReduceWithinReplica(g, x, Op.ADD, seq, "sum")
    scattered = gcl.reduceScatterWithinReplica(g, x, Op.MAX, seq, "max")
    gathered = gcl.allGatherWithinReplica(g, x, seq, "gather")
    for name, t in (("sum", total), ("max", scattered), ("gather", gathered)):
        g.createHostRead(name, t)
    assert scattered.shape() == [2, 3] and gathered.shape() == [2, 2, 6]
    e = Engine(g, seq)
    steps = [s for s in ir.iter_steps(e.ir_program) if isinstance(s, ir.Collective)]
    assert [s.groups for s in steps] == [((0, 1), (2, 3))] * 3
    assert steps[0].num_bytes == (24, 24) and steps[2].num_bytes == (48, 48)
    assert steps[0].member_tiles == (2, 2)  # the most tiles a member's row is on
    e.load(device)
    xv = np.random.default_rng(5).normal(size=(2, 2, 6)).astype(np.float32)
    e.writeTensor("x", xv)
    e.run(0)
    for k in range(2):
        np.testing.assert_allclose(e.readTensor("sum")[k], np.tile(xv[k].sum(0), (2, 1)), rtol=1e-6)
        np.testing.assert_array_equal(e.readTensor("max")[k], xv[k].max(0).reshape(2, 3))
        np.testing.assert_array_equal(e.readTensor("gather")[k], np.stack([xv[k], xv[k]]))


def test_popops_replicated_aliases():
    device = model()
    g = Graph(device.getTarget(), replication_factor=R)
    seq = prog.Sequence()
    x = g.addVariable(FLOAT, [4], "x")
    spread(g, x)
    g.createHostWrite("x", x)
    summed = popops.replicatedAllReduce(g, x, popops.Operation.ADD, seq, "sum",
                                        {"useReplicatedImplementation": "true"})  # fmt: skip
    older = popops.replicatedAllReduce(
        g, Graph(device.getTarget()), x, popops.CollectiveOperator.MAX, seq
    )
    gathered = popops.replicatedAllGather(g, x, seq)
    scattered = popops.replicatedReduceScatter(g, x, popops.Operation.MIN, seq)
    for name, t in (("sum", summed), ("max", older), ("gather", gathered), ("scatter", scattered)):
        g.createHostRead(name, t)
    e = Engine(g, seq)
    e.load(device)
    xv = np.random.default_rng(9).normal(size=(R, 4)).astype(np.float32)
    e.writeTensor("x", xv)
    e.run(0)
    np.testing.assert_allclose(e.readTensor("sum"), np.tile(xv.sum(0), (R, 1)), rtol=1e-5)
    np.testing.assert_array_equal(e.readTensor("max"), np.tile(xv.max(0), (R, 1)))
    np.testing.assert_array_equal(e.readTensor("gather"), np.tile(xv, (R, 1, 1)))
    np.testing.assert_array_equal(e.readTensor("scatter"), xv.min(0).reshape(R, 1))


def test_bad_input():
    g = Graph(model().getTarget(), replication_factor=R)
    seq = prog.Sequence()
    x = g.addVariable(FLOAT, [4], "x")
    m = g.addVariable(FLOAT, [2, 2], "m")
    i = g.addVariable(INT, [4], "i")
    for t in (x, m, i):
        g.setTileMapping(t, 0)
    with pytest.raises(
        GraphError, match=r"group size 3, which does not divide the replication factor 4"
    ):
        gcl.allReduceCrossReplica(g, x, Op.ADD, seq, CommGroup(CommGroupType.CONSECUTIVE, 3))
    with pytest.raises(GraphError, match=r"operator 'SUM' is not a CollectiveOperator"):
        gcl.allReduceCrossReplica(g, x, "SUM", seq)
    with pytest.raises(
        GraphError, match=r"(?i)data\[1\] 'i' has element type INT but data\[0\] 'x' has FLOAT"
    ):
        gcl.allReduceCrossReplica(g, [x, i], Op.ADD, seq)
    with pytest.raises(
        GraphError, match=r"(?i)destination 'm' \(FLOAT, shape \[2, 2\]\) does not match"
    ):
        gcl.allReduceToDestinationCrossReplica(g, x, m, Op.ADD, seq)
    with pytest.raises(GraphError, match=r"reduce-scatter takes 1-D tensors; hint: data.flatten"):
        gcl.reduceScatterCrossReplica(g, m, Op.ADD, seq)
    with pytest.raises(GraphError, match=r"rootReplica 4 is not a position in a group of 4"):
        gcl.broadcastCrossReplica(g, x, seq, CommGroup(), 4)
    with pytest.raises(GraphError, match=r"method='quad_directional_ring' is not supported"):
        gcl.allReduceCrossReplica(g, x, Op.ADD, seq, {"method": "quad_directional_ring"})
    with pytest.raises(
        GraphError, match=r"row 0 of data 'm' lies on IPU\(s\) \[0\].*row 1.*|own IPU"
    ):
        gcl.allReduceWithinReplica(g, m, Op.ADD, seq)
    two = Graph(model(4).getTarget(), replication_factor=2)
    y = two.addVariable(FLOAT, [2, 4], "y")
    two.setTileMapping(y, [[(0, 2)], [], [], [], [], [], [], [], [(2, 8)]])
    with pytest.raises(GraphError, match=r"row 0 of data 'y' lies on IPU\(s\) \[0, 1\]"):
        gcl.allReduceWithinReplica(two, y, Op.ADD, prog.Sequence())
    with pytest.raises(GraphError, match=r"replicaGroupSize -1 must be an int >= 0"):
        CommGroup(CommGroupType.CONSECUTIVE, -1)


def test_top_level_graph_and_groups_of_one():
    device = model()
    top = Graph(device.getTarget())
    rg = top.createReplicatedGraph(R)
    x = rg.addVariable(INT, [3], "x")
    rg.setTileMapping(x, 2)
    rg.createHostWrite("x", x)
    seq = prog.Sequence()
    total = gcl.allReduceCrossReplica(top, x, Op.ADD, seq, "total")  # GCL callers pass it
    alone = gcl.allReduceCrossReplica(
        rg, x, Op.SQUARE_ADD, seq, CommGroup(CommGroupType.CONSECUTIVE, 1), "alone"
    )
    rg.createHostRead("total", total)
    rg.createHostRead("alone", alone)
    e = Engine(top, seq)
    steps = [s for s in ir.iter_steps(e.ir_program) if isinstance(s, ir.Collective)]
    assert [s.name for s in steps] == ["total"]  # a group of one replica moves nothing
    e.load(device)
    xv = np.arange(-6, 6, dtype=np.int32).reshape(R, 3)
    e.writeTensor("x", xv)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("total"), np.tile(xv.sum(0), (R, 1)))
    np.testing.assert_array_equal(e.readTensor("alone"), xv * xv)


def test_every_pair_reads_its_values_before_any_pair_writes():
    """An in-place all-reduce of ``a``'s transpose (read through an index) and of ``a``
    (a block): each pair reduces the values the replicas held before the
    collective, not those another pair wrote."""
    device = model()
    g = Graph(device.getTarget(), replication_factor=R)
    seq = prog.Sequence()
    a = g.addVariable(FLOAT, [3, 4], "a")
    spread(g, a)
    g.createHostWrite("a", a)
    g.createHostRead("a", a)
    gcl.allReduceInPlaceCrossReplica(g, [a.transpose(), a], Op.ADD, seq, "twice")
    e = Engine(g, seq)
    e.load(device)
    av = np.random.default_rng(17).integers(-8, 8, (R, 3, 4)).astype(np.float32)
    e.writeTensor("a", av)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("a"), np.broadcast_to(av.sum(0), (R, 3, 4)))
