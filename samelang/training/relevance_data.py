"""Training groups of the reranker's relevance stage: ``(query, [d+, d-_1 .. d-_K])``, deterministic under ``seed``.

Three sources, each from its train part only:

* the corpus QA rows (``samelang.corpora.views``): a question in its language, its gold passage,
  the other passages of its document first (the confusions a reranker meets: same topic), then
  passages of other documents of the same source and language;
* the corpus ICT queries: a sentence in language A against its parallel passage (without it) in
  language B, negatives other parallel passages in B: relevance across languages;
* the XQuAD train articles (the dev articles held out): each question in each language, its gold
  paragraph in the same language, the other paragraphs of its article.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from samelang.corpora import XQUAD_LANGS, check_langs, load_xquad
from samelang.corpora.views import Views


@dataclass(frozen=True)
class RelevanceGroup:
    query: str
    docs: tuple[str, ...]  # the positive first
    lang: str
    source: str


def _fill(negatives: list[str], pool: list[str], positive: str, k: int, rng: random.Random) -> tuple[str, ...]:
    """``negatives`` (kept in order) topped up to ``k`` with random distinct texts of ``pool``."""
    out = [n for n in negatives if n != positive][:k]
    tries = 0
    while len(out) < k and pool and tries < 10 * k:
        x = rng.choice(pool)
        tries += 1
        if x != positive and x not in out:
            out.append(x)
    return tuple(out)


def corpus_groups(views: Views, k: int, rng: random.Random) -> list[RelevanceGroup]:
    pools: dict[tuple[str, str], list[str]] = {}
    for p in views.passages.values():
        pools.setdefault((p.source, p.lang), []).append(p.text)
    out = []
    for r in views.qa:
        if r.split == "train":
            negatives = _fill(list(r.negatives), pools[(r.source, r.lang)], r.positive, k, rng)
            out.append(RelevanceGroup(r.query, (r.positive, *negatives), r.lang, r.source))  # fmt: skip
    for q in views.ict:
        if q.split != "train":
            continue
        others = [
            p.text(q.positive_lang)
            for p in rng.sample(views.parallel, min(len(views.parallel), k + 1))
            if p.id != q.passage
        ]
        out.append(RelevanceGroup(q.query, (q.positive, *others[:k]), q.query_lang, q.source))
    return out


def xquad_groups(langs, exclude_articles: tuple[int, ...], k: int, rng: random.Random) -> list[RelevanceGroup]:
    out = []
    for lang in check_langs(langs):
        data = load_xquad([lang], split="train")
        by_article: dict[int, list[str]] = {}
        text = {}
        for p in data.paragraphs:
            if p.article not in exclude_articles:
                by_article.setdefault(p.article, []).append(p.group)
                text[p.group] = p.text
        everything = list(text.values())
        for q in data.questions:
            if q.article in exclude_articles:
                continue
            same = [text[g] for g in by_article[q.article] if g != q.group]
            rng.shuffle(same)
            out.append(
                RelevanceGroup(q.text, (text[q.group], *_fill(same, everything, text[q.group], k, rng)), lang, "xquad")
            )
    return out


def build_relevance_groups(
    views: Views | None, k: int = 4, seed: int = 0, langs=XQUAD_LANGS, exclude_articles: tuple[int, ...] = ()
) -> list[RelevanceGroup]:
    """Every group, shuffled; ``views`` None: XQuAD's train articles alone."""
    rng = random.Random(f"relevance-{seed}")
    out = (corpus_groups(views, k, rng) if views is not None else []) + xquad_groups(langs, exclude_articles, k, rng)
    rng.shuffle(out)
    return out
