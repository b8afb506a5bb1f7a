"""Host cost of real models on the simulator: ResNet-18/50 and a BERT-base encoder layer.

Each row runs ``examples/models/run_model.py`` in a child process (so its peak host
RAM is its own, measured by ``benchmarks/child.py``) on one Mk2 IPU Model (1472
tiles): build the ONNX model, compile it (``prepareDevice``), run one step, check it
against ``onnx.reference`` (inference: outputs; training: the loss and a directional
derivative of the anchored gradients). Columns: vertices of the compiled graph, host
seconds of build, compile and run, peak host RAM of the child, simulated cycles of
the step, and whether it matched the reference.

``--allow-oom`` compiles and runs the rows even where the step does not fit the
device's tile memory (engine option ``debug.allowOutOfMemory``; the values are computed
as if it fitted): the host cost of a model the auto-sharding does not fit, such as
ResNet-50's training step on 4 IPUs, whose row otherwise ends with the out-of-memory
error. Such rows are named with ``--allow-oom``.

``--all-to-all`` measures the fabric at scale instead: an all-to-all global exchange
on ``pod64`` (every IPU sends 1 MiB to every other, 4,032 transfers in one
``GlobalExchange`` step run by the machine model), three times, host seconds each.

``--replicas`` measures instead the host cost of replication (issue 31's "replicas at
the cost of one"): the data-parallel MLP step of ``benchmarks/bench_multi_ipu.py`` on 1
replica (one Mk2) and on 16 (``pod16``), each in its own child process (the simulated
cycles differ: 16 replicas add the gradient all-reduce and share the host links). Per
row: build and compile seconds, the step's first run, and the median CPU seconds of
:data:`LATER_RUNS` more runs of the same step in the same process; the ratios of 16
replicas to 1 of the later runs, of the first run, and of build + compile + first run.

Which figure the issue's acceptance ("16 replicas of the MLP step within 2 times the
host time of one replica") is: the issue measured the run (its "15.8 times" were run
seconds) and its item is the cost of running replicas (one batched call per kernel,
timing once), so it is the run's host time, in CPU seconds on a shared machine. A
user trains by running the step many times after one build and compile, so the time
they wait for per step is a later run: the first run also pays once-per-process costs
that do not grow with the replicas (loading compiled kernels, planning each compute
set's vertex classes, a collection the build left due), which shrink the first run's
ratio. Build + compile + first run is what a user who runs one step waits for; it is
given too, but the acceptance is read on the later runs.

Run::

    python benchmarks/bench_models.py                     # every row (long)
    python benchmarks/bench_models.py --only bert-base    # rows whose name starts so
    python benchmarks/bench_models.py --allow-oom --only "resnet50 training step, 4 IPUs"
    python benchmarks/bench_models.py --tiles 16 --only bert-tiny   # quick check
    python benchmarks/bench_models.py --replicas          # 1 and 16 replicas
    python benchmarks/bench_models.py --all-to-all        # 64-IPU all-to-all
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child import child_peak

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "examples" / "models" / "run_model.py"

#: (row name, model, training step, IPUs: more than one shards the model).
ROWS: tuple[tuple[str, str, bool, int], ...] = (
    ("bert-base forward", "bert-base", False, 1),
    ("bert-base forward+backward", "bert-base", True, 1),
    ("resnet18 inference", "resnet18", False, 1),
    ("resnet18 training step", "resnet18", True, 1),
    ("resnet18 training step, 4 IPUs", "resnet18", True, 4),
    ("resnet50 inference", "resnet50", False, 1),
    ("resnet50 inference, 4 IPUs", "resnet50", False, 4),
    ("resnet50 training step", "resnet50", True, 1),
    ("resnet50 training step, 4 IPUs", "resnet50", True, 4),
)
QUICK_ROWS: tuple[tuple[str, str, bool, int], ...] = (
    ("bert-tiny forward", "bert-tiny", False, 1),
    ("bert-tiny forward+backward", "bert-tiny", True, 1),
    ("resnet-tiny inference", "resnet-tiny", False, 1),
    ("resnet-tiny training step", "resnet-tiny", True, 1),
    ("resnet-tiny inference, 2 IPUs", "resnet-tiny", False, 2),
)


def run_row(
    model: str, train: bool, tiles: int | None, ipus: int = 1, allow_oom: bool = False
) -> dict:
    """One model in a child process: its ``run_model`` figures plus wall seconds and
    peak RSS bytes (``status`` is the child's exit code; 1 = did not match). With
    ``allow_oom`` a step over tile memory is compiled and run all the same."""
    cmd = [sys.executable, str(RUNNER), model, "--json"]
    if train:
        cmd.append("--train")
    if allow_oom:
        cmd.append("--allow-oom")
    if tiles:
        cmd += ["--tiles", str(tiles)]
    if ipus > 1:
        cmd += ["--ipus", str(ipus)]
    return _child_row(cmd)


def _child_row(cmd: list[str]) -> dict:
    """Run ``cmd`` in a child process: its exit status, wall seconds and peak RSS bytes,
    with the figures of the last JSON line it printed."""
    status, wall, peak, out = child_peak(cmd)
    row: dict = {"status": status, "wall": wall, "peak_bytes": peak}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if lines:
        row.update(json.loads(lines[-1]))
    return row


#: The MLP step of ``bench_multi_ipu.py``: batch 16 per replica, hidden 128.
MLP_BATCH, MLP_HIDDEN = 16, 128
#: Runs of the step after the first, whose median CPU seconds is a training step's.
LATER_RUNS = 10


def replica_row(replicas: int) -> dict:
    """The MLP step on ``replicas`` replicas in a child process: its figures (see
    ``bench_multi_ipu.mlp_step``) plus wall seconds and peak RSS bytes."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mlp-child", str(replicas)]
    return _child_row(cmd)


