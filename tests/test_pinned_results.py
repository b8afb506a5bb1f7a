"""Pinned results of the tutorials and examples, so an optimisation provably changes nothing.

Each case runs one script of ``examples/`` in-process, as ``python <script> <args>`` runs
it, and records:

* the exit status;
* the sha256 of its printed stdout and of its stderr, with printed host times masked
  (``host time 0.123 s; 4,567 simulated cycles per host second``, ``Host seconds: ...``);
* the fingerprint (:meth:`ipusim.trace.Trace.fingerprint`) of every trace of every
  :class:`~poplar_api.Engine` the script made, in order;
* the sha256 of the canonical JSON of every engine's graph profile and execution
  profile, the latter without its wall-clock fields (``hostSeconds``).

The pins are in ``tests/data/pinned_results.json``. Record them again (only when a
change of results is intended) with::

    python tests/test_pinned_results.py --record          # or IPUSIM_RECORD_PINS=1 pytest ...
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import runpy
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from poplar_api import engine as engine_module  # noqa: E402

EXAMPLES = ROOT / "examples"
PINS = Path(__file__).resolve().parent / "data" / "pinned_results.json"

#: Keys of a profile whose values are host (wall-clock) time, not simulated results.
HOST_TIME_KEYS = frozenset({"hostSeconds"})

#: Printed host (wall-clock) times: the profile summary's ``Runs:`` line and the CNN
#: example's ``Host seconds:`` line, each replaced by ``<host>``.
HOST_TIME_TEXT = (
    (
        re.compile(r"host time [0-9.]+ s; (?:[0-9,]+|-) simulated cycles per host second"),
        "host time <host>",
    ),
    (re.compile(r"Host seconds:[^\n]*"), "Host seconds: <host>"),
)


@dataclass(frozen=True)
class Case:
    """One script run: ``examples/<script> <args>``; ``slow`` ones only with ``-m slow``."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    slow: bool = False


CASES: tuple[Case, ...] = (
    Case("tut1", "tutorials/tut1.py"),
    Case("tut2", "tutorials/tut2.py"),
    Case("tut3", "tutorials/tut3.py"),
    Case("tut4", "tutorials/tut4.py"),
    Case("tut5-1-batch", "tutorials/tut5.py", ("--batches", "1")),
    Case("tut6-40x50", "tutorials/tut6.py", ("40", "50")),
    Case("tut7-ipu2-40x50", "tutorials/tut7.py", ("--device", "model-ipu2", "40", "50")),
    Case("tut7-ipu1-1000x1000", "tutorials/tut7.py", ("--device", "model-ipu1", "1000", "1000")),
    Case(
        "tut7-ipu2-10000x1000",
        "tutorials/tut7.py",
        ("--device", "model-ipu2", "10000", "1000"),
        slow=True,
    ),
    Case("advanced_example", "poplar/advanced_example.py", ("--model",)),
    Case("leaky_relu", "poplar/leaky_relu.py", ("0.3", "-2.7", "1.2", "-5.0")),
    Case("implicit_blocks", "poplar/lightweight_profiling_implicit_blocks.py"),
    Case("two_ipu_blocks", "poplar/lightweight_profiling_two_ipus.py"),
    Case("prefetch", "poplar/prefetch.py"),
    Case("repeat_while_true", "poplar/repeat_while_true.py"),
    Case("tut7_two_ipus", "multi_ipu/tut7_two_ipus.py", ("--device", "model-ipu1", "30", "10")),
    Case(
        "pipeline",
        "multi_ipu/pipeline.py",
        ("--micro-batches", "2", "--batch", "4", "--features", "32", "--io-features", "8"),
    ),
    Case(
        "data_parallel_mlp",
        "multi_ipu/data_parallel_mlp.py",
        ("--replicas", "2", "--batch", "4", "--steps", "2", "--hidden", "16", "--tiles", "16"),
    ),
    Case(
        "cnn_digits",
        "cnn/cnn_digits.py",
        ("--steps", "2", "--batch", "4", "--tiles", "16", "--no-eval"),
        slow=True,
    ),
)


