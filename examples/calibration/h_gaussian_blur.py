"""H: lbm-graphcore 3x3 Gaussian blur of an RGBA image on one or 16 Mk1 IPUs (per-phase cycles).

Rebuilt: two image tensors ``[height, width, 4]`` (ping-pong). On several IPUs the
image is first cut into one slice per IPU as the program's ``partitionForIpus`` does
(lbm-graphcore at the measured commit 97cd841a, docs/sources.md, "H: lbm-graphcore
Gaussian blur"): whole columns per IPU
(``shortAndWideIpuStrategy``) unless rows divide more evenly (``rows % n / rows <
cols % n / cols``: whole rows, ``longAndNarrowIpuStrategy``), cut as evenly as the
count allows (:func:`ipu_slices`). Each IPU's slice (the whole image on one IPU) is
split into a grid of tile blocks that uses every tile of the IPU and is as square in
pixels as the tile count allows, with at least :data:`WORKERS` rows per block
(:func:`tile_grid`; on one IPU at the measured size this is the 32 x 38 grid of
1216 tiles). Each block's rows are split over the 6 workers, one :class:`GaussianBlur`
vertex per worker partition computing the interior pixels of its partition from a
1-pixel halo. The halo pixels are read from neighbouring tiles, and at a slice edge
from the neighbouring IPU, so Poplar-style lowering puts in front of each compute set
an external sync and a global exchange over the IPU-Links (several IPUs only), then
an internal sync and the on-chip exchange (docs/poplar_api.md, "Graphs spanning
several IPUs"). The border pixels stay as they are.

**Halo copies** (``pre``/``post``): at the measured commit the codelet's ``in`` and
``out`` fields are the worker's partition of the image (``applySlice(imgTensor,
slice)``), connected to ``Vector`` fields, which Poplar needs contiguous; the rows of
a partition are not, so Poplar copies them on the tile into a contiguous buffer
before the compute set and the output back after it. The workload makes these copies
explicit: per worker a ``pre`` :class:`CopyPieces` vertex (its rows of the source
image into its buffer), the blur (the buffer, with the halo rows and pixels read from
the image, into a contiguous output buffer) and a ``post`` copy (the output buffer into
its rows of the destination image), each a compute set of its own, so one iteration is
``inToOutPre, inToOut, inToOutPost, outToInPre, outToIn, outToInPost``. The copies
touch only the tile's own data, so no sync or exchange comes in front of them. Their
cycles are those of Poplar's runtime copy vertices (:mod:`ipusim.machine_copies`): the
``pre`` copy a gather (strided rows into one buffer), the ``post`` copy a scatter, each
a fixed part, a part per row (region) and the bytes at 8 per thread cycle (the
``ldst64pace`` load/store path); the fixed and per-row parts are fitted on the 12 copy
rows (``_fit_hardware.py copies``, docs/calibration.md "On-tile copies"). The halo
received by exchange goes straight into the blur's field (as Poplar's exchange writes
into the field's buffer), so it is not copied on the tile.

**Image size**: the data set does not state it. The program allows at most
2000 x 1400 pixels per IPU; we take that size (:data:`IMAGE`), the largest image one
IPU holds, and report the choice with every result. The 16-IPU rows use the same
image (the data set's notes: the 16-IPU float compute is about 1/16 of the 1-IPU
one). Under the program's rule a 1400 x 2000 image on 16 IPUs is cut into 16 slices
of 125 columns (2000 % 16 = 0), so each of the 15 IPU boundaries moves one column of
1400 pixels (and the corner pixels) each way per superstep; each IPU's
1398 x 125 interior gets a 152 x 8 tile grid (blocks of about 9 x 16 pixels; the
program's own ``generalTileGridStrategy`` with 1 minimum row and column, as its
scaling runs used, would make 117 x 10 blocks of about 12 x 12.5 on 1170 tiles: about
the same halo per tile, 56 pixels around our largest block against 54).

Approximated: the codelets are compiled C++ (``-O3``), which ipusim cannot see. In
estimate mode (the default) the vertex estimate is an instruction count per output
pixel (:data:`INSTRUCTIONS_PER_PIXEL`, loads, multiply-adds and stores of 4 channels,
vectorised as the type allows) plus :data:`FIXED_INSTRUCTIONS`; this is an estimate,
not fitted. With counted cycles (engine option ``debug.vertexCycles=counted``,
docs/counted_cycles.md) the kernels below are counted instead: each is the measured
codelet written with the IPU intrinsics its type uses (``float2``/``half4`` 64-bit
loads and stores, ``f32v2``/``f16v4`` arithmetic) and constant weights. The image is
float32 for ``float`` and ``float2`` (16 B per pixel) and half for ``half4`` (8 B per
pixel), so the halo exchange and the copies move the measured bytes.

Metrics (``phase_cycles`` of the rows, one superstep, the ``inToOut`` compute set,
averaged over its executions):

* ``sync`` = the fewest sync cycles of any tile (the wait of the last tile to arrive,
  i.e. the sync's own cost without load imbalance), where a tile's sync cycles are
  those of the superstep's internal sync plus, on several IPUs, its external sync;
* ``exchange`` = the on-chip halo exchange, the slowest tile (the same on every tile
  of an IPU: the exchange is one static phase);
* ``globExchange`` = the global exchange over the IPU-Links, the slowest tile of the
  IPUs taking part (0 on one IPU); it starts when the last tile leaves the external
  sync, so the slowest tile's cycles include that sync's release skew (up to
  ``sync.max_relative_delay_cycles``; the on-chip exchange's phase model has none);
* ``compute`` = the slowest tile's compute cycles;
* ``pre`` and ``post`` = the slowest tile of the ``inToOutPre`` and ``inToOutPost``
  copies.

Companion metrics, not rows: ``phase_cycles.externalSync`` (the external sync alone,
fewest cycles of any tile) and ``global_exchange_bytes`` (bytes that cross the
IPU-Links in one ``inToOut`` superstep).
"""

