"""The disk cache of compiled vertex drivers (poplar_api.driver_cache).

Every test points the cache at its own temporary directory. Codelets live in files
the tests write and edit, so that a class can be loaded again (a new class object:
a new driver, looked up on disk) and a changed codelet can be checked to run its new
code, never the machine code cached for the old one.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numba
import numpy as np
import pytest

import poplar_api.codelet_compile as codelet_compile
from poplar_api import counted, driver_cache
from poplar_api.codelet import execute, load_codelet_file, vertex_type
from poplar_api.fields import FieldBatch

REPO = Path(__file__).resolve().parents[1]

SCALE = """
import numba
import numpy as np
from poplar_api import FLOAT
from poplar_api.codelet import Input, Output, Vector, Vertex

FACTOR = {factor}


class Scale(Vertex):
    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod{jit}
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = in_[i] * FACTOR {extra}
"""


#: A codelet whose ``out[i]`` is the expression ``call`` of ``in_[i]``, which may call a
#: function defined elsewhere (imported by ``imports``).
CALLER = """
{imports}
from poplar_api import FLOAT
from poplar_api.codelet import Input, Output, Vector, Vertex


class Caller(Vertex):
    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = {call}
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty cache directory (``IPUSIM_CACHE_DIR``) with the cache on, Numba's
    files beside its entries whatever ``NUMBA_CACHE_DIR`` the run has (Numba's default;
    a test that wants them elsewhere sets ``numba.config.CACHE_DIR`` itself)."""
    root = tmp_path / "cache"
    monkeypatch.setenv(driver_cache.CACHE_DIR_ENV, str(root))
    monkeypatch.delenv(driver_cache.SWITCH_ENV, raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    return root / "numba"


def _write(path: Path, text: str) -> Path:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(textwrap.dedent(text))
    # a later mtime than the file's last one (two writes can fall in one tick of the
    # file system's clock): load_codelet_file sees an edited file
    stat = path.stat()
    later = max(stat.st_mtime_ns, before) + 1_000_000_000
    os.utime(path, ns=(stat.st_atime_ns, later))
    return path


def _load(path: Path, name: str) -> types.ModuleType:
    """Import ``path`` as module ``name`` afresh (new class objects every time)."""
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _run(cls: type, data: np.ndarray) -> tuple[np.ndarray, object]:
    """Run ``cls`` over two vertices (``data`` split in halves); outputs and driver."""
    half = data.size // 2
    offsets = np.array([0, half, data.size], np.int64)
    batches = {
        "in": FieldBatch(data.astype(np.float32), offsets),
        "out": FieldBatch(np.zeros(data.size, np.float32), offsets),
    }
    ok = execute(vertex_type(cls), batches, 2, check_bounds=True)
    assert ok.tolist() == [True, True]
    return batches["out"].data, codelet_compile._driver(vertex_type(cls), True, 6)


def _hits(driver: object) -> int:
    return sum(driver.stats.cache_hits.values())


def _misses(driver: object) -> int:
    return sum(driver.stats.cache_misses.values())


DATA = np.arange(6, dtype=np.float32) - 2.5


def test_a_driver_is_loaded_from_disk_the_second_time(cache: Path, tmp_path: Path) -> None:
    path = _write(tmp_path / "scale_a.py", SCALE.format(factor=2.0, extra="", jit=""))
    out, first = _run(_load(path, "n7_scale_a").Scale, DATA)
    np.testing.assert_array_equal(out, DATA * np.float32(2.0))
    assert _misses(first) == 1 and _hits(first) == 0
    assert len(list(cache.glob("drv_*.py"))) == 1
    assert list((cache / "__pycache__").glob("drv_*.nbi"))
    # the same file loaded again: new classes, so a new driver, whose code is on disk
    out, second = _run(_load(path, "n7_scale_a").Scale, DATA)
    assert second is not first
    np.testing.assert_array_equal(out, DATA * np.float32(2.0))
    assert _hits(second) == 1 and _misses(second) == 0


@pytest.mark.parametrize("jit", ["", "\n    @numba.njit"], ids=["plain", "users_own_njit"])
def test_an_edited_codelet_file_runs_its_new_code(cache: Path, tmp_path: Path, jit: str) -> None:
    """A compute given as a plain function (inlined) or compiled by the user (called)."""
    path = tmp_path / "scale_b.py"
    results = []
    for factor, extra in [(2.0, ""), (2.0, "+ 1.0"), (3.0, "+ 1.0"), (2.0, "")]:
        _write(path, SCALE.format(factor=factor, extra=extra, jit=jit))
        out, _ = _run(load_codelet_file(path).Scale, DATA)
        results.append(out.copy())
    np.testing.assert_array_equal(results[0], DATA * np.float32(2.0))
    np.testing.assert_array_equal(results[1], DATA * np.float32(2.0) + np.float32(1.0))
    np.testing.assert_array_equal(results[2], DATA * np.float32(3.0) + np.float32(1.0))
    np.testing.assert_array_equal(results[3], results[0])  # back to the first code
    assert len(list(cache.glob("drv_*.py"))) == 3


def test_a_changed_helper_in_another_module_is_not_run_stale(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's own bytecode stays the same; only a function it calls changes."""
    monkeypatch.syspath_prepend(str(tmp_path))
    codelet = tmp_path / "uses_helper.py"
    _write(codelet, CALLER.format(imports="import n7_helper", call="n7_helper.step(in_[i])"))
    helper = """
        import numba

        @numba.njit
        def step(x):
            return x {body}
        """
    outs = []
    for body in ["* 2.0", "* 2.0 - 7.0"]:
        _write(tmp_path / "n7_helper.py", helper.format(body=body))
        sys.modules.pop("n7_helper", None)
        out, driver = _run(_load(codelet, "n7_uses_helper").Caller, DATA)
        outs.append((out.copy(), _hits(driver)))
    sys.modules.pop("n7_helper", None)
    np.testing.assert_array_equal(outs[0][0], DATA * np.float32(2.0))
    np.testing.assert_array_equal(outs[1][0], DATA * np.float32(2.0) - np.float32(7.0))
    assert outs[1][1] == 0  # compiled afresh, not loaded


