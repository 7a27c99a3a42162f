"""Relevance before language: the mined negatives, the groups and their loss term."""

from __future__ import annotations

import json

import pytest
import torch

from samelang.corpora import load_xquad
from samelang.corpora.records import Document
from samelang.training import relevance_first
from samelang.training.losses import InfoNCELoss
from samelang.training.mining import MiningQuery, Retriever, mine_negatives


def test_masked_candidates_leave_the_denominator():
    """A candidate marked as a false negative counts for nothing; the label is never masked."""
    gen = torch.Generator().manual_seed(0)
    a, c = torch.randn(2, 8, generator=gen), torch.randn(5, 8, generator=gen)
    nce = InfoNCELoss(0.1)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, 3] = mask[1, 1] = True  # row 1's own label stays in
    logits = torch.nn.functional.normalize(a) @ torch.nn.functional.normalize(c).T / 0.1
    want0 = -(logits[0, 0] - torch.logsumexp(logits[0, [0, 1, 2, 4]], 0))
    want1 = -(logits[1, 1] - torch.logsumexp(logits[1], 0))
    assert nce(a, c, mask).item() == pytest.approx(((want0 + want1) / 2).item(), rel=1e-5)
    assert nce(a, c, torch.zeros(2, 5, dtype=torch.bool)).item() == pytest.approx(nce(a, c).item(), rel=1e-6)
    with pytest.raises(ValueError, match="false_negatives must be"):
        nce(a, c, torch.zeros(2, 4, dtype=torch.bool))


def test_the_served_pipeline_mines_only_wrong_passages_and_caches_them(samelang_home):
    """Real mining: the base model over a small unlabelled collection of XQuAD paragraphs in two
    languages; what comes back is wrong (another key), in the pipeline's order, and cached."""
    en, zh = (load_xquad([x], split="train").paragraphs[:6] for x in ("en", "zh"))
    docs = [Document(f"{p.lang}-{p.group}", p.text, p.lang, None, {"key": p.group}) for p in en + zh]
    questions = [q for q in load_xquad(["zh"], split="train").questions if q.group in {p.group for p in en}][:4]
    queries = [MiningQuery(q.uid, q.text, "zh", q.group) for q in questions]
    got = mine_negatives(queries, docs, Retriever("base", 0.0), samelang_home, depth=5, log=lambda *a: None)
    assert set(got) == {q.id for q in queries}
    key = {d.id: d.metadata["key"] for d in docs}
    for q in queries:
        assert got[q.id] and all(key[d] != q.key for d in got[q.id])
        assert len(got[q.id]) >= 3  # at most the two versions of its own paragraph are right
    again = mine_negatives(queries, docs, Retriever("base", 0.0), samelang_home, depth=5, log=pytest.fail)
    assert again == got  # the cache answers: nothing is searched again


def test_retriever_specs_parse():
    assert Retriever.parse("base") == Retriever("base", 0.0)
    assert Retriever.parse("e5-small-aligned-v3+bm25=0.04") == Retriever("e5-small-aligned-v3", 0.04)
    served = Retriever.parse("served")
    assert served.model and served.lexical_weight >= 0


def test_groups_put_a_cross_language_positive_against_same_language_negatives(monkeypatch, tmp_path):
    """Every XQuAD group: the gold paragraph in another language first, then wrong paragraphs in the
    query's language (the mined ones first), the last one mined elsewhere; keys say what each says."""
    seen = {}

    def fake_mine(queries, docs, retriever, home, depth, log):
        seen["docs"] = docs
        by_lang = {}
        for d in docs:
            by_lang.setdefault(d.lang, []).append(d)
        # the "retriever" ranks two wrong paragraphs of the query's language first, then one in another
        return {q.id: [d.id for d in by_lang[q.lang] if d.metadata["key"] != q.key][-2:]
                + [d.id for d in by_lang["zh" if q.lang == "en" else "en"] if d.metadata["key"] != q.key][:1]
                for q in queries}  # fmt: skip

    monkeypatch.setattr(relevance_first, "mine_negatives", fake_mine)
    groups = relevance_first.build_ranking_groups(None, tmp_path, Retriever("base", 0.0), k=3, langs="en,de,zh",
                                                  exclude_articles=(0,))  # fmt: skip
    n_questions = sum(q.article != 0 for q in load_xquad(["en"], split="train").questions)
    assert len(groups) == 3 * n_questions
    text_key = {d.text: (d.metadata["key"], d.lang) for d in seen["docs"]}
    assert all(k != 0 for k in (int(d.metadata["key"].split("-")[1]) for d in seen["docs"]))  # held-out article
    for g in groups:
        assert len(g.docs) == len(g.keys) == len(g.doc_langs) == 4
        assert g.doc_langs[0] != g.lang and text_key[g.docs[0]] == (g.keys[0], g.doc_langs[0])
        assert all(k != g.keys[0] for k in g.keys[1:])
        assert g.doc_langs[1:3] == (g.lang, g.lang)
        assert g.doc_langs[3] != g.lang
    assert {g.doc_langs[0] for g in groups if g.lang == "de"} == {"en", "zh"}  # B cycles over the others