from __future__ import annotations

import numpy as np

from ipusim.machine_copies import copy_vertex_cycles
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
    concat,
)
from poplar_api import program as prog
from poplar_api.ipu_intrinsics import (
    f16v4add,
    f16v4mul,
    f32v2add,
    f32v2mul,
    load_float2,
    load_half4,
    store_float2,
    store_half4,
)
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

PHASES = ("sync", "exchange", "globExchange", "pre", "post", "compute")
#: IPU counts of the measured rows (row prefix ``H1.<n>ipu``).
IPU_COUNTS = (1, 16)
POINTS: dict[str, dict] = {
    f"H1.{n}ipu.{dt}.{name}": {"data_type": dt, "height": IMAGE[0], "width": IMAGE[1]}
    for n in IPU_COUNTS
    for dt in ("half4", "float2", "float")
    for name in PHASES
}
#: The 16-IPU rows run on 16 Mk1 IPUs (``mk1`` with ``num_ipus: 16``: its IPU-Link
#: figures, ring topology and hop latency are the preset's, see docs/calibration.md).
POINT_OVERRIDES: dict[str, dict] = {
    row: {"num_ipus": 16} for row in POINTS if row.startswith("H1.16ipu.")
}
#: Row -> the metric of this workload that the row's ``phase_cycles`` is (the rows of
#: one data type share their parameters, so one run gives all four phases).
POINT_METRICS: dict[str, str] = {row: f"phase_cycles.{row.rsplit('.', 1)[1]}" for row in POINTS}


#: The stencil's weights, constants of the codelets (corners, edges, centre).
SIXTEENTH = np.float32(1.0 / 16)
EIGHTH = np.float32(2.0 / 16)
QUARTER = np.float32(4.0 / 16)


