"""Batch kernels of a replicated step's element-wise vertices, each replica its own data.

``popops::ScaledAdd*``/``ScaledSubtract*`` (a weight update) run as one compiled pass
over every vertex of the batch, and ``popops::EncodeOneHot`` (the loss's labels) as
one vectorised pass; each vertex still uses its own scale, params and data. Checked
against numpy formulas written here, bit for bit, for FLOAT and HALF, on batches whose
vertices all differ; and, through an engine, a replicated graph with different data in
every replica against one-replica runs of the same data (also ``poplin.matMul``, whose
convolution partial vertices run on ``[replicas, vertices]`` stacks, in FLOAT and HALF).
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin, popops
from poplar_api import program as prog
from poplar_api.codelet import VertexError
from poplar_api.fields import FieldBatch
from poplar_api.popnn.onehot import one_hot_vertex
from poplar_api.popnn.vertices import MASKED_LABEL_CODE
from poplar_api.popops import vertices
from poplar_api.popops.vertices import scaled_add_vertex
from poplar_api.types import UNSIGNED_INT


def _offsets(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize("subtract", [False, True])
@pytest.mark.parametrize("layout", ["1D", "2D"])
def test_scaled_add_batch_equals_the_numpy_formula(t, subtract, layout, monkeypatch):
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 40, 37)
    n = counts.size
    a = rng.standard_normal(int(counts.sum())).astype(np.float32)
    b = rng.standard_normal(a.size).astype(np.float32) * np.float32(3.0)
    scale = rng.standard_normal(n).astype(np.float32)
    if t is HALF:  # the kernel sees HALF values widened to float32
        a, b, scale = (x.astype(np.float16).astype(np.float32) for x in (a, b, scale))
    per_element = np.repeat(scale, counts)
    product = (per_element * b).astype(np.float32)  # rounded to float32 first
    want = (a - product) if subtract else (a + product)
    offsets = _offsets(counts)
    if layout == "1D":
        batches = {
            "A": FieldBatch(a.copy(), offsets),
            "B": FieldBatch(b.copy(), offsets),
            "scaleB": FieldBatch(scale.copy(), np.arange(n + 1, dtype=np.int64)),
        }
    else:  # one inner vector per vertex
        per_vertex = np.arange(n + 1, dtype=np.int64)
        batches = {
            "A": FieldBatch(a.copy(), per_vertex, offsets),
            "B": FieldBatch(b.copy(), per_vertex, offsets),
            "scaleB": FieldBatch(scale.copy(), np.arange(n + 1, dtype=np.int64)),
        }
    cls = scaled_add_vertex(t, layout, subtract)
    calls = []
    real = vertices._scaled_add
    monkeypatch.setattr(vertices, "_scaled_add", lambda *args: calls.append(1) or real(*args))
    cls.computeBatch(batches, n, 6)
    assert calls == [1]  # the compiled pass ran
    assert want.dtype == np.float32
    np.testing.assert_array_equal(batches["A"].data.view(np.uint32), want.view(np.uint32))


def _one_hot_reference(indices, params, counts, out_sizes) -> list[np.ndarray]:
    """Each vertex's block, written index by index."""
    out, at = [], 0
    for v, c in enumerate(counts):
        offset, length, classes, _ = (int(x) for x in params[v])
        block = np.zeros(out_sizes[v], np.float32)
        for i in range(c):
            index = int(indices[at + i]) & 0xFFFFFFFF
            if index == MASKED_LABEL_CODE:
                continue
            assert index < classes
            if offset <= index < offset + length:
                block[i * length + index - offset] = 1
        out.append(block)
        at += c
    return out


def _one_hot_batches(rng, counts, bad_at=None):
    n = len(counts)
    classes = rng.integers(3, 12, n)
    offset = np.array([rng.integers(0, c) for c in classes])
    length = np.array([rng.integers(1, c - o + 1) for c, o in zip(classes, offset, strict=True)])
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]) + 100
    params = np.column_stack([offset, length, classes, first]).astype(np.uint32)
    indices = np.concatenate([rng.integers(0, c, k) for c, k in zip(classes, counts, strict=True)])
    indices = indices.astype(np.uint32)
    indices[rng.random(indices.size) < 0.2] = MASKED_LABEL_CODE
    if bad_at is not None:
        for v, i in bad_at:
            indices[int(np.sum(counts[:v])) + i] = classes[v] + 1
    out_sizes = counts * length
    batches = {
        "indices": FieldBatch(indices.astype(np.uint32), _offsets(counts)),
        "params": FieldBatch(params.reshape(-1), _offsets(np.full(n, 4))),
        "out": FieldBatch(np.zeros(int(out_sizes.sum()), np.float32), _offsets(out_sizes)),
    }
    return batches, indices, params, out_sizes


