"""Where a sweep keeps its results: one Parquet file per point, written atomically.

Layout of an output directory::

    OUT/
      experiment.json        the experiment as last run, with "keys": its points' keys
      points/
        <key>.parquet        one row: the point's results (see ROW_COLUMNS)
        <key>/               its profiles: profile.json, execution.json, summary.txt

A row is written to a temporary file in ``points/`` and renamed over its final name
(:func:`os.replace`, atomic on POSIX and Windows) only once complete, after the
point's profiles. So whenever a sweep is killed, each point either has its whole row
or none, and the next run of the sweep runs exactly the points without one; left-over
temporary files (``*.tmp``) are never read and are removed by the next run. Rows are
named by the point's key, so a point is stored at most once.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ipusim.errors import IpusimError
from ipusim.files import TMP_SUFFIX, atomic_open, make_directory, write_json
from ipusim.ir import PHASES
from ipusim.runner import write_profiles

__all__ = [
    "FIXED_TYPES",
    "PHASE_COLUMNS",
    "ROW_COLUMNS",
    "ResultStore",
    "SweepError",
]

#: One column per phase total of the trace (cycles summed over tiles), and the compute
#: cycles without idle threads.
PHASE_COLUMNS: tuple[str, ...] = (*PHASES, "compute_active")

#: The Arrow type of every column a row always has; axis columns (named by their path)
#: come after ``workload`` with the type of their values.
FIXED_TYPES: dict[str, pa.DataType] = {
    "point": pa.int64(),
    "key": pa.string(),
    "workload": pa.string(),
    "repeat": pa.int64(),
    "config": pa.string(),
    "params": pa.string(),
    "config_hash": pa.string(),
    "workload_hash": pa.string(),
    "ipusim_version": pa.string(),
    "status": pa.string(),
    "error": pa.string(),
    "check": pa.bool_(),
    "total_cycles": pa.int64(),
    **dict.fromkeys(PHASE_COLUMNS, pa.int64()),
    "memory_peak_bytes": pa.int64(),
    "host_seconds": pa.float64(),
    "compute_sets": pa.string(),
    "metrics": pa.string(),
}
#: The fixed columns in order.
ROW_COLUMNS: tuple[str, ...] = tuple(FIXED_TYPES)
_PANDAS_TYPES = {pa.int64(): "Int64", pa.bool_(): "boolean"}
_TMP_SUFFIX = TMP_SUFFIX
_AXES_META = b"ipusim.axes"


class SweepError(IpusimError, RuntimeError):
    """A sweep cannot go on: its output directory is unusable or busy, a stored row is
    unreadable, or its cluster cannot be reached."""


class ResultStore:
    """The results of a sweep in ``out_dir`` (see the module doc for the layout).

    Parameters
    ----------
    out_dir
        The sweep's output directory; created on the first write.
    """

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.root = Path(out_dir)
        self.points_dir = self.root / "points"

    def __repr__(self) -> str:
        return f"ResultStore({str(self.root)!r})"

    # ------------------------------------------------------------------------- reading
    def _files(self) -> dict[str, Path]:
        if not self.points_dir.is_dir():
            return {}
        return {p.stem: p for p in sorted(self.points_dir.glob("*.parquet")) if p.is_file()}

    def done_keys(self, include_failed: bool = True) -> set[str]:
        """Keys of the points with a stored row (only those with status ``ok`` when
        ``include_failed`` is False)."""
        if include_failed:
            return set(self._files())
        return {key for key, status in self.statuses().items() if status == "ok"}

    def statuses(self) -> dict[str, str]:
        """Key -> status (``ok`` or ``error``) of every readable stored row.

        An unreadable file (not written by a sweep: a finished row is never partial)
        is left out, so the sweep runs its point again and replaces it.
        """
        out: dict[str, str] = {}
        for (key, path), table in zip(
            self._files().items(), _read_tables(self._files().values(), ["status"]), strict=True
        ):
            if isinstance(table, Exception):
                warnings.warn(f"{path}: unreadable row ignored ({table})", stacklevel=2)
                continue
            values = table.column("status").to_pylist()
            if values:
                out[key] = str(values[0])
        return out

    def experiment_keys(self) -> list[str] | None:
        """Keys of the points of the experiment last run here, in point order (from
        ``experiment.json``); None when there is none. A store keeps the rows of every
        run into it, so after the experiment changed, ``rows(store.experiment_keys())``
        is the current grid."""
        try:
            data = json.loads((self.root / "experiment.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        keys = data.get("keys") if isinstance(data, dict) else None
        return [str(k) for k in keys] if isinstance(keys, list) else None

    def profile_dir(self, key: str) -> Path:
        """Directory of the profiles of point ``key``."""
        return self.points_dir / key

    def rows(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Every stored row (or those of ``keys``) as one DataFrame, sorted by point index.

        Integer columns are pandas' nullable ``Int64`` (empty where a point failed),
        ``check`` is ``boolean``. ``frame.attrs["axes"]``
        lists the axis columns (``config`` among them when it was an axis). An empty
        store gives an empty frame with the fixed columns.

        Raises
        ------
        SweepError
            A stored file is not a readable row (the message names it).
        """
        files = self._files()
        if keys is not None:
            wanted = set(keys)
            files = {k: p for k, p in files.items() if k in wanted}
        tables: list[pa.Table] = []
        axes: dict[str, None] = {}  # ordered set
        for path, table in zip(files.values(), _read_tables(files.values()), strict=True):
            try:
                if isinstance(table, Exception):
                    raise table
                names = json.loads((table.schema.metadata or {}).get(_AXES_META, b"[]"))
            except (OSError, pa.ArrowException, KeyError, ValueError) as exc:
                raise SweepError(
                    f"{path}: not a readable result row ({exc}); hint: delete it and run the "
                    "sweep again to recompute that point"
                ) from None
            axes.update(dict.fromkeys(names))
            tables.append(table)
        if not tables:
            return pd.DataFrame({c: pd.Series(dtype=_pandas_type(c)) for c in ROW_COLUMNS})
        try:  # one Arrow table: fast; numbers of one axis widen (int64 + double)
            frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
        except (pa.ArrowException, TypeError):  # an axis of mixed kinds (text and numbers)
            frame = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
        for column, arrow_type in FIXED_TYPES.items():
            if column in frame.columns and arrow_type in _PANDAS_TYPES:
                frame[column] = frame[column].astype(_PANDAS_TYPES[arrow_type])
        frame = frame.sort_values(["point", "key"], kind="stable").reset_index(drop=True)
        frame.attrs["axes"] = [a for a in axes if a in frame.columns]
        return frame

    # ------------------------------------------------------------------------- writing
    def write(
        self,
        row: Mapping[str, Any],
        result: Any = None,
        *,
        axes: Sequence[str] | None = None,
    ) -> Path:
        """Store ``row`` (with its ``key``) atomically, after ``result``'s profiles.

        Parameters
        ----------
        row
            One point's row, as :func:`~ipusim.sweep.run_point` returns it.
        result
            A :class:`~ipusim.runner.RunResult` (or anything with ``graph_profile``,
            ``execution_profile`` and ``summary``) whose profiles go to
            :meth:`profile_dir`; None for none.
        axes
            The row's axis columns (kept in the file's metadata, so :meth:`rows` can
            tell them, ``config`` included, from the fixed columns); default: the
            columns that are not in :data:`ROW_COLUMNS`.

        Returns
        -------
        Path
            The row's Parquet file.

        Raises
        ------
        SweepError
            The directory cannot be written.
        """
        key = str(row["key"])
        try:
            self.points_dir.mkdir(parents=True, exist_ok=True)
            if result is not None:
                write_profiles(result, self.profile_dir(key))
            table = row_table(row, axes)
            final = self.points_dir / f"{key}.parquet"
            with atomic_open(final, "wb") as f:
                pq.write_table(table, f)
        except OSError as exc:
            raise SweepError(
                f"cannot write results to {str(self.points_dir)!r} ({exc.strerror or exc}); "
                "hint: choose a writable --out directory"
            ) from None
        return final

    def write_json(self, name: str, data: Any) -> Path:
        """Write ``data`` as ``OUT/name`` (JSON), atomically."""
        make_directory(self.root, "--out")
        return write_json(self.root / name, data, indent=1, sort_keys=False, default=str)

    def clean_temporary(self) -> int:
        """Remove the temporary files a killed sweep left; return how many.

        Only safe while no sweep writes here (:meth:`lock` is held).
        """
        removed = 0
        for directory in (self.root, self.points_dir):
            if not directory.is_dir():
                continue
            for path in directory.glob(f".*{_TMP_SUFFIX}"):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold ``OUT/.lock`` for the length of a sweep, so two sweeps never write the
        same directory at once (the lock goes with the process, however it ends).

        Raises
        ------
        SweepError
            Another process holds the lock, or the directory cannot be created.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.root / ".lock", "a+b")  # noqa: SIM115 - held while yielding
        except OSError as exc:
            raise SweepError(
                f"cannot use output directory {str(self.root)!r} ({exc.strerror or exc}); "
                "hint: choose a writable --out directory"
            ) from None
        try:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows: no advisory locks
                fcntl = None  # type: ignore[assignment]
            if fcntl is not None:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise SweepError(
                        f"output directory {str(self.root)!r} is in use by another sweep; "
                        "hint: wait for it to finish, or choose another --out"
                    ) from None
            yield
        finally:
            handle.close()