class GaussianBlur(Vertex):
    """``out[k]`` = 3x3 blur of rows ``in[k..k+2]`` (each row: halo pixel, pixels, halo pixel).

    The kernel of ``GaussianBlurCodelet<float>`` (lbm-graphcore,
    ``main/codelets/GaussianBlurCodelets.cpp``): per channel nine loads, the stencil
    ``1/16 (nw + ne + sw + se) + 4/16 m + 2/16 (e + w + s + n)`` with constant weights
    (eleven float operations) and a store; its channel loop is unrolled (``#pragma
    unroll 4``), so the four channels of a pixel are written out here.
    """

    in_ = Input(VectorList(FLOAT))
    out = Output(VectorList(FLOAT))
    width = Input(Vector(FLOAT))  # one element: the partition's width in pixels

    @staticmethod
    def compute(in_, out, width):
        w = int(width[0])
        for k in range(len(out)):
            up = in_[k]
            mid = in_[k + 1]
            dn = in_[k + 2]
            dst = out[k]
            for x in range(w):
                b = 4 * x  # channel 0 of the pixel left of x (in) and of x (out)
                dst[b] = (
                    SIXTEENTH * (up[b] + up[b + 8] + dn[b] + dn[b + 8])
                    + QUARTER * mid[b + 4]
                    + EIGHTH * (mid[b + 8] + mid[b] + dn[b + 4] + up[b + 4])
                )
                dst[b + 1] = (
                    SIXTEENTH * (up[b + 1] + up[b + 9] + dn[b + 1] + dn[b + 9])
                    + QUARTER * mid[b + 5]
                    + EIGHTH * (mid[b + 9] + mid[b + 1] + dn[b + 5] + up[b + 5])
                )
                dst[b + 2] = (
                    SIXTEENTH * (up[b + 2] + up[b + 10] + dn[b + 2] + dn[b + 10])
                    + QUARTER * mid[b + 6]
                    + EIGHTH * (mid[b + 10] + mid[b + 2] + dn[b + 6] + up[b + 6])
                )
                dst[b + 3] = (
                    SIXTEENTH * (up[b + 3] + up[b + 11] + dn[b + 3] + dn[b + 11])
                    + QUARTER * mid[b + 7]
                    + EIGHTH * (mid[b + 11] + mid[b + 3] + dn[b + 7] + up[b + 7])
                )
        return True


class GaussianBlurFloat2(GaussianBlur):
    """:class:`GaussianBlur` on ``float2`` (``GaussianBlurCodeletFloat2`` of
    ``main/codelets/GaussianBlurCodeletsVectorised.cpp``): per pixel two float2 (RG,
    BA; ``#pragma unroll 2``), each nine 64-bit loads, eleven ``f32v2`` operations and
    a 64-bit store."""

    @staticmethod
    def compute(in_, out, width):
        s16 = (SIXTEENTH, SIXTEENTH)
        s8 = (EIGHTH, EIGHTH)
        s4 = (QUARTER, QUARTER)
        w = int(width[0])
        for k in range(len(out)):
            up = in_[k]
            mid = in_[k + 1]
            dn = in_[k + 2]
            dst = out[k]
            for x in range(w):
                p = 2 * x  # float2 0 (RG) of the pixel left of x (in) and of x (out)
                corners = f32v2add(
                    f32v2add(load_float2(up, p), load_float2(up, p + 4)),
                    f32v2add(load_float2(dn, p), load_float2(dn, p + 4)),
                )
                edges = f32v2add(
                    f32v2add(load_float2(mid, p + 4), load_float2(mid, p)),
                    f32v2add(load_float2(dn, p + 2), load_float2(up, p + 2)),
                )
                centre = f32v2mul(s4, load_float2(mid, p + 2))
                store_float2(
                    dst, p, f32v2add(f32v2add(f32v2mul(s16, corners), centre), f32v2mul(s8, edges))
                )
                corners = f32v2add(
                    f32v2add(load_float2(up, p + 1), load_float2(up, p + 5)),
                    f32v2add(load_float2(dn, p + 1), load_float2(dn, p + 5)),
                )
                edges = f32v2add(
                    f32v2add(load_float2(mid, p + 5), load_float2(mid, p + 1)),
                    f32v2add(load_float2(dn, p + 3), load_float2(up, p + 3)),
                )
                centre = f32v2mul(s4, load_float2(mid, p + 3))
                store_float2(
                    dst,
                    p + 1,
                    f32v2add(f32v2add(f32v2mul(s16, corners), centre), f32v2mul(s8, edges)),
                )
        return True


class GaussianBlurHalf(GaussianBlur):
    """:class:`GaussianBlur` on half-precision pixels (``GaussianBlurCodeletHalf4``:
    one ``half4`` per pixel, 8 bytes): nine 64-bit loads, eleven ``f16v4`` operations
    and a 64-bit store per pixel."""

    in_ = Input(VectorList(HALF))
    out = Output(VectorList(HALF))

    @staticmethod
    def compute(in_, out, width):
        s16 = (SIXTEENTH, SIXTEENTH, SIXTEENTH, SIXTEENTH)
        s8 = (EIGHTH, EIGHTH, EIGHTH, EIGHTH)
        s4 = (QUARTER, QUARTER, QUARTER, QUARTER)
        w = int(width[0])
        for k in range(len(out)):
            up = in_[k]
            mid = in_[k + 1]
            dn = in_[k + 2]
            dst = out[k]
            for x in range(w):
                corners = f16v4add(
                    f16v4add(load_half4(up, x), load_half4(up, x + 2)),
                    f16v4add(load_half4(dn, x), load_half4(dn, x + 2)),
                )
                edges = f16v4add(
                    f16v4add(load_half4(mid, x + 2), load_half4(mid, x)),
                    f16v4add(load_half4(dn, x + 1), load_half4(up, x + 1)),
                )
                centre = f16v4mul(s4, load_half4(mid, x + 1))
                store_half4(
                    dst, x, f16v4add(f16v4add(f16v4mul(s16, corners), centre), f16v4mul(s8, edges))
                )
        return True


