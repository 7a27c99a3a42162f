"""The judge's out-of-domain shape (:mod:`samelang.evaluation.ood`): its metrics on hand-made
lists, its collection (the held-out source, no labels) searched through the pipeline, and the line it
leaves when the corpus store lacks the source."""

from __future__ import annotations

import json

import numpy as np
import pytest

from samelang.corpora.views import load_views
from samelang.evaluation import judge as SR
from samelang.evaluation import ood as O
from samelang.evaluation.collection_shapes import ShapeJudge
from samelang.evaluation.pipeline import PipelineEvalOptions
from samelang.evaluation.serving_rule import ShapeRow


def test_out_of_domain_metrics_on_hand_made_lists():
    queries = [O.OODQuery("q0", "en", "gold a"), O.OODQuery("q1", "ru", "gold b"), O.OODQuery("q2", "ar", "gold c")]
    lists = [
        [("gold a", "en"), ("x", "en")],  # found first
        [("x", "ru"), ("gold b", "ru")],  # found second
        [("gold c", "en")],  # the same text first, but not in the reader's language
    ]
    m = O.score_ood(lists, queries)
    assert m["found_at_1"].tolist() == [1.0, 0.0, 1.0]
    assert m["reader_at_1"].tolist() == [1.0, 0.0, 0.0]
    assert m["found_at_10"].tolist() == [1.0, 1.0, 1.0]
    assert O.score_ood([[]], queries[:1])["found_at_10"].tolist() == [0.0]


def _judge(home):
    return ShapeJudge(home, split="test", shapes=("partial",), max_paragraphs=3, max_questions=1, memo=False,
                      log=lambda m: None)  # fmt: skip


def test_the_held_out_source_is_indexed_without_labels_and_searched_through_the_pipeline(
    fake_corpus_store, samelang_home
):
    digests = load_views(fake_corpus_store, require_filter=False).digests
    (fake_corpus_store.root / "contamination.json").write_text(json.dumps({"dropped": {}, "sources": digests}))
    ood = O.OutOfDomain(_judge(samelang_home), fake_corpus_store, per_lang=5)
    assert ood.documents and all(d.group is None for d in ood.documents)
    assert {d.id.split("-")[0] for d in ood.documents} <= {"tydiqa_goldp", "tydiqa"}
    texts = {d.text for d in ood.documents}
    assert ood.queries and all(q.gold in texts for q in ood.queries)
    result = ood.evaluate(ShapeRow("base"))
    assert result["found_at_10"]["n"] == len(ood.queries)
    # fewer than 10 passages: every search lists the gold, so found@10 is 100 only if the index holds it
    assert len(ood.documents) < 10 and result["found_at_10"]["mean"] == 100.0
    assert 0 <= result["found_at_1"]["mean"] <= 100 and not np.isnan(result["reader_at_1"]["mean"])
    table = O.ood_table({ShapeRow("base"): result}, ShapeRow("base"), ShapeRow("base"), ood.source)
    assert "held out of every training run" in table and "**served**" in table


def test_without_the_source_the_judge_says_how_to_import_it(tmp_path, samelang_home):
    opts = PipelineEvalOptions(shapes=True, corpora=tmp_path / "empty", home=samelang_home, out=tmp_path)
    text, data = SR.out_of_domain(opts, _judge(samelang_home), [ShapeRow("base")], ShapeRow("base"), log=lambda m: None)
    assert "not run" in text and "samelang data import" in text and "skipped" in data


def test_ood_only_swaps_the_judges_paragraph_and_refuses_a_doc_without_one(tmp_path):
    """``--ood-only --card`` replaces the out-of-domain paragraph (up to the ``Questions:`` line) and
    leaves the rest of the section; a doc without the paragraph is an error naming the fix."""
    from samelang.evaluation.judge import replace_ood_paragraph

    doc = tmp_path / "evaluation.md"
    doc.write_text("## S\n\n| t |\n\nOut of domain: not run (x).\n\nQuestions: 12 test questions.\n\n## Next\n")
    replace_ood_paragraph(doc, "**out of domain** (tydiqa)\n\n| row |\n\n")
    text = doc.read_text()
    assert "not run" not in text and "**out of domain** (tydiqa)\n\n| row |\n\nQuestions: 12" in text
    replace_ood_paragraph(doc, "**out of domain** (v2)\n\n")  # a second run replaces the first's table
    assert text.count("out of domain") == doc.read_text().count("out of domain") and "(v2)" in doc.read_text()
    bare = tmp_path / "bare.md"
    bare.write_text("## S\n\nQuestions: 1.\n")
    with pytest.raises(SystemExit, match="samelang eval pipeline --shapes --card"):
        replace_ood_paragraph(bare, "x")
