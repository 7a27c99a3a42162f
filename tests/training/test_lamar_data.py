"""LAMAR training data (Algorithms 1 and 2) on the vendored XQuAD: balanced, parallel, train-only."""

from __future__ import annotations

from collections import Counter

import pytest

from samelang.corpora import XQUAD_LANGS, dev_articles, load_split, load_xquad
from samelang.training.lamar_data import build_coherence_groups, build_distill_instances, lang_pair

DEV = dev_articles(3)


@pytest.fixture(scope="module")
def texts():
    full = load_xquad()
    return {(p.lang, p.group): p.text for p in full.paragraphs}, {(q.lang, q.id): q for q in full.questions}


def test_lang_pair_cycles_the_ordered_cartesian_product():
    langs = ("en", "zh", "th")
    pairs = [lang_pair(c, langs) for c in range(9)]
    assert len(set(pairs)) == 9 and pairs[0] == ("en", "en") and pairs[5] == ("zh", "th")
    assert lang_pair(9, langs) == ("en", "en")


def test_distill_instances_follow_algorithm_1(texts):
    paragraphs, questions = texts
    data = build_distill_instances(seed=0, n_sampled=3, exclude_articles=DEV)
    n_questions = sum(1 for q in load_xquad(["en"], split="train").questions if q.article not in DEV)
    assert len(data) == 4 * n_questions
    train = set(load_split()["train_articles"]) - set(DEV)
    for x in data[:500]:
        # teacher and student read the same query and document identities, in English and in (q_lang, d_lang)
        q_en = questions[("en", x.qid)]
        assert x.q_en == q_en.text and x.query == questions[(x.q_lang, x.qid)].text
        assert x.d_en == paragraphs[("en", x.doc_group)] and x.doc == paragraphs[(x.d_lang, x.doc_group)]
        assert x.gold == (x.doc_group == q_en.group) and int(x.doc_group.split("-")[1]) in train
    per_q = Counter(x.qid for x in data if x.gold)
    assert set(per_q.values()) == {1}  # one gold document per question and round; sampled ones are others
    # every ordered language pair, same-language included, for the gold and for the sampled documents
    for gold in (True, False):
        pairs = Counter((x.q_lang, x.d_lang) for x in data if x.gold == gold)
        assert len(pairs) == 144 and max(pairs.values()) - min(pairs.values()) <= 3 * (1 + (not gold))
    assert data == build_distill_instances(seed=0, n_sampled=3, exclude_articles=DEV)
    assert data != build_distill_instances(seed=1, n_sampled=3, exclude_articles=DEV)