class CopyPieces(Vertex):
    """``out[k]`` = ``in[k]`` for every piece ``k``: the on-tile copies Poplar makes so
    that a vertex's ``Vector`` field is contiguous (the ``pre`` copy gathers the
    tile's own pieces of a worker's ``in`` field into one buffer, the ``post`` copy
    scatters its contiguous ``out`` buffer back into the image rows)."""

    in_ = Input(VectorList(FLOAT))
    out = Output(VectorList(FLOAT))

    @staticmethod
    def compute(in_, out):
        for k in range(len(out)):
            src = in_[k]
            dst = out[k]
            for i in range(dst.shape[0]):
                dst[i] = src[i]
        return True


class CopyPiecesHalf(CopyPieces):
    """:class:`CopyPieces` of half-precision pieces."""

    in_ = Input(VectorList(HALF))
    out = Output(VectorList(HALF))


#: The codelet of each data type, as the program chooses them.
CODELETS: dict[str, type[GaussianBlur]] = {
    "float": GaussianBlur,
    "float2": GaussianBlurFloat2,
    "half4": GaussianBlurHalf,
}


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


def ipu_slices(height: int, width: int, ipus: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per IPU, the interior pixel rows and columns it computes (border pixels excluded).

    The image's rows ``0 .. height - 1`` or columns ``0 .. width - 1`` are cut into
    ``ipus`` near-equal runs as the program's ``partitionForIpus`` does: by columns
    unless rows divide more evenly (``height % ipus / height < width % ipus / width``),
    the first ``count % ipus`` runs one longer. One IPU gets the whole interior.
    """
    rows, cols = np.arange(1, height - 1), np.arange(1, width - 1)
    by_rows = (height % ipus) / height < (width % ipus) / width
    runs = np.array_split(np.arange(height if by_rows else width), ipus)
    out = []
    for run in runs:
        inner = run[(run >= 1) & (run <= (height if by_rows else width) - 2)]
        out.append((inner, cols) if by_rows else (rows, inner))
    return out


def tile_grid(tiles: int, rows: int, cols: int) -> tuple[int, int] | None:
    """(tile rows, tile columns) for a ``rows`` x ``cols`` pixel slice on ``tiles`` tiles.

    Every tile is used (rows x columns = ``tiles``), each block has at least
    :data:`WORKERS` rows and one column, and the blocks are as square in pixels as
    possible (smallest ``|log(block height / block width)|``). None when no grid fits.
    """
    best: tuple[float, int, int] | None = None
    for r in range(1, tiles + 1):
        c = tiles // r
        if r * c != tiles or r * WORKERS > rows or c > cols:
            continue
        score = abs(np.log((rows / r) / (cols / c)))
        if best is None or score < best[0]:
            best = (score, r, c)
    return None if best is None else (best[1], best[2])


def vertex_cycles(data_type: str, pixels: int, rows: int) -> int:
    """Thread cycles of the estimate for ``pixels`` output pixels in ``rows`` rows."""
    return INSTRUCTIONS_PER_PIXEL[data_type] * pixels + FIXED_INSTRUCTIONS + 2 * rows


def _worker_vertices(src, dst, own, rows, cols, width) -> tuple[dict, dict, dict]:
    """Fields of one worker's three vertices: the ``pre`` copy of its rows of ``src``
    into its buffer ``own[0]``, the blur of that buffer with the halo read from
    ``src`` (the rows above and below, the pixels left and right) into ``own[1]``,
    and the ``post`` copy of ``own[1]`` into its rows of ``dst``."""
    (p0, p1), (q0, q1) = rows, cols
    buf_in, buf_out = own
    pre = {
        "in": [src[r, q0:q1].flatten() for r in range(p0, p1)],
        "out": [buf_in[k] for k in range(p1 - p0)],
    }
    blur = {
        "in": [
            concat([src[r, q0 - 1].flatten(), buf_in[r - p0], src[r, q1].flatten()])
            if p0 <= r < p1
            else src[r, q0 - 1 : q1 + 1].flatten()
            for r in range(p0 - 1, p1 + 1)
        ],
        "out": [buf_out[k] for k in range(p1 - p0)],
        "width": width,
    }
    post = {
        "in": [buf_out[k] for k in range(p1 - p0)],
        "out": [dst[r, q0:q1].flatten() for r in range(p0, p1)],
    }
    return pre, blur, post


def workload(
    device: Device,
    data_type: str = "float",
    height: int = 20,
    width: int = 24,
    iterations: int = 1,
    ipus: int = 0,
) -> Workload:
    """``iterations`` blur iterations (2 compute sets each) of a ``height`` x ``width`` image.

    ``ipus``: the image is cut over the first ``ipus`` IPUs of the device (0: all of
    them), so rows measured on different IPU counts can be fitted on one config.
    """
    if data_type not in INSTRUCTIONS_PER_PIXEL:
        raise ValueError(
            f"h_gaussian_blur: data_type={data_type!r}; expected one of "
            f"{', '.join(INSTRUCTIONS_PER_PIXEL)}"
        )
    graph = Graph(device.getTarget())
    target = graph.getTarget()
    device_ipus, tiles_per_ipu = target.getNumIPUs(), target.getTilesPerIPU()
    cfg = target.config
    if not 0 <= ipus <= device_ipus:
        raise ValueError(
            f"h_gaussian_blur: ipus={ipus}; expected 0 (all) .. {device_ipus}, the device's "
            "IPUs; hint: a device with more IPUs (num_ipus) or a smaller -p ipus"
        )
    ipus = ipus or device_ipus
    if height < 3 or width < 3:
        raise ValueError(f"h_gaussian_blur: image {height}x{width}; expected at least 3x3")
    slices = ipu_slices(height, width, ipus)
    grids = []
    for ipu, (rows, cols) in enumerate(slices):
        grid = tile_grid(tiles_per_ipu, rows.size, cols.size)
        if grid is None:
            raise ValueError(
                f"h_gaussian_blur: image {height}x{width} is too small for {ipus} IPU(s) "
                f"of {tiles_per_ipu} tiles: IPU {ipu} computes {rows.size}x{cols.size} "
                f"interior pixels, and no grid of {tiles_per_ipu} tile blocks has at least "
                f"{WORKERS} rows (one per worker) and one column per block; hint: a larger "
                "-p height / -p width, or fewer tiles"
            )
        grids.append(grid)
    half = data_type == "half4"
    vertex = CODELETS[data_type].__name__
    graph.addCodelets(CODELETS[data_type])
    dtype = HALF if half else FLOAT
    images = [graph.addVariable(dtype, [height, width, CHANNELS], n) for n in ("imgA", "imgB")]
    names = ("inToOut", "outToIn")
    compute_sets = {
        n + part: graph.addComputeSet(n + part) for n in names for part in ("Pre", "", "Post")
    }
    copy_vertex = (CopyPiecesHalf if half else CopyPieces).__name__
    graph.addCodelets(CopyPiecesHalf if half else CopyPieces)
    pixel_bytes = CHANNELS * (2 if half else 4)
    for ipu, ((rows, cols), (grid_r, grid_c)) in enumerate(zip(slices, grids, strict=True)):
        row_bands = np.array_split(rows, grid_r)
        col_bands = np.array_split(cols, grid_c)
        for bi, band_rows in enumerate(row_bands):
            r0 = 0 if band_rows[0] == 1 else int(band_rows[0])
            r1 = height if band_rows[-1] == height - 2 else int(band_rows[-1]) + 1
            for bj, band_cols in enumerate(col_bands):
                tile = ipu * tiles_per_ipu + bi * grid_c + bj
                c0 = 0 if band_cols[0] == 1 else int(band_cols[0])
                c1 = width if band_cols[-1] == width - 2 else int(band_cols[-1]) + 1
                for img in images:
                    graph.setTileMapping(img[r0:r1, c0:c1], tile)
                w = graph.addConstant(FLOAT, [1], [float(band_cols.size)], f"width{tile}")
                graph.setTileMapping(w, tile)
                q0, q1 = int(band_cols[0]), int(band_cols[-1]) + 1
                row_bytes = [[(q1 - q0) * pixel_bytes] * k for k in range(band_rows.size + 1)]
                copies = {  # the runtime copy vertices' cycles by rows (machine_copies)
                    kind: [copy_vertex_cycles(cfg, b, kind) for b in row_bytes]
                    for kind in ("gather", "scatter")
                }
                # the pre copy's buffer of each worker's rows, and the blur's contiguous output
                bufs = [
                    graph.addVariable(dtype, [band_rows.size, (q1 - q0) * CHANNELS], f"{n}{tile}")
                    for n in ("in", "out")
                ]
                for buf in bufs:
                    graph.setTileMapping(buf, tile)
                for part in np.array_split(band_rows, WORKERS):
                    p0, p1 = int(part[0]), int(part[-1]) + 1
                    own = [buf[p0 - int(band_rows[0]) : p1 - int(band_rows[0])] for buf in bufs]
                    for name, (src, dst) in zip(names, (images, images[::-1]), strict=True):
                        vertices = _worker_vertices(src, dst, own, (p0, p1), (q0, q1), w)
                        for part_name, typ, fields, cycles in (
                            ("Pre", copy_vertex, vertices[0], copies["gather"][p1 - p0]),
                            (
                                "",
                                vertex,
                                vertices[1],
                                vertex_cycles(data_type, part.size * (q1 - q0), part.size),
                            ),
                            ("Post", copy_vertex, vertices[2], copies["scatter"][p1 - p0]),
                        ):
                            v = graph.addVertex(compute_sets[name + part_name], typ, fields)
                            graph.setTileMapping(v, tile)
                            graph.setPerfEstimate(v, cycles)
    graph.createHostWrite("imgA", images[0])
    graph.createHostWrite("imgB", images[1])
    graph.createHostRead("imgA-read", images[0])
    program = prog.Repeat(
        iterations,
        prog.Sequence(
            *(prog.Execute(compute_sets[n + p]) for n in names for p in ("Pre", "", "Post"))
        ),
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
        copies = {
            part: [r for r in trace.records if r.kind == "compute" and r.name == name + part]
            for part in ("Pre", "Post")
        }
        if not (sync and exchange and compute and copies["Pre"] and copies["Post"]):
            raise ValueError(
                "h_gaussian_blur: the trace has no inToOut sync, exchange, compute and "
                "copy (inToOutPre, inToOutPost) steps; "
                f"found {sorted({r.name for r in trace.records})}"
            )
        external = [r for r in trace.records if r.name == f"{name}/ExternalSyncIn"]
        glob = [r for r in trace.records if r.name == f"{name}/GlobalExchangeIn"]
        if ipus > 1 and not (len(external) == len(glob) == len(sync)):
            raise ValueError(
                f"h_gaussian_blur: {ipus} IPUs but {len(external)} external syncs and "
                f"{len(glob)} global exchanges for {len(sync)} inToOut supersteps"
            )
        # a tile's sync cycles of one superstep: its external sync (several IPUs) + internal
        used = slice(0, ipus * tiles_per_ipu)  # the tiles of the IPUs holding the image
        sync_tiles = [
            (r.tile_cycles + (external[i].tile_cycles if external else 0))[used]
            for i, r in enumerate(sync)
        ]
        glob_bytes = int(glob[0].step.num_bytes.sum()) if glob else 0
        return {
            "phase_cycles.sync": float(np.mean([t.min() for t in sync_tiles])),
            "phase_cycles.exchange": float(np.mean([r.tile_cycles.max() for r in exchange])),
            "phase_cycles.compute": float(np.mean([r.tile_cycles.max() for r in compute])),
            "phase_cycles.pre": float(np.mean([r.tile_cycles.max() for r in copies["Pre"]])),
            "phase_cycles.post": float(np.mean([r.tile_cycles.max() for r in copies["Post"]])),
            "phase_cycles.globExchange": (
                float(np.mean([r.tile_cycles.max() for r in glob])) if glob else 0.0
            ),
            "phase_cycles.externalSync": (
                float(np.mean([r.tile_cycles.min() for r in external])) if external else 0.0
            ),
            "global_exchange_bytes": float(glob_bytes),
        }

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
