"""Fit the hardware presets' host link and on-chip exchange with ``ipusim.calibrate``.

Two fits, each over several measured points, in physical units (docs/calibration.md):

* **host** (Mk2, M2000 at 1.33 GHz): ``host.bandwidth_bytes_per_s``, ``host.latency_s``
  and ``sync.host_sync_cycles`` against the tutorial-7 hardware summary (its host
  exchange and sync phases: three host copies of 40,044,000 bytes in all, three host
  syncs), the five A6 ``StreamCopyMid`` data phases of a 4-byte copy (an IR program of
  that one copy) and the three covered N1 tile-traffic rows (their durations as total
  cycles of the simulated iterations).
* **host_joint** (Mk2): the latency as in **host**, then bandwidth and host sync against
  T7's two phases and the three N1 rows together (five rows for two parameters). Its
  values are reported, not in the preset: N1 does not identify the bandwidth (held out
  T7's host exchange, the fit ends on the bound) and the compromise worsens four rows to
  move one (docs/calibration.md, "The host link fitted on T7 and N1 together").
* **prepare** (Mk2): ``host.copy_begin_s`` and ``host.copy_end_s``, the host's own
  work before and after a stream copy's data phase, from the five A6 triplets of a
  4-byte host-to-device copy (an IR program of that copy; measured: StreamCopyBegin +
  Mid, then Begin + Mid + End, so each step has one unknown and five rows).
* **exchange** (Mk1): ``exchange.cycles_per_message`` and
  ``exchange.fixed_latency_cycles`` against the H1 one-IPU halo exchange of ``float``
  and ``half4`` (same messages, half the bytes), as the ``internal_exchange`` phase
  of one blur iteration (two supersteps).

* **exchange_all** (Mk1): the same two parameters against the four H1 halo-exchange
  rows of 1 and 16 IPUs (float and half4), all on 16 IPUs with the 1-IPU rows' image
  on the first IPU; the values in ``mk1`` come from this fit.
* **links** (Mk1): ``links.bandwidth_bytes_per_s`` and ``links.message_overhead_bytes``
  against the three H1 16-IPU ``globExchange`` rows, then
  ``sync.global_sync_ns_per_hop`` against the three 16-IPU ``sync`` rows.

* **copies** (Mk1, applied to every generation as the ``code`` defaults): the fixed and
  per-region thread cycles of Poplar's runtime gather (``pre``) and scatter (``post``)
  copy vertices (:mod:`ipusim.machine_copies`) against the 12 H1 copy rows, the rate
  kept at the ``ldst64pace`` path's 8 bytes per thread cycle. The copy vertices are made
  when the graph is built, so ``calibrate`` (which re-times) cannot fit them: a linear
  least-squares fit of relative errors on the workload's geometry (the busiest worker's
  rows and bytes), with a leave-one-out check.

Run from the repository root (prints the reports; writes nothing)::

    .venv/bin/python examples/calibration/_fit_hardware.py \
        [host|host_joint|prepare|exchange|launch|exchange_all|links|copies]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from ipusim import ir
from ipusim.calibrate import CalibrationResult, Pair, calibrate
from ipusim.config import load_config
from ipusim.measured import MeasuredProfile, read_profile

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "tests" / "data" / "calibration"
N_WORKLOAD = "examples/calibration/n_host_traffic.py"
H_WORKLOAD = "examples/calibration/h_gaussian_blur.py"
T7_WORKLOAD = "examples/calibration/t7_matvec.py"
#: Iterations of the simulated N1 runs (the measured runs had 100,000).
N_ITERATIONS = 20
#: The N1 rows the workload covers, with its direction.
N_ROWS = {
    "N1.host_to_buffer_to_tile.tile": "to_tile",
    "N1.host_from_buffer_from_tile.tile": "from_tile",
    "N1.host_to_buffer_from_tile.tile": "from_tile",
}
HOST_PARAMETERS = [
    ("host.bandwidth_bytes_per_s", 1e9, 64e9),
    ("host.latency_s", 1e-8, 1e-4),
    ("sync.host_sync_cycles", 0, 200000),
]
#: The host's work around a copy switched off (for data that holds none of it).
NO_HOST_WORK = {"host.copy_begin_s": 0.0, "host.copy_end_s": 0.0}
EXCHANGE_PARAMETERS = [
    ("exchange.cycles_per_message", 0.0, 50.0),
    ("exchange.fixed_latency_cycles", 0, 1000),
]


def csv_rows() -> dict[str, dict[str, str]]:
    with open(DATA / "measurements.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def row_params(row: dict[str, str]) -> dict[str, str]:
    """The row's ``key=value;...`` parameters."""
    return dict(p.split("=", 1) for p in row["parameters"].split(";") if "=" in p)


