"""DeviceManager devices, virtual graphs over tile lists and whole tile mappings.

Device ids follow gc-info's numbering, worked out by hand in comments.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from poplar_api import (
    FLOAT,
    INT,
    DeviceError,
    DeviceManager,
    Engine,
    Graph,
    Interval,
    IPUModel,
    Target,
    TargetType,
)
from poplar_api import program as prog
from poplar_api.codelet import InOut, Vertex
from poplar_api.errors import EngineError, GraphError


class Twice(Vertex):
    """``c *= 2``."""

    c = InOut(INT)

    @staticmethod
    def compute(c):
        c[0] *= 2
        return True


def manager(n=4, preset="tiny"):
    return DeviceManager(preset, n)


def test_device_ids_follow_gc_info_numbering():
    m = manager(4)
    # 4 single IPUs (ids 0-3), 2 pairs (4, 5), 1 group of 4 (6): 7 devices.
    assert m.getNumDevices() == 7
    assert [d.getId() for d in m.getDevices(TargetType.IPU, 1)] == [0, 1, 2, 3]
    pairs = m.getDevices(TargetType.IPU, 2)
    assert [d.getId() for d in pairs] == [4, 5]
    assert [d.getDriverIDs() for d in pairs] == [[0, 1], [2, 3]]
    assert m.getDevices(TargetType.IPU, 3) == []  # no 3-IPU device, as on hardware
    assert len(m.getDevices()) == 7
    assert m.getDevice(6).getTarget().getNumIPUs() == 4
    assert m.getDevice(6).getTarget().getTargetType() is TargetType.IPU


def test_default_preset_is_mk2_and_env_overrides(monkeypatch):
    monkeypatch.delenv("IPUSIM_IPU_PRESET", raising=False)
    monkeypatch.delenv("IPUSIM_NUM_IPUS", raising=False)
    m = DeviceManager.createDeviceManager()
    t = m.getDevices(TargetType.IPU, 1)[0].getTarget()
    assert t.config.name == "mk2" and t.getTilesPerIPU() == 1472
    assert m.getNumDevices() == 16 + 8 + 4 + 2 + 1
    monkeypatch.setenv("IPUSIM_IPU_PRESET", "tiny")
    monkeypatch.setenv("IPUSIM_NUM_IPUS", "2")
    m = DeviceManager()
    assert m.getNumDevices() == 3 and m.getDevice(0).getTarget().getNumTiles() == 8
    monkeypatch.setenv("IPUSIM_NUM_IPUS", "two")
    with pytest.raises(DeviceError, match="IPUSIM_NUM_IPUS='two'"):
        DeviceManager()


def test_attach_once_until_detached():
    m = manager(2)
    a = m.getDevice(0)
    b = m.getDevice(0)  # another handle on the same IPU
    pair = m.getDevice(2)  # IPUs 0 and 1
    assert a.attach() is True
    assert a.attach() is False  # already attached
    assert b.attach() is False  # its IPU is held by a
    assert pair.attach() is False  # overlaps IPU 0
    one = m.getDevice(1)
    assert one.attach() is True  # IPU 1 is free
    a.detach()
    assert b.attach() is True
    b.detach()
    m2 = manager(2)  # the same system seen by a second manager
    assert m2.getDevice(1).attach() is False  # IPU 1 is held by `one`
    one.detach()


def test_dropped_device_frees_its_ipus():
    m = manager(1)
    d = m.getDevice(0)
    assert d.attach()
    del d
    gc.collect()
    e = m.getDevice(0)
    assert e.attach()
    e.detach()


def test_find_first_attachable_device_and_run():
    """The usual Poplar loop: attach to the first free single-IPU device and run on it."""
    m = manager(2)
    held = m.getDevice(0)
    assert held.attach()
    device = next(d for d in m.getDevices(TargetType.IPU, 1) if d.attach())
    assert device.getId() == 1
    g = Graph(device.getTarget())
    c = g.addVariable(INT, [1], "c")
    g.setTileMapping(c, 3)
    g.setInitialValue(c, 3)
    cs = g.addComputeSet("cs")
    v = g.addVertex(cs, Twice, {"c": c[0]})
    g.setTileMapping(v, 3)
    g.setPerfEstimate(v, 5)
    g.createHostRead("c", c)
    e = Engine(g, prog.Repeat(2, prog.Execute(cs)))
    e.load(device)
    e.run(0)
    assert e.readTensor("c").tolist() == [12]  # 3 * 2 * 2
    assert e.getTrace() is not None  # hardware IPUs are timed by ipusim
    other = Engine(g, prog.Execute(cs))
    with pytest.raises(EngineError, match="device 0 cannot be attached"):
        other.load(m.getDevice(0))
    held.detach()
    device.detach()


def test_errors_name_the_value():
    m = manager(2)
    with pytest.raises(DeviceError, match=r"no device has id 3.*ids 0\.\.2"):
        m.getDevice(3)
    with pytest.raises(DeviceError, match=r"IPU_MODEL.*IPUModel"):
        m.getDevices(TargetType.IPU_MODEL, 1)
    with pytest.raises(DeviceError, match="number of IPUs 0"):
        m.getDevices(TargetType.IPU, 0)


def test_create_ipu_target():
    t = Target.createIPUTarget(1, "ipu2")
    assert t.getTargetType() is TargetType.IPU and t.getNumTiles() == 1472
    assert Target.createIPUTarget(2, "tiny").getNumTiles() == 16


def test_model_device_attach_semantics():
    d = IPUModel("tiny").createDevice()
    assert d.attach() and not d.attach()
    d.detach()
    assert d.attach()


# ----------------------------------------------------------- graphs and mappings


def graph():
    return Graph(IPUModel("tiny").createDevice().getTarget())


def test_virtual_graph_over_tile_list():
    g = graph()
    vg = g.createVirtualGraph([6, 2, 4])
    assert vg.getTarget().getNumTiles() == 3
    t = vg.addVariable(FLOAT, [3], "t")
    for i in range(3):
        vg.setTileMapping(t[i], i)
    # virtual tiles 0, 1, 2 are parent tiles 6, 2, 4
    assert g.getTileMapping(t)[6] == [Interval(0, 1)]
    assert g.getTileMapping(t)[2] == [Interval(1, 2)]
    assert vg.getTileMapping(t) == [[Interval(0, 1)], [Interval(1, 2)], [Interval(2, 3)]]
    inner = vg.createVirtualGraph([2, 0])  # parent tiles 4 and 6
    u = inner.addVariable(FLOAT, [2], "u")
    inner.setTileMapping(u, 0)
    assert g.getTileMapping(u)[4] == [Interval(0, 2)]
    with pytest.raises(GraphError, match=r"tile 2 is listed twice \(tiles\[0\] and tiles\[2\]\)"):
        g.createVirtualGraph([2, 3, 2])
    with pytest.raises(GraphError, match=r"tiles\[1\] = 8 is out of range \[0, 8\)"):
        g.createVirtualGraph([1, 8])
    with pytest.raises(GraphError, match="tile list is empty"):
        g.createVirtualGraph([])
    with pytest.raises(GraphError, match="not a contiguous tile range"):
        _ = vg._tile_lo  # what library functions needing a tile range get


def test_set_tile_mapping_with_whole_mapping_round_trips():
    g = graph()
    t = g.addVariable(FLOAT, [2, 5], "t")
    mapping = [[] for _ in range(8)]
    mapping[3] = [Interval(0, 4), (8, 10)]
    mapping[7] = [(4, 8)]
    g.setTileMapping(t, mapping)
    got = g.getTileMapping(t)
    assert got[3] == [Interval(0, 4), Interval(8, 10)]
    assert got[7] == [Interval(4, 8)]
    assert g.getTileMapping(t[1]) == [[], [], [], [Interval(3, 5)], [], [], [], [Interval(0, 3)]]
    g2 = graph()
    u = g2.addVariable(FLOAT, [2, 5], "u")
    g2.setTileMapping(u, got)  # getTileMapping's result is accepted as is
    assert g2.getTileMapping(u) == got
    vg = g.createVirtualGraph(4, 8)
    w = vg.addVariable(FLOAT, [4], "w")
    vg.setTileMapping(w, [[(0, 2)], [], [(2, 4)]])
    assert g.getTileMapping(w)[4] == [Interval(0, 2)] and g.getTileMapping(w)[6] == [Interval(2, 4)]


def test_bad_mappings_name_tensor_and_interval():
    g = graph()
    t = g.addVariable(FLOAT, [6], "t")
    with pytest.raises(GraphError, match=r"tensor 't'.*\[2, 5\) on tile 1 overlaps \[0, 3\)"):
        g.setTileMapping(t, [[(0, 3)], [(2, 5)], [(5, 6)]])
    with pytest.raises(GraphError, match=r"tensor 't'.*covers 5 of 6.*\[3, 4\) are on no tile"):
        g.setTileMapping(t, [[(0, 3)], [(4, 6)]])
    with pytest.raises(GraphError, match=r"tensor 't'.*tile 0 interval \[4, 9\) is outside"):
        g.setTileMapping(t, [[(4, 9)]])
    with pytest.raises(GraphError, match="9 entries but this graph has 8 tiles"):
        g.setTileMapping(t, [[(0, 6)]] + [[]] * 8)
    with pytest.raises(GraphError, match="is not an interval"):
        g.setTileMapping(t, [[3]])
    assert (g._state.space(FLOAT).tile[:6] == -1).all()  # failed calls map nothing


def test_objects_of_another_graph_are_refused():
    g1, g2 = graph(), graph()
    c1 = g1.addVariable(INT, [1], "c1")
    c2 = g2.addVariable(INT, [1], "c2")
    cs1 = g1.addComputeSet("cs1")
    v1 = g1.addVertex(cs1, Twice, {"c": c1[0]})
    for _ in range(3):
        g2.addComputeSet("pad")
    with pytest.raises(GraphError, match="vertex 0 belongs to another graph"):
        g2.setTileMapping(v1, 0)
    with pytest.raises(GraphError, match="belongs to another graph"):
        g2.setPerfEstimate(v1, 3)
    with pytest.raises(GraphError, match="belongs to another graph"):
        g2.connect(v1["c"], c2[0])
    lone = graph()
    with pytest.raises(GraphError, match="not a compute set of this graph"):
        lone.addVertex(g2.addComputeSet("late"), Twice, {})  # id 3 does not exist in lone
    with pytest.raises(GraphError, match="tensor 'c2' belongs to another graph"):
        g1.setTileMapping(c2, 0)
    # the vertex of g1 keeps its state
    assert g1._state.vertices[v1.id].tile == -1
    assert np.asarray(g1._state.vertices[v1.id].fields["c"]).tolist() == [0]


def test_an_ipu_model_with_fewer_tiles_than_layout_columns():
    from poplar_api import IPUModel

    model = IPUModel("ipu2")  # mk2 lays tiles out in 16 columns
    model.tilesPerIPU = 8
    target = model.createDevice().getTarget()
    assert target.getNumTiles() == 8
    assert target.config.tile.columns == 8
