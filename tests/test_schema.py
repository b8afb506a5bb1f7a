"""The JSON Schemas of the profiles: real profiles validate, broken ones do not; CBOR
and JSON serialisations carry the same data."""

from __future__ import annotations

import copy
import io
import json
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import cbor2
import jsonschema
import numpy as np
import pytest
from examples_common import load_example

from ipusim.profile.execution import SCHEMA_DIR, ProfileError, schema
from poplar_api import Engine, Graph, IPUModel
from poplar_api.profiling import serializeToCBOR, serializeToJSON

TUTORIALS = Path(__file__).resolve().parents[1] / "examples" / "tutorials"


def tutorial(name: str) -> ModuleType:
    """Import ``examples/tutorials/<name>.py`` as a module (once per session)."""
    return load_example(f"tutorials/{name}.py")


def _engine(name: str):
    device = IPUModel("tiny").createDevice()
    mod = tutorial(name)
    if name in ("tut1", "tut2", "tut3"):
        return mod.run(device)[1]
    if name == "tut4":  # the tutorial's two products, scaled to the tiny machine
        graph = Graph(device.getTarget())
        seq, _ = mod.build(graph, {"m1": (30, 20), "m2": (20, 10), "m3": (10, 6)})
        engine = Engine(graph, seq)
        engine.load(device)
        engine.run(0)
        return engine
    if name == "tut5":  # one batch of 300 of the bundled digits
        sys.path.insert(0, str(TUTORIALS))
        images, labels = tutorial("mnist").load_digits_as_mnist()
        return mod.run(device, images[:300], labels[:300], out=lambda _line: None).engine
    if name == "tut6":
        return mod.run(device, 8, 12)[2]
    return mod.run(device, 16, 24, profile=False).engine


@cache
def profiles(name: str) -> tuple[dict, dict]:
    engine = _engine(name)
    return engine.getGraphProfile(), engine.getExecutionProfile()


def validator(name: str) -> jsonschema.protocols.Validator:
    s = schema(name)
    cls = jsonschema.validators.validator_for(s)
    cls.check_schema(s)
    return cls(s)


TUTS = ("tut1", "tut2", "tut3", "tut4", "tut5", "tut6", "tut7")


def test_schemas_are_draft_2020_12_and_shipped_in_the_package():
    for name in ("graph_profile", "execution_profile"):
        s = schema(name)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(s)
    # inside the ipusim package directory, so the wheel (packages = ["ipusim", ...])
    # carries them
    import ipusim

    assert Path(ipusim.__file__).parent in SCHEMA_DIR.parents


def test_unknown_schema_name():
    with pytest.raises(ProfileError, match="graph_profile"):
        schema("lowered_variables")


@pytest.mark.parametrize(
    "tut", [pytest.param(t, marks=pytest.mark.slow) if t == "tut5" else t for t in TUTS]
)  # tutorial 5 trains for a while
def test_real_profiles_validate(tut):
    gp, ep = profiles(tut)
    validator("graph_profile").validate(gp)
    validator("execution_profile").validate(ep)
    # and the JSON text (what a file holds) validates too
    buf = io.StringIO()
    serializeToJSON(buf, ep, pretty=True)
    validator("execution_profile").validate(json.loads(buf.getvalue()))


def _errors(name: str, doc: dict) -> list[str]:
    return [e.message for e in validator(name).iter_errors(doc)]


def test_missing_field_is_caught():
    gp, ep = profiles("tut7")
    bad = copy.deepcopy(gp)
    del bad["computeSets"]["cycleEstimates"]["cyclesByTile"]
    assert any("cyclesByTile" in m for m in _errors("graph_profile", bad))
    bad = copy.deepcopy(ep)
    del bad["simulation"]["steps"][0]["cyclesTo"]
    assert any("cyclesTo" in m for m in _errors("execution_profile", bad))
    bad = copy.deepcopy(ep)
    step = next(s for s in bad["simulation"]["steps"] if s["type"] == "OnTileExecute")
    del step["threadBalance"]
    assert any("threadBalance" in m for m in _errors("execution_profile", bad))


def test_wrong_types_are_caught():
    gp, ep = profiles("tut7")
    bad = copy.deepcopy(gp)
    bad["target"]["numTiles"] = "8"
    assert _errors("graph_profile", bad)
    bad = copy.deepcopy(gp)
    bad["computeSets"]["cycleEstimates"]["activeCyclesByTile"][0][0] = 1.5
    assert _errors("graph_profile", bad)
    bad = copy.deepcopy(gp)
    bad["programs"][0]["type"] = "Execute"  # not a Poplar profile type tag
    assert _errors("graph_profile", bad)
    bad = copy.deepcopy(ep)
    bad["simulation"]["steps"][0]["tileBalance"] = 1.5  # a balance is at most 1
    assert _errors("execution_profile", bad)
    bad = copy.deepcopy(ep)
    bad["simulation"]["cycles"] = -1
    assert _errors("execution_profile", bad)
    bad = copy.deepcopy(ep)
    bad["simulation"]["extra"] = 0
    assert _errors("execution_profile", bad)


@pytest.mark.parametrize("tut", ("tut3", "tut7"))
def test_cbor_round_trip_equals_json(tut):
    for profile in profiles(tut):
        raw = io.BytesIO()
        serializeToCBOR(raw, profile)
        text = io.StringIO()
        serializeToJSON(text, profile)
        from_cbor = cbor2.loads(raw.getvalue())
        assert from_cbor == json.loads(text.getvalue())
        assert from_cbor == profile


def test_pretty_json_is_indented_and_compact_is_one_line():
    gp, _ = profiles("tut3")
    compact, pretty = io.StringIO(), io.StringIO()
    serializeToJSON(compact, gp)
    serializeToJSON(pretty, gp, pretty=True)
    assert "\n" not in compact.getvalue()
    assert pretty.getvalue().startswith('{\n  "target"')
    assert json.loads(compact.getvalue()) == json.loads(pretty.getvalue())


def test_per_tile_arrays_have_one_entry_per_tile():
    gp, _ = profiles("tut7")
    n = gp["target"]["numTiles"]
    tables = [
        *gp["computeSets"]["cycleEstimates"]["activeCyclesByTile"],
        *gp["computeSets"]["cycleEstimates"]["cyclesByTile"],
        *gp["exchanges"]["bytesSentByTile"],
        *gp["hostExchanges"]["bytesByTile"],
    ]
    assert tables and {len(t) for t in tables} == {n}
    assert all(isinstance(x, int) for t in tables for x in t)
    assert np.asarray(tables).dtype.kind == "i"
