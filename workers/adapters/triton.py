"""Triton gRPC (asyncio) behind the TextModel protocol. Every call carries a deadline."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.grpc.aio import InferenceServerClient


class TritonTextModel:
    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self._client = InferenceServerClient(url)
        self._version = "unknown"
        self._parallelism = 1

    @property
    def version(self) -> str:
        return self._version

    @property
    def parallelism(self) -> int:
        return self._parallelism

    async def connect(self) -> None:
        """Read the serving version (set by ``modstream build-repo``) and instance count from the model config."""
        cfg = (await self._client.get_model_config(self.model, as_json=True, client_timeout=self.timeout_s))["config"]
        self._version = cfg.get("parameters", {}).get("model_version", {}).get("string_value", "unknown")
        self._parallelism = max(1, sum(int(g.get("count", 1)) for g in cfg.get("instance_group", [])))

    async def logits(
        self, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float32]:
        inputs = []
        for name, arr in (("input_ids", input_ids), ("attention_mask", attention_mask)):
            tensor = InferInput(name, list(arr.shape), "INT64")
            tensor.set_data_from_numpy(arr)
            inputs.append(tensor)
        result = await self._client.infer(
            self.model, inputs, outputs=[InferRequestedOutput("logits")], client_timeout=self.timeout_s
        )
        out: npt.NDArray[np.float32] = result.as_numpy("logits")
        return out

    async def close(self) -> None:
        await self._client.close()
