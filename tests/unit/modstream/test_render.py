"""What the commands show on a terminal."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from modstream import render
from modstream.loop.promotion import Switch
from modstream.stack.local import Endpoints
from workers.logs import JsonFormatter


def shown(show: object, *args: object) -> list[str]:
    with render.console.capture() as captured:
        show(*args)  # type: ignore[operator]
    return captured.get().splitlines()


def test_a_switch_says_what_triton_loaded_retired_and_kept() -> None:
    switch = Switch("promote", "", "/b", "vb", "t2", True, retired=["t0"], still_in_use=["t1"])
    lines = shown(render.switched, switch)
    assert lines[0] == "promote: now serving /b (decision model vb, text model t2); was nothing"
    assert lines[1].strip().startswith("Triton loaded text model t2 first")
    assert lines[2].strip() == "retired from Triton once no worker asked for them: t0"
    assert lines[3].strip().startswith("still asked for, left loaded: t1")


def test_a_switch_of_the_decision_model_alone_is_one_line() -> None:
    assert len(shown(render.switched, Switch("rollback", "/b", "/a", "va", "t1", False))) == 1


def test_a_stack_left_up_prints_what_the_loop_s_commands_need_as_exports() -> None:
    ep = Endpoints("127.0.0.1:9092", "redis://127.0.0.1:6390/0", "127.0.0.1:8001", "127.0.0.1:8000", "", True)
    lines = shown(render.stack_left_up, ep, Path("st"))
    assert lines[0] == (
        "export MODSTREAM_KAFKA_BOOTSTRAP=127.0.0.1:9092 MODSTREAM_REDIS_URL=redis://127.0.0.1:6390/0 "
        f"MODSTREAM_TRITON_URL=127.0.0.1:8001 MODSTREAM_TRITON_REPO={Path('st/triton_repo').absolute()} "
        "MODSTREAM_SESSION_TIMEOUT_S=1 MODSTREAM_FEEDBACK_SESSION_TIMEOUT_S=1"
    )  # one line, to paste as it is: promotion loads text models through Triton's repository; the embedded
    # broker's sessions are short, so a killed worker's successor decides again within seconds
    assert " ".join(lines[1:]).endswith("`modstream stack down --state-dir st/stack`")


def test_a_stack_left_up_without_endpoints_says_how_to_stop_it() -> None:
    line = " ".join(" ".join(shown(render.stack_left_up, None, Path("st"))).split())  # wrapped to its width
    assert "export" not in line and line.endswith("`modstream stack down --state-dir st/stack`")


def test_an_error_goes_to_a_service_s_json_log_once_it_has_one(caplog: pytest.LogCaptureFixture) -> None:
    assert shown(render.error, "bad thing") == ["error: bad thing"]
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)
    try:
        with caplog.at_level(logging.ERROR, "modstream"):
            assert shown(render.error, "bad thing") == []
    finally:
        logging.getLogger().removeHandler(handler)
    assert [r.getMessage() for r in caplog.records] == ["bad thing"]