def _read_one(path: Path, columns: list[str] | None) -> pa.Table | Exception:
    try:
        return pq.ParquetFile(path).read(columns=columns)
    except (OSError, pa.ArrowException, KeyError, ValueError) as exc:
        return exc


def _read_tables(
    paths: Iterable[Path], columns: list[str] | None = None
) -> list[pa.Table | Exception]:
    """Each Parquet file of ``paths`` (only ``columns`` when given), or the exception
    that reading it raised; read by a few threads, as Arrow releases the GIL."""
    paths = list(paths)
    if len(paths) < 8:
        return [_read_one(p, columns) for p in paths]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda p: _read_one(p, columns), paths))


def _pandas_type(column: str) -> str:
    arrow_type = FIXED_TYPES[column]
    if arrow_type == pa.float64():
        return "float64"
    return _PANDAS_TYPES.get(arrow_type, "object")


def row_table(row: Mapping[str, Any], axes: Sequence[str] | None = None) -> pa.Table:
    """One row as an Arrow table: the fixed columns with their :data:`FIXED_TYPES`, any
    other (axis) column with the type of its value; the axis names in the schema
    metadata (``ipusim.axes``, JSON)."""
    arrays = {}
    for name, value in row.items():
        arrow_type = FIXED_TYPES.get(name)
        arrays[name] = pa.array([value], type=arrow_type)
    if axes is None:
        axes = [name for name in row if name not in FIXED_TYPES]
    return pa.table(arrays).replace_schema_metadata({_AXES_META: json.dumps(list(axes))})
