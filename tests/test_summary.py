"""printProfileSummary: phases equal the trace's per-tile cycles (tile averages in the SDK
2.x/3.x layout, sums in the SDK 1.x layout), vertex-type cycles equal the tutorial's own
estimates, and the Memory Usage section renders a memory report."""

from __future__ import annotations

import io
import re
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from examples_common import load_example

from ipusim.tile.memory import BlockTable
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import PoplarError
from poplar_api.profiling import printProfileSummary


def tutorial(name: str) -> ModuleType:
    """Import ``examples/tutorials/<name>.py`` as a module (once per session)."""
    return load_example(f"tutorials/{name}.py")


def summary_text(engine, **options) -> str:
    buf = io.StringIO()
    engine.printProfileSummary(buf, options)
    return buf.getvalue()


def value(text: str, label: str) -> str:
    m = re.search(rf"^\s*{re.escape(label)}:\s+(.*)$", text, re.MULTILINE)
    assert m, f"no line {label!r} in:\n{text}"
    return m.group(1)


def number(text: str, label: str) -> int:
    return int(value(text, label).split()[0].replace(",", ""))


def vertex_line(text: str, name: str) -> tuple[int, int]:
    """(instances, cycles) of a "Cycles by vertex type" line."""
    m = re.search(rf"^\s+{name}\s+\(([\d,]+) instances\): ([\d,]+)$", text, re.MULTILINE)
    assert m, f"no vertex-type line for {name} in:\n{text}"
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def tut7_engine(device_name: str, rows: int, cols: int):
    t7 = tutorial("tut7")
    return t7, t7.run(t7.create_device(device_name), rows, cols, profile=False)


def phase_sums(trace) -> dict[str, int]:
    """Cycles per phase summed over tiles, from each record's per-tile arrays."""
    sums = dict.fromkeys(
        ("compute", "internal_exchange", "global_exchange", "host_exchange", "sync"), 0
    )
    active = 0
    for r in trace.records:
        sums[r.phase] += int(np.asarray(r.tile_cycles, np.int64).sum())
        if r.active_cycles is not None:
            active += int(np.asarray(r.active_cycles, np.int64).sum())
    return {**sums, "compute_active": active}


LABELS = {
    "compute": "compute cycles (including idle threads)",
    "compute_active": "compute cycles (excluding idle threads)",
    "internal_exchange": "IPU exchange cycles",
    "global_exchange": "global exchange cycles",
    "host_exchange": "host exchange cycles",
    "sync": "sync cycles",
}


