"""``samelang eval pipeline``: its metrics on lists whose answers are known by hand, the sample,
the intervals, the score cache, and the served-defaults file the service reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from samelang.core.metrics import audit as A
from samelang.core.metrics import retrieval as M
from samelang.evaluation import pipeline as ev


def test_reader_metrics_on_hand_made_lists():
    # 3 queries over 12 documents; lists of different lengths; reader gold in columns 4, 7, 2
    S = A.score_matrix([[4, 1, 2], [0, 1, 2, 3, 5, 6, 8, 9, 10, 11, 7], [1]], 12)
    graded = np.zeros((3, 12))
    graded[0, [4, 5]] = [2, 1]
    graded[1, [7, 3]] = [2, 1]
    graded[2, [2, 1]] = [2, 1]
    m = A.reader_metrics(S, np.array([4, 7, 2]), graded)
    assert m["ndcg_at_1"].tolist() == [1, 0, 0]
    # query 2: gold at rank 11 (> 10) -> 0; query 3: a one-document list without the gold -> 0,
    # although an unlisted document would tie for rank 2 in a plain argsort
    assert m["mrr_at_10"].tolist() == [1, 0, 0]
    assert m["ndcg_at_10"].tolist() == [1, 0, 0]
    ideal = 2 + 1 / np.log2(3)
    assert m["graded_ndcg_at_10"][0] == pytest.approx(2 / ideal)  # the 1-gain version is not listed
    assert m["graded_ndcg_at_10"][1] == pytest.approx((1 / np.log2(5)) / ideal)
    assert m["graded_ndcg_at_10"][2] == pytest.approx(1 / ideal)


def test_audit_of_a_full_ranking_equals_the_seed_metrics():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(20, 50))
    R = np.zeros_like(scores)
    R[np.arange(20), rng.integers(0, 50, 20)] = 1
    R[np.arange(20), rng.integers(0, 50, 20)] = 1
    lists = [list(np.argsort(-s, kind="stable")) for s in scores]
    au = A.audit_lists(A.score_matrix(lists, 50), R)
    np.testing.assert_array_equal(au.max_r, M.max_at_r(scores, R))
    np.testing.assert_array_equal(au.comp_at_10, M.comp_at_k(scores, R, 10).astype(bool))
    assert not au.censored.any()
    # a list cut at 5: queries whose relevant documents are not all listed are censored
    cut = A.audit_lists(A.score_matrix([x[:5] for x in lists], 50), R)
    assert (cut.censored == (M.max_at_r(scores, R) > 5)).all()
    agg = cut.aggregate(np.ones(20, bool), ["en"] * 20, ["en"] * 20)
    assert agg["censored"] == int(cut.censored.sum()) and agg["queries"] == 20


def test_the_sample_is_fixed_and_spans_every_article():
    s = ev.sample_indices(374, 48)
    assert len(s) == 48 and s[0] == 0 and s[-1] == 373 and (np.diff(s) > 0).all()
    assert (ev.sample_indices(374, 48) == s).all()
    assert (ev.sample_indices(10, 48) == np.arange(10)).all()
    from samelang.corpora import load_xquad

    arts = {load_xquad(["en"], split="test").questions[i].article for i in s}
    assert len(arts) == 16  # all held-out test articles


def test_bootstrap_interval():
    v = np.array([100.0] * 90 + [0.0] * 10)
    lo, hi = ev.bootstrap_ci(v)
    assert lo < 90 < hi and hi - lo < 15 and ev.bootstrap_ci(v) == (lo, hi)
    assert ev.bootstrap_ci(np.full(50, 100.0)) == (100.0, 100.0)


class CountingModel:
    """A cross-encoder stand-in that counts what it is asked to score (the cache is under test)."""

    name, kind, fingerprint, path = "counting", "cross-encoder", "counting-1", None

    def __init__(self):
        self.pairs = 0

    def score(self, query, docs):
        self.pairs += len(docs)
        return np.array([len(query) + len(d) / 100 for d in docs])


def test_score_cache_scores_each_pair_once_and_survives_a_restart(tmp_path):
    model = CountingModel()
    cache = ev.CachedReranker(model, tmp_path / "s.npz")
    a = cache.score("q1", ["a", "bb", "ccc"])
    b = cache.score("q1", ["bb", "dddd"])
    assert model.pairs == 4 and b[0] == a[1]
    assert cache.score("query two", ["a"])[0] != a[0]  # keyed by the query too
    cache.save()
    again = ev.CachedReranker(model, tmp_path / "s.npz")
    np.testing.assert_array_equal(again.score("q1", ["a", "bb", "ccc"]), a)
    assert model.pairs == 5  # nothing re-scored after the reload


def test_served_defaults_file_drives_the_service(tmp_path, monkeypatch):
    from samelang.core import catalogue
    from samelang.evaluation import serving_rule as S
    from samelang.service.config import ServiceSettings

    def results(*rows):
        res = {s: {S.PRIMARY[s]: {"mean": 90.0}} for s in S.SHAPES}
        res["partial"].update({m: {"mean": 50.0} for m in ("reader_at_1", "cross_at_1")})
        return {r: res for r in rows}

    row = S.ShapeRow("base")
    path = tmp_path / "serving.json"
    S.write_serving(path, row, results(row), results(row), {row: {"mean": 90.0, "below_base": []}}, "cmd")
    data = json.loads(path.read_text())
    assert data["served"] == {"retriever": "base", "reranker": "none", "candidates": "groups",
                              "rerank_k": 20, "lexical_weight": 0.0, "rerank_fusion": 0.0}  # fmt: skip
    assert data["chosen"] == row.name and data["test"][row.name]["partial"] == 90.0 and "rule" in data
    monkeypatch.setattr(catalogue, "SERVED_DEFAULTS", path)
    monkeypatch.setattr(catalogue.served_defaults, "__defaults__", (path,))
    d = ServiceSettings().pipeline_defaults()
    assert (d.rerank, d.rerank_k, d.group_candidates, d.lexical_weight) == (False, 20, True, 0.0)
    # a reranked row (a hand-written file: the shape judge serves none today) reranks by default
    path.write_text(json.dumps({"served": {"retriever": "base", "reranker": "lamar-e5-small", "candidates": "groups"}}))
    assert ServiceSettings().pipeline_defaults().rerank is True
    assert catalogue.default_reranker(None) == catalogue.LAMAR_RERANKER
    assert ServiceSettings(rerank=False, group_candidates=False).pipeline_defaults().rerank is False
    # an explicit --reranker turns reranking on unless --no-rerank says otherwise
    path.write_text(json.dumps({"served": {"retriever": "base", "reranker": "none", "candidates": "documents"}}))
    assert ServiceSettings().pipeline_defaults().rerank is False
    assert ServiceSettings(reranker="cosine").pipeline_defaults().rerank is True
    assert catalogue.default_reranker(None) is None and catalogue.default_reranker("cosine") is None
    assert ServiceSettings().pipeline_defaults().lexical_weight == 0.0  # a file from before hybrid rows: dense
    # a hybrid row: its BM25 weight is served, and --lexical-weight / SAMELANG_LEXICAL_WEIGHT override it
    hybrid = S.ShapeRow("e5-small-fused", 0.04)
    S.write_serving(path, hybrid, results(hybrid), results(hybrid), {hybrid: {"mean": 90.0, "below_base": []}}, "c")
    assert json.loads(path.read_text())["served"]["lexical_weight"] == 0.04
    assert ServiceSettings().pipeline_defaults().lexical_weight == 0.04
    assert catalogue.default_biencoder(ServiceSettings().home) == catalogue.REPO_MODELS / "e5-small-fused"
    assert ServiceSettings(lexical_weight=0).pipeline_defaults().lexical_weight == 0
    monkeypatch.setenv("SAMELANG_LEXICAL_WEIGHT", "0.2")
    assert ServiceSettings().pipeline_defaults().lexical_weight == 0.2
    # a reranked row fused with its retriever: k and the weight are served, and the flags override them
    fused = S.ShapeRow("e5-small-fused", 0.04, reranker="lamar-e5-small", rerank_k=10, fusion=4.0)
    S.write_serving(path, fused, results(fused), results(fused), {fused: {"mean": 90.0, "below_base": []}}, "c")
    d = ServiceSettings().pipeline_defaults()
    assert (d.rerank, d.rerank_k, d.rerank_fusion) == (True, 10, 4.0)
    assert ServiceSettings(rerank_fusion=0).pipeline_defaults().rerank_fusion == 0.0
    # the weight was measured for the measured reranker: another one given by flag is served alone
    assert ServiceSettings(reranker="cosine").pipeline_defaults().rerank_fusion == 0.0
    assert ServiceSettings(reranker="cosine", rerank_fusion=2).pipeline_defaults().rerank_fusion == 2.0
    # the row belongs to the models it was measured on: another bi-encoder gets the neutral row, another
    # reranker its neutral k, and both are named (what /info and the log say)
    monkeypatch.delenv("SAMELANG_LEXICAL_WEIGHT")
    other = ServiceSettings(model="org/other")
    d = other.pipeline_defaults()
    assert (d.rerank, d.rerank_k, d.lexical_weight, d.rerank_fusion) == (False, 20, 0.0, 0.0)
    assert other.unmeasured_models() == {"model": "org/other"}
    assert ServiceSettings(model="e5-small-fused", reranker="lamar-e5-small").unmeasured_models() == {}
    d = ServiceSettings(reranker="org/reranker").pipeline_defaults()
    assert (d.rerank, d.rerank_k, d.rerank_fusion, d.lexical_weight) == (True, 20, 0.0, 0.04)


def test_a_faster_unreranked_row_keeps_its_cross_encoder_for_rerank(tmp_path, monkeypatch):
    """The rule serves a row that reranks nothing: /search does not rerank, yet /rerank (and a request
    that asks to rerank) gets the best reranked row's cross-encoder, k and weight, not the cosine."""
    from samelang.core import catalogue
    from samelang.evaluation import serving_rule as S
    from samelang.service.config import ServiceSettings

    plain = S.ShapeRow("e5-small-fused", 0.04)
    over = [S.ShapeRow("e5-small-fused", 0.04, reranker="lamar-e5-small", rerank_k=k, fusion=4.0) for k in (10, 20)]
    other = S.ShapeRow("base", reranker="elsewhere")  # reranks another retriever: never the one named
    verdict = {plain: {"mean": 90.0}, over[0]: {"mean": 91.0}, over[1]: {"mean": 91.5}, other: {"mean": 99.0}}
    served = S.served_entry(plain, verdict)
    assert (served["reranker"], served["rerank_k"], served["rerank_fusion"], served["rerank"]) == (
        "lamar-e5-small", 20, 4.0, False)  # fmt: skip
    assert S.served_entry(over[0], verdict) == over[0].served  # a reranked row is served as it is
    assert S.served_entry(plain, {plain: {"mean": 90.0}}) == plain.served  # nothing reranked it: none
    path = tmp_path / "serving.json"
    path.write_text(json.dumps({"served": served}))
    monkeypatch.setattr(catalogue, "SERVED_DEFAULTS", path)
    monkeypatch.setattr(catalogue.served_defaults, "__defaults__", (path,))
    measured = catalogue.served_defaults()
    assert (measured.rerank, measured.search_reranker, measured.reranker) == (False, "none", "lamar-e5-small")
    assert catalogue.default_reranker(None) == catalogue.LAMAR_RERANKER  # what /rerank loads
    d = ServiceSettings().pipeline_defaults()
    assert (d.rerank, d.rerank_k, d.rerank_fusion) == (False, 20, 4.0)
    assert ServiceSettings(rerank=True).pipeline_defaults().rerank is True
    assert ServiceSettings(reranker="lamar-e5-small").unmeasured_models() == {}