def test_coherence_groups_follow_algorithm_2(texts):
    paragraphs, questions = texts
    groups = build_coherence_groups(seed=0, repeats=3, exclude_articles=DEV)
    assert Counter(Counter(g.qid for g in groups).values()) == {3: len(groups) // 3}
    pairs = Counter((g.src, g.tgt) for g in groups)
    assert len(pairs) == 144 and max(pairs.values()) - min(pairs.values()) <= 1
    for g in groups[:300]:
        assert g.query == questions[(g.src, g.qid)].text
        assert g.docs == (
            paragraphs[(g.src, g.pos_group)], paragraphs[(g.tgt, g.pos_group)],
            paragraphs[(g.src, g.neg_group)], paragraphs[(g.tgt, g.neg_group)],
        )  # fmt: skip
        # the hard negative: another paragraph of the same article
        assert g.neg_group != g.pos_group and g.neg_group.split("-")[1] == g.pos_group.split("-")[1]
    test = set(load_split()["test_articles"]) | set(DEV)
    assert not any(int(g.pos_group.split("-")[1]) in test for g in groups)


def test_builders_refuse_test_articles_and_need_english():
    with pytest.raises(ValueError, match="train articles only"):
        build_distill_instances(split="test")
    with pytest.raises(ValueError, match="train articles only"):
        build_coherence_groups(split="all")
    with pytest.raises(ValueError, match="'en'"):
        build_coherence_groups(langs=["zh", "th"])
    assert len(XQUAD_LANGS) == 12


def test_coherence_groups_take_a_retrievers_negatives_best_first(texts):
    """``negatives``: the r-th group of a question takes the r-th wrong paragraph its query's list
    holds (what the reranker will rerank); a query without a list keeps its same-article negative."""
    paragraphs, questions = texts
    plain = build_coherence_groups(langs=["en", "de"], seed=0, repeats=2, exclude_articles=DEV)
    q0, q1 = plain[0], plain[2]  # two questions, each with 2 groups
    other = next(g for g in (x.pos_group for x in plain) if g not in (q0.pos_group, q1.pos_group))
    listed = {(q0.src, q0.query): [q1.pos_group, other]}  # best-ranked first
    groups = build_coherence_groups(langs=["en", "de"], seed=0, repeats=2, exclude_articles=DEV, negatives=listed)
    assert groups[1].src == q0.src and [g.neg_group for g in groups[:2]] == [q1.pos_group, other]
    assert groups[0].neg_group == q1.pos_group and groups[0].docs[2] == paragraphs[(q0.src, q1.pos_group)]
    assert groups[0].docs[3] == paragraphs[(groups[0].tgt, q1.pos_group)]
    # a query the lists do not know keeps the paper's same-article negative, as without lists
    assert [g.neg_group for g in groups[2:]] == [g.neg_group for g in plain[2:]]


def test_distill_instances_take_a_retrievers_negatives_first():
    """Stage 1 with ``negatives``: the English question's best-ranked wrong paragraphs are the
    documents beside the gold (round r takes the next n_sampled), topped up by sampling; a question
    the lists do not know samples, as the paper does."""
    langs = ["en", "de"]
    plain = build_distill_instances(langs=langs, seed=0, n_sampled=2, rounds=2, exclude_articles=DEV)
    q0 = plain[0]
    others = list(dict.fromkeys(x.doc_group for x in plain if x.gold and x.doc_group != q0.doc_group))[:3]
    listed = {("en", q0.q_en): [q0.doc_group, *others]}  # the gold itself in the list is never a negative
    data = build_distill_instances(langs=langs, seed=0, n_sampled=2, rounds=2, exclude_articles=DEV, negatives=listed)
    mine = [x for x in data if x.qid == q0.qid]
    assert [x.doc_group for x in mine if not x.gold][:3] == others and len(mine) == 2 * 3
    assert sum(x.gold for x in mine) == 2
    # another question keeps the paper's sampling: one gold and n_sampled others per round
    rest = [x for x in data if x.qid != q0.qid]
    assert len(rest) == len(plain) - len(mine) and sum(x.gold for x in rest) == len(rest) // 3


def test_ict_coherence_groups_cross_languages_within_a_document():
    """Stage 2's groups from the parallel passages: a sentence in src as the query, the rest of its
    passage in src and tgt, another passage of the same document in both as the negative."""
    from samelang.corpora.parallel import ParallelPassage
    from samelang.training.lamar_data import ict_coherence_groups

    langs = ("en", "de", "zh")

    def passage(doc, k):
        return ParallelPassage(f"p-{doc}-{k}", "flores200", doc,
                               {x: tuple(f"{x} {doc} {k} s{i}" for i in range(3)) for x in langs})  # fmt: skip

    parallel = [passage(d, k) for d in ("a", "b") for k in range(2)]
    groups = ict_coherence_groups(parallel, 12, langs, seed=0)
    assert len(groups) == 12 and len({(g.src, g.tgt) for g in groups}) == 9
    by_id = {p.id: p for p in parallel}
    for g in groups:
        p, n = by_id[g.pos_group], by_id[g.neg_group]
        assert g.query in p.sentences[g.src] and g.query not in g.docs[0] and g.query.split()[1] == p.doc
        i = p.sentences[g.src].index(g.query)
        assert g.docs == (p.text(g.src, skip=i), p.text(g.tgt, skip=i), n.text(g.src), n.text(g.tgt))
        assert n.doc == p.doc and n.id != p.id  # the hard negative: the same document, another passage
    assert groups == ict_coherence_groups(parallel, 12, langs, seed=0)
    assert len(ict_coherence_groups(parallel, 100, langs, seed=0)) == 4 * 3  # at most one per passage and language
