"""Triton gRPC (asyncio) behind the TextModel protocol. Every call carries a deadline.

A text model is one version of the Triton model (``spam_text/<n>/``), its number derived from
the card's version (:func:`modstream.serving.triton_repo.triton_version`), so every request names the
exact text model the worker's bundle holds, and a promoted one is served beside the old.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException


class NotServed(RuntimeError):
    """Triton does not serve (yet) the version a bundle's text model needs."""


def triton_version(text_version: str) -> int:
    """The Triton version number serving the text model whose card says ``text_version``: 60 bits of its
    hash, so it is a positive int64 that every reader derives alike, with no table to share."""
    return int(hashlib.sha256(text_version.encode()).hexdigest()[:15], 16) or 1


class TritonTextModel:
    def __init__(self, url: str, model: str, timeout_s: float, version: str) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self._client = InferenceServerClient(url)
        self._version = version
        self._number = str(triton_version(version))
        self._parallelism = 1

    @property
    def version(self) -> str:
        return self._version

    @property
    def parallelism(self) -> int:
        return self._parallelism

    async def connect(self) -> None:
        """Check that Triton serves this text model's version, and read the instance count from the config."""
        if not await self._client.is_model_ready(self.model, self._number, client_timeout=self.timeout_s):
            raise NotServed(f"Triton serves no version {self._number} of {self.model} (text model {self._version})")
        cfg = (await self._client.get_model_config(self.model, as_json=True, client_timeout=self.timeout_s))["config"]
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
            self.model,
            inputs,
            model_version=self._number,
            outputs=[InferRequestedOutput("logits")],
            client_timeout=self.timeout_s,
        )
        out: npt.NDArray[np.float32] = result.as_numpy("logits")
        return out

    async def close(self) -> None:
        await self._client.close()


class TritonControl:
    """Triton's model-repository API (explicit model control), for whoever promotes a text model."""

    def __init__(self, url: str, timeout_s: float) -> None:
        from tritonclient.grpc import InferenceServerClient as SyncClient

        self.timeout_s = timeout_s
        self._client = SyncClient(url)

    def load(self, model: str) -> None:
        """Load ``model`` as its repository directory stands: versions added load, versions removed unload,
        the others keep serving. Raises when Triton cannot. A Triton polling its repository (several
        replicas on one shared volume) refuses explicit loads and follows the directory by itself."""
        try:
            self._client.load_model(model, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            if "polling is enabled" not in str(exc):
                raise

    def ready(self, model: str, number: int) -> bool:
        return bool(self._client.is_model_ready(model, str(number), client_timeout=self.timeout_s))

    def last_inference_ms(self, model: str, number: int) -> int:
        """When version ``number`` last answered a request (epoch ms; 0: never)."""
        stats = self._client.get_inference_statistics(model, str(number), as_json=True, client_timeout=self.timeout_s)
        return max((int(s.get("last_inference", 0)) for s in stats.get("model_stats", [])), default=0)

    def close(self) -> None:
        self._client.close()