def test_one_hot_batch_equals_writing_each_index():
    rng = np.random.default_rng(11)
    counts = rng.integers(0, 9, 23)
    batches, indices, params, out_sizes = _one_hot_batches(rng, counts)
    cls = one_hot_vertex(UNSIGNED_INT, FLOAT)
    cls.computeBatch(batches, len(counts), 6)
    want = _one_hot_reference(indices, params, counts, out_sizes)
    np.testing.assert_array_equal(batches["out"].data, np.concatenate(want))


def test_one_hot_names_the_first_bad_index_in_vertex_order():
    rng = np.random.default_rng(12)
    counts = np.array([3, 0, 4, 5, 2])
    batches, indices, params, _ = _one_hot_batches(rng, counts, bad_at=[(3, 1), (2, 2), (4, 0)])
    cls = one_hot_vertex(UNSIGNED_INT, FLOAT)
    with pytest.raises(VertexError) as info:
        cls.computeBatch(batches, len(counts), 6)
    at = int(np.sum(counts[:2])) + 2  # vertex 2's third index comes first
    assert f"holds {int(indices[at])} at position {int(params[2, 3]) + 2}" in str(info.value)
    assert f"[0, {int(params[2, 2])})" in str(info.value)


def _engine(replicas: int, build) -> Engine:
    """An engine of the program ``build(graph)`` returns, on a graph of ``replicas``
    replicas of one ``tiny`` IPU Model each."""
    m = IPUModel("tiny")
    m.numIPUs = replicas
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=replicas)
    popops.addCodelets(g)
    poplin.addCodelets(g)
    e = Engine(g, build(g))
    e.load(device)
    return e


def _replica_inputs(seed: int, replicas: int, dtype: type, **shapes: tuple) -> dict:
    """Standard-normal inputs of every replica, drawn in the order named: ``name ->
    [replicas, *shape]`` in ``dtype``."""
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal((replicas, *shape)).astype(dtype)
        for name, shape in shapes.items()
    }


def _replicated_and_alone(build, inputs: dict, out: str, shape: tuple) -> tuple:
    """``out`` of every replica of one replicated run (``inputs``: per replica) and of
    a one-replica run of each replica's inputs: ``([replicas, *shape], [...])``."""
    replicas = len(next(iter(inputs.values())))
    e = _engine(replicas, build)
    for name, x in inputs.items():
        e.writeTensor(name, x)
    e.run(0)
    got = np.asarray(e.readTensor(out)).reshape(replicas, *shape)
    alone = []
    for r in range(replicas):
        one = _engine(1, build)
        for name, x in inputs.items():
            one.writeTensor(name, x[r])
        one.run(0)
        alone.append(np.asarray(one.readTensor(out)).reshape(shape))
    return got, np.stack(alone)


def _scaled_program(t):
    """``a += s * b; a -= 0.375 * b``."""

    def build(g: Graph) -> prog.Sequence:
        a = g.addVariable(t, [40, 7], "a")
        b = g.addVariable(t, [40, 7], "b")
        s = g.addVariable(t, [1], "s")
        for tile, x in enumerate((a, b, s)):
            g.setTileMapping(x, tile)
        for name, x in (("a", a), ("b", b), ("s", s)):
            g.createHostWrite(name, x)
        g.createHostRead("a", a)
        seq = prog.Sequence()
        popops.scaledAddTo(g, a, b, s, seq, "add")
        popops.scaledSubtractFrom(g, a, b, 0.375, seq, "sub")
        return seq

    return build


@pytest.mark.parametrize("t", [FLOAT, HALF])
def test_replicas_with_different_data_equal_one_replica_runs(t):
    replicas = 4
    dtype = np.float32 if t is FLOAT else np.float16
    inputs = _replica_inputs(3, replicas, dtype, a=(40, 7), b=(40, 7), s=(1,))
    a, b, s = inputs["a"], inputs["b"], inputs["s"]
    got, alone = _replicated_and_alone(_scaled_program(t), inputs, "a", (40, 7))
    np.testing.assert_array_equal(got.view(np.uint8), alone.view(np.uint8))
    for r in range(replicas):
        a32, b32, s32 = (x.astype(np.float32) for x in (a[r], b[r], s[r]))
        step = (a32 + (s32[0] * b32).astype(np.float32)).astype(dtype).astype(np.float32)
        want = (step - (np.float32(0.375) * b32).astype(np.float32)).astype(dtype)
        np.testing.assert_array_equal(got[r].view(np.uint8), want.view(np.uint8))
    assert not np.array_equal(got[0], got[1])  # the replicas did not merge


