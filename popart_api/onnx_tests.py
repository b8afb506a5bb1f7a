"""Run ONNX's own backend *node* tests against popart_api.

Each node test is a directory ``<data>/node/test_<name>/`` with a ``model.onnx`` and
``test_data_set_<k>/input_<j>.pb`` / ``output_<j>.pb`` (serialized ``TensorProto``).
This module classifies every test against the live op registry
(:data:`popart_api.ops.REGISTRY`), runs the supported ones with an
:class:`~popart_api.InferenceSession` on an 8-tile IPU Model (every model output
anchored) and compares the results with the expected outputs.

Usage::

    python -m popart_api.onnx_tests [--ops Add,Relu] [--filter REGEX] [--markdown]
                                    [--jobs N] [--record [PATH]] [--data-dir DIR]

Where the data comes from: ``--data-dir``, else ``$IPUSIM_ONNX_NODE_DATA``, else the
``onnx`` package's ``backend/test/data/node``, else a cache written by ``--generate``
(some onnx wheels, 1.23 for one, ship no node data; ``--generate`` writes it from the
package's own test-case generators in ``onnx.backend.test.case.node``, with
``numpy.random.seed(0)``).

Operands PopART needs known when it builds its graph
(:data:`popart_api.onnx_scope.CONST_OPERANDS`: a
Reshape's shape, a reduction's axes, Clip's bounds, ...) that a test feeds from a graph
input become ``Constant`` nodes holding the data set's values (one session per data set),
as a PopART user writes such a model. The pass rate is measured on the tests *in
PopART's scope* (:func:`in_popart_scope`: every op one PopART supports, every input
and output a tensor of a type the IPU takes).

Tolerance: float outputs must satisfy ``numpy.testing.assert_allclose(actual,
expected, rtol=1e-3, atol=1e-5)``. ONNX's own backend runner uses ``rtol=1e-3,
atol=1e-7``; ``atol`` is looser here to allow for float32 results computed in another
order than numpy's (sums, matmuls, on tiles) near zero. (Measured with onnx 1.23.2:
every test that passes also passes at ``atol=1e-7``.) Integer and bool outputs must
be equal. An int64 expected output is compared by value with the device's int32.

Statuses: ``pass``; ``fail`` (wrong shape or values; the reason has the largest
difference); ``error`` (an exception: ``kind`` is ``"popart"`` for a
``popart_exception``, a clear refusal, or ``"crash"`` for any other exception, a bug);
``unsupported`` (an ai.onnx opset older than PopART's oldest, 6; an op missing from
the registry or older than its first registered opset; or a model input/output type
the session does not take); ``too_large`` (an
input of more than :data:`MAX_INPUT_ELEMENTS` elements; not run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from popart_api.onnx_scope import (
    constant_inputs,
    in_popart_scope,
    walk_nodes,
)

#: Tolerances of the float comparison (see the module docstring).
RTOL = 1e-3
ATOL = 1e-5
#: Tests with an input of more elements than this are not run ("too_large").
MAX_INPUT_ELEMENTS = 1_000_000
#: Environment variable naming a node-test data directory.
DATA_ENV = "IPUSIM_ONNX_NODE_DATA"
#: Default file of the recorded counts (``--record``).
COUNTS_FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "onnx_backend_counts.json"

#: Element types of model inputs the session takes (INT64 as INT32, as PopART does).
INPUT_TYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.BOOL,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT16,
        TensorProto.UINT16,
        TensorProto.UINT32,
    }
)
#: Element types of model outputs compared (int64 by value against the device's int32).
OUTPUT_TYPES = INPUT_TYPES
STATUSES = ("pass", "fail", "error", "unsupported", "too_large")


class OnnxDataMissing(FileNotFoundError):
    """No ONNX node-test data directory was found (the message names where it looked)."""


@dataclass
class Result:
    """The outcome of one node test.

    Attributes
    ----------
    name
        The test's directory name (``test_add_bcast``).
    op
        The op the test is about (see :func:`primary_op`).
    status
        One of :data:`STATUSES`.
    reason
        Why it is not ``pass`` (one line).
    kind
        For ``error``: ``"popart"`` (a ``popart_exception``) or ``"crash"`` (any other
        exception).
    max_diff
        For a value ``fail``: the largest absolute difference.
    seconds
        Wall time of the run.
    in_scope
        Whether the test is in PopART's scope (see :func:`in_popart_scope`).
    """

    name: str
    op: str
    status: str
    reason: str = ""
    kind: str = ""
    max_diff: float | None = None
    seconds: float = 0.0
    in_scope: bool = False


@dataclass
class Summary:
    """Counts of results, overall and per op.

    Attributes
    ----------
    total
        Results per status.
    per_op
        Op type -> results per status.
    """

    total: Counter = field(default_factory=Counter)
    per_op: dict[str, Counter] = field(default_factory=dict)


# --------------------------------------------------------------------------- data
def package_data_dir() -> Path:
    """The ``backend/test/data/node`` directory of the installed ``onnx`` package."""
    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "node"


def cache_data_dir() -> Path:
    """Where ``--generate`` writes the node-test data (per onnx version)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ipusim" / f"onnx-node-tests-{onnx.__version__}"


