"""Poplar's and Poplibs' logging variables, one test each, and the message format of
Poplibs' logging.cpp: ``<UTC time>Z PL:<module padded> <pid>.<tid> <letter>: <msg>``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest

from poplar_api import logging_config
from poplar_api.logging_config import LoggingConfigError, configure, logger

VARIABLES = ("LOG_LEVEL", "LOG_DEST")


def line_re(prefix: str, module: str, width: int, letter: str, message: str) -> re.Pattern:
    """The line Poplibs' pattern ``%Y-%m-%dT%H:%M:%S.%fZ PL:%-<w>n %P.%t %L: %v`` gives."""
    return re.compile(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z "
        + re.escape(f"{prefix}:{module.ljust(width)} {os.getpid()}.")
        + r"\d+ "
        + re.escape(f"{letter}: {message}")
        + "$"
    )


@pytest.fixture(autouse=True)
def restore():
    yield
    configure({})  # everything off again, log files closed


def test_everything_is_off_by_default(capsys):
    configure({})
    logger("ENGINE").error("not shown")
    logger("POPOPS").error("not shown")
    assert capsys.readouterr().err == ""


def test_poplar_log_level(capsys):
    configure({"POPLAR_LOG_LEVEL": "INFO"})
    logger("ENGINE").info("loading")
    logger("ENGINE").debug("hidden below INFO")
    logger("POPOPS").warning("poplibs stays off")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    # Poplar's longest module names (CODELETS, PROFILER) have 8 letters
    assert line_re("PO", "ENGINE", 8, "I", "loading").match(err[0]), err[0]


def test_poplibs_log_level(capsys):
    configure({"POPLIBS_LOG_LEVEL": "TRACE"})
    logger("POPOPS").log(logging_config.TRACE, "every detail")
    logger("POPLIN").warning("plan over budget")
    logger("GRAPH").error("poplar stays off")
    err = capsys.readouterr().err.splitlines()
    # Poplibs' longest module names (POPSOLVER, POPSPARSE) have 9 letters
    assert line_re("PL", "POPOPS", 9, "T", "every detail").match(err[0]), err
    assert line_re("PL", "POPLIN", 9, "W", "plan over budget").match(err[1]), err
    assert len(err) == 2


def test_a_module_level_overrides_the_library_level(capsys):
    # the guide's example: Engine at TRACE, every other Poplar module at INFO
    configure({"POPLAR_LOG_LEVEL": "INFO", "POPLAR_ENGINE_LOG_LEVEL": "TRACE"})
    logger("ENGINE").log(logging_config.TRACE, "engine trace")
    logger("GRAPH").debug("graph debug hidden")
    logger("GRAPH").info("graph info")
    configure({"POPLIBS_LOG_LEVEL": "OFF", "POPLIBS_POPNN_LOG_LEVEL": "ERR"})
    logger("POPNN").error("popnn error")
    logger("POPOPS").error("popops off")
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in err] == ["engine trace", "graph info", "popnn error"]


def test_poplar_log_dest(tmp_path, capsys):
    configure({"POPLAR_LOG_LEVEL": "WARN", "POPLAR_LOG_DEST": "stdout"})
    logger("TARGET").warning("to stdout")
    out = capsys.readouterr()
    assert out.err == "" and line_re("PO", "TARGET", 8, "W", "to stdout").match(out.out.strip())
    path = tmp_path / "poplar.log"
    path.write_text("old content\n")
    configure({"POPLAR_LOG_LEVEL": "ERR", "POPLAR_LOG_DEST": str(path)})
    logger("PROGRAM").error("to a file")
    logging.getLogger("poplar").handlers[0].flush()
    lines = path.read_text().splitlines()  # truncated when logging started
    assert len(lines) == 1 and line_re("PO", "PROGRAM", 8, "E", "to a file").match(lines[0])
    assert capsys.readouterr() == ("", "")


def test_poplibs_log_dest(tmp_path, capsys):
    path = tmp_path / "both.log"
    configure(
        {
            "POPLIBS_LOG_LEVEL": "DEBUG",
            "POPLIBS_LOG_DEST": str(path),
            "POPLAR_LOG_LEVEL": "DEBUG",
            "POPLAR_LOG_DEST": str(path),  # one file for both libraries
        }
    )
    logger("POPRAND").debug("seed set")
    logger("TENSOR").debug("tensor made")
    configure({})  # closes the file
    lines = path.read_text().splitlines()
    assert line_re("PL", "POPRAND", 9, "D", "seed set").match(lines[0]), lines
    assert line_re("PO", "TENSOR", 8, "D", "tensor made").match(lines[1]), lines
    configure({"POPLIBS_LOG_LEVEL": "INFO", "POPLIBS_LOG_DEST": "stderr"})
    logger("POPUTIL").info("to stderr")
    assert "PL:POPUTIL" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"POPLAR_LOG_LEVEL": "info"}, "POPLAR_LOG_LEVEL='info'"),
        ({"POPLIBS_LOG_LEVEL": "WARNING"}, "POPLIBS_LOG_LEVEL='WARNING'"),
        ({"POPLAR_ENGINE_LOG_LEVEL": "LOUD"}, "POPLAR_ENGINE_LOG_LEVEL='LOUD'"),
    ],
)
def test_a_level_poplar_would_refuse_is_an_error_naming_it(env, named):
    with pytest.raises(LoggingConfigError) as info:
        configure(env)
    assert named in str(info.value) and "TRACE, DEBUG, INFO, WARN, ERR, OFF" in str(info.value)


def test_an_unopenable_log_file_is_named(tmp_path):
    bad = tmp_path / "no" / "such" / "dir.log"
    with pytest.raises(LoggingConfigError, match="POPLIBS_LOG_DEST") as info:
        configure({"POPLIBS_LOG_DEST": str(bad)})
    assert str(bad) in str(info.value)


def test_an_unknown_module_lists_the_modules():
    with pytest.raises(LoggingConfigError, match="POPSOLVER"):
        logger("POPLAR")


def test_colours_only_on_a_terminal():
    class Tty:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

        def isatty(self):
            return True

    tty = Tty()
    old = sys.stderr
    sys.stderr = tty
    try:
        configure({"POPLAR_LOG_LEVEL": "TRACE"})
        logger("ENGINE").warning("yellow")
        logger("ENGINE").error("red")
        logger("ENGINE").info("plain")
    finally:
        sys.stderr = old
    first, second, third = tty.text.splitlines()
    assert first.startswith("\033[33m") and first.endswith("\033[m")
    assert second.startswith("\033[31m\033[1m")
    assert "\033" not in third


def test_an_engine_logs_its_options_from_the_environment(tmp_path):
    """End to end, in a fresh process: the variables are read at the first log."""
    script = textwrap.dedent(
        """
        from poplar_api import Engine, Graph, IPUModel
        from poplar_api import program as prog
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        Engine(graph, [prog.Sequence()], {"opt.enableSwSyncs": "true"})
        """
    )
    env = dict(os.environ, POPLAR_LOG_LEVEL="DEBUG", POPLAR_LOG_DEST=str(tmp_path / "p.log"))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "p.log").read_text()
    assert re.search(r"PO:ENGINE   \d+\.\d+ D: Engine options: opt\.enableSwSyncs=true", text)