def measured(source: str, phases: dict[str, float], tiles: int, clock_hz: float):
    return MeasuredProfile(source=source, format="csv", phases=phases, num_tiles=tiles,
                           clock_hz=clock_hz)  # fmt: skip


def host_pairs(clock_hz: float, tiles: int) -> list[Pair]:
    """T7 HW (host exchange, sync), A6 Mid (x5), N1 tile rows (x3)."""
    rows = csv_rows()
    t7 = read_profile(DATA / "tut7_10000x1000_mk2_hardware.txt")
    keep = {k: t7.phases[k] for k in ("host_exchange", "sync")}
    pairs = [
        Pair(T7_WORKLOAD, {"rows": 10000, "cols": 1000},
             measured("T7 hardware summary", keep, tiles, clock_hz), label="T7 HW")
    ]  # fmt: skip
    # A6: one host->device copy of 4 bytes to tile 100, on its own (the Mid data phase).
    copy = ir.StreamCopy(name="in1", direction="host_to_device", tile=np.array([100]),
                         num_bytes=np.array([4]), stream="in1")  # fmt: skip
    for t in range(1, 6):
        rid = f"A6.t{t}.Mid"
        value = float(rows[rid]["value"])
        pairs.append(Pair(ir.Program(entries=(ir.Sequence([copy]),)), {},
                          measured(rid, {"total": value}, tiles, clock_hz), label=rid))  # fmt: skip
    for rid, direction in N_ROWS.items():
        duration = float(row_params(rows[rid])["duration_s"])
        iterations = int(row_params(rows[rid])["iterations"])
        total = duration * clock_hz * N_ITERATIONS / iterations
        pairs.append(Pair(N_WORKLOAD, {"direction": direction, "iterations": N_ITERATIONS},
                          measured(rid, {"total": total}, tiles, clock_hz), label=rid))  # fmt: skip
    return pairs


def fit_host() -> list[CalibrationResult]:
    """Two steps (``calibrate`` compares the same phases in every pair): the latency
    from the five A6 data phases, then bandwidth and host sync from the T7 hardware
    host exchange and sync with that latency; N1 is reported with the result."""
    # the Mid phase, the host-exchange and sync phases and N1's remote-buffer traffic
    # hold none of the host's work around a copy (StreamCopyBegin/End, step "prepare")
    base = load_config("mk2", overrides=NO_HOST_WORK)
    pairs = host_pairs(base.tile.clock_hz, base.num_tiles)
    a6 = [p for p in pairs if p.label.startswith("A6")]
    t7 = [p for p in pairs if p.label == "T7 HW"]
    n1 = [p for p in pairs if p.label.startswith("N1")]
    first = calibrate(a6, base, [HOST_PARAMETERS[1]], phases=("total",), extends="mk2")
    latency = load_config("mk2", overrides={**NO_HOST_WORK, **first.values_after})
    second = calibrate(t7, latency, [HOST_PARAMETERS[0], HOST_PARAMETERS[2]],
                       phases=("host_exchange", "sync"), extends="mk2")  # fmt: skip
    fitted = load_config(
        "mk2", overrides={**NO_HOST_WORK, **first.values_after, **second.values_after}
    )
    check = calibrate(n1, fitted, [("host.latency_s", 1e-8, 1e-4)], phases=("total",),
                      max_evaluations=1)  # fmt: skip
    return [first, second, check]


