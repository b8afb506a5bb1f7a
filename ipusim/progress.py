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

Library work done outside any command (a user's own script building a graph,
compiling it, running a program) has no phases to name; it shows one line per piece of
work that lasts longer than :data:`ACTIVITY_DELAY` (``Graph construction: 45,210
vertices, 2.1 s``, ``Graph compilation: 1.3 s``, ``Engine.run(1): 12.0 s``), on a
terminal only unless :data:`PROGRESS_ENV` says otherwise (:func:`activity`,
:func:`watch_graph`). A script whose work is quick prints exactly what it prints.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import io
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import IO, Any

__all__ = [
    "Activity",
    "Progress",
    "activity",
    "activity_wanted",
    "add_progress_arguments",
    "advance",
    "current",
    "detail",
    "end",
    "phase",
    "progress_of",
    "progress_wanted",
    "watch_graph",
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


# -- library work outside a command -------------------------------------------------
#: Environment variable for library work outside a command (a user's own script):
#: ``1`` shows its progress even when stderr is not a terminal, ``0`` never shows it;
#: unset, it is shown when stderr is a terminal.
PROGRESS_ENV = "IPUSIM_PROGRESS"
#: Seconds a piece of library work runs before its line appears: quicker work prints
#: nothing, so a short script's output is untouched.
ACTIVITY_DELAY = 0.25
#: Seconds without growth after which a watched graph's construction line is ended.
IDLE_SECONDS = 1.5

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def activity_wanted(stream: IO[str] | None = None) -> bool:
    """Whether library work outside a command shows progress: :data:`PROGRESS_ENV`
    when set, else whether ``stream`` (default stderr) is a terminal."""
    value = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return progress_wanted(None, stream)


class _StatusLine:
    """One status line on a stream: redrawn in place on a terminal, written once when
    shown and once when ended elsewhere (a log keeps two lines, not hundreds)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.terminal = progress_wanted(None, stream)
        self.shown = False

    def show(self, text: str) -> None:
        try:
            if self.terminal:
                self.stream.write(f"\r{text}\x1b[K")
            elif not self.shown:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: progress is optional
            return
        self.shown = True

    def finish(self, text: str) -> None:
        if not self.shown:
            return
        try:
            self.stream.write((f"\r{text}\x1b[K\n") if self.terminal else text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
        self.shown = False


class Activity:
    """A line on stderr for one piece of library work (compiling a graph, running a
    program) done outside a command's :class:`Progress`.

    Nothing is printed unless the work lasts :data:`ACTIVITY_DELAY` seconds; then the
    line shows the label, an optional status and the elapsed seconds, refreshed every
    :data:`REFRESH_SECONDS`, and stays (with the final time) when the work ends.
    Watched graphs (:func:`watch_graph`) stay quiet while an activity runs.

    Parameters
    ----------
    label
        What is being done (``"Graph compilation"``).
    status
        Called on each refresh for a short status (``"1,234 vertices"``), or None.
    stream
        Where to print (default stderr).
    """

    def __init__(
        self, label: str, status: Callable[[], str] | None = None, stream: IO[str] | None = None
    ) -> None:
        self.label = label
        self.status = status
        self._line = _StatusLine(sys.stderr if stream is None else stream)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        #: the nested piece of work going on now (:func:`activity` inside this one)
        self.stage = ""
        #: the steps of the work going on now, when their number is known (a meter)
        self.count: _Count | None = None
        self._token: contextvars.Token[Activity | None] | None = None

    def __enter__(self) -> Activity:
        global _ACTIVE
        self._start = time.monotonic()
        self._token = _ACTIVITY.set(self)
        with _WATCH_LOCK:
            _ACTIVE += 1
            _WATCHER.quiet()
        self._thread = threading.Thread(target=self._tick, name="ipusim-activity", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.stage = ""
        self._line.finish(self._text())
        with _WATCH_LOCK:
            _ACTIVE -= 1
        if self._token is not None:
            _ACTIVITY.reset(self._token)
            self._token = None

    def _text(self) -> str:
        status = ""
        if self.status is not None:
            try:
                status = f" {self.status()},"
            except Exception:  # a status is decoration: never let it stop the work
                status = ""
        stage = f" {self.stage}" if self.stage else ""
        count = self.count
        if count is not None:
            stage += f" {count.meter()}"
        stage += "," if stage else ""
        return f"{self.label}:{stage}{status} {time.monotonic() - self._start:.1f} s"

    def _tick(self) -> None:
        if self._stop.wait(ACTIVITY_DELAY):
            return
        while True:
            self._line.show(self._text())
            if self._stop.wait(REFRESH_SECONDS):
                return


#: How a counted piece of work's meter is drawn (tqdm's ``format_meter``).
METER_FORMAT = "{n_fmt}/{total_fmt} {unit} |{bar:12}| {elapsed}<{remaining}"


class _Count:
    """Steps done of a known number, drawn as a tqdm meter on an :class:`Activity`'s
    line; calling it counts ``n`` more (the work's thread counts, the line's thread
    draws)."""

    def __init__(self, total: int, unit: str) -> None:
        self.total = max(int(total), 0)
        self.unit = unit
        self.done = 0
        self.began = time.monotonic()

    def __call__(self, n: int = 1) -> None:
        self.done += n

    def meter(self) -> str:
        from tqdm import tqdm

        done = self.done  # a count past the total (an estimate short) widens the total
        return tqdm.format_meter(
            done,
            max(self.total, done),
            time.monotonic() - self.began,
            unit=self.unit,
            bar_format=METER_FORMAT,
        )


def _uncounted(n: int = 1) -> None:
    """The count of work whose progress is not shown: nothing to do."""


@contextlib.contextmanager
def activity(
    label: str,
    status: Callable[[], str] | None = None,
    total: int | None = None,
    unit: str = "step",
) -> Iterator[Callable[[int], None]]:
    """Show ``label`` while the ``with`` body runs, if it runs long (see
    :class:`Activity`); inside a command's :class:`Progress`, or when
    :func:`activity_wanted` says no, nothing is shown. Inside another activity, the
    label is shown as that activity's current stage, after the stage it is part of
    (``Graph compilation: emit``).

    With ``total``, the work has that many steps: the ``with`` gives a function the
    body calls with the steps it has done (``step(n=1)``), and the line shows a tqdm
    meter of them (count, bar, elapsed and remaining time). Without, or when nothing
    is shown, the function given does nothing.
    """
    count = _Count(total, unit) if total is not None else None
    step = count if count is not None else _uncounted
    outer = _ACTIVITY.get()
    if outer is not None:
        before, before_count = outer.stage, outer.count
        outer.stage = f"{before}: {label}" if before else label
        outer.count = count
        try:
            yield step
        finally:
            outer.stage, outer.count = before, before_count
        return
    if _CURRENT.get() is not None or not activity_wanted():
        yield _uncounted
        return
    with Activity(label, status) as shown:
        shown.count = count
        yield step


class _GraphWatcher:
    """Shows the construction of watched graphs: a line appears once a graph has grown
    for :data:`ACTIVITY_DELAY` seconds and ends when it stops growing (or a compile
    starts). One daemon thread polls every watched graph; graphs are held weakly."""

    def __init__(self) -> None:
        self.graphs: weakref.WeakKeyDictionary[Any, Callable[[Any], tuple[int, int]]] = (
            weakref.WeakKeyDictionary()
        )
        self.thread: threading.Thread | None = None
        self.line: _StatusLine | None = None
        self.last = 0
        #: vertices of the watched graphs at the last poll
        self.vertices = 0
        self.grew_at = 0.0
        self.began = 0.0
        #: when the graphs were last polled (growth seen now began after it)
        self.polled = 0.0

    def add(self, graph: Any, count: Callable[[Any], tuple[int, int]]) -> None:
        self.graphs[graph] = count
        now = time.monotonic()
        if now - self.grew_at > IDLE_SECONDS:
            self.began = now  # a new graph: its construction starts now
        self.grew_at = self.polled = now
        if self.thread is None:
            self.thread = threading.Thread(target=self._poll, name="ipusim-graph", daemon=True)
            self.thread.start()

    def quiet(self) -> None:
        """End the current line (called with the lock held)."""
        if self.line is not None:
            self.line.finish(self._text(time.monotonic()))
            self.line = None

    def _text(self, now: float) -> str:
        return f"Graph construction: {self.vertices:,} vertices, {now - self.began:.1f} s"

    def _poll(self) -> None:
        while True:
            time.sleep(REFRESH_SECONDS)
            with _WATCH_LOCK:
                sizes = [count(g) for g, count in list(self.graphs.items())]
                if not sizes:  # every watched graph is gone
                    self.quiet()
                    self.last = 0
                    continue
                self.vertices = sum(v for v, _ in sizes)
                total = sum(t for _, t in sizes)
                now = time.monotonic()
                if total > self.last:
                    if now - self.grew_at > IDLE_SECONDS:
                        self.began = self.polled  # growth after a pause: a new construction
                    self.grew_at = now
                self.last = total
                self.polled = now
                if _ACTIVE:
                    continue
                if now - self.grew_at > IDLE_SECONDS:
                    self.quiet()
                elif now - self.began >= ACTIVITY_DELAY:
                    if self.line is None:
                        self.line = _StatusLine(sys.stderr)
                    self.line.show(self._text(now))


_ACTIVITY: contextvars.ContextVar[Activity | None] = contextvars.ContextVar(
    "ipusim_activity", default=None
)
_WATCH_LOCK = threading.Lock()
_WATCHER = _GraphWatcher()
#: Activities running now (a graph's construction line stays quiet while any does).
_ACTIVE = 0


def watch_graph(graph: Any, count: Callable[[Any], tuple[int, int]]) -> None:
    """Show the construction of ``graph`` when it takes long; ``count(graph)`` gives its
    vertices (shown) and a size that grows with any addition (variables, compute sets:
    growth keeps the line open). Nothing when :func:`activity_wanted` says no. For
    graphs built by user code, which has no phases to name: inside a command's
    :class:`Progress` (shown or silenced, ``--no-progress``) nothing either."""
    if _CURRENT.get() is not None or not activity_wanted():
        return
    with _WATCH_LOCK:
        _WATCHER.add(graph, count)
