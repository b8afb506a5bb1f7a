"""Workloads: loading errors, ``ipusim run`` and re-timing a run on another config."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ipusim import cli
from ipusim.config import load_config, with_overrides
from ipusim.runner import WorkloadError, run_workload
from poplar_api.workload import load_workload, run

ROOT = Path(__file__).resolve().parents[1]
TUT3 = str(ROOT / "examples" / "tutorials" / "tut3.py")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


GOOD = """
from poplar_api import FLOAT, Graph
from poplar_api import program as prog
from poplar_api.workload import Workload

def helper():
    pass

def workload(device, rows: int = 4, scale: float = 1.0):
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [rows], "a")
    b = graph.addVariable(FLOAT, [rows], "b")
    graph.setTileMapping(a, 0)
    graph.setTileMapping(b, 1)
    return Workload(graph, prog.Copy(a, b))

def not_a_workload(device):
    return 42
"""


def test_missing_file_is_named(tmp_path):
    with pytest.raises(WorkloadError, match=r"nope\.py.*not found"):
        load_workload(str(tmp_path / "nope.py"))


def test_import_error_shows_file_and_original_message(tmp_path):
    spec = write(tmp_path, "broken.py", "import numpy\nraise RuntimeError('bad\\nthing')\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(spec)
    msg = str(info.value)
    assert "broken.py" in msg and "RuntimeError: bad thing" in msg and "\n" not in msg


def test_missing_function_lists_the_callables(tmp_path):
    spec = write(tmp_path, "wl.py", GOOD)
    with pytest.raises(WorkloadError) as info:
        load_workload(spec + ":build")
    msg = str(info.value)
    assert "'build'" in msg and "wl.py" in msg
    assert "helper" in msg and "not_a_workload" in msg and "workload" in msg


def test_missing_module_is_named():
    with pytest.raises(WorkloadError, match=r"no_such_pkg_xyz.*not found"):
        load_workload("no_such_pkg_xyz.mod")


def test_unknown_parameter_lists_those_taken(tmp_path):
    spec = write(tmp_path, "wl.py", GOOD)
    with pytest.raises(WorkloadError) as info:
        run(spec, "tiny", {"colz": 3})
    msg = str(info.value)
    assert "'colz'" in msg and "rows=4" in msg and "scale=1.0" in msg


def test_wrong_type_names_param_value_and_type(tmp_path):
    spec = write(tmp_path, "wl.py", GOOD)
    with pytest.raises(WorkloadError) as info:
        run(spec, "tiny", {"rows": "many"})
    msg = str(info.value)
    assert "'rows'" in msg and "'many'" in msg and "int" in msg
    # An int is a valid float.
    assert run(spec, "tiny", {"scale": 2}).ok is None


def test_result_that_is_not_a_workload(tmp_path):
    spec = write(tmp_path, "wl.py", GOOD)
    with pytest.raises(WorkloadError, match="not_a_workload returned int"):
        run(spec + ":not_a_workload", "tiny")


def test_a_function_without_the_device_parameter_is_named(tmp_path, capsys):
    spec = write(tmp_path, "wl.py", GOOD + "\ndef no_device(*, rows: int = 4):\n    pass\n")
    with pytest.raises(
        WorkloadError, match=r"no_device\(\*, rows: int = 4\) does not take the dev"
    ):
        run(spec + ":no_device", "tiny")
    status = cli.main(["run", spec + ":no_device", "--config", "tiny", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "def no_device(device, " in err and "internal error" not in err


def checked_by(returned: str) -> str:
    """GOOD with a check returning the expression ``returned`` (numpy as np)."""
    return "import numpy as np\n" + GOOD.replace(
        "return Workload(graph, prog.Copy(a, b))",
        f"return Workload(graph, prog.Copy(a, b), check=lambda e: {returned})",
    )


@pytest.mark.parametrize(
    ("header", "shown"),
    [("rows: int = 4", "its default 4"), ("rows: int", "its type int")],
)
def test_a_workload_parameter_in_the_device_place_is_named(tmp_path, header, shown):
    # The device was passed as rows' value and failed deep in the graph's calls.
    spec = write(tmp_path, "wl.py", GOOD + f"\ndef first({header}):\n    pass\n")
    with pytest.raises(WorkloadError, match=r"takes 'rows' first, which looks like a work") as i:
        run(spec + ":first", "tiny")
    assert shown in str(i.value) and "hint: add the device first" in str(i.value)


@pytest.mark.parametrize(
    ("returned", "shown"),
    [("None", "check returned None of type NoneType"), ("np.array([True, False])", "ndarray")],
)
def test_a_check_that_returns_no_truth_value_is_named(tmp_path, returned, shown):
    spec = write(tmp_path, "wl.py", checked_by(returned))
    with pytest.raises(
        WorkloadError, match=r"required True or False; hint: does the check"
    ) as info:
        run(spec, "tiny")
    assert shown in str(info.value)


def test_a_numpy_bool_check_is_a_truth_value(tmp_path):
    assert run(write(tmp_path, "wl.py", checked_by("np.bool_(1)")), "tiny").ok is True


@pytest.mark.parametrize(
    ("args", "kwargs", "found"),
    [
        ((123, "tiny"), {}, "workload spec 123 is a int; expected a string"),
        ((TUT3, "tiny", [1, 2]), {}, "params is a list ([1, 2]); expected a mapping"),
        ((TUT3, "tiny"), {"options": ["x"]}, "options is a list (['x']); expected a mapping"),
    ],
)
def test_run_workload_names_arguments_of_the_wrong_type(args, kwargs, found):
    # They raised AttributeError or TypeError from inside the runner.
    with pytest.raises(WorkloadError) as info:
        run_workload(*args, **kwargs)
    assert found in str(info.value)


def test_errors_are_value_errors():
    assert issubclass(WorkloadError, ValueError)


def test_cli_run_writes_profiles(tmp_path, capsys):
    out = tmp_path / "prof"
    status = cli.main(["run", TUT3, "--config", "tiny", "--out", str(out)])
    assert status == 0
    text = capsys.readouterr().out
    assert "Total cycles" in text and "Steps" in text
    for name in ("profile.json", "execution.json"):
        json.loads((out / name).read_text())
    assert (out / "summary.txt").read_text().startswith("Target:")


def test_cli_bad_param_is_a_clean_error(capsys):
    status = cli.main(["run", TUT3, "--config", "tiny", "-p", "rows=3"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("ipusim: error:") and "'rows'" in err and "Traceback" not in err


def test_cli_failed_check_exits_1(tmp_path):
    spec = write(
        tmp_path,
        "fails.py",
        GOOD.replace(
            "return Workload(graph, prog.Copy(a, b))",
            "return Workload(graph, prog.Copy(a, b), check=lambda e: False)",
        ),
    )
    assert cli.main(["run", spec, "--config", "tiny", "--out", str(tmp_path / "o")]) == 1


def test_tut3_check_and_module_spec(tmp_path):
    result = run_workload(TUT3, "tiny")
    assert result.ok is True
    assert result.trace is result.traces[-1]
    assert set(result.host_seconds) == {"build", "compile", "run"}


def test_retime_same_config_gives_identical_trace():
    result = run_workload(TUT3, "tiny")
    assert result.retime(result.config).fingerprint() == result.trace.fingerprint()


EXCHANGE = """
from poplar_api import FLOAT, Graph
from poplar_api import program as prog
from poplar_api.workload import Workload

