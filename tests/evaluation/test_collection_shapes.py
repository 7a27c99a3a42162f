"""The collection-shape judge (``samelang eval pipeline --shapes``): the fixed constructions, the
metrics on lists whose answers are known by hand, the serving rule, and the tiny run end to end
(every shape, the served row through a real HTTP server giving the numbers ``Pipeline.search`` gives)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from samelang.core.catalogue import served_defaults, shipped_cross_encoders
from samelang.core.metrics.audit import LabelledQuery
from samelang.core.paths import REPO_MODELS
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.evaluation import collection_shapes as S
from samelang.evaluation import judge as SR


def _groups(split="all"):
    return [p.group for p in load_xquad(["en"], split=split).paragraphs]


def test_the_shapes_are_fixed_and_hold_what_they_promise():
    groups = _groups()
    partial = S.present_versions("partial", groups)
    assert partial == S.present_versions("partial", list(reversed(groups)))  # a hash per version, not an order
    assert {g for g, _ in partial} == set(groups)  # at least one version of every paragraph
    share = {x: sum((g, x) in partial for g in groups) / len(groups) for x in XQUAD_LANGS}
    assert abs(share["en"] - S.P_EN) < 0.08 and all(abs(share[x] - S.P_OTHER) < 0.08 for x in XQUAD_LANGS[1:])
    one = S.present_versions("one", groups)
    assert len(one) == len(groups) and {g for g, _ in one} == set(groups)
    assert len({x for _, x in one}) == 12  # every language holds some paragraphs
    assert S.present_versions("parallel", groups) == {(g, x) for g in groups for x in XQUAD_LANGS}
    with pytest.raises(ValueError, match="unknown shape"):
        S.present_versions("mostly-english", groups)


def test_only_the_parallel_shape_carries_group_labels_and_test_pools_hold_every_paragraph():
    docs = S.shape_documents("partial", "test")
    assert docs and all(d.group is None for d in docs)
    assert {d.id for d in docs} <= {p.id for x in XQUAD_LANGS for p in load_xquad([x]).paragraphs}
    assert len({d.metadata["article"] for d in docs}) == 48  # test questions search all 240 paragraphs
    train = S.shape_documents("one", "train")
    test_articles = {p.article for p in load_xquad(["en"], split="test").paragraphs}
    assert not {d.metadata["article"] for d in train} & test_articles  # tuning never sees a test paragraph
    assert all(d.group for d in S.shape_documents("parallel", "train", max_paragraphs=2))


def _q(lang, article, paragraph):
    gid = f"xquad-{article}-{paragraph}"
    return LabelledQuery("?", lang, gid, (), f"xquad-{lang}-{article}-{paragraph}")


def test_metrics_on_hand_made_lists():
    qs = [_q("de", 2, 0), _q("de", 2, 1), _q("zh", 5, 3), _q("zh", 5, 4)]
    present = {("xquad-2-0", "de"), ("xquad-2-0", "en"), ("xquad-2-1", "en"), ("xquad-5-3", "zh"), ("xquad-5-4", "en")}
    lists = [
        ["xquad-en-2-0", "xquad-de-2-0"],  # found, but not the reader's version (which exists)
        ["xquad-en-2-1"],  # found in English: the German one does not exist -> cross
        ["xquad-zh-5-3"],  # the reader's version first
        ["xquad-zh-9-9"] * 10 + ["xquad-en-5-4"],  # found only at rank 11
    ]
    m = S.score_lists("partial", lists, qs, present)
    assert m["found_at_1"].tolist() == [1, 1, 1, 0]
    assert np.isnan(m["reader_at_1"]).tolist() == [False, True, False, True]
    assert m["reader_at_1"][[0, 2]].tolist() == [0, 1]
    assert m["cross_at_1"][[1, 3]].tolist() == [1, 0]
    # question 4's answer exists only in English, and a wrong Chinese paragraph comes first
    assert np.isnan(m["same_language_first"]).tolist() == [True, False, True, False]
    assert m["same_language_first"][[1, 3]].tolist() == [0, 1]
    wrong_elsewhere = S.score_lists("partial", [["xquad-en-9-9"]], [qs[3]], present)
    assert wrong_elsewhere["same_language_first"].tolist() == [0] and wrong_elsewhere["cross_at_1"].tolist() == [0]
    assert m["found_at_10"].tolist() == [1, 1, 1, 0]
    mono = S.score_lists("mono", [["xquad-de-1-1", "xquad-de-2-0"], ["xquad-de-2-1"], [], ["x-x-1-1"]], qs, present)
    assert mono["ndcg_at_10"][0] == pytest.approx(1 / np.log2(3)) and mono["ndcg_at_10"][1:].tolist() == [1, 0, 0]
    par = S.score_lists(
        "parallel", [["xquad-en-2-0", "xquad-de-2-0"], ["xquad-de-2-1"], [], ["xquad-zh-5-4"]], qs, present
    )
    assert par["ndcg_at_1"].tolist() == [0, 1, 0, 1] and par["found_at_1"].tolist() == [1, 1, 0, 1]
    assert par["mrr_at_10"].tolist() == [0.5, 1, 0, 1] and par["ndcg_at_10"][0] == pytest.approx(1 / np.log2(3))
    summary = S.summarise(m, np.array([q.lang for q in qs]))
    assert summary["reader_at_1"]["n"] == 2 and summary["reader_at_1"]["mean"] == 50.0
    assert summary["cross_at_1"]["per_lang"]["de"] == 100.0 and summary["cross_at_1"]["per_lang"]["en"] is None


@pytest.fixture(scope="module")
def tiny(samelang_home, tmp_path_factory):
    from samelang.evaluation.pipeline import PipelineEvalOptions

    serving = REPO_MODELS / "serving.json"
    before = serving.read_bytes()
    # one cross-encoder, the one /rerank serves: every shipped one would convert three more models on a cold
    # cache for the same code path (the default's list: test_reranked_rows_cross_the_speed_and_fusion_levers...)
    served = served_defaults()  # the served rows only: every row's own code path is the same
    opts = PipelineEvalOptions(shapes=True, tiny=True, out=tmp_path_factory.mktemp("shapes"), home=samelang_home,
                               retriever=[served.retriever],
                               cross_encoder=[n for n in [served.reranker] if n != "none"])  # fmt: skip
    report = SR.run_shapes(opts, log=lambda m: None)
    assert serving.read_bytes() == before  # a tiny run never changes what is served
    return opts, report


def test_the_tiny_judge_runs_every_shape_and_http_gives_the_pipelines_numbers(tiny):
    opts, report = tiny
    data = json.loads((opts.out / "shapes-tiny" / "results.json").read_text())
    names = [r["row"] for r in data["test"]]
    assert names[:2] == ["base -> groups", "base + BM25 (w=0.08) -> groups"] and data["chosen"] in names
    for split in ("train", "test"):
        for row in data[split]:
            assert set(row["shapes"]) == set(S.SHAPES)
            for shape, metrics in row["shapes"].items():
                v = metrics[S.PRIMARY[shape]]
                assert v["n"] == 2 * 12 and 0 <= v["mean"] <= 100, (split, row["row"], shape)
            # 3 paragraphs per language: within its own language every row lists the gold among its 10
            # (a shape index that does not hold the questions' paragraphs fails here)
            assert row["shapes"]["mono"]["ndcg_at_10"]["mean"] >= 50, (split, row["row"])
    served = next(r for r in data["test"] if r["row"] == data["chosen"])
    for shape in S.SHAPES:  # through HTTP, the served row's lists are the pipeline's
        for metric, v in data["http"][shape].items():
            assert v["mean"] == pytest.approx(served["shapes"][shape][metric]["mean"], nan_ok=True), (shape, metric)
    assert "Reported on the test-article shapes" in report.table and "per query language" in report.table
    # the --cross-encoder reranks the retriever the rule chose among the retriever rows, on the
    # reranked rows' questions (tiny: all 2 per language), beside that retriever on the same questions
    reranked = [r for r in data["test"] if r["reranker"] != "none"]
    assert {r["reranker"] for r in reranked} == (set(opts.cross_encoder) or {p.name for p in shipped_cross_encoders()})
    assert all(r["shapes"]["partial"]["found_at_1"]["n"] == 24 for r in reranked)
    assert "beside their retriever on the same" in report.table
    assert set(data["p50_ms"]["test"]) == set(names) and all(v > 0 for v in data["p50_ms"]["test"].values())


def test_every_shipped_retriever_is_a_row_with_the_weight_it_is_served_with():
    """The judge rows the base model, each shipped bi-encoder (dense and hybrid) and each fused
    retriever at the BM25 weight its ``fused.json`` was tuned with; a cross-encoder is no row."""
    from samelang.core.catalogue import shipped_biencoders

    rows = SR.default_rows({"base": 0.08})
    names = {r.retriever for r in rows}
    fused = sorted(p.parent.name for p in REPO_MODELS.glob("*/fused.json"))
    assert {p.name for p in shipped_biencoders()} <= names and set(fused) <= names
    assert "lamar-e5-small" not in names and "e5-small-aligned" in names

    for name in fused:
        cfg = json.loads((REPO_MODELS / name / "fused.json").read_text())
        assert [r.lexical for r in rows if r.retriever == name] == [cfg["lexical_weight"]] == [SR.fused_weight(name)]
    assert SR.fused_weight("e5-small-aligned") is None


def test_a_named_retriever_is_judged_beside_the_base_rows_only_and_a_card_keeps_the_served_one():
    from types import SimpleNamespace

    weights = {"base": 0.08}
    every = SR.default_rows(weights)
    assert SR.judged_rows(SimpleNamespace(retriever=[], card=False), weights) == every
    named = SR.judged_rows(SimpleNamespace(retriever=["e5-small-aligned-v4"], card=False), weights)
    assert {r.retriever for r in named} == {"base", "e5-small-aligned-v4"} and named[:2] == every[:2]
    assert named == [r for r in every if r.retriever in ("base", "e5-small-aligned-v4")]  # each with all its weights
    carded = SR.judged_rows(SimpleNamespace(retriever=["e5-small-aligned-v4"], card=True), weights)
    assert {r.retriever for r in carded} == {"base", "e5-small-aligned-v4", served_defaults().retriever}
    with pytest.raises(ValueError, match=r"--retriever \['no-such-model'\]: not a judged row"):
        SR.judged_rows(SimpleNamespace(retriever=["no-such-model"], card=False), weights)


def test_the_judge_asks_only_the_articles_it_is_given_over_the_same_pools(samelang_home):
    """The serving rule chooses on the dev articles' questions (no trainer here trains on them): a
    judge given articles asks only their questions (its pools are the split's: :meth:`ShapeJudge.index`
    builds from the split's paragraphs alone)."""
    first = load_xquad(["en"], split="train").paragraphs[0].article
    kw = dict(split="train", shapes=("partial",), max_paragraphs=3, memo=False, log=lambda m: None)
    judge = S.ShapeJudge(samelang_home, articles=(first,), **kw)
    assert judge.queries and {int(q.group.split("-")[1]) for q in judge.queries} == {first}
    assert not S.ShapeJudge(samelang_home, articles=(10_000,), **kw).queries


def test_reranked_rows_ask_the_same_positions_in_every_language(samelang_home):
    judge = S.ShapeJudge(samelang_home, split="test", shapes=("partial",), memo=False, log=lambda m: None)
    mask = judge.reranked_questions
    assert mask.sum() == S.RERANK_PER_LANG * 12
    per_lang = {x: sorted(judge.position[mask & (judge.qlang == x)].tolist()) for x in XQUAD_LANGS}
    assert len({tuple(v) for v in per_lang.values()}) == 1  # one set of questions, asked in all 12 languages
    assert judge.row_questions(S.ShapeRow("base", reranker="lamar")).tolist() == np.flatnonzero(mask).tolist()
    assert len(judge.row_questions(S.ShapeRow("base"))) == len(judge.queries)


def test_reranked_rows_cross_the_speed_and_fusion_levers_over_one_retriever():
    """Each cross-encoder reranks the chosen retriever's first k candidates for each k of the grid, alone and
    fused with the retriever's score; every such row is compared with that same retriever."""
    retriever = S.ShapeRow("e5-small-fused-v3", 0.04)
    assert {r.reranker for r in SR.reranked_rows(retriever)} == {p.name for p in shipped_cross_encoders()}
    rows = SR.reranked_rows(retriever, ["a", "b"])
    assert len(rows) == 2 * len(SR.RERANK_KS) * len(SR.RERANK_FUSIONS) and len(set(rows)) == len(rows)
    assert {(r.rerank_k, r.fusion) for r in rows} == {(k, w) for k in SR.RERANK_KS for w in SR.RERANK_FUSIONS}
    assert all(r.reranked and r.unreranked == retriever for r in rows)
    assert {r.reranker for r in rows} == {"a", "b"} and len({r.name for r in rows}) == len(rows)
    assert {r.reranker for r in SR.reranked_rows(retriever)} == {p.name for p in shipped_cross_encoders()}


def test_cross_encoder_none_judges_the_retrievers_alone_and_never_writes_the_card():
    from pydantic import ValidationError

    from samelang.evaluation.pipeline import PipelineEvalOptions

    retriever = S.ShapeRow("e5-small-fused-v3", 0.04)
    assert SR.judged_rerankers(PipelineEvalOptions(cross_encoder=["none"]), retriever) == []
    assert len(SR.judged_rerankers(PipelineEvalOptions(cross_encoder=["a"]), retriever)) == len(SR.reranked_rows(
        retriever, ["a"]))  # fmt: skip
    # the served row is chosen among the reranked rows too: a card without them would not be the judge's
    with pytest.raises(ValidationError, match="--cross-encoder none with --card"):
        PipelineEvalOptions(cross_encoder=["none"], card=True)


def test_rerank_k_narrows_the_reranked_rows_and_the_card_names_it(monkeypatch):
    """``--rerank-k`` (or ``SAMELANG_EVAL_RERANK_K``) replaces the tuned grid's ks: only those rows, every fusion;
    out-of-range ks are refused naming the field; the judge's command line says every narrowing flag."""
    from pydantic import ValidationError

    from samelang.evaluation.pipeline import PipelineEvalOptions

    retriever = S.ShapeRow("e5-small-fused-v3", 0.04)
    opts = PipelineEvalOptions(cross_encoder=["a"], rerank_k=[10, 10], retriever=["e5-small-fused-v3"], ood=False)
    rows = SR.judged_rerankers(opts, retriever)
    assert {r.rerank_k for r in rows} == {10} and len(rows) == len(SR.RERANK_FUSIONS)
    assert SR.judge_command(opts) == ("samelang eval pipeline --shapes --no-ood --retriever e5-small-fused-v3 "
                                      "--cross-encoder a --rerank-k 10")  # fmt: skip
    monkeypatch.setenv("SAMELANG_EVAL_RERANK_K", "5,20")
    assert PipelineEvalOptions().rerank_k == [5, 20]
    monkeypatch.delenv("SAMELANG_EVAL_RERANK_K")
    for bad in (0, 101):
        with pytest.raises(ValidationError, match="rerank_k"):
            PipelineEvalOptions(rerank_k=[bad])


def test_every_tuned_grid_names_the_command_that_chose_it():
    """The judge's grids are data (``grids.json``), each beside the command that chose it and what it found;
    the command names a script or subcommand that exists."""
    root = Path(__file__).resolve().parents[2]
    grids = {k: v for k, v in SR.GRIDS.items() if k != "about"}
    assert set(grids) == {"hybrid_weights", "rerank_ks", "rerank_fusions"}
    for name, g in grids.items():
        assert g["value"] and g["what"] and g["found"], name
        script = g["command"].split()[1] if g["command"].startswith("python ") else None
        assert g["command"].startswith("samelang eval ") or (root / script).is_file(), (name, g["command"])
