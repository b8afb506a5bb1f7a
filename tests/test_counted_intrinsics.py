"""IPU intrinsics in counted kernels: vector loads, stores and arithmetic counted as one
instruction each, ``rpt`` loops run as bundles without loop steps, ``delay`` counted in
tile cycles (poplar_api.ipu_intrinsics, docs/counted_cycles.md)."""

from __future__ import annotations

import numpy as np
import pytest
from examples_common import load_example

from ipusim.config import load_config
from ipusim.tile.counted import OP_CLASSES, worker_vertex_cycles
from poplar_api import UNSIGNED_INT, DeviceManager, Engine, Graph, TargetType
from poplar_api import program as prog
from poplar_api.codelet import Output, SupervisorVertex
from poplar_api.counted import counting_kernel, vertexCycles
from poplar_api.errors import CodeletError
from poplar_api.ipu_intrinsics import (
    delay,
    f16v4add,
    f16v4mul,
    f16v4sub,
    f32v2add,
    f32v2axpy,
    f32v2mul,
    f32v2sub,
    ld2x64pace,
    load_float2,
    load_half4,
    rpt,
    store_float2,
    store_half4,
)

#: The vector triad of the counted-kernel example (``a = b + Q c``, an ``rpt`` loop of
#: ``ld2xst64pace`` and ``f32v2axpy`` bundles): the kernel these tests count is the one
#: the example runs.
_VECTOR_EXAMPLE = load_example("poplar/counted_vector_kernel.py")
Q = _VECTOR_EXAMPLE.Q
triad = _VECTOR_EXAMPLE.VectorTriad.compute


def scalar_offsets(a, out):
    for i in range(a.shape[0] - 1):
        out[i] = a[i + 1]  # ld32 with an immediate offset
    return True


def offset_as_value(a, out):
    for i in range(a.shape[0] - 1):
        j = i + 1
        out[i] = a[j] + j  # j is a value too: its add is an instruction


def branchy_rpt(a):
    for i in rpt(a.shape[0]):
        if a[i] > 0:
            a[i] = 0
    return True


def halves(a, out):
    for i in range(a.shape[0] >> 2):
        x = load_half4(a, i)
        y = f16v4mul(f16v4add(x, x), f16v4sub(x, (0.5, 0.5, 0.5, 0.5)))
        store_half4(out, i, y)
    return True


