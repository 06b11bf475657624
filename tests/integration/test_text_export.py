"""ONNX export parity for the content model, on tiny random DistilBERTs (fast, CPU only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import BertModel, DistilBertConfig, DistilBertForSequenceClassification

from training.text_model.base import MINILM_NAME, init_model, minilm_dir, minilm_distilbert
from training.text_model.export import export_onnx, quantize_int8
from training.text_model.scoring import session
from workers.text.encoder import TextEncoder, spam_prob

TEXTS = [
    "Congratulations! You have WON a $1000 gift card, click here to claim",
    "are we still on for lunch?",
    "ok",
    "Cheap meds online, no prescription needed, discreet shipping worldwide, order today",
    "Minutes from Tuesday's meeting are in the shared folder",
]


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder(minilm_dir() / "tokenizer.json", max_length=32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[DistilBertForSequenceClassification, Path]:
    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, num_labels=2
    )
    model = DistilBertForSequenceClassification(config).eval()
    return model, export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx")


def torch_logits(model: DistilBertForSequenceClassification, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()


def test_io_contract(tiny: tuple[DistilBertForSequenceClassification, Path]) -> None:
    sess = ort.InferenceSession(str(tiny[1]), providers=["CPUExecutionProvider"])
    inputs = {i.name: (i.type, i.shape) for i in sess.get_inputs()}
    assert inputs == {
        "input_ids": ("tensor(int64)", ["batch", "seq"]),
        "attention_mask": ("tensor(int64)", ["batch", "seq"]),
    }
    (output,) = sess.get_outputs()
    assert (output.name, output.type, output.shape) == ("logits", "tensor(float)", ["batch", 2])


@pytest.mark.parametrize("texts", [TEXTS, TEXTS[1:3]], ids=["batch5", "batch2"])
def test_torch_onnx_parity_on_padded_batches(
    tiny: tuple[DistilBertForSequenceClassification, Path], encoder: TextEncoder, texts: list[str]
) -> None:
    model, path = tiny
    ids, mask = encoder.encode(texts)
    assert (mask == 0).any(), "the batch must contain padding"
    (logits,) = session(path, threads=2).run(["logits"], {"input_ids": ids, "attention_mask": mask})
    assert logits.dtype == np.float32 and logits.shape == (len(texts), 2)
    np.testing.assert_allclose(logits, torch_logits(model, ids, mask), atol=1e-4)


def test_padding_does_not_change_logits(
    tiny: tuple[DistilBertForSequenceClassification, Path], encoder: TextEncoder
) -> None:
    sess = session(tiny[1], threads=1)
    ids, mask = encoder.encode(TEXTS)
    (batched,) = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    for i, text in enumerate(TEXTS):
        solo_ids, solo_mask = encoder.encode([text])
        (solo,) = sess.run(["logits"], {"input_ids": solo_ids, "attention_mask": solo_mask})
        np.testing.assert_allclose(batched[i], solo[0], atol=1e-4)


def test_int8_quantization_keeps_the_contract(
    tiny: tuple[DistilBertForSequenceClassification, Path], encoder: TextEncoder, tmp_path: Path
) -> None:
    int8 = session(quantize_int8(tiny[1], tmp_path / "model.int8.onnx", encoder, TEXTS), threads=1)
    ids, mask = encoder.encode(TEXTS)
    (logits,) = int8.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    assert logits.shape == (len(TEXTS), 2) and np.isfinite(logits).all()
    # The first layers' feed-forward outputs stay fp32; every other projection is int8.
    ops = {node.name: node.op_type for node in onnx.load(str(tmp_path / "model.int8.onnx")).graph.node}
    fp32 = sorted(name for name, op in ops.items() if op == "MatMul" and "/ffn/" in name)
    assert fp32 == [f"/model/distilbert/transformer/layer.{k}/ffn/lin2/MatMul" for k in (0, 1)]
    assert sum(op == "QLinearMatMul" for op in ops.values()) == 2 * 6 - 2  # q, k, v, out, lin1, lin2 a layer


def test_int8_scores_do_not_depend_on_batch_neighbours_or_padding(
    tiny: tuple[DistilBertForSequenceClassification, Path], encoder: TextEncoder, tmp_path: Path
) -> None:
    """The same text gets the same score alone, in any batch and at any padding length."""
    # Calibrated over several batches of different lengths, as the real run is.
    calibration = [t for n in range(1, 8) for t in (TEXTS[: n % 5 + 1] * 4)]
    int8 = session(quantize_int8(tiny[1], tmp_path / "model.int8.onnx", encoder, calibration), threads=1)

    def scores(texts: list[str], pad_to: int | None = None) -> np.ndarray:
        ids, mask = encoder.encode(texts)
        if pad_to:
            ids = np.pad(ids, ((0, 0), (0, pad_to - ids.shape[1])))
            mask = np.pad(mask, ((0, 0), (0, pad_to - mask.shape[1])))
        (logits,) = int8.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        return spam_prob(logits)

    alone = np.concatenate([scores([t]) for t in TEXTS])
    np.testing.assert_allclose(scores(TEXTS), alone, atol=1e-6)
    np.testing.assert_allclose(scores(TEXTS[::-1])[::-1], alone, atol=1e-6)
    np.testing.assert_allclose(scores(TEXTS, pad_to=32), alone, atol=1e-6)


def test_minilm_maps_onto_distilbert(encoder: TextEncoder) -> None:
    """The MiniLM->DistilBERT key mapping reproduces the BERT encoder's hidden states."""
    bert = BertModel.from_pretrained(minilm_dir(), add_pooling_layer=False).eval()
    distil = minilm_distilbert().eval()
    ids, mask = map(torch.from_numpy, encoder.encode(TEXTS[:2]))
    with torch.no_grad():
        expected = bert(input_ids=ids, attention_mask=mask).last_hidden_state
        actual = distil.distilbert(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (expected - actual)[real].abs().max().item() < 1e-4


def test_offline_init_falls_back_to_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    init = init_model(None)
    assert init.name == MINILM_NAME
    assert init.model.config.model_type == "distilbert"
    assert init.model.config.id2label == {0: "ham", 1: "spam"}


def test_non_distilbert_base_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be DistilBERT"):
        init_model(str(minilm_dir()))  # a BERT checkpoint