def _has_tests(path: Path) -> bool:
    return path.is_dir() and any(path.glob("test_*/model.onnx"))


def find_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The node-test data directory: ``data_dir``, ``$IPUSIM_ONNX_NODE_DATA``, the onnx
    package's, or the ``--generate`` cache, the first that holds tests.

    Raises
    ------
    OnnxDataMissing
        None of them holds ``test_*/model.onnx`` (the message lists the paths tried).
    """
    if data_dir is not None:
        path = Path(data_dir)
        if not _has_tests(path):
            raise OnnxDataMissing(
                f"ONNX node-test data directory '{path}' holds no test_*/model.onnx; "
                "hint: pass the 'node' directory of onnx/backend/test/data, or omit "
                "--data-dir and run with --generate"
            )
        return path
    tried = []
    env = os.environ.get(DATA_ENV)
    candidates = ([Path(env)] if env else []) + [package_data_dir(), cache_data_dir()]
    for path in candidates:
        if _has_tests(path):
            return path
        tried.append(str(path))
    raise OnnxDataMissing(
        f"no ONNX node-test data found (looked in {', '.join(tried)}); the installed onnx "
        f"{onnx.__version__} ships none. hint: `python -m popart_api.onnx_tests --generate` "
        f"writes it to {cache_data_dir()} from onnx's own test-case generators, or set "
        f"${DATA_ENV} / --data-dir to an onnx checkout's onnx/backend/test/data/node"
    )


def _value_proto(value: object, vi: onnx.ValueInfoProto) -> bytes:
    """Serialize one input/output value of a generated test case as ONNX stores it."""
    t = vi.type
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, vi.name).SerializeToString()
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, vi.name).SerializeToString()
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, vi.name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(np.asarray(value), vi.name).SerializeToString()


def generate_data(out_dir: str | os.PathLike | None = None, seed: int = 0) -> Path:
    """Write the node tests of ``onnx.backend.test.case.node`` to ``out_dir``.

    The directory is written in a temporary sibling and renamed into place, so
    concurrent callers (pytest-xdist workers) do not see half a directory.

    Parameters
    ----------
    out_dir
        Target directory (default :func:`cache_data_dir`); left as is when it
        already holds tests.
    seed
        ``numpy.random.seed`` before the generators run (their inputs are random).

    Returns
    -------
    Path
        ``out_dir``.
    """
    from onnx.backend.test.case.node import collect_testcases

    out = Path(out_dir) if out_dir is not None else cache_data_dir()
    if _has_tests(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            cases = collect_testcases()
    finally:
        np.random.set_state(state)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        for case in cases:
            if case.model is None or not case.data_sets:
                continue
            tdir = tmp / case.name
            tdir.mkdir()
            (tdir / "model.onnx").write_bytes(case.model.SerializeToString())
            graph = case.model.graph
            for k, (inputs, outputs) in enumerate(case.data_sets):
                ddir = tdir / f"test_data_set_{k}"
                ddir.mkdir()
                for prefix, values, infos in (
                    ("input", inputs, graph.input),
                    ("output", outputs, graph.output),
                ):
                    for j, (value, vi) in enumerate(zip(values, infos, strict=False)):
                        try:
                            data = _value_proto(value, vi)
                        except Exception:  # an exotic value; the test is unsupported anyway
                            continue
                        (ddir / f"{prefix}_{j}.pb").write_bytes(data)
        (tmp / "SOURCE.json").write_text(
            json.dumps({"onnx": onnx.__version__, "generated": True, "seed": seed}) + "\n"
        )
        try:
            tmp.rename(out)
        except OSError:  # another process won the race
            if not _has_tests(out):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def ensure_data_dir(data_dir: str | os.PathLike | None = None, generate: bool = False) -> Path:
    """:func:`find_data_dir`, generating the cache first when nothing is found and
    ``generate`` is true."""
    try:
        return find_data_dir(data_dir)
    except OnnxDataMissing:
        if data_dir is not None or not generate:
            raise
    return generate_data()


def data_source(data_dir: Path) -> str:
    """``"generated"`` for a ``--generate`` directory, else ``"shipped"``."""
    return "generated" if (data_dir / "SOURCE.json").is_file() else "shipped"


# ----------------------------------------------------------------- classification
@lru_cache(maxsize=1)
def _schema_names() -> dict[str, str]:
    """Lower-cased op type -> op type, of every ONNX schema."""
    return {s.name.lower(): s.name for s in onnx.defs.get_all_schemas_with_history()}


_walk_nodes = walk_nodes


def _domain(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


_EXPANDED = re.compile(r"^(.*)_expanded(_ver\d+)?$")


@lru_cache(maxsize=4096)
def _single_op(model_path: str) -> str | None:
    """The op type of the one-op model at ``model_path``, or None."""
    if not os.path.isfile(model_path):
        return None
    types = {n.op_type for n in onnx.load(model_path, load_external_data=False).graph.node}
    return types.pop() if len(types) == 1 else None


def primary_op(name: str, model: onnx.ModelProto, data_dir: Path | None = None) -> str:
    """The op a test is about: the op of a one-op model; for ``<base>_expanded[_verN]``
    (a function op expanded into its body) the op of ``<base>`` in ``data_dir``; else
    the op type whose name is the longest prefix of the test name
    (``test_softmax_example_expanded`` -> ``Softmax``); else the model's first op."""
    types = list(dict.fromkeys(n.op_type for n in model.graph.node))
    if len(types) == 1:
        return types[0]
    expanded = _EXPANDED.match(name)
    if expanded and data_dir is not None:
        base = _single_op(str(data_dir / expanded.group(1) / "model.onnx"))
        if base:
            return base
    key = name.removeprefix("test_").replace("_", "").lower()
    for pool in ({t.lower(): t for t in types}, _schema_names()):
        matches = [k for k in pool if key.startswith(k)]
        if matches:
            return pool[max(matches, key=len)]
    return types[0] if types else "(none)"


