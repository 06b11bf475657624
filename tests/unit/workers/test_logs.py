"""Logs a platform can ship: one JSON object per line, librdkafka's lines through the same logging."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from modstream.cli import app
from workers.config import Settings
from workers.logs import LIBRDKAFKA, JsonFormatter, configure


def test_a_record_is_one_json_line_with_its_traceback_inside() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert (out["level"], out["logger"], out["message"]) == ("ERROR", "x", "failed here")
    assert "ValueError: bad\nthing" in out["exception"] and out["time"].endswith("+00:00")


@pytest.fixture
def root_logging() -> Iterator[None]:
    """The root logger as it was, after a test that configures it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("root_logging")
def test_configure_json_writes_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure("INFO", "json")
    logging.getLogger("modstream.test").info("one %d", 1)
    logging.getLogger("modstream.test").debug("not at INFO")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["one 1"]


def test_librdkafka_lines_go_through_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    """Not raw ``%3|...|FAIL|`` lines on stderr: the client's logger setting, served by poll."""
    producer = Producer({**Settings(kafka_bootstrap="127.0.0.1:1").kafka_common(), "socket.timeout.ms": 100})
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA.name):
        deadline = time.monotonic() + 10
        while not any(r.name == LIBRDKAFKA.name for r in caplog.records) and time.monotonic() < deadline:
            producer.poll(0.1)
    assert any(r.name == LIBRDKAFKA.name and "FAIL" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("root_logging")
def test_a_service_misconfigured_in_json_logs_says_so_in_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODSTREAM_LOG_FORMAT", "json")
    monkeypatch.setenv("MODSTREAM_MODEL_DIR", "/nonexistent/bundle")
    result = CliRunner().invoke(app, ["worker"])
    assert result.exit_code == 2
    (line,) = [json.loads(x) for x in result.stderr.splitlines()]
    assert line["level"] == "ERROR" and "/nonexistent/bundle" in line["message"]
