"""A stand-in for tritonserver on a GPU host: the KServe v2 gRPC calls the worker makes, the text model in
PyTorch on the GPU (docs/PERFORMANCE.md, "GPU").

tritonserver's TensorRT and ONNX Runtime GPU backends do not fit in what travels to a lent GPU machine,
so the end-to-end run there serves the text model with this: the same contract the worker's
:class:`workers.adapters.triton.TritonTextModel` speaks (``ModelReady``, ``ModelConfig``, ``ModelInfer``
with INT64 ``input_ids`` and ``attention_mask`` in, FP32 ``logits`` out), and Triton's dynamic batcher as
``build-repo --target gpu-tensorrt`` configures it: requests merged up to ``--max-batch`` rows, waiting at
most ``--queue-delay-us`` for more, one execution at a time, in fp16.

It writes its counters (calls, rows, seconds the GPU step took) to ``--stats`` once a second, so a run
can say how busy the model was.

    python3 -m training.experiments.kserve_standin --model-dir BUNDLE/text --port 8001 --stats stats.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from workers.adapters.triton import triton_version
from workers.model_cards import TextModelCard

IntArray = npt.NDArray[np.int64]


@dataclass
class Stats:
    calls: int = 0  # model executions (merged batches)
    requests: int = 0
    rows: int = 0
    busy_s: float = 0.0  # wall time of the executions, each synchronised


@dataclass
class Pending:
    ids: IntArray
    mask: IntArray
    done: asyncio.Future[npt.NDArray[np.float32]]


class TextModelOnGpu:
    """The text model's architecture on the GPU. Its weights are the card's ``hf/`` checkpoint when
    it travelled, else random: the time a forward pass takes does not depend on the weights' values."""

    def __init__(self, text_dir: Path, device: str) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification

        self._torch = torch
        hf = text_dir / "hf"
        if any(hf.glob("*.safetensors")):
            model = AutoModelForSequenceClassification.from_pretrained(hf)
            self.weights = "trained"
        else:
            model = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(hf))
            self.weights = "random"
        # fp16 on the GPU; fp32 on a CPU (a rehearsal), where half precision has no fast kernels.
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.model = model.to(device=device, dtype=dtype).eval()
        self.device = device

    def logits(self, ids: IntArray, mask: IntArray) -> npt.NDArray[np.float32]:
        torch = self._torch
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.from_numpy(ids).to(self.device, non_blocking=True),
                attention_mask=torch.from_numpy(mask).to(self.device, non_blocking=True),
            ).logits
            result: npt.NDArray[np.float32] = out.float().cpu().numpy()
        return result


def merge(pending: list[Pending]) -> tuple[IntArray, IntArray]:
    """One batch of the requests' rows, right-padded to the longest (the worker pads each request already)."""
    width = max(p.ids.shape[1] for p in pending)
    rows = sum(p.ids.shape[0] for p in pending)
    ids, mask = np.zeros((rows, width), np.int64), np.zeros((rows, width), np.int64)
    at = 0
    for p in pending:
        n, w = p.ids.shape
        ids[at : at + n, :w], mask[at : at + n, :w] = p.ids, p.mask
        at += n
    return ids, mask


