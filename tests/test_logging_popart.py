"""PopART's logging variables, one test each: ``POPART_LOG_LEVEL``, ``POPART_LOG_DEST``
and ``POPART_LOG_CONFIG`` (per-module levels), in PopART's line format
``[time] [popart:module] [level] message`` (graphcore/popart ``willow/src/logging.cpp``
and its User Guide, "Environment variables")."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest

import popart_api as popart
from popart_api import logger as popart_logger

LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\] \[popart:(\w+)\] \[(\w+)\] (.*)$")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in ("LEVEL", "DEST", "CONFIG"):
        monkeypatch.delenv(f"POPART_LOG_{var}", raising=False)
    yield
    handler = popart_logger._state.pop("handler", None)
    popart_logger._state.clear()
    for module in popart_logger.MODULES:
        log = popart_logger._python_logger(module)
        log.setLevel(logging.NOTSET)
        if handler in log.handlers:
            log.removeHandler(handler)
    if isinstance(handler, logging.Handler):
        handler.close()


def _emit():
    """One message of each level from the session, devicex and ir modules."""
    for module in ("session", "devicex", "ir"):
        log = popart.getLogger(module)
        log.debug(f"{module} debug")
        log.info(f"{module} info")
        log.warn(f"{module} warn")


def _lines(text: str) -> list[tuple[str, str, str]]:
    found = [LINE.match(line) for line in text.splitlines() if line]
    assert all(found), text
    return [(m.group(2), m.group(3), m.group(4)) for m in found]


def test_log_level_sets_every_module_in_popart_format(tmp_path, monkeypatch):
    dest = tmp_path / "popart.log"
    monkeypatch.setenv("POPART_LOG_LEVEL", "INFO")
    monkeypatch.setenv("POPART_LOG_DEST", str(dest))
    popart_logger.configure()
    _emit()
    got = _lines(dest.read_text())
    want = [
        (m, lvl, f"{m} {w}")
        for m in ("session", "devicex", "ir")
        for lvl, w in (("info", "info"), ("warning", "warn"))
    ]
    assert got == want
    monkeypatch.setenv("POPART_LOG_LEVEL", "LOUD")
    with pytest.raises(popart.popart_exception, match="POPART_LOG_LEVEL='LOUD'"):
        popart_logger.configure()


def test_log_level_off_by_default_and_off_says_nothing(tmp_path, monkeypatch):
    dest = tmp_path / "popart.log"
    monkeypatch.setenv("POPART_LOG_DEST", str(dest))  # destination only: level OFF
    popart_logger.configure()
    _emit()
    assert dest.read_text() == ""


@pytest.mark.parametrize("dest", ["stdout", "stderr"])
def test_log_dest_stdout_and_stderr(dest, monkeypatch, capsys):
    monkeypatch.setenv("POPART_LOG_LEVEL", "WARN")
    monkeypatch.setenv("POPART_LOG_DEST", dest)
    popart_logger.configure()
    popart.getLogger("session").warn("to " + dest)
    out, err = capsys.readouterr()
    assert _lines(out if dest == "stdout" else err) == [("session", "warning", "to " + dest)]
    assert "to " + dest not in (err if dest == "stdout" else out)


def test_log_dest_that_cannot_be_opened(tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_LOG_LEVEL", "INFO")
    monkeypatch.setenv("POPART_LOG_DEST", str(tmp_path / "missing" / "x.log"))
    with pytest.raises(popart.popart_exception, match=r"POPART_LOG_DEST=.*cannot open"):
        popart_logger.configure()


def test_log_config_sets_levels_per_module(tmp_path, monkeypatch):
    config = tmp_path / "conf.json"
    # the guide's key form and the one PopART's code looks up
    config.write_text(json.dumps({"devicex": "INFO", "popart:session": "WARN"}))
    dest = tmp_path / "popart.log"
    monkeypatch.setenv("POPART_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("POPART_LOG_DEST", str(dest))
    monkeypatch.setenv("POPART_LOG_CONFIG", str(config))
    popart_logger.configure()
    _emit()
    got = [(m, msg) for m, _, msg in _lines(dest.read_text())]
    assert got == [
        ("session", "session warn"),
        ("devicex", "devicex info"),
        ("devicex", "devicex warn"),
        ("ir", "ir debug"),  # not in the file: POPART_LOG_LEVEL's DEBUG
        ("ir", "ir info"),
        ("ir", "ir warn"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"sessions": "INFO"}', "'sessions' is not a PopART module"),
        ('{"ir": "LOUD"}', "module 'ir'.*'LOUD' is not a level"),
        ('["ir"]', "holds a list"),
        ("{not json", "cannot read it as JSON"),
    ],
)
def test_log_config_errors_name_the_file_key_and_value(tmp_path, monkeypatch, content, message):
    config = tmp_path / "conf.json"
    config.write_text(content)
    monkeypatch.setenv("POPART_LOG_CONFIG", str(config))
    with pytest.raises(popart.popart_exception, match=message):
        popart_logger.configure()


def test_a_session_logs_through_the_variables(tmp_path, monkeypatch):
    dest = tmp_path / "popart.log"
    monkeypatch.setenv("POPART_LOG_LEVEL", "INFO")
    monkeypatch.setenv("POPART_LOG_DEST", str(dest))
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    y = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    session = popart.InferenceSession(
        fnModel=b.getModelProto(),
        dataFlow=popart.DataFlow(1, {y: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    )
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.ones((2, 2), np.float32)}, anchors))
    lines = _lines(dest.read_text())
    assert lines and all(level in ("info", "warning") for _, level, _ in lines)
    assert any("prepareDevice: 1 nodes" in msg for _, _, msg in lines)
