"""The GPU host's stand-in for tritonserver speaks the worker's contract, and its batcher merges and splits."""

from __future__ import annotations

import asyncio

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs
import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from modstream.stack.local import free_port
from training.experiments.kserve_standin import Batcher, Pending, Service, merge
from workers.adapters.triton import NotServed, TritonTextModel, triton_version


class RowSums:
    """A model whose logits name their row: (sum of ids, width), and that counts its calls."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def logits(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        self.batches.append(ids.shape[0])
        return np.stack([ids.sum(1), mask.sum(1)], axis=1).astype(np.float32)


def _rows(start: int, n: int, width: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    ids = np.arange(start, start + n, dtype=np.int64)[:, None] * np.ones((1, width), np.int64)
    return ids, np.ones_like(ids)


def test_merge_pads_each_request_to_the_widest() -> None:
    loop = asyncio.new_event_loop()
    try:
        a, b = _rows(1, 2, 3), _rows(5, 1, 5)
        ids, mask = merge([Pending(*a, loop.create_future()), Pending(*b, loop.create_future())])
    finally:
        loop.close()
    assert ids.shape == (3, 5)
    assert mask.sum(1).tolist() == [3, 3, 5]
    assert ids[:2, 3:].sum() == 0


async def test_requests_arriving_together_share_one_execution_and_get_their_own_rows() -> None:
    model = RowSums()
    batcher = Batcher(model, max_batch=8, queue_delay_s=0.05)  # type: ignore[arg-type]
    task = asyncio.create_task(batcher.run())
    try:
        out = await asyncio.gather(*(batcher.infer(*_rows(10 * i, 3, 4)) for i in range(4)))
    finally:
        task.cancel()
    for i, logits in enumerate(out):
        assert logits[:, 0].tolist() == [4.0 * (10 * i + r) for r in range(3)]
    assert sum(model.batches) == 12
    assert max(model.batches) <= 8  # a request that would overflow the batch opens the next
    assert len(model.batches) < 4


async def test_a_caller_that_gave_up_stops_nothing() -> None:
    """A request whose deadline passed (its future cancelled, queued or mid-batch) is skipped; the next is served."""
    model = RowSums()
    batcher = Batcher(model, max_batch=8, queue_delay_s=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(batcher.run())
    try:
        gone = asyncio.create_task(batcher.infer(*_rows(1, 2, 2)))
        await asyncio.sleep(0)
        gone.cancel()
        kept = await asyncio.wait_for(batcher.infer(*_rows(3, 1, 2)), 5)
    finally:
        task.cancel()
    assert kept.tolist() == [[6.0, 2.0]]
    assert not task.done() or task.cancelled()


async def test_the_worker_client_is_served_by_version_and_refused_another() -> None:
    model = RowSums()
    batcher = Batcher(model, max_batch=64, queue_delay_s=0.001)  # type: ignore[arg-type]
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Service("spam_text", str(triton_version("v1")), batcher), server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    task = asyncio.create_task(batcher.run())
    client = TritonTextModel(f"127.0.0.1:{port}", "spam_text", 5.0, "v1")
    other = TritonTextModel(f"127.0.0.1:{port}", "spam_text", 5.0, "v2")
    try:
        await client.connect()
        assert client.parallelism == 1
        logits = await client.logits(*_rows(2, 2, 6))
        assert logits.tolist() == [[12.0, 6.0], [18.0, 6.0]]
        with pytest.raises(NotServed):
            await other.connect()
    finally:
        await client.close()
        await other.close()
        task.cancel()
        await server.stop(None)