def _matmul_program(t):
    """``y = x @ w`` by ``poplin.matMul`` (the convolution partial vertices)."""

    def build(g: Graph) -> prog.Sequence:
        x = poplin.createMatMulInputLHS(g, t, [12, 16], [16, 10], "x")
        w = poplin.createMatMulInputRHS(g, t, [12, 16], [16, 10], "w")
        seq = prog.Sequence()
        y = poplin.matMul(g, x, w, seq, "mm")
        for name, tensor in (("x", x), ("w", w)):
            g.createHostWrite(name, tensor)
        g.createHostRead("y", y)
        return seq

    return build


@pytest.mark.parametrize("t", [FLOAT, HALF])
def test_replicated_matmul_with_different_data_equals_one_replica_runs(t):
    replicas = 3
    dtype = np.float32 if t is FLOAT else np.float16
    inputs = _replica_inputs(8, replicas, dtype, x=(12, 16), w=(16, 10))
    x, w = inputs["x"], inputs["w"]
    got, alone = _replicated_and_alone(_matmul_program(t), inputs, "y", (12, 10))
    np.testing.assert_array_equal(got.view(np.uint8), alone.view(np.uint8))
    tol = 1e-5 if t is FLOAT else 2e-2
    for r in range(replicas):
        want = x[r].astype(np.float64) @ w[r].astype(np.float64)
        np.testing.assert_allclose(got[r].astype(np.float64), want, rtol=tol, atol=tol * 4)
    assert not np.array_equal(got[0], got[1])


def _scaled_2d_program(t):
    """``a[:, :5] += s * b`` on a 2-D layout (rows of a on several tiles), then
    ``a -= 0.5 * b`` over all of it."""

    def build(g: Graph) -> prog.Sequence:
        a = g.addVariable(t, [24, 9], "a")
        b = g.addVariable(t, [24, 9], "b")
        s = g.addVariable(t, [1], "s")
        for row in range(24):
            g.setTileMapping(a[row], row % 5)
            g.setTileMapping(b[row], (row + 2) % 5)
        g.setTileMapping(s, 6)
        for name, x in (("a", a), ("b", b), ("s", s)):
            g.createHostWrite(name, x)
        g.createHostRead("a", a)
        seq = prog.Sequence()
        popops.scaledAddTo(g, a.slice(0, 5, 1), b.slice(0, 5, 1), s, seq, "add")
        popops.scaledSubtractFrom(g, a, b, 0.5, seq, "sub")
        return seq

    return build


def test_replicated_float_updates_run_where_the_fields_lie(monkeypatch):
    """FLOAT scaled adds of a replicated graph update every replica's image in place:
    bit for bit the one-replica runs and the formula."""
    calls = []
    real = vertices._scaled_add_in_place
    monkeypatch.setattr(
        vertices, "_scaled_add_in_place", lambda *a: calls.append(real(*a)) or calls[-1]
    )
    replicas = 3
    inputs = _replica_inputs(11, replicas, np.float32, a=(24, 9), b=(24, 9), s=(1,))
    a, b, s = inputs["a"], inputs["b"], inputs["s"]
    got, alone = _replicated_and_alone(_scaled_2d_program(FLOAT), inputs, "a", (24, 9))
    assert calls and all(calls)  # in place (the one-replica runs do not call it)
    assert got.tobytes() == alone.tobytes()
    for r in range(replicas):
        want = a[r].copy()
        want[:, :5] = want[:, :5] + (s[r, 0] * b[r, :, :5]).astype(np.float32)
        want = want - (np.float32(0.5) * b[r]).astype(np.float32)
        assert got[r].tobytes() == want.tobytes(), f"replica {r}"


def test_an_update_reading_what_it_writes_runs_packed(monkeypatch):
    """B's elements among A's (``a[1:] += s * a[:-1]``): the packed pass reads all of B
    before writing A, so the update is not done in place."""
    calls = []
    real = vertices._scaled_add_in_place
    monkeypatch.setattr(
        vertices, "_scaled_add_in_place", lambda *a: calls.append(real(*a)) or calls[-1]
    )

    def build(g: Graph) -> prog.Sequence:
        a = g.addVariable(FLOAT, [30], "a")
        s = g.addVariable(FLOAT, [1], "s")
        g.setTileMapping(a, 0)
        g.setTileMapping(s, 1)
        g.createHostWrite("a", a)
        g.createHostWrite("s", s)
        g.createHostRead("a", a)
        seq = prog.Sequence()
        popops.scaledAddTo(g, a.slice(1, 30), a.slice(0, 29), s, seq, "shift")
        return seq

    inputs = _replica_inputs(5, 2, np.float32, a=(30,), s=(1,))
    a, s = inputs["a"], inputs["s"]
    got, alone = _replicated_and_alone(build, inputs, "a", (30,))
    assert calls == [False]  # asked, and refused: packed
    assert got.tobytes() == alone.tobytes()
    for r in range(2):
        want = a[r].copy()
        want[1:] = a[r, 1:] + (s[r, 0] * a[r, :-1]).astype(np.float32)
        assert got[r].tobytes() == want.tobytes()