def test_best_row_prefers_quality_then_latency_then_simplicity():
    def row(name, ndcg, ms, reranker="none", strategy="groups", lexical=0.0, graded=50.0):
        r = ev.Row(name, reranker, strategy, lexical=lexical)
        r.results = {"sample": {"ndcg_at_1": {"mean": ndcg}, "graded_ndcg_at_10": {"mean": graded}},
                     "latency_ms_p50": ms}  # fmt: skip
        return r

    rows = [row("a", 92.0, 10), row("b", 94.001, 900, "lamar"), row("c", 94.0, 20)]
    assert ev.best_row(rows).retriever == "c"  # 94.001 and 94.0 tie at 0.01 points: the faster wins
    assert ev.best_row(rows[:2]).retriever == "b"  # quality first, whatever it costs
    # equal quality and latency within timing noise: no reranker before the cosine, documents before groups
    same = [row("cos", 90.0, 17.0, "cosine", "documents"), row("grp", 90.0, 16.0), row("doc", 90.0, 17.5,
            strategy="documents")]  # fmt: skip
    assert ev.best_row(same).retriever == "doc"
    # a hybrid retriever is served when it is better, not when it ties (dense is the simpler one)
    assert ev.best_row([row("dense", 90.0, 16.0), row("hybrid", 90.0, 16.5, lexical=0.08)]).retriever == "dense"
    best = ev.best_row([row("dense", 90.0, 16.0), row("hybrid", 93.0, 18.0, lexical=0.08)])
    assert best.retriever == "hybrid" and best.name == "hybrid + BM25 (w=0.08) -> groups -> no rerank"
    # tied on the reader's gold: the row that also shows the gold's other versions next wins (graded nDCG@10)
    tie = [row("doc", 90.0, 16.0, strategy="documents", graded=55.0), row("grp", 90.0, 17.0, graded=91.0)]
    assert ev.best_row(tie).retriever == "grp"
    close = [row("doc", 90.0, 16.0, strategy="documents", graded=90.5), row("grp", 90.0, 17.0, graded=91.0)]
    assert ev.best_row(close).retriever == "doc"  # within a point: the simpler one


