"""Make the IPU Model presets (``configs/*-ipumodel.yaml``) with ``ipusim calibrate``.

The IPU Model's accounting of host stream copies, syncs and exchanges is fitted to the
one recorded IPU Model profile of the calibration data set (tutorial 7, 10000 x 1000,
Mk2), in physical units: the host link's bandwidth (bytes per second), the set-up
cycles of one exchange message and the cycles of a sync with the host. The tutorial
ran its IPU Model with ``minIPUSyncDelay = 0`` and ``relativeSyncDelay = NO_DELAY``, so
the fit runs with those settings; the presets take the IPU Model's default sync
(``relativeSyncDelay = AUTO`` and the delay that ``_fit_ipumodel_sync.py`` fits on
Poplibs' reduction benchmarks, :data:`DEFAULT_SYNC`) and record both fits in their
``provenance``.

The Mk1 and Bow presets carry the same fitted mechanisms: no IPU Model profile of
those generations is in the data set, and each value is in units that do not depend on
the clock (bytes per second) or is a count of cycles of the same exchange and sync
code.

Run from the repository root::

    .venv/bin/python examples/calibration/make_presets.py [--check]

``--check`` fits and prints the residuals without writing the presets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from ipusim.calibrate import Pair, calibrate
from ipusim.config import load_config
from ipusim.measured import read_profile

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "tests" / "data" / "calibration" / "tut7_10000x1000_mk2_ipumodel_sdk2.txt"
WORKLOAD = "examples/calibration/t7_matvec.py"
#: Settings of the IPU Model the tutorial ran on (tut7.cpp sets them).
T7_DEVICE = {"sync.min_sync_delay_cycles": 0, "sync.relative_delay": "none"}
#: Rules of the IPU Model presets that are not fitted (docs/machine.md): a vertex costs its
#: estimate and nothing more (the IPU Model's compute rules, exact); exchanges are
#: whole-IPU phases with Poplibs' planning figure of 100 fixed cycles, and a host
#: transfer's time is its bytes over the bandwidth (a latency cannot be told apart from
#: the bandwidth with the three copies of one profile), with no host work around it (the
#: IPU Model's profile has no StreamCopyBegin/End phases).
PINNED = {
    "tile.vertex_launch_cycles": 0,
    "tile.multi_vertex_launch_cycles": 0,
    "exchange.model": "phase",
    "exchange.fixed_latency_cycles": 100,
    "host.latency_s": 0.0,
    "host.copy_begin_s": 0.0,
    "host.copy_end_s": 0.0,
    "host.prepare_bandwidth_bytes_per_s": None,
}
#: Rules of one generation's IPU Model preset on top of :data:`PINNED`: the Mk1 IPU
#: Model keeps the published IPU-Link rate (C) and Poplibs' external-sync hop model
#: (A), not the figures the ``mk1`` hardware preset fits on the 16-IPU H rows.
PINNED_BY_BASE: dict[str, dict] = {
    "mk1": {
        "links.bandwidth_bytes_per_s": 64e9,
        "links.message_overhead_bytes": 0,
        "sync.global_sync_ns_per_hop": 15.0,
    },
}
#: The IPU Model's default sync (``createTestDevice`` leaves ``minIPUSyncDelay`` and
#: ``relativeSyncDelay = AUTO`` at Poplar's defaults): the delay fitted by
#: ``_fit_ipumodel_sync.py`` on Poplibs' reduction benchmarks, and its record.
DEFAULT_SYNC = {"sync.min_sync_delay_cycles": 222, "sync.relative_delay": "auto"}
DEFAULT_SYNC_PROVENANCE = {
    "tool": "examples/calibration/_fit_ipumodel_sync.py",
    "date": "2026-11-29",
    "parameters": ["sync.min_sync_delay_cycles"],
    "sources": "J-bert_reduce-1..5 (.ipum1, .ipum2) and Poplibs f927358 "
    "resnet50_tr_bs1_{cnv,bm64L0A0,bm128L0A0,bm128L0}_reduce (IpuModel1, IpuModel2): "
    "18 reduce_op runs on default IPU Model devices",
    "loss": "mean |relative error| of the total cycles",
    "before": {"sync.min_sync_delay_cycles": 15},
    "after": {"sync.min_sync_delay_cycles": 222},
    "loss_before": 0.21,
    "loss_after": 0.032,
    "applies_to": "fitted on Mk1 and Mk2 IPU Model runs; the Bow IPU Model takes the same cycles",
}
PARAMETERS = [
    ("host.bandwidth_bytes_per_s", 1e9, 64e9),
    ("exchange.cycles_per_message", 0.0, 50.0),
    ("sync.host_sync_cycles", 0, 5000),
]
PHASES = ("total", "internal_exchange", "host_exchange", "sync")
#: Preset name -> (base preset, description).
PRESETS = {
    "mk1-ipumodel": ("mk1", "Poplar's IPU Model of a Mk1 IPU (IPUModel('ipu1'))"),
    "mk2-ipumodel": ("mk2", "Poplar's IPU Model of a Mk2 IPU (IPUModel('ipu2'))"),
    "bow-ipumodel": ("bow", "Poplar's IPU Model of a Bow IPU (IPUModel('ipu21'))"),
}


def fit():
    """Run the calibration of the IPU Model mechanisms against the T7 profile."""
    base = load_config("mk2", overrides={**T7_DEVICE, **PINNED})
    measured = read_profile(MEASURED)
    measured = type(measured)(**{**measured.__dict__, "source": str(MEASURED.relative_to(ROOT))})
    pair = Pair(WORKLOAD, {"rows": 10000, "cols": 1000}, measured, label="T7 IPU Model")
    return calibrate([pair], base, PARAMETERS, phases=PHASES, extends="mk2")


def preset_text(name: str, result) -> str:
    """The YAML of one preset: the fitted values over its base, with provenance."""
    base, description = PRESETS[name]
    values = {p.path: result.values_after[p.path] for p in result.parameters}
    doc: dict = {"extends": base, "name": name, "description": description}
    pinned = {**PINNED, **PINNED_BY_BASE.get(base, {})}
    for path, value in {**pinned, **values, **DEFAULT_SYNC}.items():
        section, leaf = path.split(".")
        doc.setdefault(section, {})[leaf] = value
    provenance = result.provenance()
    provenance["base"] = (
        f"mk2 with {T7_DEVICE} (the tutorial's IPU Model settings) and the pinned rules {PINNED}"
    )
    provenance["applies_to"] = (
        "fitted on the Mk2 profile"
        if base == "mk2"
        else "transferred from the Mk2 fit (no IPU Model profile of this generation)"
    )
    provenance["sync_delay"] = DEFAULT_SYNC_PROVENANCE
    doc["provenance"] = provenance
    header = (
        f"# {description}: the {base} preset with the IPU Model's accounting of host\n"
        "# stream copies, exchange messages and host syncs fitted by `ipusim calibrate`\n"
        "# (examples/calibration/make_presets.py) to the recorded IPU Model profile of\n"
        "# tutorial 7 (docs/sources.md#t7-poplar-tutorial-7-profiles, docs/calibration.md).\n"
        "# Every fitted value is an estimate: calibrated, not published.\n"
    )
    body = yaml.safe_dump(doc, sort_keys=False, width=100)
    marked = []
    section = ""
    for line in body.splitlines():
        key = line.strip().split(":")[0]
        if not line.startswith(" "):
            section = key
        top = line.startswith("  ") and not line.startswith("    ")
        if top and f"{section}.{key}" in values:
            line += "  # estimate: fitted, see provenance"
        elif top and f"{section}.{key}" == "sync.min_sync_delay_cycles":
            line += "  # estimate: fitted on Poplibs' reduction benchmarks, see provenance"
        elif top and f"{section}.{key}" == "sync.relative_delay":
            line += "  # Poplar's IPUModel default (relativeSyncDelay AUTO), the mk profile"
        elif top and f"{section}.{key}" in pinned:
            line += "  # docs/machine.md: IPU Model rule, not fitted"
        marked.append(line)
    return header + "\n".join(marked) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fit and report; write nothing")
    args = parser.parse_args(argv)
    result = fit()
    print(result.report())
    if args.check:
        return 0
    for name in PRESETS:
        path = ROOT / "configs" / f"{name}.yaml"
        path.write_text(preset_text(name, result), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