@pytest.mark.parametrize("frozen", [(False, False), (False, True), (True, False), (True, True)])
def test_an_update_in_place_takes_writeable_and_read_only_ids_alike(frozen):
    """Fields' ids come writeable or read-only: the in-place update computes the same
    float32 formula either way, through one compiled signature."""
    from poplar_api.field_images import ImageField

    rng = np.random.default_rng(13)
    replicas, f32 = 3, np.dtype(np.float32)
    image = rng.standard_normal((replicas, 64)).astype(np.float32).view(np.uint32)
    before = image.view(np.float32).copy()
    a_ids, b_ids = np.arange(10, 22, dtype=np.int32), np.arange(40, 52, dtype=np.int32)
    s_ids = np.array([60, 61], np.int32)
    for ids, ro in zip((a_ids, b_ids), frozen, strict=True):
        ids.flags.writeable = not ro
    offsets = np.array([0, 5, 12])

    def field(ids, offs):
        return ImageField(image, f32, ids, offs, None, f32)

    batches = {"A": field(a_ids, offsets), "B": field(b_ids, offsets),
               "scaleB": field(s_ids, np.arange(3))}  # fmt: skip
    assert vertices._scaled_add_in_place(batches, False)
    got = image.view(np.float32)
    scale = np.repeat(before[:, s_ids], [5, 7], axis=1)
    want = before[:, a_ids] + (scale * before[:, b_ids]).astype(np.float32)
    np.testing.assert_array_equal(got[:, a_ids], want)
    assert len(vertices._scaled_add_block.signatures) == 1  # (A is one block)


@pytest.mark.parametrize("subtract", [False, True])
def test_an_update_of_one_block_is_the_update_through_ids(subtract):
    """An update whose A is one block of ids runs as a slice of each replica's row
    (``_scaled_add_block``): bit for bit the update through A's ids
    (``_scaled_add_images``) and the float32 formula, with B scattered and every vertex
    and replica its own scale; A's ids out of order are no block."""
    rng = np.random.default_rng(21)
    replicas, n = 4, 60
    scale_exp = np.exp2(rng.integers(-20, 21, (replicas, 300)))
    image = (rng.standard_normal((replicas, 300)) * scale_exp).astype(np.float32)
    a_ids = np.arange(100, 100 + n, dtype=np.int32)
    b_ids = rng.permutation(np.arange(200, 300))[:n].astype(np.int32)
    counts = np.array([7, 1, 30, 22], np.int64)
    scales = rng.standard_normal((replicas, 4)).astype(np.float32)
    assert vertices._block_start(a_ids) == 100
    assert vertices._block_start(a_ids[::-1].copy()) is None
    assert vertices._block_start(np.r_[a_ids[:5], a_ids[6:]]) is None
    block, through_ids = image.copy(), image.copy()
    vertices._scaled_add_block(block, 100, image, b_ids, scales, counts, subtract)
    vertices._scaled_add_images(through_ids, a_ids, image, b_ids, scales, counts, subtract)
    assert block.tobytes() == through_ids.tobytes()
    prod = (np.repeat(scales, counts, axis=1) * image[:, b_ids]).astype(np.float32)
    want = image.copy()
    want[:, a_ids] = want[:, a_ids] - prod if subtract else want[:, a_ids] + prod
    assert block.tobytes() == want.tobytes()


def test_whether_b_is_apart_from_a_is_found_once_per_pair_of_arrays(monkeypatch):
    """An in-place update asks whether B's ids are apart from A's on every run, of the
    same arrays: the answer is found once per pair, and is that pair's."""
    a = np.arange(10, 20)
    overlapping, beyond, between = np.arange(15, 25), np.arange(30, 40), np.array([5, 25, 50])
    compared = []
    real = np.isin
    monkeypatch.setattr(np, "isin", lambda *x, **k: compared.append(1) or real(*x, **k))
    for _ in range(3):
        assert not vertices._apart(a, overlapping)
        assert vertices._apart(a, beyond)  # spans apart: no ids compared
        assert vertices._apart(a, between)
        assert not vertices._apart(overlapping, a)
    assert len(compared) == 3
