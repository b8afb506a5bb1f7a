"""Names a ported Poplar program uses: ``addTensor`` and ``createComputeSet`` (older
SDKs' names), element types given by Poplar's name (``"float"``), and
``popops.encodeOneHot`` (Poplibs' namespace). Tutorial 7 ported line by line with the
older names prints exactly what it prints with the current ones."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from poplar_api import FLOAT, UNSIGNED_INT, Engine, Graph, IPUModel, popops
from poplar_api import program as prog
from poplar_api.errors import GraphError

TUT7 = Path(__file__).resolve().parents[1] / "examples" / "tutorials" / "tut7.py"


def _graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


def test_add_tensor_and_create_compute_set_are_the_same_calls():
    g = _graph()
    t = g.addTensor("float", [2, 3], "t")
    v = g.addVariable(FLOAT, [4], "v")
    assert t.shape() == [2, 3] and t.elementType() == FLOAT and t.name == "t"
    assert g.getVariables()[0].name == "t" and v.name == "v"
    cs = g.createComputeSet("cs")
    assert g.getNumComputeSets() == 1 and cs.name == "cs"


@pytest.mark.parametrize(
    ("name", "expected"), [("float", FLOAT), ("unsigned int", UNSIGNED_INT), ("FLOAT", FLOAT)]
)
def test_element_types_by_poplar_name(name, expected):
    g = _graph()
    assert g.addVariable(name, [3]).elementType() == expected
    c = g.addConstant(name, [2], 7)
    assert c.elementType() == expected
    made = g.addConstants(name, [[1], [2]], [[1], [2, 3]])
    assert [m.elementType() for m in made] == [expected, expected]


def test_an_unknown_type_name_is_refused_with_the_valid_names():
    with pytest.raises(GraphError, match=r"unknown element type 'float64'.*'float'"):
        _graph().addVariable("float64", [3])


def test_popops_encode_one_hot_writes_one_hot_rows():
    device = IPUModel("ipu2").createDevice()
    g = Graph(device.getTarget())
    popops.addCodelets(g)
    idx = g.addVariable(UNSIGNED_INT, [4], "idx")
    enc = g.addVariable(FLOAT, [4, 5], "enc")
    g.setTileMapping(idx, 0)
    g.setTileMapping(enc, 1)
    g.createHostWrite("idx", idx)
    g.createHostRead("enc", enc)
    seq = prog.Sequence()
    popops.encodeOneHot(g, idx, enc, seq, "onehot")
    engine = Engine(g, seq)
    engine.load(device)
    labels = np.array([3, 0, 4, 1], np.uint32)
    engine.writeTensor("idx", labels)
    engine.run(0)
    assert np.array_equal(engine.readTensor("enc"), np.eye(5, dtype=np.float32)[labels])


def _run(path: Path, args: list[str]) -> str:
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None)
    finally:
        sys.argv = argv
    return out.getvalue()


def test_tutorial_7_ported_with_the_older_names_prints_the_same(tmp_path):
    source = TUT7.read_text(encoding="utf-8")
    assert "graph.addVariable(" in source and "graph.addComputeSet(" in source
    ported = source.replace("graph.addVariable(", "graph.addTensor(")
    ported = ported.replace("graph.addComputeSet(", "graph.createComputeSet(")
    path = tmp_path / "tut7_ported.py"
    path.write_text(ported, encoding="utf-8")
    args = ["--device", "model-ipu2", "40", "50"]
    sys.path.insert(0, str(TUT7.parent))
    try:
        original, port = _run(TUT7, args), _run(path, args)
    finally:
        sys.path.remove(str(TUT7.parent))
    assert "Multiplication result OK" in original
    strip = [x for x in original.splitlines() if "host time" not in x]
    assert [x for x in port.splitlines() if "host time" not in x] == strip
