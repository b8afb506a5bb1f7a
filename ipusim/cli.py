"""Command line interface: ``ipusim <command> ...`` (also ``python -m ipusim``).

Each command is added by one ``_register_<name>(subparsers)`` function that creates its
sub-parser and sets ``handler`` to a function ``(args) -> int``; a new command is one
more such function listed in :data:`_REGISTRARS`. Errors of the simulator
(:class:`~ipusim.errors.IpusimError`) and of the file system are printed to stderr as
one line, without a traceback, and give exit status 2; a command stopped by Ctrl-C or
SIGTERM prints one line and exits 130 or 143 (see :func:`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ipusim import __version__
from ipusim.calibrate import register as register_calibrate
from ipusim.compare import register as register_compare
from ipusim.config import (
    config_hash,
    config_to_yaml,
    list_presets,
    load_config,
    parse_overrides,
    preset_path,
)
from ipusim.errors import IpusimError
from ipusim.files import FileWriteError, Interrupted, signal_name, signals_as_exceptions
from ipusim.progress import Progress, add_progress_arguments, progress_of
from ipusim.runner import register as register_run
from ipusim.sweep.cli import normalize_argv as normalize_sweep_argv
from ipusim.sweep.cli import register as register_sweep

__all__ = ["build_parser", "main"]

_Subparsers = Any  # argparse's _SubParsersAction is private


# ipusim config ----------------------------------------------------------------------------
def _config_show(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, overrides=parse_overrides(args.set or []))
    sys.stdout.write(config_to_yaml(cfg))
    sys.stdout.write(f"hash: {config_hash(cfg)}\n")
    return 0


def _config_list(args: argparse.Namespace) -> int:
    names = list_presets()
    width = max((len(n) for n in names), default=0)
    for name in names:
        cfg = load_config(name)
        print(f"{name:<{width}}  {cfg.description}")
    if args.verbose:
        for name in names:
            print(f"{name}: {preset_path(name)}")
    return 0


def _register_config(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser("config", help="show and list machine configs")
    commands = parser.add_subparsers(dest="config_command", metavar="{show,list}")
    commands.required = True

    show = commands.add_parser("show", help="print a resolved config as YAML, followed by its hash")
    show.add_argument("config", metavar="NAME|PATH", help="preset name or YAML file")
    show.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="override a field by dotted path, e.g. --set tile.clock_hz='1.85 GHz' (repeatable)",
    )
    show.set_defaults(handler=_config_show)

    listing = commands.add_parser("list", help="list the preset configs")
    listing.add_argument("-v", "--verbose", action="store_true", help="also show file paths")
    listing.set_defaults(handler=_config_list)


# ipusim report ----------------------------------------------------------------------------
def _report(args: argparse.Namespace) -> int:
    from ipusim.report import run_report  # lazy: plotting loads matplotlib

    with Progress("ipusim report", progress_of(args)):
        run_report(args.profile_dir, out=args.out, plots=not args.no_plots)
    return 0


def _register_report(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="print a profile directory (autoReport) and plot its steps",
        description="Print summary.txt of a profile directory written by the engine's "
        "autoReport option and write steps.png (cycles per step, from execution.json) and "
        "memory.png (from profile.json) next to it.",
    )
    parser.add_argument("profile_dir", metavar="PROFILE_DIR", help="the profile directory")
    parser.add_argument("--out", metavar="DIR", help="write the plots here (default PROFILE_DIR)")
    parser.add_argument("--no-plots", action="store_true", help="print only, write no plots")
    add_progress_arguments(parser)
    parser.set_defaults(handler=_report)


# Assembly ---------------------------------------------------------------------------------
_REGISTRARS: list[Callable[[_Subparsers], None]] = [
    _register_config,
    _register_report,
    register_run,
    register_calibrate,
    register_compare,
    register_sweep,
]
"""One function per top-level command; each adds its sub-parser and ``handler``."""


def build_parser() -> argparse.ArgumentParser:
    """The ``ipusim`` argument parser with every registered command."""
    parser = argparse.ArgumentParser(
        prog="ipusim", description="Cycle-approximate simulator of the Graphcore IPU."
    )
    parser.add_argument("--version", action="version", version=f"ipusim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for register in _REGISTRARS:
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0 on success; 2 for a usage error, an :class:`~ipusim.errors.IpusimError` or a
    file the system refuses (disk full, file size limit, permissions), each a message
    on stderr without a traceback; 130 for Ctrl-C (SIGINT) and 128 + N for signal N
    (SIGTERM 143, SIGHUP 129), with one line on stderr; 70 for an error of ipusim
    itself (one line; ``IPUSIM_TRACEBACK=1`` prints its traceback). Files are written
    whole or not at all (:mod:`ipusim.files`), so a stopped command leaves no partial
    file.
    """
    parser = build_parser()
    argv = normalize_sweep_argv(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse reports usage errors (and --help) this way
        return exc.code if isinstance(exc.code, int) else 2
    command = str(args.command)
    with signals_as_exceptions():
        try:
            return int(args.handler(args))
        except IpusimError as exc:
            _traceback_on_request(exc)
            return _fail(f"ipusim: error: {exc}", 2)
        except BrokenPipeError:  # the reader went away (`ipusim config show mk2 | head`)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        except Interrupted as exc:
            return _fail(
                f"ipusim: {command} stopped by {signal_name(exc.signum)}",
                exc.exit_status,
            )
        except KeyboardInterrupt:
            return _fail(f"ipusim: {command} interrupted (Ctrl-C)", 130)
        except OSError as exc:
            return _fail(f"ipusim: error: {_os_error_text(exc)}", 2)
        except MemoryError as exc:
            if _is_layers(exc):  # tile memory (OutOfMemoryError): its report is the message
                return _fail(f"ipusim: error: {type(exc).__name__}: {exc}", 2)
            return _fail(
                f"ipusim: error: {command} ran out of host memory; hint: a smaller "
                "workload, fewer tiles or fewer sweep points",
                2,
            )
        except RecursionError:
            return _fail(f"ipusim: error: {command}: an input is nested too deeply to process", 2)
        except Exception as exc:  # one line; the traceback on request
            if _traceback_wanted():
                raise
            return _unexpected(exc, command)


#: Environment variable that makes the CLI show the traceback of an internal error.
TRACEBACK_ENV = "IPUSIM_TRACEBACK"


def _fail(message: str, status: int) -> int:
    """Print ``message`` to stderr (after what stdout holds); return ``status``."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr)
    return status


def _os_error_text(exc: OSError) -> str:
    """One line for an OSError: the path(s), the reason and a hint."""
    if isinstance(exc, FileWriteError):
        return str(exc)
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        paths = f"'{exc.filename}'"
        if exc.filename2 is not None:
            paths += f" -> '{exc.filename2}'"
        return f"{paths}: {reason}; hint: check the path, its permissions and the free space"
    return f"{reason} ({type(exc).__name__}); hint: check the paths, permissions and free space"


#: The packages of this distribution (by directory, so the Poplar layers are not
#: imported here): code outside them and outside the Python installation is the user's.
_OWN_DIRS = tuple(
    str(Path(__file__).resolve().parent.parent / name) + os.sep
    for name in ("ipusim", "poplar_api", "popart_api")
)
_LIBRARY_DIRS = tuple(
    {str(Path(p).resolve()) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
)


def _traceback_wanted() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0")


def _traceback_on_request(exc: BaseException) -> None:
    """Print the traceback of ``exc`` (with its causes) when :data:`TRACEBACK_ENV` asks."""
    if _traceback_wanted():
        import traceback

        traceback.print_exception(exc, file=sys.stderr)


def _frames(exc: BaseException) -> list[tuple[str, int]]:
    """``(file, line)`` of each frame of ``exc``'s traceback, outermost first."""
    out = []
    tb = exc.__traceback__
    while tb is not None:
        out.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _is_users(filename: str) -> bool:
    path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
    return not path.startswith(_OWN_DIRS + _LIBRARY_DIRS) and not filename.startswith("<frozen")


def _is_layers(exc: BaseException) -> bool:
    """An error class of the Poplar or PopART layer: a refused input, with its message."""
    return type(exc).__module__.split(".")[0] in ("poplar_api", "popart_api")


def _unexpected(exc: Exception, command: str) -> int:
    """One line for an exception that is neither an IpusimError nor an OSError.

    An error class of the Poplar or PopART layer is a refused input (status 2); an
    exception raised in the user's own code (a workload) names where (status 2);
    anything else is an error of ipusim itself (status 70)."""
    kind = type(exc)
    text = f"{kind.__name__}: {exc}"
    hint = f"hint: set {TRACEBACK_ENV}=1 to see the traceback"
    if _is_layers(exc):
        return _fail(f"ipusim: error: {text}", 2)
    frames = _frames(exc)
    users = [f for f in frames if _is_users(f[0])]
    if users:
        file, line = users[-1]
        return _fail(f"ipusim: error: {command}: {text} (raised at {file}:{line}); {hint}", 2)
    where = f" (at {os.path.basename(frames[-1][0])}:{frames[-1][1]})" if frames else ""
    return _fail(f"ipusim: internal error in {command}: {text}{where}; {hint}, and report it", 70)
