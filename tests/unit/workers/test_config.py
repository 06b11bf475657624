"""Durations are seconds in the code; the former millisecond variables still work."""

import pytest

from workers.config import FORMERLY_MS, Settings


def test_former_millisecond_variables_are_read_as_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODSTREAM_BATCH_MAX_WAIT_MS", "20")
    monkeypatch.setenv("MODSTREAM_TRITON_TIMEOUT_MS", "2500")
    monkeypatch.setenv("MODSTREAM_REDIS_TIMEOUT_MS", "800")
    monkeypatch.setenv("MODSTREAM_REDIS_TIMEOUT_S", "0.25")  # the current name wins
    s = Settings()
    assert (s.batch_max_wait_s, s.triton_timeout_s, s.redis_timeout_s) == (0.02, 2.5, 0.25)


def test_a_bad_former_variable_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODSTREAM_SESSION_TIMEOUT_MS", "soon")
    with pytest.raises(ValueError, match="MODSTREAM_SESSION_TIMEOUT_MS"):
        Settings()


def test_librdkafka_gets_integer_milliseconds() -> None:
    conf = Settings(session_timeout_s=6.0, fetch_wait_max_s=0.02).consumer_conf()
    assert (conf["session.timeout.ms"], conf["fetch.wait.max.ms"]) == (6000, 20)


def test_consumers_rebalance_cooperatively_and_find_new_topics_within_seconds() -> None:
    conf = Settings().consumer_conf()
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert conf["topic.metadata.refresh.interval.ms"] == 5000
    assert Settings().producer_conf()["topic.metadata.refresh.interval.ms"] == 5000
    eager = Settings(kafka_assignment_strategy="range", kafka_metadata_refresh_s=30).consumer_conf()
    assert (eager["partition.assignment.strategy"], eager["topic.metadata.refresh.interval.ms"]) == ("range", 30000)


def test_every_former_name_is_a_seconds_setting() -> None:
    assert all(name.endswith("_s") and name in Settings.model_fields for name in FORMERLY_MS)


def test_exactly_once_commits_offsets_only_in_transactions() -> None:
    s = Settings(processing_guarantee="exactly_once", group_id="g", instance_id="w1")
    assert s.transactional_id == "g-w1" and s.producer_conf(s.transactional_id)["transactional.id"] == "g-w1"
    assert s.consumer_conf(transactional=True)["enable.auto.commit"] is False
    assert "transactional.id" not in s.producer_conf()  # replay producers and other workers stay plain
    assert Settings().transactional_id is None and Settings().consumer_conf()["enable.auto.commit"] is True


def test_static_membership_names_only_the_moderation_group_member() -> None:
    s = Settings(static_membership=True, instance_id="w1", session_timeout_s=1.0)
    assert s.consumer_conf()["group.instance.id"] == "w1" and "group.instance.id" not in s.consumer_conf("other")
    assert s.consumer_conf()["heartbeat.interval.ms"] == 333 and "group.instance.id" not in Settings().consumer_conf()


def test_bad_settings_stop_a_command_with_one_line_naming_the_prefix_and_field() -> None:
    from typer.testing import CliRunner

    from modstream.cli import app

    result = CliRunner().invoke(app, ["profile-contract"], env={"MODSTREAM_REDIS_TIMEOUT_S": "soon"})
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "bad MODSTREAM_* settings: redis_timeout_s" in result.output


def test_bad_feedback_settings_stop_the_service_with_one_line() -> None:
    import os
    import subprocess
    import sys

    env = os.environ | {"MODSTREAM_FEEDBACK_BATCH_MAX_SIZE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "modstream.cli", "feedback"], env=env, capture_output=True, text=True, timeout=60
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "bad MODSTREAM_FEEDBACK_* settings: batch_max_size" in out and "Traceback" not in out