def fit_host_joint() -> list[CalibrationResult]:
    """The host link's bandwidth and host sync fitted on T7's two phases and N1's three
    tile rows together (five rows, two parameters), the latency fixed first from the A6
    data phases as in :func:`fit_host`.

    ``calibrate`` compares the same phases in every pair, so each pair's measured phases
    are given as metrics instead: a quantity a pair did not measure (T7 has no total
    here, N1 no host-exchange or sync phase) does not count.
    """
    base = load_config("mk2", overrides=NO_HOST_WORK)
    tiles, clock = base.num_tiles, base.tile.clock_hz
    pairs = host_pairs(clock, tiles)
    a6 = [p for p in pairs if p.label.startswith("A6")]
    joint = [
        Pair(p.workload, p.params,
             MeasuredProfile(source=p.measured.source, format="csv", phases={},
                             metrics=dict(p.measured.phases), num_tiles=tiles, clock_hz=clock),
             label=p.label)
        for p in pairs if p.label == "T7 HW" or p.label.startswith("N1")
    ]  # fmt: skip
    first = calibrate(a6, base, [HOST_PARAMETERS[1]], phases=("total",), extends="mk2")
    latency = load_config("mk2", overrides={**NO_HOST_WORK, **first.values_after})
    second = calibrate(joint, latency, [HOST_PARAMETERS[0], HOST_PARAMETERS[2]], phases=(),
                       metrics=("host_exchange", "sync", "total"), extends="mk2",
                       max_evaluations=80)  # fmt: skip
    return [first, second]


PREPARE_PARAMETERS = [
    ("host.copy_begin_s", 0.0, 1e-3),
    ("host.copy_end_s", 0.0, 1e-3),
]


def fit_prepare() -> list[CalibrationResult]:
    """The host's work around a stream copy from the A6 triplets (4-byte copies, so
    the bytes cost nothing): first StreamCopyBegin against Begin + Mid of each triplet,
    then StreamCopyEnd against Begin + Mid + End with that Begin."""
    base = load_config("mk2", overrides=NO_HOST_WORK)
    rows = csv_rows()
    copy = ir.StreamCopy(name="in1", direction="host_to_device", tile=np.array([100]),
                         num_bytes=np.array([4]), stream="in1")  # fmt: skip
    program = ir.Program(entries=(ir.Sequence([copy]),))

    def pairs(phases: tuple[str, ...]) -> list[Pair]:
        out = []
        for t in range(1, 6):
            value = sum(float(rows[f"A6.t{t}.{p}"]["value"]) for p in phases)
            label = f"A6.t{t}.{'+'.join(phases)}"
            out.append(Pair(program, {}, measured(label, {"total": value}, base.num_tiles,
                                                  base.tile.clock_hz), label=label))  # fmt: skip
        return out

    first = calibrate(pairs(("Begin", "Mid")), base, [PREPARE_PARAMETERS[0]], phases=("total",),
                      extends="mk2")  # fmt: skip
    begun = load_config("mk2", overrides={**NO_HOST_WORK, **first.values_after})
    second = calibrate(pairs(("Begin", "Mid", "End")), begun, [PREPARE_PARAMETERS[1]],
                       phases=("total",), extends="mk2")  # fmt: skip
    return [first, second]


def fit_exchange() -> CalibrationResult:
    base = load_config("mk1")
    rows = csv_rows()
    pairs = []
    for dt in ("float", "half4"):
        rid = f"H1.1ipu.{dt}.exchange"
        # One iteration = two supersteps (inToOut, outToIn), each with the same halo exchange.
        value = 2 * float(rows[rid]["value"])
        pairs.append(Pair(H_WORKLOAD, {"data_type": dt, "height": 1400, "width": 2000},
                          measured(rid, {"internal_exchange": value}, base.num_tiles,
                                   base.tile.clock_hz), label=rid))  # fmt: skip
    return calibrate(pairs, base, EXCHANGE_PARAMETERS, phases=("internal_exchange",),
                     extends="mk1")  # fmt: skip


def fit_exchange_all() -> CalibrationResult:
    """Mk1 on-chip exchange from the four H1 halo-exchange rows (1 and 16 IPUs, float and
    half4): ``exchange.cycles_per_message`` (the exchange code's instructions per message
    on the sending and receiving tiles) and ``exchange.fixed_latency_cycles``, the
    exchange rate kept at Poplibs' 4 B per cycle (A). The 1-IPU blocks send several
    times the messages of the 16-IPU ones and the data types differ in bytes, so the
    rows separate the per-message from the fixed part. All four run on 16 IPUs, the
    1-IPU rows with the image on the first IPU only (the workload's ``ipus``).
    """
    rows = csv_rows()
    pairs = []
    for ipus in (1, 16):
        for dt in ("float", "half4"):
            rid = f"H1.{ipus}ipu.{dt}.exchange"
            value = float(rows[rid]["value"])
            prof = MeasuredProfile(source=rid, format="csv", phases={},
                                   metrics={"phase_cycles.exchange": value})  # fmt: skip
            params = {"data_type": dt, "height": 1400, "width": 2000, "ipus": ipus}
            pairs.append(Pair(H_WORKLOAD, params, prof, label=rid))
    base = load_config("mk1", overrides={"num_ipus": 16})
    return calibrate(pairs, base, EXCHANGE_PARAMETERS, phases=(),
                     metrics=["phase_cycles.exchange"], extends="mk1")  # fmt: skip