_KINDS = {
    "sequence_type": "a sequence",
    "optional_type": "an optional",
    "map_type": "a map",
    "sparse_tensor_type": "a sparse tensor",
}


def unsupported_reason(model: onnx.ModelProto) -> str | None:
    """Why the session cannot run ``model`` (checked against the live registry), or
    None."""
    from popart_api import ops
    from popart_api.session import MIN_AI_ONNX_OPSET

    opsets = {_domain(o.domain): o.version for o in model.opset_import}
    if opsets.get("ai.onnx", MIN_AI_ONNX_OPSET) < MIN_AI_ONNX_OPSET:
        return (
            f"the model imports ai.onnx opset {opsets['ai.onnx']}; PopART supports opsets "
            f"from {MIN_AI_ONNX_OPSET}"
        )
    missing: list[str] = []
    for node in _walk_nodes(model.graph):
        domain = _domain(node.domain)
        entries = ops.REGISTRY.get((domain, node.op_type))
        label = f"{domain}::{node.op_type}"
        if not entries:
            if label not in missing:
                missing.append(label)
            continue
        opset = opsets.get(domain, 1)
        if entries[0][0] > opset:
            return f"{label} is registered from opset {entries[0][0]}; the model has {opset}"
    if missing:
        return "op(s) not supported: " + ", ".join(missing)
    inits = {t.name for t in model.graph.initializer}
    for what, infos, allowed in (
        ("input", [v for v in model.graph.input if v.name not in inits], INPUT_TYPES),
        ("output", model.graph.output, OUTPUT_TYPES),
    ):
        for vi in infos:
            kind = vi.type.WhichOneof("value")
            if kind != "tensor_type":
                what_kind = _KINDS.get(kind or "", "an untyped value")
                return f"{what} '{vi.name}' is {what_kind}, not a tensor"
            elem = vi.type.tensor_type.elem_type
            if elem not in allowed:
                return (
                    f"{what} '{vi.name}' has type {TensorProto.DataType.Name(elem)} "
                    "(not supported by the session)"
                )
    return None


