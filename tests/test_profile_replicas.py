"""The profile summary's replica lines and the graph profile's replica fields: a graph
replicated over a device says how many replicas there are and each one's share of the
device; a graph that is not replicated has neither."""

from __future__ import annotations

import io
import re

import jsonschema
import numpy as np
import pytest

from ipusim.profile.execution import schema
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog


def _engine(num_ipus: int, replicas: int) -> Engine:
    model = IPUModel("tiny")
    model.numIPUs = num_ipus
    device = model.createDevice()
    g = Graph(device.getTarget(), replication_factor=replicas)
    x = g.addVariable(FLOAT, [4], "x")
    g.setTileMapping(x, 0)
    e = Engine(g, prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, 4), x)))
    e.load(device)
    e.connectStream("in", np.zeros((replicas, 4), np.float32))
    e.run(0)
    return e


def _line(text: str, label: str) -> str:
    found = re.search(rf"^  {label}:\s+(.+)$", text, re.MULTILINE)
    assert found, label
    return found.group(1)


@pytest.mark.parametrize(("num_ipus", "replicas"), [(4, 4), (4, 2)])
def test_a_replicated_graph_shows_its_replicas(num_ipus, replicas):
    e = _engine(num_ipus, replicas)
    gp = e.getGraphProfile()
    jsonschema.validate(gp, schema("graph_profile"))
    t = gp["target"]
    tiles_per_ipu = t["tilesPerIPU"]  # 8 on the tiny preset
    ipus = num_ipus // replicas
    assert (t["numReplicas"], t["ipusPerReplica"]) == (replicas, ipus)
    assert t["tilesPerReplica"] == ipus * tiles_per_ipu
    assert t["memoryPerReplica"] == ipus * tiles_per_ipu * t["bytesPerTile"]
    out = io.StringIO()
    e.printProfileSummary(out)
    text = out.getvalue()
    assert _line(text, "Number of Replicas") == str(replicas)
    assert _line(text, "IPUs per Replica") == str(ipus)
    assert _line(text, "Tiles per Replica") == str(ipus * tiles_per_ipu)
    kib = ipus * tiles_per_ipu * 64  # 64 KiB per tile on the tiny preset
    shown = f"{kib:,.1f} KiB" if kib < 1024 else f"{kib / 1024:,.2f} MiB"
    assert _line(text, "Memory per Replica") == shown


def test_a_graph_that_is_not_replicated_has_no_replica_lines():
    e = _engine(2, 1)
    assert "numReplicas" not in e.getGraphProfile()["target"]
    out = io.StringIO()
    e.printProfileSummary(out)
    assert "Replica" not in out.getvalue()
