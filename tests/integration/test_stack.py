"""The embedded stack end to end: broker round trip, Redis, and gRPC inference on the tiny model."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import redis
import tritonclient.grpc as grpcclient
from confluent_kafka import Consumer, Producer, TopicPartition
from tritonclient.utils import InferenceServerException

from modstream.serving.triton_repo import INPUT_NAMES, MODEL_NAME, NUM_LABELS, OUTPUT_NAME
from modstream.stack.local import S3_DIR, STATE_FILE, STOP_GRACE_S, Endpoints, LocalStack, create_topics, group_members
from tests.conftest import first_record, records
from workers.adapters.triton import triton_version

pytestmark = pytest.mark.integration

Ids = npt.NDArray[np.int64]
Logits = npt.NDArray[np.float32]


def test_broker_round_trip(stack: Endpoints) -> None:
    topic = "stack-test"
    create_topics(stack.kafka_bootstrap, {topic: 2})
    create_topics(stack.kafka_bootstrap, {topic: 2})  # idempotent

    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True})
    producer.produce(topic, key=b"k", value=b"hello", partition=0)
    assert producer.flush(10) == 0

    message = first_record(stack.kafka_bootstrap, topic)
    assert (message.key(), message.value()) == (b"k", b"hello")


def test_a_durable_stack_keeps_its_topics_and_offsets_across_down_and_up(
    tmp_path: Path, triton_repo: Path, stack: Endpoints
) -> None:
    """``stack up``'s default: the broker's log and group offsets outlive its processes (modstream/stack/s3store.py)."""
    durable = LocalStack(tmp_path / "stack", triton_repo, stack.redis_url, durable=True)
    topic, group = "kept", "kept-readers"
    with durable as ep:
        assert ep.s3_url is not None
        create_topics(ep.kafka_bootstrap, {topic: 1})
        producer = Producer({"bootstrap.servers": ep.kafka_bootstrap, "enable.idempotence": True})
        for i in range(10):
            producer.produce(topic, value=str(i).encode())
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": ep.kafka_bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        consumer.close()
    assert not durable.status().services  # down: nothing recorded as running
    assert any((tmp_path / "stack" / S3_DIR).rglob("*")), "the broker wrote nothing to its files"

    with durable as ep:  # new ports, new processes, the same files
        assert [m.value() for m in records(ep.kafka_bootstrap, topic, 10)] == [str(i).encode() for i in range(10)]
        consumer = Consumer({"bootstrap.servers": ep.kafka_bootstrap, "group.id": group})
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        consumer.close()
        assert committed.offset == 4


def test_redis_ping(stack: Endpoints) -> None:
    assert stack.redis_started
    assert redis.Redis.from_url(stack.redis_url, socket_timeout=1).ping()


def make_inputs(ids: Ids, mask: Ids | None = None) -> list[grpcclient.InferInput]:
    mask = np.ones_like(ids) if mask is None else mask
    inputs = []
    for name, array in zip(INPUT_NAMES, (ids, mask), strict=True):
        tensor = grpcclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def infer(client: grpcclient.InferenceServerClient, ids: Ids) -> Logits:
    result = client.infer(MODEL_NAME, make_inputs(ids), outputs=[grpcclient.InferRequestedOutput(OUTPUT_NAME)])
    logits: Logits = result.as_numpy(OUTPUT_NAME)
    return logits


def model_stats(client: grpcclient.InferenceServerClient) -> tuple[int, int]:
    """(executions, inferred rows) of spam_text so far."""
    stats = client.get_inference_statistics(MODEL_NAME).model_stats[0]
    return stats.execution_count, stats.inference_count


@pytest.fixture
def client(stack: Endpoints) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(stack.triton_grpc)


@pytest.mark.parametrize(("batch", "seq"), [(1, 7), (5, 33)])
def test_triton_infer(client: grpcclient.InferenceServerClient, batch: int, seq: int) -> None:
    ids = np.random.default_rng(batch).integers(0, 30522, size=(batch, seq), dtype=np.int64)

    logits = infer(client, ids)

    assert logits.shape == (batch, NUM_LABELS) and logits.dtype == np.float32
    assert np.isfinite(logits).all()
    assert client.is_model_ready(MODEL_NAME, str(triton_version("tiny0001")))  # the version the card names


def test_triton_dynamic_batch_of_mixed_lengths(client: grpcclient.InferenceServerClient) -> None:
    """Requests of different lengths, sent together, each get their own rows back (padding is masked)."""
    rng = np.random.default_rng(0)
    requests = [rng.integers(0, 30522, size=(b, s), dtype=np.int64) for b, s in [(1, 5), (3, 40), (2, 12)]]
    expected = [infer(client, ids) for ids in requests]

    results: dict[int, Logits | Exception] = {}
    done = threading.Event()

    def on_result(i: int, result: grpcclient.InferResult, error: Exception | None) -> None:
        results[i] = error if error is not None else result.as_numpy(OUTPUT_NAME)
        if len(results) == len(requests):
            done.set()

    before = model_stats(client)
    for i, ids in enumerate(requests):
        client.async_infer(MODEL_NAME, make_inputs(ids), callback=functools.partial(on_result, i))
    assert done.wait(10)
    after = model_stats(client)

    for i, logits in enumerate(expected):
        result = results[i]
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result, logits, rtol=1e-5, atol=1e-6)
    executions, inferences = (a - b for a, b in zip(after, before, strict=True))
    assert inferences == sum(len(ids) for ids in requests)
    assert executions < len(requests), "the requests should have been batched into fewer executions"


def test_triton_bad_request_fails_alone(client: grpcclient.InferenceServerClient) -> None:
    ids = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(InferenceServerException, match="same"):
        client.infer(MODEL_NAME, make_inputs(ids, mask=np.ones((2, 5), dtype=np.int64)))
    assert infer(client, ids).shape == (2, NUM_LABELS)  # the model still serves


HOLD = """
import sys, time
from pathlib import Path
from modstream.stack.local import LocalStack
stack = LocalStack(Path(sys.argv[1]), Path(sys.argv[2]), redis_url=None)
if sys.argv[3] == "with":
    with stack:
        print("up", flush=True)
        time.sleep(600)
else:
    stack.up()
    print("up", flush=True)
"""


def _hold(state: Path, repo: Path, how: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A process that starts a stack ``how`` ("with": a ``with`` block; else ``up()``, as ``stack up``),
    and the process groups of the servers it started, once they are ready."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state), str(repo), how], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc, [s["pid"] for s in json.loads((state / STATE_FILE).read_text())["services"]]


def _gone(groups: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while any(group_members(g) for g in groups):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_held_stack_stops_when_its_process_is_killed_and_stack_ups_stays(tmp_path: Path, triton_repo: Path) -> None:
    """kill -9 of a process in a ``with LocalStack`` block leaves no server behind (they ran in sessions
    of their own, so nothing else stopped them); a stack started by ``up()`` alone outlives its process."""
    held, groups = _hold(tmp_path / "held", triton_repo, "with")
    held.kill()
    held.wait()
    try:
        assert _gone(groups, STOP_GRACE_S + 5), "a killed holder's servers are still running"
    finally:  # on failure, not left running for the rest of the session
        LocalStack(tmp_path / "held", triton_repo).down()

    started, groups = _hold(tmp_path / "up", triton_repo, "up")
    try:
        assert started.wait(30) == 0
        time.sleep(1)  # a parent-death signal would have landed by now
        assert all(group_members(g) for g in groups), "stack up's servers died with the command"
    finally:
        LocalStack(tmp_path / "up", triton_repo).down()
    assert _gone(groups, 1)
