"""Writing files so that each one exists only when it is complete.

Every file the ``ipusim`` commands and libraries produce (profiles, summaries,
timelines, plots, CSV tables, overlay YAML, sweep rows) goes through this module:

* :func:`atomic_open` writes to a temporary file in the *same directory* as the
  target (``.<name>.<pid>.<random>.tmp``), flushes it, ``fsync`` s it and renames it
  over the target with :func:`os.replace` (atomic on POSIX and Windows), then syncs
  the directory. A reader therefore sees the old file or the new one, never half of
  one. Whatever stops the write (an exception, Ctrl-C, a full disk, a file size limit)
  removes the temporary file; nothing is left under the final name.
* :class:`FileGroup` does the same for several files that belong together (the three
  files of a profile directory): all are written to temporary files first and renamed
  only once every one is complete, with SIGINT/SIGTERM held back during the renames.
* A file replaced keeps its permissions; writing through a symbolic link replaces the
  file it points to and leaves the link in place.
* A process killed outright (SIGKILL, power loss) cannot clean up: it may leave a
  temporary file, never a partial final file. The next write of the same target
  removes temporaries whose writing process no longer runs.
* :func:`signals_as_exceptions` turns SIGTERM (and SIGHUP) into :class:`Interrupted`,
  a :class:`KeyboardInterrupt`, so a terminated command unwinds exactly like one
  stopped with Ctrl-C: every writer removes its temporary file on the way out.

A write that fails with an :class:`OSError` raises :class:`FileWriteError`, which
names the path, the reason and a hint (an :class:`~ipusim.errors.IpusimError`, so the
command line prints it as one line).
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import json
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ipusim.errors import IpusimError

__all__ = [
    "TMP_SUFFIX",
    "FileGroup",
    "FileWriteError",
    "Interrupted",
    "atomic_open",
    "check_writable",
    "make_directory",
    "remove_stale_temporaries",
    "save_figure",
    "signals_as_exceptions",
    "write_bytes",
    "write_json",
    "write_text",
]

#: Suffix of the temporary files (hidden: they start with a dot).
TMP_SUFFIX = ".tmp"
_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}" + re.escape(TMP_SUFFIX) + "$")

_HINTS = {
    errno_codes.ENOSPC: "free some space on that file system or write elsewhere",
    errno_codes.EDQUOT: "the disk quota is used up; free some space or write elsewhere",
    errno_codes.EFBIG: "the file is larger than the file size limit (ulimit -f) or the "
    "file system allows; write elsewhere or raise the limit",
    errno_codes.EACCES: "check the permissions of the file and its directory",
    errno_codes.EPERM: "check the permissions of the file and its directory",
    errno_codes.EROFS: "the file system is read-only; write elsewhere",
    errno_codes.ENOENT: "the directory does not exist; create it or write elsewhere",
    errno_codes.ENOTDIR: "a part of the path is a file, not a directory",
    errno_codes.EISDIR: "the path is a directory; give a file name",
}


class FileWriteError(IpusimError, OSError):
    """A file (or the directory it goes in) cannot be written.

    Attributes
    ----------
    filename
        The path that could not be written.
    errno
        The operating system's error number, when there is one.
    """

    def __init__(self, path: str | os.PathLike[str], exc: BaseException, what: str = "") -> None:
        code = getattr(exc, "errno", None)
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        hint = _HINTS.get(code, "check the path and the free space") if code else ""
        label = f"{what} " if what else ""
        text = f"cannot write {label}'{os.fspath(path)}' ({reason})"
        super().__init__(f"{text}; hint: {hint}" if hint else text)
        self.filename = os.fspath(path)
        self.errno = code
        self.strerror = reason

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_write_error, (str(self), self.filename, self.errno, self.strerror)


def _rebuild_write_error(
    text: str, filename: str, code: int | None, reason: str | None
) -> FileWriteError:
    """A :class:`FileWriteError` from its pickled state."""
    error = FileWriteError.__new__(FileWriteError, text)
    Exception.__init__(error, text)
    error.args = (text,)
    error.filename, error.errno, error.strerror = filename, code, reason
    return error


class Interrupted(KeyboardInterrupt):
    """A signal that asks the process to stop (SIGTERM, SIGHUP), raised where the main
    thread is, like Ctrl-C's :class:`KeyboardInterrupt`.

    Attributes
    ----------
    signum
        The signal number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """``128 + signum``, the status a shell reports for a process ended by it."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, and so on."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


#: Signals turned into :class:`Interrupted` (SIGINT already raises KeyboardInterrupt).
_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _handled_by(signums: tuple[int, ...], handler: Any) -> Iterator[dict[int, Any]]:
    """While open, ``handler`` handles each of ``signums`` that can be set; yields the
    handlers they had, which come back on exit. Does nothing outside the main thread,
    where handlers cannot be set (it then yields an empty dict)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in signums:
            with contextlib.suppress(OSError, ValueError):
                previous[signum] = signal.signal(signum, handler)
    try:
        yield previous
    finally:
        for signum, old in previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(signum, old)


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """While open, SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread
    (SIGINT raises :class:`KeyboardInterrupt` as always); the previous handlers come
    back on exit. Does nothing outside the main thread, where handlers cannot be set."""
    with _handled_by(_STOP_SIGNALS, _raise_interrupted):
        yield


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back while a group of renames or a clean-up runs, so
    it is never cut in the middle; a signal that arrives meanwhile takes effect on exit.

    Python runs signal handlers in the main thread, whichever thread the signal reached,
    so the handlers themselves are swapped for ones that only note the signal (blocking
    it in this thread alone would not do). Outside the main thread nothing can
    interrupt the renames and nothing is done."""
    caught: list[int] = []
    previous: dict[int, Any] = {}
    try:
        with _handled_by(
            (signal.SIGINT, *_STOP_SIGNALS), lambda n, f: caught.append(n)
        ) as previous:
            yield
    finally:
        if caught:
            _deliver(caught[0], previous.get(caught[0], signal.SIG_DFL))


def _deliver(signum: int, handler: Any) -> None:
    """Act on signal ``signum`` as ``handler`` (the one in place before it was held)."""
    if callable(handler):
        handler(signum, None)  # raises KeyboardInterrupt or Interrupted
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # the default action: end the process


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: leave its files alone
    return True


def remove_stale_temporaries(path: str | os.PathLike[str]) -> int:
    """Remove the temporary files of ``path`` left by processes that no longer run
    (killed outright while writing it); return how many were removed."""
    target = Path(path)
    removed = 0
    try:
        entries = list(target.parent.glob(f".{glob_escape(target.name)}.*{TMP_SUFFIX}"))
    except OSError:
        return 0
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        if m is None or m["name"] != target.name or _pid_alive(int(m["pid"])):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
            removed += 1
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _final(path: str | os.PathLike[str]) -> Path:
    """The file a write of ``path`` replaces: a symbolic link's target (the link stays
    a link, as when writing through it), else ``path``."""
    target = Path(path)
    if target.is_symlink():
        return Path(os.path.realpath(target))
    return target


def _temporary(target: Path, binary: bool, encoding: str, newline: str | None) -> tuple[Path, IO]:
    """A new temporary file beside ``target``, with ``target``'s permissions when it
    exists (the umask's otherwise), open for writing."""
    name = f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    tmp = target.parent / name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(OSError):  # keep the mode of the file replaced
            os.chmod(fd, os.stat(target).st_mode & 0o7777)
        handle = (
            os.fdopen(fd, "wb")
            if binary
            else os.fdopen(fd, "w", encoding=encoding, newline=newline)
        )
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp, handle


def _finish(handle: IO) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()


def _sync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable (best effort: not every system can)."""
    if sys.platform == "win32":  # pragma: no cover - no directory handles
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _discard(tmp: Path, handle: IO | None) -> None:
    with _signals_held():
        if handle is not None:
            with contextlib.suppress(OSError, ValueError):
                handle.close()
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str],
    mode: str = "w",
    *,
    encoding: str = "utf-8",
    newline: str | None = None,
    what: str = "",
) -> Iterator[IO[Any]]:
    """Open ``path`` for writing so that it appears only once complete.

    Parameters
    ----------
    path
        The final file. Its directory must exist (see :func:`make_directory`).
    mode
        ``"w"`` (text) or ``"wb"`` (bytes).
    encoding, newline
        As for :func:`open`, in text mode.
    what
        What the file is, for the error message (``"--csv"``, ``"profile"``).

    Yields
    ------
    file object
        The temporary file; write the whole content to it.

    Raises
    ------
    FileWriteError
        The temporary file cannot be created, written or renamed (full disk, file
        size limit, permissions); the message names ``path``. Nothing is left behind.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r}; required 'w' or 'wb'")
    target = _final(path)
    remove_stale_temporaries(target)
    try:
        tmp, handle = _temporary(target, mode == "wb", encoding, newline)
    except OSError as exc:
        raise FileWriteError(target, exc, what) from None
    try:
        yield handle
        _finish(handle)
        with _signals_held():
            os.replace(tmp, target)
    except OSError as exc:
        _discard(tmp, handle)
        raise FileWriteError(target, exc, what) from None
    except BaseException:
        _discard(tmp, handle)
        raise
    _sync_directory(target.parent)