#: IPU-Link figures fitted on the 16-IPU global exchange rows (``fit_links``).
LINK_PARAMETERS = [
    ("links.bandwidth_bytes_per_s", 4e9, 64e9),
    ("links.message_overhead_bytes", 0, 4096),
]
#: The external sync's per-hop latency fitted on the 16-IPU sync rows (``fit_links``).
SYNC_PARAMETERS = [("sync.global_sync_ns_per_hop", 5.0, 100.0)]


def fit_links() -> list[CalibrationResult]:
    """Mk1 IPU-Links and external sync from the H1 16-IPU rows (two steps).

    Step 1: ``links.bandwidth_bytes_per_s`` (one link, one direction) and
    ``links.message_overhead_bytes`` against the three ``globExchange`` rows (float and
    float2 move 22,400 B per IPU boundary and direction, half4 11,200 B, in the same
    messages: the byte difference gives the rate, the rest the per-message cost).
    Step 2: ``sync.global_sync_ns_per_hop`` (Poplibs' hop model of the external sync)
    against the three 16-IPU ``sync`` rows, with step 1's links.
    """
    rows = csv_rows()
    base = load_config("mk1", overrides={"num_ipus": 16})

    def pairs(phase: str) -> list[Pair]:
        out = []
        for dt in ("float", "float2", "half4"):
            rid = f"H1.16ipu.{dt}.{phase}"
            value = float(rows[rid]["value"])
            prof = MeasuredProfile(source=rid, format="csv", phases={},
                                   metrics={f"phase_cycles.{phase}": value})  # fmt: skip
            params = {"data_type": dt, "height": 1400, "width": 2000}
            out.append(Pair(H_WORKLOAD, params, prof, label=rid))
        return out

    step1 = calibrate(pairs("globExchange"), base, LINK_PARAMETERS, phases=(),
                      metrics=["phase_cycles.globExchange"], extends="mk1")  # fmt: skip
    base2 = load_config("mk1", overrides={"num_ipus": 16, **step1.values_after})
    step2 = calibrate(pairs("sync"), base2, SYNC_PARAMETERS, phases=(),
                      metrics=["phase_cycles.sync"], extends="mk1")  # fmt: skip
    return [step1, step2]


#: Cycles one ``ipu_cycle_count`` adds to a bracketed interval (row C1.overhead).
COUNTER_CYCLES = 45.0


def fit_launch() -> CalibrationResult:
    """Bow's supervisor (multi-vertex) launch cost from the single-vertex intervals.

    PF (the AMP vertex on every tile; its cycles already exclude the 45-cycle counter
    read) and C2 (one ScaledAddSupervisor on one tile; 45 subtracted here), both as
    the compute set's cycles on the machine against the measured interval. B1 is not
    fitted: its intervals hold more than the vertex (run B, with half the elements,
    measured 25 cycles more than run A), so it is reported, not fitted.
    """
    rows = csv_rows()
    pairs = []
    for n in (16, 64, 256, 1024, 2048):
        tflops = float(rows[f"PF.N{n}"]["value"])
        cycles = 2 * n * 16 * 16 * 1472 * 1.85e9 / (tflops * 1e12)
        prof = MeasuredProfile(source=f"PF.N{n}", format="csv", phases={},
                               metrics={"cycles_per_call": cycles})  # fmt: skip
        pairs.append(Pair("examples/calibration/pf_amp_matmul.py", {"n": n}, prof, f"PF.N{n}"))
    for n in (64, 128, 256, 512):
        value = float(rows[f"C2.N{n}"]["value"]) - COUNTER_CYCLES
        prof = MeasuredProfile(source=f"C2.N{n}", format="csv", phases={},
                               metrics={"tile_cycles": value})  # fmt: skip
        pairs.append(Pair("examples/calibration/c_scaled_add.py", {"n": n}, prof, f"C2.N{n}"))
    # one parameter; each pair compares the metric its measurement has
    return calibrate(
        pairs,
        load_config("bow", overrides={"tile.multi_vertex_launch_cycles": 0}),  # from zero
        [("tile.multi_vertex_launch_cycles", 0, 500)],
        phases=(),
        metrics=["cycles_per_call", "tile_cycles"],
    )


