"""Each architecture runs as its own sentence-transformers configuration says (``samelang.core.runtime.heads``):
pooling (mean, CLS), prompt names (e5's, jina's), a sequence classifier's logit, a causal LM's
yes/no at the last token with its pair template; the engine's outputs equal sentence-transformers'
own on tiny random stand-ins, and what the ONNX backend cannot run is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.runtime.heads import QWEN3_RERANKER_TEMPLATE, fit_pair, pair_template, pick_prompts
from samelang.core.runtime.precision import EngineConfigError, EngineOptions

TEXTS = [
    "Where does the Rhine begin?",
    "莱茵河发源于瑞士的阿尔卑斯山。",
    "Река начинается в Альпах, а затем течёт на север.",
]
PAIRS = [(TEXTS[0], TEXTS[1]), (TEXTS[0], TEXTS[2]), (TEXTS[2], TEXTS[0])]


def test_prompts_by_name():
    assert pick_prompts({"query": "query: ", "passage": "passage: ", "document": ""}) == ("query: ", "passage: ")
    jina = {"retrieval.query": "Represent the query: ", "retrieval.passage": "Represent the document: "}
    assert pick_prompts(jina) == ("Represent the query: ", "Represent the document: ")
    assert pick_prompts({"s2p_query": "Q: ", "corpus": "D: "}) == ("Q: ", "D: ")
    assert pick_prompts({"instruct": "Find: "}, default_prompt_name="instruct") == ("Find: ", "Find: ")
    assert pick_prompts({"query": "", "document": ""}) == ("", "")


def test_fit_pair_cuts_longest_first():
    q, d = list(range(10)), list(range(100))
    assert fit_pair(q, d, 200) == (q, d)
    assert fit_pair(q, d, 50) == (q, d[:40])
    assert fit_pair(d, d, 50) == (d[:25], d[:25])


@pytest.mark.parametrize(("kind", "pooling", "query_prompt"), [
    ("xlmr-mean", "mean", "query: "), ("xlmr-cls", "cls", ""), ("bert", "mean", "Represent the query: "),
])  # fmt: skip
@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_embeddings_are_sentence_transformers_own(tiny_models, tmp_path, kind, pooling, query_prompt, backend):
    from sentence_transformers import SentenceTransformer

    enc = Encoder(tiny_models[kind], home=tmp_path, options=EngineOptions(precision="fp32", backend=backend))
    assert (enc.engine.meta["pooling"], enc.prompt()) == (pooling, query_prompt)
    st = SentenceTransformer(str(tiny_models[kind]), device="cpu")
    ours = enc.encode_queries(TEXTS)
    theirs = st.encode(TEXTS, prompt=query_prompt, normalize_embeddings=True)
    assert np.allclose(ours, theirs, atol=1e-5)
    docs = enc.encode_passages(TEXTS)
    assert not np.allclose(docs, ours, atol=1e-4) or not query_prompt  # another prompt, another vector


@pytest.mark.parametrize("kind", ["xlmr-seqcls", "qwen3-causal", "gemma3-causal"])
def test_scores_are_sentence_transformers_own(tiny_models, tmp_path, kind):
    from sentence_transformers import CrossEncoder

    rr = CrossEncoderReranker(tiny_models[kind], home=tmp_path, max_length=256,
                              options=EngineOptions(precision="fp32", backend="torch"))  # fmt: skip
    theirs = CrossEncoder(str(tiny_models[kind]), device="cpu", max_length=512).predict(PAIRS)
    assert np.allclose(rr.score_pairs(PAIRS), theirs, atol=1e-5)
    # batched with a longer pair (left padding for the causal ones) changes no score
    alone = np.array([rr.score_pairs([p])[0] for p in PAIRS])
    assert np.allclose(alone, theirs, atol=1e-5)


def test_causal_reranker_reads_its_template_and_cuts_the_pair_not_the_suffix(tiny_models, tmp_path):
    rr = CrossEncoderReranker(tiny_models["qwen3-causal"], home=tmp_path, max_length=32,
                              options=EngineOptions(precision="fp32"))  # fmt: skip
    meta = rr.engine.meta
    assert meta["score"] == "yes-no" and meta["padding_side"] == "left"
    assert meta["template"][0].startswith("<|im_start|>system") and meta["template"][2].endswith("</think>\n")
    long_doc = "word " * 500
    assert rr.overflowing("q", [long_doc, "short"]) == [True, False]
    ids = rr.engine._tokenise([("q", long_doc)])[0]
    suffix = rr.engine.tokenizer.encode(meta["template"][2], add_special_tokens=False).ids
    assert ids[-len(suffix) :] == suffix  # the scored last token is the template's
    assert rr.engine.backend_name == "torch"  # auto: a causal LM does not go to the BERT graph


def test_no_pair_template_falls_back_to_qwen3_reranker_s(tiny_models):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models["qwen3-causal"])
    own = pair_template(tok)  # its own, written for the pair: used as it is
    assert own[1].endswith("<Document>: ") and own != QWEN3_RERANKER_TEMPLATE
    # a generic chat template renders the pair as two turns, which no reranker was trained on
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    assert pair_template(tok) == QWEN3_RERANKER_TEMPLATE
    tok.chat_template = "{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}"
    assert pair_template(tok) == QWEN3_RERANKER_TEMPLATE


@pytest.mark.parametrize("kind", ["qwen3-causal", "gemma3-causal"])
def test_onnx_and_int8_are_refused_for_what_does_not_export(tiny_models, tmp_path, kind):
    for opts in (EngineOptions(precision="fp32", backend="onnx"), EngineOptions(precision="int8")):
        with pytest.raises(EngineConfigError, match="not BERT-family"):
            CrossEncoderReranker(tiny_models[kind], home=tmp_path, options=opts)


def test_a_pooling_the_engine_lacks_is_refused(tiny_models, tmp_path):
    import json
    import shutil

    folder = tmp_path / "maxpool"
    shutil.copytree(tiny_models["xlmr-mean"], folder)
    cfg_file = next(folder.glob("*Pooling/config.json"))
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), "pooling_mode": "max"}))
    with pytest.raises(ValueError, match="pooling 'max'"):
        Encoder(folder, home=tmp_path, options=EngineOptions(precision="fp32", backend="torch"))