def write_text(path: str | os.PathLike[str], text: str, *, what: str = "") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_open`); return the path."""
    with atomic_open(path, "w", what=what) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, what: str = "") -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_open`); return the path."""
    with atomic_open(path, "wb", what=what) as f:
        f.write(data)
    return Path(path)


def write_json(path: str | os.PathLike[str], data: Any, *, what: str = "", **options: Any) -> Path:
    """Write ``data`` as JSON to ``path`` atomically; ``options`` go to :func:`json.dump`
    (default compact separators unless ``indent`` is given). Return the path."""
    if "indent" not in options:
        options.setdefault("separators", (",", ":"))
    with atomic_open(path, "w", what=what) as f:
        json.dump(data, f, **options)
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike[str], *, what: str = "", **options: Any) -> Path:
    """Save a matplotlib figure to ``path`` atomically, in the format of its suffix
    (``.png``, ``.svg``, ``.pdf``); ``options`` go to ``fig.savefig`` (default 100 dpi)."""
    target = Path(path)
    options.setdefault("dpi", 100)
    with atomic_open(target, "wb", what=what) as f:
        fig.savefig(f, format=target.suffix.lower().lstrip(".") or "png", **options)
    return target


def check_writable(path: str | os.PathLike[str], what: str = "", directory: bool = False) -> Path:
    """Refuse, before any work starts, an output path that cannot be written: a file
    where a directory is wanted (or the reverse), or a parent that is a file, missing
    for a file, or not writable. Nothing is created.

    Parameters
    ----------
    path
        The file (or, with ``directory``, the directory) a command will write.
    what
        The option or thing it is, for the message (``--out``).
    directory
        ``path`` is a directory (created with its parents when written).

    Raises
    ------
    FileWriteError
        Naming the path, what is in the way and a hint.
    """
    target = Path(path)
    if target.exists():
        if directory and not target.is_dir():
            raise FileWriteError(target, OSError(errno_codes.ENOTDIR, "a file is in the way"), what)
        if not directory and target.is_dir():
            raise FileWriteError(target, OSError(errno_codes.EISDIR, "Is a directory"), what)
        where = target if directory else target.parent
    else:
        where = target.parent
        if not directory and not where.is_dir():
            reason = "Not a directory" if where.exists() else "No such file or directory"
            code = errno_codes.ENOTDIR if where.exists() else errno_codes.ENOENT
            raise FileWriteError(target, OSError(code, reason), what)
        while not where.exists() and where != where.parent:
            where = where.parent
        if not where.is_dir():
            raise FileWriteError(target, OSError(errno_codes.ENOTDIR, f"'{where}' is a file"), what)
    if not os.access(where, os.W_OK | os.X_OK):
        raise FileWriteError(target, OSError(errno_codes.EACCES, "Permission denied"), what)
    return target


def make_directory(path: str | os.PathLike[str], what: str = "") -> Path:
    """Create directory ``path`` (and its parents) if missing; return it.

    Raises
    ------
    FileWriteError
        It cannot be created (a file in the way, permissions, ...), naming the path.
    """
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileWriteError(directory, exc, what) from None
    return directory


class FileGroup:
    """Files that appear together or not at all (a profile directory).

    Each :meth:`open` writes a temporary file; :meth:`commit` (called when the
    ``with`` block ends without an exception) renames them all over their final names
    with SIGINT/SIGTERM held back, so a stopped command leaves the old files or the new
    ones. Any exception removes every temporary file.

    Examples
    --------
    >>> with FileGroup("out") as group:                      # doctest: +SKIP
    ...     with group.open("summary.txt") as f:
    ...         f.write(text)
    """

    def __init__(self, directory: str | os.PathLike[str], what: str = "") -> None:
        self.directory = Path(directory)
        self.what = what
        self._pending: list[tuple[Path, Path]] = []  # (temporary, final)
        self._handles: list[IO] = []

    def __enter__(self) -> FileGroup:
        make_directory(self.directory, self.what)
        return self

    @contextlib.contextmanager
    def open(
        self, name: str, mode: str = "w", *, encoding: str = "utf-8", newline: str | None = None
    ) -> Iterator[IO[Any]]:
        """A temporary file for ``directory / name``, renamed at :meth:`commit`."""
        target = _final(self.directory / name)
        remove_stale_temporaries(target)
        try:
            tmp, handle = _temporary(target, mode == "wb", encoding, newline)
        except OSError as exc:
            raise FileWriteError(target, exc, self.what) from None
        self._pending.append((tmp, target))
        self._handles.append(handle)
        try:
            yield handle
            _finish(handle)
        except OSError as exc:
            raise FileWriteError(target, exc, self.what) from None

    def write_text(self, name: str, text: str) -> None:
        """Add ``name`` with ``text`` (UTF-8)."""
        with self.open(name) as f:
            f.write(text)

    def write_json(self, name: str, data: Any, **options: Any) -> None:
        """Add ``name`` with ``data`` as JSON (default compact separators)."""
        options.setdefault("separators", (",", ":"))
        with self.open(name) as f:
            json.dump(data, f, **options)

    def commit(self) -> list[Path]:
        """Rename every temporary file over its final name; return the final paths."""
        done: list[Path] = []
        with _signals_held():
            for tmp, target in self._pending:
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    self.discard()
                    raise FileWriteError(target, exc, self.what) from None
                done.append(target)
            self._pending = []
        _sync_directory(self.directory)
        return done

    def discard(self) -> None:
        """Remove every temporary file not yet renamed."""
        with _signals_held():
            for handle in self._handles:
                with contextlib.suppress(OSError, ValueError):
                    handle.close()
            for tmp, _ in self._pending:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._pending = []

    def __exit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()