def test_the_worker_count_a_kernel_reads_is_part_of_the_key(cache: Path, tmp_path: Path) -> None:
    path = _write(
        tmp_path / "workers.py",
        """
        from poplar_api import FLOAT
        from poplar_api.codelet import MultiVertex, Output, Vector, numWorkers


        class Count(MultiVertex):
            out = Output(Vector(FLOAT))

            @staticmethod
            def compute(workerId, out):
                if workerId == 0:
                    out[0] = numWorkers()
        """,
    )
    for workers in (6, 3, 6):
        cls = _load(path, "n7_workers").Count
        batches = {"out": FieldBatch(np.zeros(1, np.float32), np.array([0, 1], np.int64))}
        execute(vertex_type(cls), batches, 1, num_workers=workers)
        assert batches["out"].data[0] == workers


@pytest.mark.parametrize("numba_cache_dir", [False, True])
def test_a_corrupt_entry_is_compiled_again(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, numba_cache_dir: bool
) -> None:
    """Numba's files beside the entry, or where ``NUMBA_CACHE_DIR`` puts them."""
    if numba_cache_dir:
        monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba_dir"))
    path = _write(tmp_path / "scale_c.py", SCALE.format(factor=4.0, extra="- 0.5", jit=""))
    expected = DATA * np.float32(4.0) - np.float32(0.5)
    _run(_load(path, "n7_scale_c").Scale, DATA)
    files = sorted(tmp_path.rglob("drv_*.nb*"))
    assert files and all((tmp_path / "numba_dir" in f.parents) == numba_cache_dir for f in files)
    assert {f.suffix for f in files} == {".nbi", ".nbc"}
    for item in files:  # garbage in the index and the data
        item.write_bytes(item.read_bytes()[:40] + b"\x00garbage")
    out, driver = _run(_load(path, "n7_scale_c").Scale, DATA)
    np.testing.assert_array_equal(out, expected)
    assert driver not in driver_cache._ENTRIES  # compiled in memory this time
    # the next load compiles and saves it again, the one after loads it
    out, _ = _run(_load(path, "n7_scale_c").Scale, DATA)
    np.testing.assert_array_equal(out, expected)
    out, driver = _run(_load(path, "n7_scale_c").Scale, DATA)
    np.testing.assert_array_equal(out, expected)
    assert _hits(driver) == 1
    # an entry's source edited on disk is written back before it is compiled
    entry = next(cache.glob("drv_*.py"))
    entry.write_text("def driver(*args):\n    raise RuntimeError('edited')\n")
    out, _ = _run(_load(path, "n7_scale_c").Scale, DATA)
    np.testing.assert_array_equal(out, expected)


