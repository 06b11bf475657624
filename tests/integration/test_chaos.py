"""The chaos suite, short: small replays and a few faults on a stack of its own (tiny models)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from modstream.harness.chaos import Suite, hides_aborted_records, run_suite, table
from modstream.harness.traffic import Record
from modstream.serving.triton_repo import RepoOptions, build_repo
from modstream.stack.local import LocalStack, S3Standin, create_topics
from tests.integration.test_pipeline import post

pytestmark = pytest.mark.integration

POSTS = 120


def posts(prefix: str) -> list[Record]:
    return [post(f"{prefix}{i}", f"post {i} about the weather" + " buy now" * (i % 3)) for i in range(POSTS)]


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, model_bundle: Path) -> Iterator[list[Suite]]:
    """The main stack, and one whose broker keeps its log on S3 (moto's server standing in)."""
    work = tmp_path_factory.mktemp("chaos")
    repo = build_repo("cpu-embedded", tiny_model_dir, work / "repo", RepoOptions.for_target("cpu-embedded"))
    # Its own Redis and tritonserver: the outages must not reach the other tests' stack.
    memory = LocalStack(work / "stack", repo)
    with memory as ep, S3Standin(work / "s3") as s3:
        durable = LocalStack(work / "s3stack", repo, ep.redis_url, kafka_storage="s3://tansu/", kafka_env=s3.kafka_env)
        with durable as s3_ep:
            yield [
                Suite(stack, endpoints, model_bundle, work, posts, kills=2, outage_s=3.0)
                for stack, endpoints in ((memory, ep), (durable, s3_ep))
            ]


def test_no_fault_loses_a_post_or_changes_a_decision(suites: list[Suite]) -> None:
    memory, _ = suites
    results = run_suite(memory)  # the broker restarts: the test below
    print("\n" + table(results))
    by_name = {r.scenario: r for r in results}
    assert all(r.lost == 0 and r.disagreeing == 0 for r in results), results
    assert all(r.crashes == 0 for r in results if "kill -9" not in r.scenario), results
    # Killed workers back under the same identity, as the same process or as a rescheduled pod.
    eos = [by_name["kill -9 x2, exactly-once"], by_name["kill -9 x2, exactly-once, rescheduled pods"]]
    if any(r.duplicates for r in eos) and not _hides_aborted(memory):
        pytest.xfail(f"the broker shows aborted transactions to read_committed readers: {eos}")
    assert all(r.duplicates == 0 for r in eos), eos


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_broker_restart_under_load_ends_no_worker(suites: list[Suite], guarantee: str) -> None:
    """Tansu on S3 killed -9 mid-stream and back 5 s later: the lost assignment, the commits it
    refuses and (exactly-once) a transactional call that never returns are survived
    (workers/kafka/commit.py). The time from the broker being back to the first verdict is a figure in
    docs/RELIABILITY.md, printed here, not asserted."""
    _, s3 = suites
    result = s3.broker(guarantee)
    print(f"\n{result}")
    assert result.crashes == 0 and result.lost == 0 and result.disagreeing == 0, result


def _hides_aborted(suite: Suite) -> bool:
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    create_topics(suite.endpoints.kafka_bootstrap, {probe: 1})
    return hides_aborted_records(suite.endpoints.kafka_bootstrap, probe)