def check_tut7_summary(device_name: str, rows: int, cols: int, layout: str | None) -> None:
    t7, result = tut7_engine(device_name, rows, cols)
    engine = result.engine
    trace = engine.getTrace()
    options = {"summaryLayout": layout} if layout else {}
    text = summary_text(engine, **options)
    sums = phase_sums(trace)
    assert number(text, "Total cycles") == trace.total_cycles
    us = trace.total_cycles / trace.clock_hz * 1e6
    compute = [r for r in trace.records if r.kind == "compute"]
    cycles = [np.asarray(r.tile_cycles, np.int64) for r in compute]
    busy = sum(int(c.sum()) for c in cycles)
    thread_balance = sums["compute_active"] / sums["compute"]
    if (layout or ("sdk1" if device_name == "model-ipu1" else "sdk2")) == "sdk1":
        assert f"(approx. {us:,.1f} microseconds)" in value(text, "Total cycles")
        for phase, label in LABELS.items():
            assert number(text, f"Total {label}") == sums[phase]
        tile_balance = busy / (trace.num_tiles * sum(int(c.max()) for c in cycles))
        assert value(text, "Total tile balance") == f"{tile_balance:.1%}"
        assert value(text, "Total thread balance") == f"{thread_balance:.1%}"
        assert "Tile average" not in text
    else:
        assert f"(approx {us:,.1f} microseconds)" in value(text, "Total cycles")
        for phase, label in LABELS.items():
            average = sums[phase] / trace.num_tiles
            share = average / trace.total_cycles
            shown = value(text, f"Tile average {label}")
            assert shown == f"{average:,.1f} ({share:.1%} of total)", (label, shown)
        # balance over the tiles that computed in each step
        active_span = sum(int(c.max()) * int((c > 0).sum()) for c in cycles)
        assert value(text, "Tile balance (tiles that compute)") == f"{busy / active_span:.1%}"
        assert value(text, "Thread balance") == f"{thread_balance:.1%}"
        assert "Total compute cycles" not in text

    # Cycles by vertex type: the tutorial's own estimates, summed by hand
    split = result.best.split
    segments = [(i + 1) * cols // split - i * cols // split for i in range(split)]
    segments = [s for s in segments if s]
    dot = rows * sum(t7.dot_product_cycles(s) for s in segments)
    red = rows * t7.reduce_cycles(split)
    assert vertex_line(text, "DotProductVertex") == (rows * len(segments), dot)
    assert vertex_line(text, "ReduceVertex") == (rows, red)


@pytest.mark.parametrize(
    ("device", "layout"),
    [("model-ipu1", None), ("model-ipu2", None), ("model-ipu2", "sdk1"), ("model-ipu1", "sdk2")],
)
def test_tut7_1000x1000_phases_equal_the_trace(device, layout):
    check_tut7_summary(device, 1000, 1000, layout)


@pytest.mark.slow
def test_tut7_10000x1000_phases_equal_the_trace():
    check_tut7_summary("model-ipu2", 10000, 1000, None)


def test_sdk2_summary_reads_back_as_the_trace_averages():
    """ipusim.measured reads the tile averages back (to the 0.1 cycle printed)."""
    from ipusim.measured import read_summary

    _, result = tut7_engine("model-ipu2", 100, 100)
    trace = result.engine.getTrace()
    profile = read_summary(summary_text(result.engine, showExecutionSteps="true"))
    assert profile.format == "summary-sdk2"
    sums = phase_sums(trace)
    for phase in LABELS:
        assert profile.phases[phase] == pytest.approx(sums[phase] / trace.num_tiles, abs=0.05)
    assert profile.phases["total"] == trace.total_cycles
    assert len(profile.steps) == len(trace.records)


def test_unknown_layout_is_refused(small_engine):
    with pytest.raises(ValueError, match=r"summaryLayout='sdk4'.*sdk1, sdk2"):
        summary_text(small_engine, summaryLayout="sdk4")


@pytest.mark.parametrize(
    ("options", "found"),
    [
        ({"showExecutionStep": "true"}, "'showExecutionStep' is not known"),
        ({"showExecutionSteps": "maybe"}, "showExecutionSteps='maybe' is neither true nor"),
    ],
)
def test_unknown_or_unreadable_options_are_refused(small_engine, options, found):
    # Both were ignored: a misspelt showExecutionSteps printed no steps, without a word.
    with pytest.raises(ValueError, match=re.escape(found)):
        summary_text(small_engine, **options)


def test_a_stream_without_write_is_named(small_engine):
    with pytest.raises(PoplarError, match=r"stream 'out\.txt' has no write"):
        small_engine.printProfileSummary("out.txt")


@pytest.fixture(scope="module")
def small_engine():
    t7 = tutorial("tut7")
    return t7.run(IPUModel("tiny").createDevice(), 16, 24, profile=False).engine


def test_sections_and_steps(small_engine):
    text = summary_text(small_engine, showExecutionSteps="true")
    heads = [line for line in text.splitlines() if line and not line.startswith(" ")]
    assert heads == ["Target:", "Graph:", "Memory Usage:", "Execution:"]
    assert number(text, "Total Tiles") == 8
    assert number(text, "Number of vertices") == len(small_engine._state.vertices)
    steps = text.split("  Steps:\n", 1)[1].splitlines()[1:]
    names = [r.name for r in small_engine.getTrace().records]
    assert len(steps) == len(names)
    for line, name in zip(steps, names, strict=True):
        assert line.endswith(f"  {name}")
    assert "Steps:" not in summary_text(small_engine)


def test_module_function_prints_the_same(small_engine):
    buf = io.StringIO()
    printProfileSummary(
        buf,
        small_engine.getGraphProfile(),
        small_engine.getExecutionProfile(),
        {"showExecutionSteps": "true"},
    )
    assert buf.getvalue() == summary_text(small_engine, showExecutionSteps="true")


def _plain_engine():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    v = graph.addVariable(FLOAT, [4], "v")
    graph.setTileMapping(v, 0)
    return Engine(graph, prog.Sequence([prog.Copy(v, v)]))


def test_before_any_run_and_without_memory():
    engine = _plain_engine()
    engine.memory = None
    text = summary_text(engine)
    assert "(no run on an IPU Model device yet)" in text
    assert "(no memory report" in text


def test_memory_section_from_a_report():
    engine = _plain_engine()
    (copy_type,) = engine.getGraphProfile()["vertexTypes"]["names"]
    cap = 64 * 1024
    need = np.array([0, 100, 8192, 9000, 20000, cap, 70000, 30000], np.int64)
    excl = need - 8  # 8 bytes of gaps per tile
    zeros = np.zeros(8, np.int64)
    over = np.maximum(need - cap, 0)
    engine.memory = SimpleNamespace(
        num_tiles=8,
        capacity={"nonInterleaved": 16 * 1024, "interleaved": 48 * 1024, "total": cap},
        by_tile={
            "total": excl,
            "totalIncludingGaps": need,
            "interleaved": excl,
            "interleavedIncludingGaps": need,
            "nonInterleaved": zeros,
            "nonInterleavedIncludingGaps": zeros,
            "overflowed": over,
            "overflowedIncludingGaps": over,
        },
        by_category={"variable": excl - 100, "vertexCode": np.full(8, 100)},
        by_compute_set={},
        by_vertex_type={copy_type: 1234},
        vertex_data_by_type={copy_type: np.array([1000, 234, 0, 0, 0, 0, 0, 0])},
        liveness=[("mulCS", 4000, 96), ("reduceCS", 10, 96)],
        out_of_memory=True,
        tiles_out_of_memory=np.array([6]),
        # the placed blocks the profile's byCategory is counted from
        blocks=BlockTable.concat(
            [
                BlockTable.per_tile("v", "variable", excl - 100),
                BlockTable.per_tile("code", "vertexCode", np.full(8, 100)),
            ]
        ),
        block_region=np.zeros(16, np.int64),
        block_offset=np.concatenate((np.zeros(8, np.int64), np.maximum(excl - 100, 0))),
    )
    text = summary_text(engine, showVarStorage="true")
    assert number(text, "Including gaps") == int(need.sum())
    assert number(text, "Excluding gaps") == int(need.sum()) - 8 * 8
    assert value(text, "Overflowed") == f"{70000 - cap:,} B / {70000 - cap:,} B"
    assert number(text, "vertexCode") == 800
    assert number(text, copy_type) == 1234
    # histogram: 8 buckets of 8 KiB; 65536 falls in the last (closed) one, 70000 is over
    bars = re.findall(r"^\s+(.+?)\s+(\d+) #*$", text, re.MULTILINE)
    counts = [int(c) for _, c in bars]
    assert counts == [2, 2, 1, 1, 0, 0, 0, 1, 1]
    assert "Maximum tile: tile 6 uses 70,000 of 65,536 B (106.8%)" in text
    assert value(text, "Tiles out of memory") == "1 (6)"
    live = text.split("program point\n", 1)[1].splitlines()
    assert re.split(r"\s+", live[0].strip()) == ["0", "4,000", "96", "mulCS"]
    assert re.split(r"\s+", live[1].strip()) == ["1", "10", "96", "reduceCS"]


@pytest.mark.parametrize("layout", ["sdk1", "sdk2"])
def test_cycles_by_ipu_in_both_layouts(layout, capsys):
    """Two IPUs: per-IPU rows are the trace's per-IPU sums (sdk1) or their tile averages."""
    module = load_example("multi_ipu/tut7_two_ipus.py")
    outcome = module.run(module.create_device(IPUModel("tiny")), 40, 12, profile=False)
    capsys.readouterr()
    trace = outcome.engine.getTraces()[-1]
    text = summary_text(outcome.engine, summaryLayout=layout)
    heading = {
        "sdk1": "Cycles by IPU (sum over the IPU's tiles):",
        "sdk2": "Tile average cycles by IPU (over the IPU's tiles):",
    }[layout]
    rows = text.split(heading + "\n", 1)[1].splitlines()[1:3]
    per_ipu = []
    for r in trace.records:
        c = np.asarray(r.tile_cycles, np.int64).reshape(2, -1).sum(axis=1)
        per_ipu.append((r.phase, c))
    for ipu, row in enumerate(rows):
        cells = row.split()
        assert cells[0] == str(ipu)
        phases = ("compute", "internal_exchange", "global_exchange", "host_exchange", "sync")
        sums = [sum(int(c[ipu]) for p, c in per_ipu if p == phase) for phase in phases]
        if layout == "sdk1":
            assert cells[1:] == [f"{s:,}" for s in sums]
        else:
            assert cells[1:] == [f"{s / trace.tiles_per_ipu:,.1f}" for s in sums]


@pytest.mark.parametrize(
    ("arch", "options", "layout"),
    [
        ("ipu1", {}, "sdk1"),
        ("ipu2", {}, "sdk2"),
        ("ipu21", {}, "sdk2"),
        ("ipu21", {"summaryLayout": "SDK1"}, "sdk1"),
        ("ipu1", {"summaryLayout": "sdk2"}, "sdk2"),
    ],
)
def test_layout_by_target_and_option(arch, options, layout):
    from poplar_api.summary import summary_layout

    assert summary_layout({"target": {"arch": arch}}, options) == layout


# Trace.summary: the same two layouts, chosen by the config's arch --------------------------
def _four_tile_trace(preset: str, **overrides):
    """60-cycle vertices on tiles 0-3, then a sync, on ``preset``."""
    from ipusim import ir
    from ipusim.config import load_config
    from ipusim.machine import Machine

    program = ir.Sequence(
        [
            ir.Compute(name="cs", vertex_tile=[0, 1, 2, 3], vertex_cycles=[60] * 4),
            ir.Sync(name="sync"),
        ]
    )
    return Machine(load_config(preset, overrides=overrides)).run(program)


def _value(text: str, label: str) -> str:
    line = next(line for line in text.splitlines() if line.startswith(label + ":"))
    return line.split(":", 1)[1].split()[0]


def test_trace_summary_is_in_tile_averages_on_ipu2_configs():
    trace = _four_tile_trace("tiny")  # arch ipu2, 8 tiles
    text = trace.summary()
    assert "Layout sdk2: tile averages" in text.splitlines()[1]
    # One vertex per tile runs on one of the 6 barrel contexts: 6 * 60 tile cycles on each
    # of 4 tiles, averaged over the 8 tiles.
    assert _value(text, "Tile average compute cycles (including idle threads)") == "180.0"
    assert _value(text, "Tile average compute cycles (excluding idle threads)") == "30.0"
    sync = np.mean([r.tile_cycles for r in trace.records if r.phase == "sync"], axis=1).sum()
    assert _value(text, "Tile average sync cycles") == f"{sync:,.1f}"
    share = f"({sync / trace.total_cycles:.1%} of total)"
    assert share in next(line for line in text.splitlines() if "average sync" in line)
    assert "Total sync cycles" not in text


def test_trace_summary_sums_over_tiles_on_ipu1_and_on_request():
    trace = _four_tile_trace("mk1")  # arch ipu1
    text = trace.summary()
    assert "Layout sdk1: sums over tiles" in text.splitlines()[1]
    assert _value(text, "Total compute cycles (including idle threads)") == f"{4 * 6 * 60:,}"
    sync = int(sum(r.tile_cycles.sum() for r in trace.records if r.phase == "sync"))
    assert _value(text, "Total sync cycles") == f"{sync:,}"
    tiny = _four_tile_trace("tiny").summary("sdk1")
    assert _value(tiny, "Total compute cycles (excluding idle threads)") == "240"
    assert "Tile average" not in tiny


def test_trace_summary_refuses_an_unknown_layout():
    with pytest.raises(ValueError, match=r"found 'sdk3'; expected one of sdk1, sdk2"):
        _four_tile_trace("tiny").summary("sdk3")
