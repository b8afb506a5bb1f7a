"""H: lbm-graphcore 3x3 Gaussian blur of an RGBA image on one Mk1 IPU (per-phase cycles).

Rebuilt: two image tensors ``[height, width, 4]`` (ping-pong), split into a grid of
tile blocks (rows x columns of tiles as square as the tile count allows), each block's
rows split over the 6 workers, one :class:`GaussianBlur` vertex per worker partition
computing the interior pixels of its partition from a 1-pixel halo (the halo rows are
read from neighbouring tiles, so Poplar-style lowering adds a sync and an exchange in
front of each compute set). One iteration is ``Execute(inToOut); Execute(outToIn)``;
the border pixels stay as they are.

**Image size**: the data set does not state it. The program allows at most
2000 x 1400 pixels per IPU; we take that size (:data:`IMAGE`), the largest image one
IPU holds, and report the choice with every result.

Approximated: the codelets are compiled C++ (``-O3``), which ipusim cannot see. The
vertex estimate is an instruction count per output pixel (:data:`INSTRUCTIONS_PER_PIXEL`,
loads, multiply-adds and stores of 4 channels, vectorised as the type allows) plus
:data:`FIXED_INSTRUCTIONS`; this is an estimate, not fitted. The image is float32
for ``float`` and ``float2`` (16 B per pixel) and half for ``half4`` (8 B per pixel),
so the halo exchange moves the measured bytes.

Metrics (``phase_cycles`` of the rows, one superstep, the ``inToOut`` compute set):
``sync`` = the fewest sync cycles of any tile (the wait of the last tile to arrive,
i.e. the sync's own cost without load imbalance), ``exchange`` = the halo exchange
(the same on every tile: the exchange is one static phase), ``compute`` = the slowest
tile's compute cycles, ``globExchange`` = global exchange (0 on one IPU).
**Not covered**: ``pre``/``post`` (on-tile halo copies the program makes; ipusim
lowers halo reads straight into the vertex fields) and every ``H1.16ipu.*`` row
(multi-IPU data exchange: lowering rejects "data read by a vertex or copied must be on
the same IPU").
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import (
    FLOAT,
    HALF,
    Device,
    Engine,
    Graph,
    Input,
    Output,
    Vector,
    VectorList,
    Vertex,
)
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "mk1"
TEST_CONFIG = "tiny"
#: Chosen image (height, width): the program's largest image per IPU (see module doc).
IMAGE = (1400, 2000)
CHANNELS = 4
WORKERS = 6
#: estimate, per output pixel (4 channels): 9 neighbour loads and 9 multiply-adds per
#: load width, then the stores. float: 4 x (9 + 9) + 4; float2 (64-bit, 2 channels):
#: 2 x (9 + 9) + 2; half4 (64-bit, 4 halves): 9 + 9 + 1.
INSTRUCTIONS_PER_PIXEL = {"float": 76, "float2": 38, "half4": 19}
#: estimate: vertex prologue, loop set-up per row, epilogue.
FIXED_INSTRUCTIONS = 20
WEIGHTS = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.float32) / 16

PHASES = ("sync", "exchange", "globExchange", "compute")
POINTS: dict[str, dict] = {
    f"H1.1ipu.{dt}.{name}": {"data_type": dt, "height": IMAGE[0], "width": IMAGE[1]}
    for dt in ("half4", "float2", "float")
    for name in PHASES
}
#: Row -> the metric of this workload that the row's ``phase_cycles`` is (the rows of
#: one data type share their parameters, so one run gives all four phases).
POINT_METRICS: dict[str, str] = {row: f"phase_cycles.{row.rsplit('.', 1)[1]}" for row in POINTS}


class GaussianBlur(Vertex):
    """``out[k]`` = 3x3 blur of rows ``in[k..k+2]`` (each row: halo pixel, pixels, halo pixel)."""

    in_ = Input(VectorList(FLOAT))
    out = Output(VectorList(FLOAT))
    width = Input(Vector(FLOAT))  # one element: the partition's width in pixels

    @staticmethod
    def compute(in_, out, width):
        w = int(width[0])
        for k in range(len(out)):
            dst = out[k]
            for j in range(w):
                for ch in range(4):
                    s = np.float32(0.0)
                    for di in range(3):
                        row = in_[k + di]
                        for dj in range(3):
                            wt = np.float32((2 - abs(di - 1)) * (2 - abs(dj - 1))) / 16
                            s += wt * row[(j + dj) * 4 + ch]
                    dst[j * 4 + ch] = s
        return True


class GaussianBlurHalf(GaussianBlur):
    """:class:`GaussianBlur` on half-precision pixels (``half4``: 8 bytes per pixel)."""

    in_ = Input(VectorList(HALF))
    out = Output(VectorList(HALF))


def blur_reference(img: np.ndarray) -> np.ndarray:
    """The interior blurred once with numpy (border unchanged)."""
    out = img.copy()
    h, w = img.shape[:2]
    acc = np.zeros((h - 2, w - 2, CHANNELS), np.float32)
    for di in range(3):
        for dj in range(3):
            acc += WEIGHTS[di, dj] * img[di : h - 2 + di, dj : w - 2 + dj]
    out[1:-1, 1:-1] = acc
    return out


def tile_grid(tiles: int) -> tuple[int, int]:
    """(tile rows, tile columns) with rows x columns = ``tiles``, as square as possible."""
    rows = int(np.sqrt(tiles))
    while tiles % rows:
        rows -= 1
    return rows, tiles // rows


def vertex_cycles(data_type: str, pixels: int, rows: int) -> int:
    """Thread cycles of the estimate for ``pixels`` output pixels in ``rows`` rows."""
    return INSTRUCTIONS_PER_PIXEL[data_type] * pixels + FIXED_INSTRUCTIONS + 2 * rows


def workload(
    device: Device,
    data_type: str = "float",
    height: int = 20,
    width: int = 24,
    iterations: int = 1,
) -> Workload:
    """``iterations`` blur iterations (2 compute sets each) of a ``height`` x ``width`` image."""
    if data_type not in INSTRUCTIONS_PER_PIXEL:
        raise ValueError(
            f"h_gaussian_blur: data_type={data_type!r}; expected one of "
            f"{', '.join(INSTRUCTIONS_PER_PIXEL)}"
        )
    graph = Graph(device.getTarget())
    tiles = graph.getTarget().getNumTiles()
    grid_r, grid_c = tile_grid(tiles)
    if height - 2 < grid_r * WORKERS or width - 2 < grid_c:
        raise ValueError(
            f"h_gaussian_blur: image {height}x{width} is too small for {tiles} tiles "
            f"({grid_r}x{grid_c} grid, {WORKERS} workers per tile); need height >= "
            f"{grid_r * WORKERS + 2} and width >= {grid_c + 2}"
        )
    half = data_type == "half4"
    vertex = "GaussianBlurHalf" if half else "GaussianBlur"
    graph.addCodelets(GaussianBlurHalf if half else GaussianBlur)
    dtype = HALF if half else FLOAT
    images = [graph.addVariable(dtype, [height, width, CHANNELS], n) for n in ("imgA", "imgB")]
    row_bands = np.array_split(np.arange(1, height - 1), grid_r)
    col_bands = np.array_split(np.arange(1, width - 1), grid_c)
    compute_sets = [graph.addComputeSet("inToOut"), graph.addComputeSet("outToIn")]
    for bi, rows in enumerate(row_bands):
        r0 = 0 if bi == 0 else int(rows[0])
        r1 = height if bi == grid_r - 1 else int(rows[-1]) + 1
        for bj, cols in enumerate(col_bands):
            tile = bi * grid_c + bj
            c0 = 0 if bj == 0 else int(cols[0])
            c1 = width if bj == grid_c - 1 else int(cols[-1]) + 1
            for img in images:
                graph.setTileMapping(img[r0:r1, c0:c1], tile)
            w = graph.addConstant(FLOAT, [1], [float(cols.size)], f"width{tile}")
            graph.setTileMapping(w, tile)
            for part in np.array_split(rows, WORKERS):
                p0, p1 = int(part[0]), int(part[-1]) + 1
                q0, q1 = int(cols[0]), int(cols[-1]) + 1
                for cs, (src, dst) in zip(compute_sets, (images, images[::-1]), strict=True):
                    fields = {
                        "in": [src[r, q0 - 1 : q1 + 1].flatten() for r in range(p0 - 1, p1 + 1)],
                        "out": [dst[r, q0:q1].flatten() for r in range(p0, p1)],
                        "width": w,
                    }
                    v = graph.addVertex(cs, vertex, fields)
                    graph.setTileMapping(v, tile)
                    graph.setPerfEstimate(
                        v, vertex_cycles(data_type, part.size * cols.size, part.size)
                    )
    graph.createHostWrite("imgA", images[0])
    graph.createHostWrite("imgB", images[1])
    graph.createHostRead("imgA-read", images[0])
    program = prog.Repeat(
        iterations, prog.Sequence(prog.Execute(compute_sets[0]), prog.Execute(compute_sets[1]))
    )
    rng = np.random.default_rng(3)
    host = rng.random((height, width, CHANNELS), dtype=np.float32)
    if half:
        host = host.astype(np.float16)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("imgA", host)
        engine.writeTensor("imgB", host)

    def check(engine: Engine) -> bool:
        want = host.astype(np.float32)
        for _ in range(2 * iterations):
            want = blur_reference(want)
            if half:
                want = want.astype(np.float16).astype(np.float32)
        tol = 2e-3 if half else 1e-5
        got = np.asarray(engine.readTensor("imgA-read"), np.float32)
        return bool(np.allclose(got, want, rtol=tol, atol=tol))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        name = "inToOut"
        sync = [r for r in trace.records if r.kind == "sync" and r.name == f"{name}/Sync"]
        exchange = [r for r in trace.records if r.name == f"{name}/ExchangeIn"]
        compute = [r for r in trace.records if r.kind == "compute" and r.name == name]
        if not (sync and exchange and compute):
            raise ValueError(
                "h_gaussian_blur: the trace has no inToOut sync, exchange and compute steps; "
                f"found {sorted({r.name for r in trace.records})}"
            )
        return {
            "phase_cycles.sync": float(np.mean([r.tile_cycles.min() for r in sync])),
            "phase_cycles.exchange": float(np.mean([r.tile_cycles.max() for r in exchange])),
            "phase_cycles.compute": float(np.mean([r.tile_cycles.max() for r in compute])),
            "phase_cycles.globExchange": float(trace.totals["global_exchange"]),
        }

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