def floats(a, out):
    for i in range(a.shape[0] // 2):
        x = load_float2(a, i)
        store_float2(out, i, f32v2mul(f32v2add(x, x), f32v2sub(x, x)))
    return True


def _inputs(*arrays: np.ndarray) -> list[np.ndarray]:
    """``arrays`` read-only, as a codelet's ``Input`` fields reach its kernel: a kernel
    and its intrinsics are compiled per argument type, and a writable array is another
    type than a read-only one (so the tests compile what the vertices run)."""
    for a in arrays:
        a.flags.writeable = False
    return list(arrays)


def _run_counted(func, *args):
    kernel = counting_kernel(func, None, False, None)
    runs = np.zeros(kernel.num_blocks, np.int64)
    kernel.dispatcher(*args, runs)
    profile = kernel.profile()
    totals = runs @ profile
    return {OP_CLASSES[k]: int(v) for k, v in enumerate(totals) if v}, profile, runs


@pytest.mark.parametrize("pairs", [1, 2, 9, 40])
def test_the_triad_kernel_is_one_bundle_per_float2_in_its_rpt_loop(pairs):
    rng = np.random.default_rng(pairs)
    b, c = _inputs(*rng.standard_normal((2, 2 * pairs)).astype(np.float32))
    a = np.zeros(2 * pairs, np.float32)
    got, profile, runs = _run_counted(triad, a, b, c)
    np.testing.assert_array_equal(a, b + np.float32(Q) * c)
    assert got == {
        k: v
        for k, v in {
            "load_32": 1,  # a.shape
            "int_alu": 2,  # >> 1, and the rpt count pairs - 1 (the store's index is folded)
            "load_2x64": 1,
            "load_2x64_store_64": pairs - 1,
            "float2_arith": pairs,
            "store_64": 1,
            "rpt": 1,
            "rpt_body": pairs - 1,  # one straight body block per iteration
        }.items()
        if v
    }
    cfg = load_config("tiny").counted
    cycles = int(worker_vertex_cycles(cfg, profile, runs[None, :])[0])
    # each further float2 is one bundle: ld2xst64pace and f32v2axpy in one thread cycle
    if pairs > 1:
        a1, b1, c1 = np.zeros(2, np.float32), *_inputs(b[:2].copy(), c[:2].copy())
        _, profile1, runs1 = _run_counted(triad, a1, b1, c1)
        one = int(worker_vertex_cycles(cfg, profile1, runs1[None, :])[0])
        assert cycles - one == (pairs - 1) * max(
            cfg.load_2x64_store_64_cycles, cfg.float2_arith_cycles
        )


def test_index_offsets_of_scalar_loads_are_addressing():
    a = np.arange(5, dtype=np.float32)
    out = np.zeros(4, np.float32)
    got, _, _ = _run_counted(scalar_offsets, a, out)
    np.testing.assert_array_equal(out, a[1:])
    assert got["int_alu"] == 2  # shape - 1 and the loop set-up; a[i + 1] is ld32 with offset 1


def test_an_offset_that_is_also_a_value_is_counted():
    a = np.arange(5, dtype=np.float32)
    out = np.zeros(4, np.float32)
    got, _, _ = _run_counted(offset_as_value, a, out)
    np.testing.assert_array_equal(out, a[1:] + np.arange(1, 5))
    assert got["int_alu"] == 2 + 4  # and i + 1 per element


def test_vector_arithmetic_gives_numpy_values_and_one_instruction_per_vector():
    (a,) = _inputs(np.linspace(-2, 2, 16).astype(np.float32))
    out = np.zeros_like(a)
    got, _, _ = _run_counted(halves, a, out)
    x = a.reshape(-1, 4)
    np.testing.assert_allclose(out.reshape(-1, 4), (x + x) * (x - np.float32(0.5)), rtol=1e-6)
    assert got["half4_arith"] == 3 * 4 and got["load_64"] == 4 and got["store_64"] == 4
    assert "float_arith" not in got and "load_32" in got  # the shape only
    out2 = np.zeros_like(a)
    got2, _, _ = _run_counted(floats, a, out2)
    np.testing.assert_array_equal(out2, np.zeros_like(a))  # (x + x) * (x - x)
    assert got2["float2_arith"] == 3 * 8 and got2["load_64"] == 8 and got2["store_64"] == 8
    assert got2["int_alu"] == 2  # // 2 is a shift; the loop's set-up


def test_an_rpt_body_that_branches_is_refused():
    with pytest.raises(CodeletError, match=r"rpt loop .* branches"):
        _run_counted(branchy_rpt, np.ones(4, np.float32))


def count_to(n, out):
    for _ in rpt(n[0]):
        out[0] += 1
    return True


def test_rpt_refuses_counts_beyond_the_repeat_register():
    out = np.zeros(1, np.int32)
    got, _, _ = _run_counted(count_to, np.array([4095], np.int32), out)
    assert out[0] == 4095 and got["rpt_body"] == 4095
    with pytest.raises(ValueError, match="4095"):
        _run_counted(count_to, np.array([4096], np.int32), out)


def test_the_intrinsics_run_as_plain_python_values():
    b = np.arange(4, dtype=np.float32)
    c = np.arange(4, 8, dtype=np.float32)
    x, y = ld2x64pace(b, c, 1)
    assert x == (2.0, 3.0) and y == (6.0, 7.0)
    assert f32v2axpy(2.0, (1.0, 2.0), (0.5, 0.5)) == (2.5, 4.5)
    assert load_float2(c, 0) == (4.0, 5.0)


# ------------------------------------------------------------------ delay on a device
class Wait300(SupervisorVertex):
    done = Output(UNSIGNED_INT)

    @staticmethod
    def compute(done):
        delay(300)
        done[0] = 1
        return True


class Wait100(SupervisorVertex):
    done = Output(UNSIGNED_INT)

    @staticmethod
    def compute(done):
        delay(100)
        done[0] = 1
        return True


def _block_cycles(codelet) -> int:
    device = DeviceManager("tiny", 1).getDevices(TargetType.IPU, 1)[0]
    assert device.attach()
    graph = Graph(device.getTarget())
    graph.addCodelets(codelet)
    done = graph.addVariable(UNSIGNED_INT, [1], "done")
    graph.setTileMapping(done, 0)
    cs = graph.addComputeSet("wait")
    v = graph.addVertex(cs, codelet.__name__, {"done": done[0]})
    graph.setTileMapping(v, 0)
    with vertexCycles("auto"):
        engine = Engine(graph, prog.Execute(cs), {"profiler.programs.filter": "wait"})
    engine.load(device)
    engine.run()
    return int(engine.getBlockRecords(0)[0]["cycles"])


def test_delay_adds_its_operand_in_tile_cycles():
    assert _block_cycles(Wait300) - _block_cycles(Wait100) == 200


def variable_delay(n):
    delay(n[0])
    return True


def test_a_delay_whose_operand_is_not_a_constant_is_refused():
    with pytest.raises(CodeletError, match="constant"):
        _run_counted(variable_delay, np.array([5], np.int32))


# ------------------------------------------------------------ the calibration kernels
CAL = "examples/calibration/"


def test_the_triad_workload_counted_is_its_rpt_loop_per_repeat():
    from ipusim.runner import run_workload

    n = 8
    cfg = load_config("tiny")
    with vertexCycles("counted"):
        result = run_workload(CAL + "f_stream_triad.py", cfg, {"n": n, "repeats": 3})
    assert result.ok
    c = cfg.counted
    pairs = n // 2
    # entry block: a.shape, >> 1, pairs - 1, ld2x64pace, rpt (main); f32v2axpy (float)
    main = c.load_32_cycles + 2 * c.int_alu_cycles + c.load_2x64_cycles + c.rpt_cycles
    flt = c.float2_arith_cycles
    entry = main + flt - c.pairing * min(main, flt)
    body = (pairs - 1) * max(c.load_2x64_store_64_cycles, c.float2_arith_cycles)
    thread = np.ceil(c.worker_entry_cycles + entry + body + c.store_64_cycles)
    assert result.metrics["cycles_per_repeat"] == thread * cfg.tile.worker_contexts


def test_the_delay_workload_counted_meets_the_poplibs_bound():
    from ipusim.runner import run_workload

    with vertexCycles("counted"):
        result = run_workload(CAL + "m_delay.py", "mk2")
    assert result.ok
    # Poplibs' Popsys test: 1000 <= measured < 1000 + 150
    assert 1000 <= result.metrics["measured_cycles_upper_bound"] < 1150


def past_the_end(a, out):
    store_float2(out, 0, load_float2(a, a.shape[0] // 2))
    return True


def test_a_vector_access_outside_the_field_raises():
    (a,) = _inputs(np.zeros(4, np.float32))
    with pytest.raises(IndexError, match="outside the field"):
        _run_counted(past_the_end, a, np.zeros(2, np.float32))
    with pytest.raises(IndexError, match="outside the field"):
        load_half4(a, 1)


@pytest.mark.parametrize(
    ("name", "per_pixel"),
    [
        # per pixel: loads, stores, float operations, index products (class names)
        ("GaussianBlur", {"load_32": 36, "store_32": 4, "float_arith": 44, "int_mul": 1}),
        ("GaussianBlurFloat2", {"load_64": 18, "store_64": 2, "float2_arith": 22, "int_mul": 1}),
        ("GaussianBlurHalf", {"load_64": 9, "store_64": 1, "half4_arith": 11}),
    ],
)
def test_the_blur_codelets_count_nine_loads_eleven_operations_and_a_store(name, per_pixel):
    from numba.typed import List

    h = load_example("calibration/h_gaussian_blur.py")
    rows, width = 2, 3
    rng = np.random.default_rng(1)
    image = rng.random((rows + 2, width + 2, 4)).astype(np.float32)
    in_ = List([image[r].reshape(-1).copy() for r in range(rows + 2)])
    out = List([np.zeros(width * 4, np.float32) for _ in range(rows)])
    kernel = getattr(h, name).__dict__["compute"].__func__
    got, _, _ = _run_counted(kernel, in_, out, np.array([float(width)], np.float32))
    want = h.blur_reference(image)[1:-1, 1:-1]
    np.testing.assert_allclose(np.stack(list(out)).reshape(want.shape), want, rtol=1e-6)
    pixels = rows * width
    expected = {k: v * pixels for k, v in per_pixel.items()}
    # per row: the in_ rows k, k + 1, k + 2 and out[k] (a VectorList vector: load_64)
    expected["load_64"] = expected.get("load_64", 0) + 4 * rows
    expected["load_32"] = expected.get("load_32", 0) + 2  # len(out), width[0]
    expected.update(
        int_alu=1 + rows,  # the loops' set-ups
        convert=1,  # int(width[0])
        loop_backedge=(rows + 1) + rows * (width + 1),
    )
    assert got == expected