def _plain(value: Any) -> Any:
    """JSON-ready form of numpy scalars and arrays (for ``json.dumps(default=...)``)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot pin a {type(value).__name__} in a profile")


def without_host_time(value: Any) -> Any:
    """``value`` with every :data:`HOST_TIME_KEYS` entry of every nested mapping removed."""
    if isinstance(value, dict):
        return {k: without_host_time(v) for k, v in value.items() if k not in HOST_TIME_KEYS}
    if isinstance(value, (list, tuple)):
        return [without_host_time(v) for v in value]
    return value


def sha256_json(value: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of ``value``."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


def masked_stdout(text: str) -> str:
    """``text`` with the printed host-time figures (:data:`HOST_TIME_TEXT`) masked."""
    for pattern, replacement in HOST_TIME_TEXT:
        text = pattern.sub(replacement, text)
    return text


@contextlib.contextmanager
def engines_made() -> Iterator[list[Any]]:
    """Collect every :class:`~poplar_api.Engine` constructed inside the block."""
    made: list[Any] = []
    original = engine_module.Engine.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    engine_module.Engine.__init__ = init  # type: ignore[method-assign]
    try:
        yield made
    finally:
        engine_module.Engine.__init__ = original  # type: ignore[method-assign]


def _profile_hash(get: Any, drop_host_time: bool) -> str:
    """sha256 of a profile getter's result, or of its error type when it has none."""
    try:
        profile = get()
    except Exception as exc:
        return f"error:{type(exc).__name__}"
    return sha256_json(without_host_time(profile) if drop_host_time else profile)


def run_case(case: Case) -> dict[str, Any]:
    """Run ``case`` in-process as its command line would; return what is pinned."""
    path = EXAMPLES / case.script
    out, err = io.StringIO(), io.StringIO()
    argv, cwd = sys.argv, Path.cwd()
    status: Any = 0
    sys.argv = [str(path), *case.args]
    try:
        os.chdir(ROOT)
        with (
            engines_made() as engines,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exc:
                status = exc.code
    finally:
        sys.argv = argv
        os.chdir(cwd)
    return {
        "exit": 0 if status is None else status,
        "stdout_sha256": hashlib.sha256(masked_stdout(out.getvalue()).encode()).hexdigest(),
        "stderr_sha256": hashlib.sha256(masked_stdout(err.getvalue()).encode()).hexdigest(),
        "trace_fingerprints": [[t.fingerprint() for t in e.getTraces()] for e in engines],
        "graph_profile_sha256": [_profile_hash(e.getGraphProfile, False) for e in engines],
        "execution_profile_sha256": [_profile_hash(e.getExecutionProfile, True) for e in engines],
    }


def load_pins() -> dict[str, Any]:
    """The recorded pins (an empty mapping when the file does not exist yet)."""
    if not PINS.exists():
        return {}
    return json.loads(PINS.read_text())


def record(cases: Sequence[Case]) -> dict[str, Any]:
    """Run ``cases`` and write their results into :data:`PINS` (other pins are kept)."""
    pins = load_pins()
    for case in cases:
        print(f"recording {case.name}", file=sys.stderr, flush=True)
        pins[case.name] = {"script": case.script, "args": list(case.args), **run_case(case)}
    PINS.parent.mkdir(parents=True, exist_ok=True)
    PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
    return pins


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in CASES],
)
def test_results_are_unchanged(case: Case) -> None:
    if os.environ.get("IPUSIM_RECORD_PINS") == "1":
        record([case])
        pytest.skip("recorded")
    pins = load_pins()
    assert case.name in pins, (
        f"no pin for {case.name}; hint: python tests/test_pinned_results.py --record"
    )
    pinned = pins[case.name]
    assert (pinned["script"], pinned["args"]) == (case.script, list(case.args)), (
        "the case's command line changed since it was pinned; record it again"
    )
    got = run_case(case)
    for key, value in got.items():
        assert value == pinned[key], f"{case.name}: {key} changed\n got {value}\n pin {pinned[key]}"


def main(argv: Sequence[str] | None = None) -> int:
    """``--record [NAME ...]``: run the cases (default: all) and write their pins."""
    parser = argparse.ArgumentParser(description="Record the pinned results of the examples.")
    parser.add_argument("--record", action="store_true", help="run the cases and write the pins")
    parser.add_argument("names", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args(argv)
    if not args.record:
        parser.error("nothing to do; pass --record (or run the tests with pytest)")
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {sorted(by_name)}")
    record([by_name[n] for n in args.names] if args.names else CASES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
