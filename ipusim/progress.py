"""Progress of long commands on stderr: phase names, elapsed seconds and tqdm bars.

A command that may take more than a couple of seconds (``ipusim run``, ``sweep``,
``calibrate``, ``compare`` of a workload) opens a :class:`Progress` and names its
phases; code further down (a workload runner, a compiler, a fit) reports through the
module functions :func:`phase`, :func:`advance` and :func:`detail`, which do nothing
when no :class:`Progress` is open, so library calls stay silent. The open reporter is
held in a :class:`contextvars.ContextVar`, so the layer that does the work needs no
argument for it: a workload runner calls ``ipusim.progress.detail("compile")`` to say
which step of the caller's phase it is in.

Whether progress is shown follows the ``--progress``/``--no-progress`` flags of the
command (:func:`add_progress_arguments`); without either, it is shown when stderr is a
terminal, so output piped into a file or a log stays clean.

A phase without a known count shows its name and the seconds since it started,
refreshed twice a second; a phase with a count is a tqdm bar with its rate and ETA.
"""

from __future__ import annotations

import argparse
import contextvars
import io
import os
import sys
import threading
from types import TracebackType
from typing import IO, Any

__all__ = [
    "Progress",
    "add_progress_arguments",
    "advance",
    "current",
    "detail",
    "end",
    "phase",
    "progress_of",
    "progress_wanted",
]

_CURRENT: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "ipusim_progress", default=None
)
#: Seconds between refreshes of a phase's elapsed time.
REFRESH_SECONDS = 0.5
#: Columns and lines assumed when the terminal does not tell its size.
FALLBACK_SIZE = (80, 24)


def progress_wanted(flag: bool | None, stream: IO[str] | None = None) -> bool:
    """Whether to show progress: ``flag`` when given, else whether ``stream`` (default
    stderr) is a terminal."""
    if flag is not None:
        return bool(flag)
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced by an object without isatty
        return False


def add_progress_arguments(parser: Any) -> None:
    """Add ``--progress`` and ``--no-progress`` (dest ``progress``: True, False or None
    for "when stderr is a terminal") to a parser."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show progress on stderr even when it is not a terminal",
    )
    group.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress (default: shown when stderr is a terminal)",
    )


def progress_of(args: argparse.Namespace) -> bool:
    """Whether a command parsed with :func:`add_progress_arguments` shows progress."""
    return progress_wanted(getattr(args, "progress", None))


class Progress:
    """The progress of one command: a sequence of phases, each shown as one line.

    Use it as a context manager; while it is open, the module functions
    :func:`phase` and :func:`advance` report to it. With ``enabled=False`` it prints
    nothing (and the module functions still find it, doing nothing).

    Parameters
    ----------
    command
        Prefix of every line (``"run"`` shows ``run: compile``).
    enabled
        Whether anything is printed.
    stream
        Where to print (default stderr at the time the reporter is made).
    """

    def __init__(self, command: str, enabled: bool = True, stream: IO[str] | None = None) -> None:
        self.command = command
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.phases: list[str] = []
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._token: contextvars.Token[Progress | None] | None = None

    # -- context --------------------------------------------------------------------
    def __enter__(self) -> Progress:
        self._token = _CURRENT.set(self)
        if self.enabled:
            self._ticker = threading.Thread(target=self._tick, name="ipusim-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the current phase and stop refreshing; the reporter is no longer current."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            self._end_bar()
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    # -- phases ---------------------------------------------------------------------
    def phase(self, name: str, total: int | None = None, unit: str = "step") -> None:
        """Start phase ``name`` (ending the previous one); ``total`` steps when known."""
        self.phases.append(name)
        if not self.enabled:
            return
        from tqdm import tqdm

        with self._lock:
            self._end_bar()
            desc = f"{self.command}: {name}"
            bar_format = None if total is not None else "{desc} {elapsed}{postfix}"
            sized = _terminal_sized(self.stream)
            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                file=self.stream,
                leave=True,
                dynamic_ncols=sized,
                ncols=None if sized else FALLBACK_SIZE[0],
                nrows=None if sized else FALLBACK_SIZE[1],
                bar_format=bar_format,
                mininterval=0.2,
            )

    def detail(self, text: str) -> None:
        """Show ``text`` after the current phase (what a lower layer is doing within it,
        e.g. ``compile``), replacing the previous detail."""
        if not self.enabled:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix_str(text, refresh=True)

    def end(self) -> None:
        """End the current phase (its line stays), before the command prints to stdout."""
        if not self.enabled:
            return
        with self._lock:
            self._end_bar()

    def advance(self, n: int = 1, **postfix: Any) -> None:
        """Count ``n`` steps of the current phase; ``postfix`` items are shown after it."""
        if not self.enabled:
            return
        with self._lock:
            if self._bar is None:
                return
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            total = self._bar.total
            if total is not None and self._bar.n + n > total:
                self._bar.total = self._bar.n + n  # a budget overrun: a bar, not a count
            self._bar.update(n)

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _tick(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()


def _terminal_sized(stream: IO[str]) -> bool:
    """Whether ``stream`` writes to a terminal that tells its size (not a pipe, a file
    or a pseudo-terminal reporting 0 x 0, where tqdm would draw an empty line)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    return size.columns > 0 and size.lines > 0


def current() -> Progress | None:
    """The open :class:`Progress` of this context, or None."""
    return _CURRENT.get()


def phase(name: str, total: int | None = None, unit: str = "step") -> None:
    """Start phase ``name`` of the open :class:`Progress`; nothing when none is open."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.phase(name, total=total, unit=unit)


def advance(n: int = 1, **postfix: Any) -> None:
    """Count ``n`` steps of the open :class:`Progress`'s phase; nothing when none is open."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.advance(n, **postfix)


def end() -> None:
    """End the open :class:`Progress`'s phase; nothing when none is open."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.end()


def detail(text: str) -> None:
    """Show ``text`` after the open :class:`Progress`'s phase; nothing when none is open.

    For a layer that does part of a command's phase (a workload runner saying
    ``build``, ``compile``, ``run``): it names its step without starting a phase of
    its own, so a caller's phases and counts stay intact.
    """
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.detail(text)