def test_the_trainer_adds_the_relevance_first_term(tmp_path, base_model_path, monkeypatch):
    from samelang.training.biencoder import BiencoderArgs, train_biencoder

    monkeypatch.setattr(relevance_first, "mine_negatives", lambda *a, **k: {})  # same-article negatives only
    out = tmp_path / "rf"
    args = BiencoderArgs(out=out, base=str(base_model_path), langs="zh", per_lang=2, batch_size=2, max_steps=2,
                         max_length=32, dev_n_articles=0, device="cpu", relevance_first=True, relevance_batch=3,
                         relevance_negatives=2, mine_with="base")  # fmt: skip
    train_biencoder(args, log=lambda *a: None)
    history = json.loads((out / "history.json").read_text())
    assert all(h["nce_rf"] > 0 for h in history)
    assert all(abs(h["loss"] - h["jsd"] - h["nce"] - h["nce_rf"]) < 1e-3 for h in history)
    assert "--relevance-first" in (out / "README.md").read_text()


def test_the_reranker_relevance_stage_takes_the_groups(tmp_path, fake_corpus_store, samelang_home, monkeypatch):
    """``train reranker --stage 0 --relevance-first``: the groups join the relevance stage's (the corpus's ICT
    queries among them), each scored with its positive first."""
    from samelang.training.lamar import RerankerArgs, train_reranker

    (fake_corpus_store.root / "contamination.json").write_text('{"dropped": {}}')
    monkeypatch.setattr(relevance_first, "mine_negatives", lambda *a, **k: {})
    built = []
    real = relevance_first.build_ranking_groups
    monkeypatch.setattr(relevance_first, "build_ranking_groups", lambda *a, **k: built.extend(real(*a, **k)) or built)
    args = RerankerArgs(out=tmp_path / "s0", stage=0, corpora=fake_corpus_store.root, langs="en,zh",
                        negatives_per_query=2, batch_size=3, max_steps=1, max_length=48, dev_questions=0,
                        device="cpu", home=samelang_home, relevance_first=True, mine_with="base",
                        relevance_negatives=2)  # fmt: skip
    said = []
    train_reranker(args, log=said.append)
    assert built and {g.source for g in built} - {"xquad"}  # the corpus's ICT queries too
    assert all(len(g.docs) == 3 and g.doc_langs[0] != g.lang for g in built if g.source == "xquad")
    assert any(f"{len(built)} of them relevance before language" in s for s in said)
    assert "--relevance-first" in (args.out / "README.md").read_text()


def test_later_reranker_stages_keep_learning_relevance_first(tmp_path, samelang_home, monkeypatch):
    """Stages 1 and 2 with ``--relevance-first``: ``L_rel`` on the groups joins each step's own loss."""
    from samelang.training.lamar import RerankerArgs, train_reranker

    monkeypatch.setattr(relevance_first, "mine_negatives", lambda *a, **k: {})
    monkeypatch.setattr(RerankerArgs, "training_views", lambda self: _no_corpus())
    common = dict(langs="en,zh", batch_size=2, max_steps=2, max_length=48, dev_questions=0, device="cpu",
                  home=samelang_home, relevance_first=True, relevance_batch=2, relevance_negatives=2)  # fmt: skip
    s1 = RerankerArgs(out=tmp_path / "s1", stage=1, n_sampled=1, **common)
    train_reranker(s1, log=lambda *a: None)
    s2 = RerankerArgs(out=tmp_path / "s2", stage=2, init=str(tmp_path / "s1"), **common)
    train_reranker(s2, log=lambda *a: None)
    for out, own in ((s1.out, ("distill",)), (s2.out, ("rank", "lc"))):
        history = json.loads((out / "history.json").read_text())
        assert all(h["relevance_first"] > 0 for h in history)
        assert all(abs(h["loss"] - h["relevance_first"] - sum(h[k] for k in own)) < 1e-3 for h in history)


def _no_corpus():
    from samelang.corpora.views import Views

    return Views([], [], [], {})
