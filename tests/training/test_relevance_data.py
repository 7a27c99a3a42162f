"""The relevance stage's groups: the gold passage first, same-document negatives before others, train parts only."""

from __future__ import annotations

from samelang.corpora import dev_articles, load_xquad
from samelang.corpora.views import load_views
from samelang.training.relevance_data import build_relevance_groups


def test_groups_put_the_gold_first_and_its_document_before_other_negatives(fake_corpus_store):
    views = load_views(fake_corpus_store, require_filter=False)
    dev = dev_articles(3)
    groups = build_relevance_groups(views, k=2, seed=0, langs="en,zh", exclude_articles=dev)
    beijing = next(g for g in groups if g.query == "中国的首都是哪里？")
    assert beijing.docs[:2] == ("北京是中国的首都。", "北京有很多胡同。")  # gold, then its article's other passage
    assert all(g.docs[0] not in g.docs[1:] and len(set(g.docs)) == len(g.docs) for g in groups)
    ict = [g for g in groups if g.source in ("flores200", "ntrex128")]
    train_ict = [q for q in views.ict if q.split == "train"]
    assert len(ict) == len(train_ict) and all(len(g.docs) == 3 for g in ict)
    dev_questions = {q.text for q in load_xquad(["en"], split="train").questions if q.article in dev}
    xquad = [g for g in groups if g.source == "xquad"]
    assert xquad and not dev_questions & {g.query for g in xquad}  # the dev articles stay out
    assert groups == build_relevance_groups(views, k=2, seed=0, langs="en,zh", exclude_articles=dev)