class Batcher:
    """Triton's dynamic batcher, in small: the first waiting request opens a batch that takes what arrives
    within the queue delay, up to ``max_batch`` rows; one execution at a time, off the event loop."""

    def __init__(self, model: TextModelOnGpu, max_batch: int, queue_delay_s: float) -> None:
        self.model, self.max_batch, self.queue_delay_s = model, max_batch, queue_delay_s
        self.queue: asyncio.Queue[Pending] = asyncio.Queue()
        self.stats = Stats()
        self._gpu = ThreadPoolExecutor(1, thread_name_prefix="gpu")

    async def infer(self, ids: IntArray, mask: IntArray) -> npt.NDArray[np.float32]:
        done: asyncio.Future[npt.NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        await self.queue.put(Pending(ids, mask, done))
        return await done

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            rows = batch[0].ids.shape[0]
            deadline = loop.time() + self.queue_delay_s
            while rows < self.max_batch:
                try:
                    nxt = self.queue.get_nowait() if self.queue.qsize() else None
                    if nxt is None:
                        nxt = await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                if rows + nxt.ids.shape[0] > self.max_batch:
                    await self._execute(batch)
                    batch, rows = [], 0
                batch.append(nxt)
                rows += nxt.ids.shape[0]
            await self._execute(batch)

    async def _execute(self, batch: list[Pending]) -> None:
        batch = [p for p in batch if not p.done.done()]  # a caller whose deadline passed has gone
        if not batch:
            return
        ids, mask = merge(batch)
        started = time.perf_counter()
        try:
            logits = await asyncio.get_running_loop().run_in_executor(self._gpu, self.model.logits, ids, mask)
        except Exception as exc:  # every caller gets the failure, the server goes on
            for p in batch:
                if not p.done.done():
                    p.done.set_exception(exc)
            return
        s = self.stats
        s.calls, s.requests, s.rows = s.calls + 1, s.requests + len(batch), s.rows + ids.shape[0]
        s.busy_s += time.perf_counter() - started
        at = 0
        for p in batch:
            n = p.ids.shape[0]
            if not p.done.done():  # cancelled while its batch ran
                p.done.set_result(logits[at : at + n])
            at += n


class Service(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, name: str, version: str, batcher: Batcher) -> None:
        self.name, self.version, self.batcher = name, version, batcher

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(ready=request.name == self.name and request.version in ("", self.version))

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        config = mc.ModelConfig(
            name=self.name,
            max_batch_size=self.batcher.max_batch,
            instance_group=[mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_GPU)],
        )
        return pb.ModelConfigResponse(config=config)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        if request.model_name != self.name or request.model_version not in ("", self.version):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_name} {request.model_version}")
        arrays = {
            t.name: np.frombuffer(raw, np.int64).reshape(tuple(t.shape))
            for t, raw in zip(request.inputs, request.raw_input_contents, strict=True)
        }
        logits = await self.batcher.infer(arrays["input_ids"], arrays["attention_mask"])
        out = pb.ModelInferResponse.InferOutputTensor(name="logits", datatype="FP32", shape=list(logits.shape))
        return pb.ModelInferResponse(
            model_name=self.name,
            model_version=self.version,
            id=request.id,
            outputs=[out],
            raw_output_contents=[np.ascontiguousarray(logits).tobytes()],
        )


async def _write_stats(batcher: Batcher, path: Path, weights: str) -> None:
    while True:
        path.with_suffix(".tmp").write_text(json.dumps({**asdict(batcher.stats), "weights": weights}))
        path.with_suffix(".tmp").replace(path)
        await asyncio.sleep(1.0)


async def serve(args: argparse.Namespace) -> None:
    card = TextModelCard.load(args.model_dir)
    model = TextModelOnGpu(args.model_dir, args.device)
    model.logits(np.zeros((args.max_batch, 128), np.int64), np.ones((args.max_batch, 128), np.int64))  # warm-up
    batcher = Batcher(model, args.max_batch, args.queue_delay_us / 1e6)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(
        Service(args.model, str(triton_version(card.version)), batcher), server
    )
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    print(f"serving {args.model} (text model {card.version}, {model.weights} weights) on {args.port}", flush=True)
    tasks = [asyncio.create_task(batcher.run()), asyncio.create_task(_write_stats(batcher, args.stats, model.weights))]
    try:
        await server.wait_for_termination()
    finally:
        for task in tasks:
            task.cancel()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, required=True, help="the bundle's text model (card, hf/config.json)")
    p.add_argument("--model", default="spam_text")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--device", default="cuda")
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--queue-delay-us", type=int, default=2000)
    p.add_argument("--stats", type=Path, required=True)
    args = p.parse_args()
    if args.max_batch < 1 or args.queue_delay_us < 0:
        p.error("--max-batch must be at least 1 and --queue-delay-us at least 0")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