def workload(device, n: int = 1000):
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [n], "a")
    b = graph.addVariable(FLOAT, [n], "b")
    graph.setTileMapping(a, 0)
    graph.setTileMapping(b, 1)
    return Workload(graph, prog.Repeat(3, prog.Copy(a, b)))
"""


def test_retime_with_double_exchange_bandwidth(tmp_path):
    spec = write(tmp_path, "xchg.py", EXCHANGE)
    n = 1000
    result = run_workload(spec, "tiny", {"n": n})
    base = result.config
    fast = with_overrides(base, {"exchange.bytes_per_cycle": 2 * base.exchange.bytes_per_cycle})
    retimed = result.retime(fast)
    slow_x, fast_x = (t.totals["internal_exchange"] for t in (result.trace, retimed))
    # Tile 1 receives 4n bytes per copy (tile 0 sends them): ceil(4n / bpc) cycles each, 3 copies.
    per_copy = lambda bpc: math.ceil(4 * n / bpc)  # noqa: E731
    drop = (
        3
        * 2
        * (per_copy(base.exchange.bytes_per_cycle) - per_copy(2 * base.exchange.bytes_per_cycle))
    )
    assert slow_x - fast_x == drop
    # A fresh run on the fast config agrees with the re-timed one.
    assert run_workload(spec, fast, {"n": n}).trace.fingerprint() == retimed.fingerprint()


def test_retime_refuses_a_new_machine_shape():
    result = run_workload(TUT3, "tiny")
    other = load_config("tiny", overrides={"tile.tiles_per_ipu": 16})
    with pytest.raises(WorkloadError, match=r"tile.tiles_per_ipu: 8 -> 16"):
        result.retime(other)


def test_retime_replays_predicates(tmp_path):
    spec = write(
        tmp_path,
        "loop.py",
        """
import numpy as np
from poplar_api import INT, Graph, popops
from poplar_api import program as prog
from poplar_api.workload import Workload

def workload(device):
    graph = Graph(device.getTarget())
    i = graph.addVariable(INT, [1], "i")
    graph.setTileMapping(i, 0)
    graph.setInitialValue(i, np.array([3], np.int32))
    body = prog.Sequence()
    popops.subInPlace(graph, i, 1, body)
    return Workload(graph, prog.RepeatWhileTrue(prog.Sequence(), i, body))
""",
    )
    result = run_workload(spec, "tiny")
    # i = 3, 2, 1 true; 0 stops: four answers to the loop's one predicate
    assert [value for _, value in result.trace.decisions] == [1, 1, 1, 0]
    assert len({predicate for predicate, _ in result.trace.decisions}) == 1
    assert result.retime(result.config).fingerprint() == result.trace.fingerprint()
    assert np.isfinite(result.trace.total_cycles)


@pytest.mark.parametrize(
    ("field", "found"),
    [
        ("run=(1.7,)", "Workload.run is (1.7,); required a sequence of program indices"),
        ("run='01'", "Workload.run is '01'"),
        ("check=True", "Workload.check is True of type bool; required a function"),
    ],
)
def test_workload_fields_the_run_would_misread_are_named(tmp_path, field, found):
    # run=(1.7,) ran program 1 and run="01" programs 0 and 1; check=True failed only
    # after the compilation, as an internal error.
    text = GOOD.replace(
        "return Workload(graph, prog.Copy(a, b))",
        f"return Workload(graph, [prog.Copy(a, b), prog.Copy(b, a)], {field})",
    )
    with pytest.raises(WorkloadError, match=re.escape(found)):
        run(write(tmp_path, "wl.py", text), "tiny")
