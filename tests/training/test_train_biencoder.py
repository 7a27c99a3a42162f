"""A 2-step CPU training run of the real base model with LoRA: it finishes,
changes the weights, and writes adapter, card, arguments and manifest."""

from __future__ import annotations

import json

import pytest
from safetensors.numpy import load_file

from training.biencoder import BiencoderArgs, train_biencoder


def test_two_step_smoke_run_changes_the_weights(tmp_path, base_model_path):
    out = tmp_path / "aligned"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh,ar", per_lang=4, batch_size=2, max_steps=2,
                         max_length=48, eval_every=1000, dev_n_articles=0, device="cpu")  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    weights = load_file(out / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and max(abs(v).max() for v in lora_b) > 0  # LoRA B starts at zero: non-zero means trained
    targs = json.loads((out / "training_args.json").read_text())
    assert targs["loss"] == "jsd+nce" and targs["n_triplets"] == 8
    history = json.loads((out / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2] and all(h["jsd"] > 0 and h["nce"] > 0 for h in history)
    manifest = json.loads((out / "samelang_manifest.json").read_text())
    assert manifest["kind"] == "lora-adapter" and manifest["adapter_sha256"]
    assert "samelang train biencoder" in (out / "README.md").read_text()
    assert not (out / "checkpoints").exists()


def test_adapter_loads_in_the_service_encoder(tmp_path, base_model_path, encoder):
    from service.models.encoder import Encoder

    out = tmp_path / "a"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh", per_lang=2, batch_size=2, max_steps=1,
                         max_length=32, dev_n_articles=0, device="cpu", lr=1e-2)  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    aligned = Encoder(out)
    assert aligned.fingerprint != encoder.fingerprint and aligned.dim == 384
    a = aligned.encode_passages(["Der Rhein ist ein Fluss."])
    b = encoder.encode_passages(["Der Rhein ist ein Fluss."])
    assert 0.5 < float((a * b).sum()) < 0.99999  # the adapter is applied, and the model is still sane


def test_target_queries_add_their_two_terms(tmp_path, base_model_path):
    """``--target-queries``: q_t is trained against p_t and p_en, beside the seed's terms."""
    out = tmp_path / "tq"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="de", per_lang=4, batch_size=2, max_steps=1,
                         max_length=32, dev_n_articles=0, device="cpu", target_queries=True)  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    (step,) = json.loads((out / "history.json").read_text())
    assert step["nce_qt"] > 0 and step["nce_qt_en"] > 0
    assert step["loss"] == pytest.approx(step["jsd"] + step["nce"] + step["nce_qt"] + step["nce_qt_en"], rel=1e-5)
    assert "--target-queries" in (out / "README.md").read_text()
