"""The fields of Poplar's profile format (docs/profiles.md, "Fields of Poplar's profile
format", with the guide section of each) are in the JSON Schemas when the table says
so, and real profiles carry the guide's program tags and profiler mode."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from ipusim.profile.execution import schema
from poplar_api import INT, DeviceManager, Engine, Graph, IPUModel, TargetType
from poplar_api import program as prog

DOC = Path(__file__).resolve().parents[1] / "docs" / "profiles.md"
ROW = re.compile(r"^\| `([A-Za-z.\[\]]+)` \| ([0-9.]+) ([^|]*)\| (yes|no)\b")


def table() -> list[tuple[str, str, str]]:
    """(field path, guide section number, yes/no) of every row of the table."""
    text = DOC.read_text()
    start = text.index("### Fields of Poplar's profile format")
    end = text.index("\n## ", start)
    rows = [ROW.match(line) for line in text[start:end].splitlines()]
    return [(m.group(1), m.group(2), m.group(4)) for m in rows if m]


def resolve(doc: dict, path: str) -> bool:
    """Whether the schema ``doc`` defines ``path`` (``a.b[].c``: ``[]`` = array items)."""
    node = doc
    for part in re.findall(r"[A-Za-z]+|\[\]", path):
        while "$ref" in node or "oneOf" in node:  # a reference, or "null or an object"
            if "$ref" in node:
                node = doc["$defs"][node["$ref"].rsplit("/", 1)[-1]]
            else:
                node = next(b for b in node["oneOf"] if b.get("type") != "null")
        if part == "[]":
            if "items" not in node:
                return False
            node = node["items"]
            continue
        props = node.get("properties", {})
        if part not in props:
            return False
        node = props[part]
    return True


def test_the_table_names_every_section_of_the_guide():
    sections = {section for _, section, _ in table()}
    expected = {"3.2.1", "3.2.2", "3.2.3", "3.2.4", "3.2.5", "3.2.6", "3.2.7", "3.2.8"}
    assert expected | {"4.2.1", "4.2.2", "4.2.3"} <= sections


@pytest.mark.parametrize(("field", "section", "present"), table())
def test_the_schema_has_exactly_the_fields_the_table_says(field, section, present):
    doc = schema("graph_profile" if section.startswith("3.") else "execution_profile")
    assert resolve(doc, field) == (present == "yes"), (field, section, present)


def tags_of(profile):
    return {p["type"] for p in profile["programs"]}


def test_programs_carry_the_guides_tags_and_the_profiles_validate():
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    flag = graph.addVariable(INT, [], "flag")
    other = graph.addVariable(INT, [], "other")
    zero = graph.addVariable(INT, [], "zero")
    for k, t in enumerate((flag, other, zero)):
        graph.setTileMapping(t, k)
    graph.setInitialValue(flag, 1)
    graph.setInitialValue(other, 7)
    graph.setInitialValue(zero, 0)
    graph.createHostRead("flag", flag)
    body = prog.Sequence(
        [
            prog.RepeatWhileTrue(prog.Sequence(), flag, prog.Copy(zero, flag)),  # once
            prog.RepeatWhileFalse(prog.Sequence(), other, prog.Sequence()),  # never
            prog.If(flag, prog.Sequence(), prog.Copy(other, flag)),  # flag is 0: else
        ]
    )
    engine = Engine(graph, [body])
    engine.load(device)
    engine.run(0)
    assert int(engine.readTensor("flag")) == 7
    gp = engine.getGraphProfile()
    ep = engine.getExecutionProfile()
    assert {"RepeatWhileTrue", "RepeatWhileFalse", "IfElse"} <= tags_of(gp)
    assert not {"RepeatWhile", "If"} & tags_of(gp)
    for p in gp["programs"]:
        if p["type"].startswith("RepeatWhile"):
            assert p["whileTrue"] == (p["type"] == "RepeatWhileTrue")
    assert gp["optimizationInfo"] == {}
    assert ep["profilerMode"] == "IPU_MODEL"
    jsonschema.validate(dict(gp), schema("graph_profile"))
    jsonschema.validate(dict(ep), schema("execution_profile"))


@pytest.mark.parametrize(
    ("options", "mode"),
    [
        ({}, "NONE"),
        ({"debug.instrument": "true"}, "COMPUTE_SETS"),
        (
            {"debug.instrumentCompute": "true", "debug.computeInstrumentationLevel": "vertex"},
            "VERTICES",
        ),
        (
            {"debug.instrumentCompute": "true", "debug.computeInstrumentationLevel": "ipu"},
            "SINGLE_TILE_COMPUTE_SETS",
        ),
        ({"debug.instrumentExternalExchange": "true"}, "EXTERNAL_EXCHANGES"),
        # SDK 1.x: the mode named by debug.executionProfile (as Poplibs' tools pass it)
        ({"debug.executionProfile": "compute_sets"}, "COMPUTE_SETS"),
        ({"debug.executionProfile": "vertices"}, "VERTICES"),
        ({"debug.executionProfile": "single_tile_compute_sets"}, "SINGLE_TILE_COMPUTE_SETS"),
        ({"debug.executionProfile": "external_exchanges"}, "EXTERNAL_EXCHANGES"),
        ({"debug.executionProfile": "none"}, "NONE"),
        # a level given with it wins over the level the mode implies
        (
            {"debug.executionProfile": "vertices", "debug.computeInstrumentationLevel": "tile"},
            "COMPUTE_SETS",
        ),
    ],
)
def test_profiler_mode_comes_from_a_hardware_device_and_its_instrumentation(options, mode):
    device = DeviceManager("tiny", 1).getDevices(TargetType.IPU, 1)[0]
    assert device.attach()
    try:
        graph = Graph(device.getTarget())
        x = graph.addVariable(INT, [4], "x")
        graph.setTileMapping(x, 0)
        out = graph.addDeviceToHostFIFO("out", INT, 4)
        engine = Engine(graph, [prog.Copy(x, out)], options)
        engine.load(device)
        got = np.zeros(4, np.int32)
        engine.connectStream("out", got)
        engine.run(0)
        ep = engine.getExecutionProfile()
    finally:
        device.detach()
    assert ep["profilerMode"] == mode
    assert ep["simulation"]["cycles"] > 0  # simulated cycles in every mode
    jsonschema.validate(dict(ep), schema("execution_profile"))
    assert engine.getGraphProfile()["target"]["type"] == "IPU"
