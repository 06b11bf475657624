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

    @property
    def version(self) -> str:
        return self._version

    async def connect(self) -> None:
        """Read the serving version from the model config (set by ``modstream build-repo``)."""
        cfg = await self._client.get_model_config(self.model, as_json=True, client_timeout=self.timeout_s)
        params = cfg["config"].get("parameters", {})
        self._version = params.get("model_version", {}).get("string_value", "unknown")

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