def scope_rate(results: Iterable[Result]) -> tuple[int, int]:
    """``(passed, total)`` of the in-scope results."""
    scoped = [r for r in results if r.in_scope]
    return sum(r.status == "pass" for r in scoped), len(scoped)


def _data_sets(path: Path) -> list[Path]:
    sets = [p for p in path.glob("test_data_set_*") if p.is_dir()]
    return sorted(sets, key=lambda p: int(p.name.rsplit("_", 1)[1]))


def _numbered(ddir: Path, prefix: str) -> list[Path]:
    files = list(ddir.glob(f"{prefix}_*.pb"))
    return sorted(files, key=lambda p: int(p.stem.rsplit("_", 1)[1]))


def _largest_input(path: Path) -> int:
    largest = 0
    for ddir in _data_sets(path):
        for f in _numbered(ddir, "input"):
            t = onnx.load_tensor(str(f))
            largest = max(largest, int(np.prod(t.dims, dtype=np.int64)))
    return largest


def list_tests(
    data_dir: Path, ops: Iterable[str] | None = None, pattern: str | None = None
) -> list[Path]:
    """Test directories of ``data_dir`` (sorted), those whose name matches ``pattern``
    (``re.search``) and, with ``ops``, whose :func:`primary_op` is one of ``ops``."""
    regex = re.compile(pattern) if pattern else None
    wanted = set(ops) if ops else None
    out = []
    for path in sorted(p.parent for p in data_dir.glob("test_*/model.onnx")):
        if regex is not None and not regex.search(path.name):
            continue
        if wanted is not None:
            model = onnx.load(str(path / "model.onnx"), load_external_data=False)
            if primary_op(path.name, model, path.parent) not in wanted:
                continue
        out.append(path)
    return out


def classify(path: Path) -> Result | None:
    """The ``unsupported`` or ``too_large`` result of the test at ``path``, or None
    when it is to be run."""
    model = onnx.load(str(path / "model.onnx"), load_external_data=False)
    op = primary_op(path.name, model, path.parent)
    reason = unsupported_reason(model)
    if reason:
        return Result(path.name, op, "unsupported", reason)
    if not _data_sets(path):
        return Result(path.name, op, "unsupported", "no test_data_set_* directory")
    largest = _largest_input(path)
    if largest > MAX_INPUT_ELEMENTS:
        return Result(
            path.name, op, "too_large", f"an input has {largest} > {MAX_INPUT_ELEMENTS} elements"
        )
    return None


# ------------------------------------------------------------------------- run
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line}"[:300]


def compare(name: str, actual: np.ndarray, expected: np.ndarray) -> tuple[str, float | None]:
    """Check one output: ``("", None)`` when it matches, else a one-line reason and
    the largest absolute difference (None for a shape mismatch)."""
    if list(actual.shape) != list(expected.shape):
        return (
            f"output '{name}': shape {list(actual.shape)} != expected {list(expected.shape)}",
            None,
        )
    if expected.dtype.kind in "fc":
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        try:
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True)
        except AssertionError:
            with np.errstate(all="ignore"):
                diff = np.abs(a - e)
                bad = ~(np.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True))
                worst = float(np.nanmax(np.where(bad, diff, 0.0))) if diff.size else 0.0
                if not np.isfinite(worst) or np.isnan(diff[bad]).any():
                    worst = float("inf")
            return (
                f"output '{name}': {int(bad.sum())}/{e.size} elements differ, max |diff| "
                f"{worst:.3g} (rtol {RTOL:g}, atol {ATOL:g})",
                worst,
            )
        return "", None
    if expected.dtype.kind in "iub":
        bad = actual.astype(np.int64) != expected.astype(np.int64)
        if bad.any():
            diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
            return (
                f"output '{name}': {int(bad.sum())}/{expected.size} elements differ "
                f"(max |diff| {int(diff.max())})",
                float(diff.max()),
            )
        return "", None
    return f"output '{name}': expected dtype {expected.dtype} is not compared", None


def _session(model: onnx.ModelProto, output_names: list[str]) -> Any:
    import popart_api as popart

    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("ALL") for o in output_names})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 8})
    session = popart.InferenceSession(
        fnModel=model.SerializeToString(), dataFlow=flow, deviceInfo=device
    )
    session.prepareDevice()
    session.weightsFromHost()
    return session


