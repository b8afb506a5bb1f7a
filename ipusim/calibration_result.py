"""Calibration result: the fitted values, residual tables, the report and the overlay.

:class:`CalibrationResult` is what :func:`ipusim.calibrate.calibrate` returns; its
overlay is a YAML config that ``extends:`` the base config with the fitted fields and a
``provenance:`` record of the measurements, workloads and losses behind them.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from ipusim.calibration_fit import Pair, Parameter, config_value
from ipusim.config import MachineConfig, load_config
from ipusim.config_sections import leaf_paths

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CalibrationResult",
    "Insensitivity",
    "number_text",
]


# Results ------------------------------------------------------------------------------------
@dataclass
class Insensitivity:
    """Evidence that the loss does not depend on a parameter.

    Attributes
    ----------
    path
        The parameter.
    losses
        Value tried -> loss there (the initial value, ±``PROBE_FRACTION`` of the
        range and both bounds); all equal.
    """

    path: str
    losses: dict[float, float]

    def __str__(self) -> str:
        tried = ", ".join(f"{v:g} -> {loss:.6g}" for v, loss in self.losses.items())
        return (
            f"{self.path}: the residuals do not change when it moves (value -> loss: "
            f"{tried}); it is left out of the fit (the simulated quantities do not depend "
            f"on it, or re-timing cannot see it)"
        )


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate`.

    Attributes
    ----------
    parameters
        The fitted parameters with their bounds.
    values_before, values_after
        Dotted path -> value at the start and after the fit.
    residuals_before, residuals_after
        One row per pair and quantity: ``pair``, ``quantity`` (phase or metric),
        ``measured``, ``simulated``, ``rel_error`` (``(simulated - measured) /
        measured``).
    loss_before, loss_after
        Sum of squared residuals (relative or absolute, see ``loss``).
    leave_one_out
        With three pairs or more: for each pair, the parameters fitted on the other
        pairs and that pair's errors under them (``held_out``, ``quantity``,
        ``measured``, ``simulated``, ``rel_error``, one column per parameter).
        Otherwise ``None``.
    insensitive
        Parameters the loss does not depend on, with the evidence; not fitted.
    config
        The calibrated machine config.
    base_config, extends
        The config the fit started from, and the preset or path the overlay extends
        (None: the overlay holds the whole config).
    pairs, quantities, loss
        What was fitted: the pairs, the phases and metrics compared, the loss kind.
    evaluations
        Simulations run (distinct parameter vectors, each re-timing every pair).
    seconds, build_seconds
        Wall time of the whole calibration, and of the workload runs within it.
    warnings
        Every warning issued, as text.
    """

    parameters: list[Parameter]
    values_before: dict[str, float | int]
    values_after: dict[str, float | int]
    residuals_before: pd.DataFrame
    residuals_after: pd.DataFrame
    loss_before: float
    loss_after: float
    leave_one_out: pd.DataFrame | None
    insensitive: list[Insensitivity]
    config: MachineConfig
    base_config: MachineConfig
    extends: str | None
    pairs: list[Pair]
    quantities: list[str]
    loss: str
    evaluations: int
    seconds: float
    build_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def overlay(self) -> dict[str, Any]:
        """The overlay as a mapping: ``extends``, the changed fields, ``provenance``."""
        changed: dict[str, Any] = {}
        fitted = set(self.values_after) - set(self.insensitive_paths)
        if self.extends is not None:
            reference = load_config(self.extends)
            paths = [
                p
                for p in leaf_paths()
                if p not in ("name", "description")
                and (p in fitted or config_value(self.config, p) != config_value(reference, p))
            ]
        else:
            paths = list(leaf_paths())
        for path in paths:
            node = changed
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = _plain(config_value(self.config, path))
        out: dict[str, Any] = {}
        if self.extends is not None:
            out["extends"] = self.extends
        out.update(changed)
        out["provenance"] = self.provenance()
        return out

    def provenance(self) -> dict[str, Any]:
        """Where the fitted values come from: sources, workloads, losses, values."""
        try:
            from importlib.metadata import version

            ipusim_version = version("ipusim")
        except Exception:  # a source tree without package metadata
            ipusim_version = "unknown"
        return {
            "tool": "ipusim calibrate",
            "ipusim_version": ipusim_version,
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "base": self.extends if self.extends is not None else self.base_config.name,
            "loss": self.loss,
            "quantities": list(self.quantities),
            "loss_before": float(self.loss_before),
            "loss_after": float(self.loss_after),
            "parameters": {
                p.path: {
                    "before": _plain(self.values_before[p.path]),
                    "after": _plain(self.values_after[p.path]),
                    "lower": _plain(p.lower),
                    "upper": _plain(p.upper),
                }
                for p in self.parameters
            },
            "insensitive": [i.path for i in self.insensitive],
            "pairs": [
                {
                    "label": pair.label,
                    "workload": pair.workload if isinstance(pair.workload, str) else "<ir program>",
                    "params": {k: _plain(v) for k, v in (pair.params or {}).items()},
                    "measured": str(getattr(pair.measured, "source", "")),
                    "format": str(getattr(pair.measured, "format", "")),
                }
                for pair in self.pairs
            ],
        }

    def overlay_text(self) -> str:
        """The overlay YAML text (loadable by :func:`ipusim.config.load_config`)."""
        header = (
            "# Written by `ipusim calibrate`: the fitted fields over the base config;\n"
            "# provenance records the measurements, workloads and losses behind them.\n"
        )
        return header + yaml.safe_dump(
            self.overlay(), sort_keys=False, allow_unicode=True, width=100
        )

    def to_overlay_yaml(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`overlay_text` to ``path``; return the path.

        ``extends`` is written as given (a preset name, or a path: made absolute so the
        overlay loads from any directory). The file appears only once complete; a
        failed write raises :class:`ipusim.files.FileWriteError` naming the path.
        """
        from ipusim.files import write_text

        return write_text(Path(path), self.overlay_text(), what="overlay")

    def report(self) -> str:
        """Residual tables before and after, leave-one-out, insensitive parameters."""
        lines = [f"Parameters ({self.loss} loss over {', '.join(self.quantities)}):"]
        for p in self.parameters:
            mark = " (insensitive, not fitted)" if p.path in self.insensitive_paths else ""
            lines.append(
                f"  {p.path}: {number_text(self.values_before[p.path])} -> "
                f"{number_text(self.values_after[p.path])}  "
                f"[{number_text(p.lower)}, {number_text(p.upper)}]{mark}"
            )
        lines += [
            "",
            f"Residuals before (loss {self.loss_before:.6g}):",
            _table(self.residuals_before),
            "",
            f"Residuals after (loss {self.loss_after:.6g}):",
            _table(self.residuals_after),
        ]
        if self.leave_one_out is not None:
            lines += ["", "Leave-one-out (each pair predicted by a fit on the others):"]
            lines.append(_table(self.leave_one_out))
        if self.warnings:
            lines += ["", "Warnings:"] + [f"  - {w}" for w in self.warnings]
        lines.append(
            f"\n{self.evaluations} simulations of {len(self.pairs)} pair(s) in {self.seconds:.1f} s"
        )
        return "\n".join(lines)

    @property
    def insensitive_paths(self) -> list[str]:
        """Paths of the insensitive parameters."""
        return [i.path for i in self.insensitive]


def _plain(value: Any) -> Any:
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    return value


def number_text(value: float) -> str:
    """A parameter value or bound as the report prints it (six significant digits)."""
    return f"{value:.6g}"


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "  (empty)"
    return frame.to_string(index=False, float_format=lambda v: f"{v:.6g}")