@pytest.mark.slow
def test_eval_pipeline_command_end_to_end(tmp_path, samelang_home):
    """The whole command on 2 questions per language (smoke: every row, the HTTP check)."""
    import subprocess
    import sys

    from samelang.evaluation.fusion import tuned_weights

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "samelang", "eval", "pipeline", "--max-questions", "2", "--per-lang", "2"]
    r = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    # 2 retrievers x 2 strategies x (none, cosine, lamar) + base's hybrid x 2 strategies x (none, lamar)
    assert len(data["rows"]) == 16 and data["http"]["queries"] == 24
    assert {r["lexical_weight"] for r in data["rows"]} == {0.0, tuned_weights()["base"]}
    for row in data["rows"]:
        assert 0 <= row["sample"]["ndcg_at_1"]["mean"] <= 100 and row["latency_ms_p50"] > 0


def test_fusion_weights_are_tuned_on_articles_the_model_never_saw(tmp_path, base_model_path):
    from samelang.core.catalogue import ALIGNED_BIENCODER
    from samelang.corpora import dev_articles, load_split
    from samelang.evaluation import fusion

    test = set(load_split()["test_articles"])
    articles, why = fusion.tuning_articles(base_model_path)  # never trained on XQuAD: every train article
    assert set(articles) == set(load_split()["train_articles"]) and not test & set(articles)
    articles, why = fusion.tuning_articles(ALIGNED_BIENCODER)  # trained on XQuAD: only its dev articles
    assert articles == dev_articles(3) and "dev" in why
    shipped = json.loads(fusion.fusion_file().read_text())
    for r in shipped["retrievers"].values():
        assert not test & set(r["articles"])
        assert r["lexical_weight"] in [float(w) for w in r["ndcg_at_1"]]
        best = max(r["ndcg_at_1"].values())
        assert r["ndcg_at_1"][f"{r['lexical_weight']:g}"] == best  # the chosen weight is the grid's best
    assert fusion.tuned_weights() == {n: r["lexical_weight"] for n, r in shipped["retrievers"].items()}
    assert fusion.tuned_weights(tmp_path / "none.json") == {}
