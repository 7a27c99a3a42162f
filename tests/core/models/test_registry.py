"""The models the repository ships, loaded the way the service loads them: named through the
registry (``resolve_model``, ``default_cross_encoder``), with the engine options of a default
``ServiceSettings``, and checked for sane output on a few sentences (a broken adapter, a wrong
base model or a lost prompt shows up as scores no better than chance)."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.core import catalogue as R

EN = "The Rhine flows from the Swiss Alps through Germany to the North Sea."
DE = "Der Rhein fließt von den Schweizer Alpen durch Deutschland in die Nordsee."
UNRELATED = [
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "Die Fotosynthese wandelt Licht, Wasser und Kohlendioxid in Zucker und Sauerstoff um.",
    "柏林是德国的首都。",
]


@pytest.fixture(scope="module")
def served_options(samelang_home):
    from samelang.service.config import ServiceSettings

    return ServiceSettings(home=samelang_home, generator="none").engine_options()


def test_the_registry_names_the_shipped_models(samelang_home):
    assert R.resolve_model("e5-small-aligned", samelang_home) == R.ALIGNED_BIENCODER
    assert R.resolve_model("lamar-e5-small", samelang_home) == R.LAMAR_RERANKER
    for path in (R.ALIGNED_BIENCODER, R.LAMAR_RERANKER):
        assert (path / "adapter_config.json").exists() and (path / "adapter_model.safetensors").exists()
    if R.served_defaults().reranker in ("none", R.COSINE):  # evaluations fall back to the shipped LAMAR
        assert R.default_cross_encoder() == R.LAMAR_RERANKER


def test_the_aligned_encoder_puts_a_sentence_nearest_its_translation(samelang_home, served_options):
    from samelang.core.models.encoder import Encoder

    enc = Encoder(R.resolve_model("e5-small-aligned", samelang_home), home=samelang_home, options=served_options)
    assert enc.name == "e5-small-aligned" and enc.dim == 384
    q = enc.encode_queries([EN])[0]
    p = enc.encode_passages([DE, *UNRELATED])
    assert np.allclose(np.linalg.norm(p, axis=1), 1, atol=1e-4)
    cos = p @ q
    assert cos.argmax() == 0 and cos[0] - cos[1:].max() > 0.05, cos  # the translation, by a clear margin


def test_the_lamar_reranker_scores_a_relevant_pair_above_irrelevant_ones(samelang_home, served_options):
    from samelang.core.models.cross_encoder import CrossEncoderReranker

    path = R.default_cross_encoder()
    assert path is not None
    rr = CrossEncoderReranker(path, home=samelang_home, options=served_options)
    query = "Where does the Rhine flow into the sea?"
    scores = rr.score(query, [EN, DE, *UNRELATED])
    assert scores.shape == (5,) and ((scores > 0) & (scores < 1)).all()  # sigmoid probabilities
    assert min(scores[:2]) > max(scores[2:]), scores  # both languages' answer above every unrelated text


def test_an_int8_encoder_gets_its_own_demo_index(samelang_home):
    """An index holds passage vectors of one precision variant: switching precision builds another
    index rather than mixing int8 queries with fp32 passages depending on what ran first."""
    from samelang.core.catalogue import demo_index_path

    fp32 = demo_index_path(samelang_home, "en,zh", "f" * 64)
    assert demo_index_path(samelang_home, "en,zh", "f" * 64, "fp32") == fp32
    assert demo_index_path(samelang_home, "en,zh", "f" * 64, "int8-sq1") == fp32.with_name(fp32.name + "-int8-sq1")


def test_each_milvus_gets_its_own_demo_index(samelang_home, tmp_path, monkeypatch):
    """The demo index in Milvus names its collection at one URI: another ``--uri`` is another folder (a
    relative milvus-lite path counts as the file it names)."""
    from samelang.core.catalogue import demo_index_path

    monkeypatch.chdir(tmp_path)
    fp32 = demo_index_path(samelang_home, "en,zh", "f" * 64)
    a = demo_index_path(samelang_home, "en,zh", "f" * 64, "fp32", "milvus", "./a.db")
    assert a == demo_index_path(samelang_home, "en,zh", "f" * 64, "fp32", "milvus", str(tmp_path / "a.db"))
    b = demo_index_path(samelang_home, "en,zh", "f" * 64, "fp32", "milvus", "http://milvus:19530")
    assert len({fp32, a, b}) == 3 and a.name.startswith(fp32.name + "-milvus-")