def _with_constants(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` with the graph inputs ``values`` made ``Constant`` nodes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [v for v in out.graph.input if v.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    consts = [
        onnx.helper.make_node(
            "Constant", [], [n], name=f"{n}/constant", value=numpy_helper.from_array(a, n)
        )
        for n, a in values.items()
    ]
    nodes = [*consts, *out.graph.node]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _run_model(path: Path, model: onnx.ModelProto, op: str) -> Result:
    import popart_api as popart

    inits = {t.name for t in model.graph.initializer}
    input_names = [v.name for v in model.graph.input if v.name not in inits]
    output_names = [v.name for v in model.graph.output]
    folded = constant_inputs(model)
    session = None if folded else _session(model, output_names)
    for ddir in _data_sets(path):
        in_files = _numbered(ddir, "input")
        feeds = {
            n: numpy_helper.to_array(onnx.load_tensor(str(f)))
            for n, f in zip(input_names, in_files, strict=False)
        }
        if folded:  # one session per data set, its constant operands as Constant nodes
            consts = {n: feeds.pop(n) for n in folded if n in feeds}
            session = _session(_with_constants(model, consts), output_names)
        anchors = session.initAnchorArrays()
        session.run(popart.PyStepIO(feeds, anchors))
        for oname, f in zip(output_names, _numbered(ddir, "output"), strict=False):
            expected = numpy_helper.to_array(onnx.load_tensor(str(f)))
            reason, diff = compare(oname, np.asarray(anchors[oname]), expected)
            if reason:
                if len(_data_sets(path)) > 1:
                    reason = f"{ddir.name}: {reason}"
                return Result(path.name, op, "fail", reason, max_diff=diff)
    return Result(path.name, op, "pass")


def run_test(path: str | os.PathLike) -> Result:
    """Classify and, when supported, run the node test at ``path``; never raises."""
    from popart_api.errors import popart_exception

    path = Path(path)
    start = time.perf_counter()
    op = "(unknown)"
    scoped = False
    try:
        model = onnx.load(str(path / "model.onnx"), load_external_data=False)
        scoped = in_popart_scope(model)
        skipped = classify(path)
        if skipped is not None:
            skipped.in_scope = scoped
            return skipped
        op = primary_op(path.name, model, path.parent)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = _run_model(path, model, op)
    except popart_exception as exc:
        result = Result(path.name, op, "error", _first_line(exc), kind="popart")
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        reason = f"{_first_line(exc)} (at {Path(where.filename).name}:{where.lineno})"
        result = Result(path.name, op, "error", reason, kind="crash")
    result.seconds = time.perf_counter() - start
    result.in_scope = scoped
    return result


def run_all(paths: Sequence[Path], jobs: int = 1) -> list[Result]:
    """:func:`run_test` of every path, in ``jobs`` processes; results in path order."""
    if jobs <= 1 or len(paths) <= 1:
        return [run_test(p) for p in paths]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run_test, [str(p) for p in paths], chunksize=8))


# ------------------------------------------------------------------- reports
def summarize(results: Iterable[Result]) -> Summary:
    """Counts per status, overall and per op."""
    summary = Summary()
    for r in results:
        summary.total[r.status] += 1
        summary.per_op.setdefault(r.op, Counter())[r.status] += 1
    return summary


def counts_line(summary: Summary) -> str:
    """``N tests: P passed, F failed, E errors, U unsupported, L too large``."""
    t = summary.total
    return (
        f"{sum(t.values())} tests: {t['pass']} passed, {t['fail']} failed, {t['error']} "
        f"errors, {t['unsupported']} unsupported, {t['too_large']} too large"
    )


def scope_line(results: Iterable[Result]) -> str:
    """``in PopART's scope: P/N pass (x %)`` (see :func:`in_popart_scope`)."""
    passed, total = scope_rate(results)
    rate = 100.0 * passed / total if total else 0.0
    return (
        f"in PopART's scope (ops PopART supports, types the IPU takes): {passed}/{total} "
        f"pass ({rate:.1f} %)"
    )


def markdown_table(results: Iterable[Result], only_run: bool = False) -> str:
    """The per-op table ``op type | passed | failed | unsupported`` (failed counts
    failures and errors; unsupported counts too-large tests too). With ``only_run``,
    ops without a run test are left out."""
    summary = summarize(results)
    lines = ["| op type | passed | failed | unsupported |", "|---|---:|---:|---:|"]
    for op in sorted(summary.per_op, key=str.lower):
        c = summary.per_op[op]
        run = c["pass"] + c["fail"] + c["error"]
        if only_run and not run:
            continue
        lines.append(
            f"| {op} | {c['pass']} | {c['fail'] + c['error']} | "
            f"{c['unsupported'] + c['too_large']} |"
        )
    t = summary.total
    lines.append(
        f"| **total** | {t['pass']} | {t['fail'] + t['error']} | "
        f"{t['unsupported'] + t['too_large']} |"
    )
    return "\n".join(lines)


def text_table(results: Iterable[Result]) -> str:
    """The per-op counts as plain text (ops with a run test only)."""
    summary = summarize(results)
    rows = [("op", "pass", "fail", "error", "unsup", "large")]
    for op in sorted(summary.per_op, key=str.lower):
        c = summary.per_op[op]
        if c["pass"] + c["fail"] + c["error"]:
            rows.append((op, *(str(c[s]) for s in STATUSES)))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{r[0]:<{width}} " + " ".join(f"{v:>6}" for v in r[1:]) for r in rows)


def record_counts(
    results: Sequence[Result], path: str | os.PathLike = COUNTS_FILE, data_dir: Path | None = None
) -> Path:
    """Write the counts and the names of the passing tests to ``path`` (JSON)."""
    summary = summarize(results)
    payload = {
        "onnx": onnx.__version__,
        "data": data_source(data_dir) if data_dir is not None else "unknown",
        "rtol": RTOL,
        "atol": ATOL,
        "counts": {s: summary.total[s] for s in STATUSES},
        "popart_scope": dict(zip(("pass", "total"), scope_rate(results), strict=True)),
        "passed_tests": sorted(r.name for r in results if r.status == "pass"),
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    return out


def load_counts(path: str | os.PathLike = COUNTS_FILE) -> dict:
    """The JSON written by :func:`record_counts`."""
    return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------ CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m popart_api.onnx_tests",
        description="Run ONNX's backend node tests against popart_api (IPU Model, 8 tiles).",
    )
    p.add_argument("--ops", help="comma-separated op types (the test's primary op)")
    p.add_argument("--filter", help="regular expression on the test directory name")
    p.add_argument("--markdown", action="store_true", help="print the markdown table")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--data-dir", help=f"node-test data directory (default: ${DATA_ENV}, ...)")
    p.add_argument(
        "--generate",
        action="store_true",
        help="write the node-test data from onnx's generators when none is found",
    )
    p.add_argument(
        "--record",
        nargs="?",
        const=str(COUNTS_FILE),
        help=f"write the counts to this JSON file (default {COUNTS_FILE})",
    )
    p.add_argument("--json", help="write every result to this JSON file")
    p.add_argument("-v", "--verbose", action="store_true", help="print every result")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status (2: no data or a bad argument)."""
    args = _parser().parse_args(argv)
    try:
        data_dir = ensure_data_dir(args.data_dir, generate=args.generate)
    except OnnxDataMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    try:
        paths = list_tests(data_dir, ops, args.filter)
    except re.error as exc:
        print(
            f"error: --filter {args.filter!r} is not a regular expression: {exc}", file=sys.stderr
        )
        return 2
    if not paths:
        print(f"error: no node test in {data_dir} matches the selection", file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = run_all(paths, max(1, args.jobs))
    elapsed = time.perf_counter() - start
    if args.verbose:
        for r in results:
            print(f"{r.status:<11} {r.name} {r.reason}")
    print(f"data: {data_dir} ({data_source(data_dir)}, onnx {onnx.__version__})")
    print(f"{counts_line(summarize(results))} in {elapsed:.1f} s")
    print(scope_line(results))
    crashes = [r for r in results if r.status == "error" and r.kind == "crash"]
    if crashes:
        print(f"{len(crashes)} of the errors are crashes (not a popart_exception)")
    print()
    print(markdown_table(results, only_run=True) if args.markdown else text_table(results))
    bad = [r for r in results if r.status in ("fail", "error")]
    if bad:
        print("\nfailing tests:")
        for r in bad:
            tag = f"error/{r.kind}" if r.status == "error" else "fail"
            print(f"  {r.name} [{r.op}] {tag}: {r.reason}")
    large = [r.name for r in results if r.status == "too_large"]
    if large:
        print(f"\ntoo large (not run): {', '.join(large)}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    if args.record:
        print(f"\nrecorded counts in {record_counts(results, args.record, data_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