def copy_geometry(ipus: int, data_type: str) -> tuple[int, int]:
    """(rows, bytes per row) of the busiest worker's copy in the H workload at the
    chosen image on ``ipus`` Mk1 IPUs (every row of a partition is one region)."""
    h = _load_h()
    height, width = h.IMAGE
    pixel = h.CHANNELS * (2 if data_type == "half4" else 4)
    worst = (0, 0)
    for rows, cols in h.ipu_slices(height, width, ipus):
        grid_r, grid_c = h.tile_grid(1216, rows.size, cols.size)
        most_rows = max(
            p.size for band in np.array_split(rows, grid_r) for p in np.array_split(band, h.WORKERS)
        )
        widest = max(band.size for band in np.array_split(cols, grid_c))
        worst = max(worst, (most_rows, widest * pixel))
    return worst


def _load_h():
    sys.path.insert(0, str(HERE))
    import h_gaussian_blur

    return h_gaussian_blur


def fit_copies(report: bool = True) -> dict[str, float]:
    """Fixed and per-region cycles of the gather (``pre``) and scatter (``post``) copy
    vertices from the H1 copy rows (module docstring); prints the residuals and the
    leave-one-out values, returns the fitted ``code.*`` values."""
    rows = csv_rows()
    rate = 8  # bytes per thread cycle: ldst64pace (64-bit load + 64-bit store)
    workers = 6
    out: dict[str, float] = {}
    for phase, kind in (("pre", "gather"), ("post", "scatter")):
        data = []
        for ipus in (1, 16):
            for dt in ("half4", "float2", "float"):
                rid = f"H1.{ipus}ipu.{dt}.{phase}"
                n, row_bytes = copy_geometry(ipus, dt)
                data.append((rid, n, n * -(-row_bytes // rate), float(rows[rid]["value"])))

        def solve(points: list) -> np.ndarray:
            # tile cycles = workers x (fixed + n x region + moves), relative errors
            a = np.array([[workers / y, workers * n / y] for _, n, _, y in points])
            t = np.array([1 - workers * moves / y for _, _, moves, y in points])
            return np.linalg.lstsq(a, t, rcond=None)[0]

        fixed, region = solve(data)
        out[f"code.copy_{kind}_fixed_cycles"] = round(float(fixed), 1)
        out[f"code.copy_{kind}_region_cycles"] = round(float(region), 1)
        if report:
            print(f"== copies {kind} ({phase}): fixed {fixed:.1f}, per region {region:.2f}")
            for rid, n, moves, y in data:
                pred = workers * (round(fixed + n * region) + moves)
                print(f"  {rid:22s} rows {n} measured {y:8.0f} model {pred:8.0f} "
                      f"{100 * (pred / y - 1):+6.1f}%")  # fmt: skip
            for i, held in enumerate(data):
                f, r = solve(data[:i] + data[i + 1 :])
                _, n, moves, y = held
                pred = workers * (f + n * r + moves)
                print(f"  leave out {held[0]:22s}: fixed {f:6.1f}, region {r:5.2f}, "
                      f"held-out row {100 * (pred / y - 1):+6.1f}%")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    which = (argv if argv is not None else sys.argv[1:]) or [
        "host",
        "prepare",
        "exchange",
        "launch",
    ]
    for name in which:
        if name == "copies":
            print(fit_copies())
            continue
        results = {
            "host": fit_host,
            "host_joint": fit_host_joint,
            "prepare": fit_prepare,
            "exchange": lambda: [fit_exchange()],
            "launch": lambda: [fit_launch()],
            "links": fit_links,
            "exchange_all": lambda: [fit_exchange_all()],
        }[name]()
        for i, result in enumerate(results):
            print(f"== {name} step {i + 1}")
            print(result.report())
            print(result.values_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
