"""PopART's ``SessionOptions.numIOTiles`` (popart_api.io_tiles): the I/O tiles hold the
streamed inputs and anchors and copy them while the compute tiles compute, the ops run
on the other tiles, and the values are those of a session without I/O tiles."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import device, train_once

import popart_api as popart

TILES = 128
IO = 32
BATCH, WIDTH = 8, 64


def _session(
    n_io: int,
    bps: int = 6,
    width: int = WIDTH,
    anchor: str = "ALL",
    batch: int = BATCH,
    relus: int = 1,
    anchor_x: bool = False,
    synthetic: bool = False,
):
    """Relu(x @ w) over ``bps`` batches on one IPU of 128 tiles, auto virtual graphs;
    ``width`` 0: ``relus`` Relus of ``batch`` x 256 inputs (little compute, long
    copies); ``anchor_x`` anchors the input too; ``synthetic``: no host copies at all
    (synthetic inputs, no anchor), the compute alone."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [batch, width or 256]), "x")
    w0 = np.random.default_rng(0).standard_normal((width, width)).astype(np.float32)
    if width:
        w = b.addInitializedInputTensor(w0, "w")
        y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
    else:
        w0 = np.eye(256, dtype=np.float32)
        y = x
        for _ in range(relus):
            y = b.aiOnnx.relu([y])
    art = popart.AnchorReturnType(anchor)
    anchors = {y: art, x: art} if anchor_x else {y: art}
    opts = popart.SessionOptions()
    if synthetic:
        anchors = {}
        opts.syntheticDataMode = popart.SyntheticDataMode.Zeros
    opts.virtualGraphMode = popart.VirtualGraphMode.Auto
    opts.numIOTiles = n_io
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": TILES})
    session = popart.InferenceSession(
        b.getModelProto(), popart.DataFlow(bps, anchors), device, userOptions=opts
    )
    return session, x, y, w0


def _run(n_io: int, bps: int = 6, width: int = WIDTH, batch: int = BATCH, **kwargs):
    session, x, y, w0 = _session(n_io, bps, width, batch=batch, **kwargs)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    shape = (bps, batch, width or 256)
    data = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    session.run(popart.PyStepIO({x: data}, anchors))
    return session, anchors.get(y), np.maximum(data @ w0, 0)


def test_values_equal_those_without_io_tiles() -> None:
    _, without, want = _run(0)
    _, with_io, _ = _run(IO)
    assert np.array_equal(with_io, without)
    np.testing.assert_allclose(with_io, want, rtol=1e-5, atol=1e-5)


def test_the_io_tiles_hold_the_landing_buffers_and_run_no_compute() -> None:
    session, _, _ = _run(IO, bps=2)
    trace = session.engine.getTrace()
    for record in trace.records:
        if record.kind == "compute":
            assert np.flatnonzero(record.tile_cycles).min() >= IO, record.name
    variable = session.engine.memory.by_category["variable"]
    # x and the anchor (8 x 64 floats each) land on the I/O tiles; the seed (8 B) is
    # on tile 0 as without I/O tiles
    assert int(variable[:IO].sum()) == 2 * BATCH * WIDTH * 4 + 8


def _period(n_io: int, **kwargs) -> int:
    """Cycles of one more batch: a step of 5 batches less one of 4."""
    t = [_run(n_io, bps=n, **kwargs)[0].engine.getTrace().total_cycles for n in (4, 5)]
    return t[1] - t[0]


def test_a_batch_lasts_the_longer_of_compute_and_copies_plus_the_hand_overs() -> None:
    # 64 x 256 floats in and out per batch on the I/O tiles. With few Relus the copies
    # are longer: a batch lasts max(C, T) + H = T + H whatever the compute (1 or 3
    # Relus); with the copies on every tile (no I/O tiles) it lasts C + T and grows.
    few = {"width": 0, "batch": 64}
    assert _period(IO, relus=1, **few) == _period(IO, relus=3, **few)
    assert _period(0, relus=3, **few) > _period(0, relus=1, **few)
    # With many Relus (8 x 256 floats) the compute is longer: the batch grows with the
    # compute one for one, as the compute alone does (synthetic data, no copies).
    many = {"width": 0, "batch": 8}
    grows = _period(IO, relus=60, **many) - _period(IO, relus=40, **many)
    alone = _period(IO, relus=60, synthetic=True, **many) - _period(
        IO, relus=40, synthetic=True, **many
    )
    assert grows == alone > 0


@pytest.mark.parametrize(
    ("n_io", "match"),
    [(30, "even number >= 32"), (33, "even number >= 32"), (TILES, "no compute tiles")],
)
def test_bad_io_tile_counts_are_refused_by_name(n_io: int, match: str) -> None:
    session, *_ = _session(n_io)
    with pytest.raises(popart.popart_exception, match=f"numIOTiles = {n_io}.*{match}"):
        session.prepareDevice()


def test_anchors_other_than_all_are_refused_by_name() -> None:
    session, *_ = _session(IO, anchor="FINAL")
    with pytest.raises(popart.popart_exception, match=r"AnchorReturnType FINAL.*numIOTiles"):
        session.prepareDevice()


def test_the_option_is_checked_when_set() -> None:
    opts = popart.SessionOptions()
    with pytest.raises(popart.popart_exception, match="numIOTiles: -2 must be an int >= 0"):
        opts.numIOTiles = -2


def test_training_lands_its_inputs_on_the_io_tiles_with_equal_values() -> None:
    def train(n_io: int):
        b = popart.Builder()
        x = b.addInputTensor(popart.TensorInfo("FLOAT", [8, 32]), "x")
        lab = b.addInputTensor(popart.TensorInfo("INT32", [8]), "lab")
        w0 = np.random.default_rng(0).standard_normal((32, 10)).astype(np.float32)
        w = b.addInitializedInputTensor(w0, "w")
        loss = b.aiGraphcore.nllloss([b.aiOnnx.softmax([b.aiOnnx.matmul([x, w])]), lab])
        opts = popart.SessionOptions()
        opts.virtualGraphMode = popart.VirtualGraphMode.Auto
        opts.numIOTiles = n_io
        rng = np.random.default_rng(1)
        data = {
            x: rng.standard_normal((3, 8, 32)).astype(np.float32),
            lab: rng.integers(0, 10, (3, 8)).astype(np.int32),
        }
        session, anchors = train_once(
            data,
            fnModel=b.getModelProto(),
            dataFlow=popart.DataFlow(3, {loss: popart.AnchorReturnType("ALL")}),
            deviceInfo=device(TILES),
            loss=loss,
            optimizer=popart.ConstSGD(0.1),
            userOptions=opts,
        )
        variable = session.engine.memory.by_category["variable"]
        return anchors[loss], int(variable[:IO].sum())

    losses, _ = train(0)
    with_io, io_bytes = train(IO)
    assert np.array_equal(with_io, losses)
    assert io_bytes >= (8 * 32 + 8) * 4  # x and the labels land on the I/O tiles