def test_an_index_whose_data_file_is_missing_is_compiled_again(cache: Path, tmp_path: Path) -> None:
    """An index naming a data file that is gone (removed, or not written yet by
    another process) is a miss: the driver is compiled and saved again."""
    path = _write(tmp_path / "scale_m.py", SCALE.format(factor=7.0, extra="", jit=""))
    _run(_load(path, "n7_scale_m").Scale, DATA)
    for item in (cache / "__pycache__").glob("drv_*.nbc"):
        item.unlink()
    out, driver = _run(_load(path, "n7_scale_m").Scale, DATA)
    np.testing.assert_array_equal(out, DATA * np.float32(7.0))
    assert _misses(driver) == 1 and driver in driver_cache._ENTRIES
    out, driver = _run(_load(path, "n7_scale_m").Scale, DATA)
    np.testing.assert_array_equal(out, DATA * np.float32(7.0))
    assert _hits(driver) == 1


def _run_counted(cls: type, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
    """``cls`` counted over two vertices: outputs, block runs, profile and driver."""
    half = data.size // 2
    offsets = np.array([0, half, data.size], np.int64)
    batches = {
        "in": FieldBatch(data.astype(np.float32), offsets),
        "out": FieldBatch(np.zeros(data.size, np.float32), offsets),
    }
    vtype = vertex_type(cls)
    ids = np.arange(2, dtype=np.int64)
    ok, runs, profile = counted.execute_counted(vtype, batches, 2, 6, vertex_ids=ids, tiles=ids)
    assert ok.tolist() == [True, True]
    key = (cls, counted.RUN_CHECKS_BOUNDS.get(), None)
    return batches["out"].data, runs, profile, counted._DRIVERS[key]


def test_a_counted_driver_and_its_profile_are_loaded_from_disk(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted execution's driver is cached like the others, and the kernel's profile
    (from the typed IR, which Numba's cache does not keep) is stored beside it: a
    process that loads the driver compiles nothing and counts as one that compiled it
    (the reference: the same codelet counted with the cache off)."""
    path = _write(tmp_path / "scale_k.py", SCALE.format(factor=3.0, extra="+ 1.0", jit=""))
    expected = DATA * np.float32(3.0) + np.float32(1.0)
    monkeypatch.setenv(driver_cache.SWITCH_ENV, "off")
    out, want_runs, want_profile, driver = _run_counted(_load(path, "n7_scale_k").Scale, DATA)
    np.testing.assert_array_equal(out, expected)
    assert driver not in driver_cache._ENTRIES and not cache.exists()
    assert want_runs.sum() > 0 and want_profile.sum() > 0
    monkeypatch.delenv(driver_cache.SWITCH_ENV)
    for attempt in ("compiled", "loaded", "profile lost"):
        if attempt == "profile lost":
            for item in cache.glob("drv_*.profile.npy"):
                item.write_bytes(b"not an array")
        for entry in cache.glob("drv_*.py"):  # its module made afresh, as in a new process
            sys.modules.pop(f"_ipusim_driver_{entry.stem}")
        module = _load(path, "n7_scale_k")
        out, runs, profile, driver = _run_counted(module.Scale, DATA)
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(runs, want_runs)
        np.testing.assert_array_equal(profile, want_profile)
        checked = counted.RUN_CHECKS_BOUNDS.get()
        kernel = counted._COUNTING[(module.Scale.compute, checked, None)].dispatcher
        assert (_hits(driver), _misses(driver)) == ((1, 0) if attempt == "loaded" else (0, 1))
        assert bool(kernel.overloads) == (attempt != "loaded"), attempt
        assert len(list(cache.glob("drv_*.profile.npy"))) == 1


def test_the_cache_can_be_turned_off(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(driver_cache.SWITCH_ENV, "off")
    assert driver_cache.cache_directory() is None
    path = _write(tmp_path / "scale_d.py", SCALE.format(factor=5.0, extra="", jit=""))
    out, driver = _run(_load(path, "n7_scale_d").Scale, DATA)
    np.testing.assert_array_equal(out, DATA * np.float32(5.0))
    assert driver not in driver_cache._ENTRIES and not cache.exists()


def test_an_unwritable_cache_directory_leaves_drivers_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(driver_cache.CACHE_DIR_ENV, str(blocker))
    assert driver_cache.cache_directory() is None
    path = _write(tmp_path / "scale_e.py", SCALE.format(factor=6.0, extra="", jit=""))
    out, driver = _run(_load(path, "n7_scale_e").Scale, DATA)
    np.testing.assert_array_equal(out, DATA * np.float32(6.0))
    assert driver not in driver_cache._ENTRIES


# ------------------------------------------------------------------ fingerprints
def _kernel(x):
    return helper(x) + OFFSET  # noqa: F821 - globals given below


def _with_globals(**glob: object) -> types.FunctionType:
    return types.FunctionType(_kernel.__code__, {**glob, "__name__": __name__}, "_kernel")


def test_fingerprints_follow_what_a_kernel_reaches() -> None:
    def h1(x):
        return x * 2

    def h2(x):
        return x * 3

    def key(**glob: object) -> str:
        return driver_cache.fingerprint("text", [numba.njit(_with_globals(**glob))])

    base = key(helper=numba.njit(h1), OFFSET=1.0)
    assert key(helper=numba.njit(h1), OFFSET=1.0) == base  # deterministic
    assert key(helper=numba.njit(h2), OFFSET=1.0) != base  # another helper body
    assert key(helper=numba.njit(h1), OFFSET=2.0) != base  # another constant
    assert key(helper=numba.njit(fastmath=True)(h1), OFFSET=1.0) != base  # other options
    table = np.arange(4.0)
    with_table = key(helper=numba.njit(h1), OFFSET=table)
    table[0] = 9.0
    assert key(helper=numba.njit(h1), OFFSET=table) != with_table  # array contents
    assert driver_cache.fingerprint("other text", [numba.njit(h1)]) != driver_cache.fingerprint(
        "text", [numba.njit(h1)]
    )
    module = types.ModuleType("n7_namespace")
    module.helper = numba.njit(h1)

    def through_module(x):
        return module.helper(x)

    first = driver_cache.fingerprint("text", [numba.njit(through_module)])
    module.helper = numba.njit(h2)
    assert driver_cache.fingerprint("text", [numba.njit(through_module)]) != first


def test_one_file_imported_under_two_names_gives_one_key(tmp_path: Path) -> None:
    """A script run as ``__main__`` and imported by name, or an example a test loads
    by path, is one code under two module names: its drivers share an entry."""
    path = _write(tmp_path / "scale_n.py", SCALE.format(factor=2.0, extra="", jit=""))

    def key(name: str) -> str:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return driver_cache.fingerprint("text", [numba.njit(module.Scale.compute)])

    assert key("n7_as_main") == key("n7_imported")
    other = _write(tmp_path / "scale_o.py", SCALE.format(factor=3.0, extra="", jit=""))
    spec = importlib.util.spec_from_file_location("n7_other", other)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert driver_cache.fingerprint("text", [numba.njit(module.Scale.compute)]) != key("n7_a")


def test_an_unknown_global_makes_a_driver_uncacheable() -> None:
    class Opaque:
        pass

    with pytest.raises(driver_cache.Uncacheable, match="Opaque"):
        driver_cache.fingerprint("text", [numba.njit(_with_globals(helper=Opaque()))])


# ------------------------------------------------------------------ processes
SCRIPT = """
import sys
import numpy as np
from poplar_api.codelet import execute, load_codelet_file, vertex_type
import poplar_api.codelet_compile as cc
from poplar_api.fields import FieldBatch

cls = load_codelet_file(sys.argv[1]).Scale
data = np.arange(6, dtype=np.float32) - 2.5
offsets = np.array([0, 3, 6], np.int64)
b = {"in": FieldBatch(data, offsets), "out": FieldBatch(np.zeros(6, np.float32), offsets)}
execute(vertex_type(cls), b, 2, check_bounds=True)
driver = cc._driver(vertex_type(cls), True, 6)
print(sum(driver.stats.cache_hits.values()), *b["out"].data.tolist())
"""


@pytest.mark.slow
def test_processes_share_the_cache(cache: Path, tmp_path: Path) -> None:
    """Two processes filling the same entry at once, then a third loading it."""
    codelet = _write(tmp_path / "scale_p.py", SCALE.format(factor=1.5, extra="+ 2.0", jit=""))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    command = [sys.executable, str(script), str(codelet)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    both = [subprocess.Popen(command, **pipes) for _ in "ab"]
    runs = [(p.communicate(timeout=300), p.returncode) for p in both]
    third = subprocess.run(command, timeout=300, **pipes)
    runs.append(((third.stdout, third.stderr), third.returncode))
    for (_out, err), code in runs:
        assert code == 0, err
    outputs = [out.split() for (out, _), _ in runs]
    expected = (DATA * np.float32(1.5) + np.float32(2.0)).tolist()
    for values in outputs:
        assert [float(v) for v in values[1:]] == expected
    entries = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert outputs[2][0] == "1", (outputs, entries)  # the third process loaded the driver
    assert len(list(cache.glob("drv_*.py"))) == 1, entries


OVERLOADED = """
import sys
import numpy as np
from poplar_api.codelet import execute, load_codelet_file, vertex_type
from poplar_api.fields import FieldBatch

cls = load_codelet_file(sys.argv[1]).Caller
data = np.arange(4, dtype=np.float32)
at = np.array([0, 4])
b = {"in": FieldBatch(data, at), "out": FieldBatch(np.zeros(4, np.float32), at)}
execute(vertex_type(cls), b, 1, check_bounds=True)
print(*b["out"].data.tolist())
"""


def test_an_overload_edited_in_another_file_is_not_run_stale(cache: Path, tmp_path: Path) -> None:
    """Numba finds an ``@overload`` through its registry, not the kernel's globals: the
    kernel, its file and the overloaded function stay the same, only the overload's
    file changes between two processes."""
    (tmp_path / "n7_stub.py").write_text("def bump(x):\n    return x\n")
    overload = textwrap.dedent(
        """
        from numba.extending import overload
        import n7_stub


        @overload(n7_stub.bump)
        def _bump(x):
            def impl(x):
                return x + {step}
            return impl
        """
    )
    imports = "import n7_overload  # registers the overload of n7_stub.bump\nimport n7_stub"
    codelet = _write(
        tmp_path / "bumped.py", CALLER.format(imports=imports, call="n7_stub.bump(in_[i])")
    )
    script = tmp_path / "run_overloaded.py"
    script.write_text(OVERLOADED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    for step in (1.0, 5.0):
        (tmp_path / "n7_overload.py").write_text(overload.format(step=step))
        run = subprocess.run(
            [sys.executable, str(script), str(codelet)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        assert [float(v) for v in run.stdout.split()] == [x + step for x in range(4)]