def _later(row: dict) -> float:
    """Median CPU seconds of a row's later runs."""
    runs = sorted(row["later_cpu"])
    mid = len(runs) // 2
    return runs[mid] if len(runs) % 2 else (runs[mid - 1] + runs[mid]) / 2


def replica_table(one: dict, many: dict) -> str:
    """Markdown table of the 1- and 16-replica rows and their ratios: of the later runs'
    median CPU seconds (a training step's; the acceptance's figure, see the module
    docstring), of the first run (wall and CPU: on a shared machine the CPU seconds are
    the steadier figure), and of build + compile + first run CPU seconds."""
    out = [
        "| replicas | build s | compile s | first run s | first run CPU s "
        "| later runs CPU s (median) | peak RAM GB | cycles |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in (one, many):
        out.append(
            f"| {r['ipus']} | {r['build']:.2f} | {r['compile']:.2f} | {r['seconds']:.3f} | "
            f"{r['cpu_seconds']:.3f} | {_later(r):.4f} | {r['peak_bytes'] / 1e9:.2f} | "
            f"{r['cycles']:,} |"
        )
    n = many["ipus"]
    total = [r["build_cpu"] + r["compile_cpu"] + r["cpu_seconds"] for r in (one, many)]
    out += [
        f"\nlater runs' CPU seconds, {n} replicas / 1: {_later(many) / _later(one):.2f}",
        f"first run, {n} replicas / 1: {many['seconds'] / one['seconds']:.2f} "
        f"(CPU: {many['cpu_seconds'] / one['cpu_seconds']:.2f})",
        f"build + compile + first run CPU seconds: {total[0]:.3f} and {total[1]:.3f}, "
        f"{n} replicas / 1: {total[1] / total[0]:.2f}",
    ]
    return "\n".join(out)


def all_to_all(preset: str = "pod64", nbytes: int = 1 << 20, repeats: int = 3) -> list[str]:
    """Host seconds of an all-to-all global exchange on ``preset``: every IPU sends
    ``nbytes`` from its tile 0 to tile 0 of every other IPU, in one step."""
    import time

    import numpy as np

    from ipusim import ir
    from ipusim.config import load_config
    from ipusim.machine import Machine

    cfg = load_config(preset)
    n, tpi = cfg.num_ipus, cfg.tile.tiles_per_ipu
    src, dst = np.divmod(np.arange(n * n), n)
    keep = src != dst
    step = ir.GlobalExchange(
        name="all-to-all",
        src_tile=src[keep] * tpi,
        dst_tile=dst[keep] * tpi,
        num_bytes=np.full(int(keep.sum()), nbytes),
    )
    lines = []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        trace = Machine(cfg).run(step)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        lines.append(
            f"{preset}: {n} IPUs, {int(keep.sum()):,} transfers of {nbytes:,} B: "
            f"{trace.total_cycles:,} cycles, {seconds:.3f} s host ({cpu:.3f} s CPU)"
        )
    return lines


def table(rows: Sequence[tuple[str, dict]]) -> str:
    """Markdown table of the rows."""
    head = (
        "| model | vertices | build s | compile s | run s | total s | peak RAM GB "
        "| cycles | matched |\n|---|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    out = [head]
    for name, r in rows:
        if "seconds" not in r:
            why = r.get("error", f"exit status {r['status']}").replace("|", "/")[:160]
            out.append(f"| {name} | failed: {why} | | | | {r['wall']:.1f} | "
                       f"{r['peak_bytes'] / 1e9:.2f} | | no |")  # fmt: skip
            continue
        s = r["seconds"]
        total = s["build"] + s["compile"] + s["run"]
        out.append(
            f"| {name} | {r['vertices']:,} | {s['build']:.1f} | {s['compile']:.1f} | "
            f"{s['run']:.1f} | {total:.1f} | {r['peak_bytes'] / 1e9:.2f} | {r['cycles']:,} | "
            f"{'yes' if r['matched'] else 'no'} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rows and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="row name prefix, or a whole row's name for that row alone",
    )
    parser.add_argument("--tiles", type=int, default=None, help="tiles per IPU (Mk2: 1472)")
    parser.add_argument("--quick", action="store_true", help="the scaled-down models")
    parser.add_argument(
        "--allow-oom", action="store_true", help="run rows even if over tile memory"
    )
    parser.add_argument("--replicas", action="store_true", help="the MLP step, 1 and 16 replicas")
    parser.add_argument("--all-to-all", action="store_true", help="64-IPU all-to-all")
    parser.add_argument("--mlp-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mlp_child:  # one replicated MLP step, in this (child) process
        from bench_multi_ipu import mlp_step

        preset = {1: "mk2", 16: "pod16", 64: "pod64"}[args.mlp_child]
        print(json.dumps(mlp_step(args.mlp_child, preset, MLP_BATCH, MLP_HIDDEN, LATER_RUNS)))
        return 0
    if args.all_to_all:
        print("\n".join(all_to_all()))
        return 0
    if args.replicas:
        one, many = replica_row(1), replica_row(16)
        for r in (one, many):
            print(json.dumps(r), file=sys.stderr, flush=True)
        print(replica_table(one, many))
        return 0
    rows = QUICK_ROWS if args.quick else ROWS
    if args.only:
        # a name that is a whole row's picks that row alone (not its 4-IPU variant)
        exact = {r[0] for r in rows} & set(args.only)
        rows = tuple(
            r
            for r in rows
            if r[0] in exact or any(r[0].startswith(p) for p in set(args.only) - exact)
        )
    done = []
    for name, model, train, ipus in rows:
        result = run_row(model, train, args.tiles, ipus, args.allow_oom)
        name = f"{name} (--allow-oom)" if args.allow_oom else name
        done.append((name, result))
        print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
