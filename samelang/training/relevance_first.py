"""Training groups that put relevance before language: a query, a right passage in *another* language,
and wrong passages in the query's own language, mined by the served retriever.

Why: no earlier training group held a right passage in another language against a wrong one in the
reader's language, and the served product ranked such a wrong passage first in 54% of its misses.
Two sources, train parts only (the dev articles and dev documents held out):

* the XQuAD train articles: each question in each language A; the positive its gold paragraph in a
  language B != A (B cycles over the other languages, seeded); the negatives the retriever's first wrong
  paragraphs in A, then other paragraphs of the same article in A, then its first wrong passage elsewhere;
* the corpus's inverse-cloze queries: a sentence in A, the rest of its parallel passage in B; the
  negatives the retriever's first wrong parallel passages in A, then passages of other documents in A.

Each document carries its key (the meaning it says: a paragraph group, a parallel passage id) so that a
loss can leave out a candidate that says what an anchor's positive says (:class:`RankingGroup`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from samelang.corpora import XQUAD_LANGS, check_langs, load_xquad
from samelang.corpora.records import Document
from samelang.corpora.views import Views
from samelang.training.mining import MiningOptions, MiningQuery, Retriever, mine_negatives


class RelevanceFirstOptions(MiningOptions):
    """The groups' options, declared once for every trainer that ranks (a plain model: each trainer's
    settings class keeps its own ``SAMELANG_*`` prefix)."""

    relevance_first: bool = Field(
        False,
        description="Also learn relevance before language: a query against its answer in another language and the "
        "mining retriever's wrong passages in the query's own language (XQuAD train questions in every language; "
        "with the corpus also its ICT queries).",
    )
    relevance_batch: int = Field(
        16, ge=2, description="With --relevance-first: groups per step (the reranker's relevance stage: in its data)."
    )
    relevance_negatives: int = Field(3, ge=1, description="With --relevance-first: negatives per group.")

    def ranking_groups(
        self, views: Views | None, home: Path, seed: int, langs, exclude_articles: tuple[int, ...], log=print
    ) -> list[RankingGroup]:
        """:func:`build_ranking_groups` with these options (none without ``--relevance-first``)."""
        if not self.relevance_first:
            return []
        retriever = Retriever.parse(self.mine_with)
        return build_ranking_groups(views, home, retriever, self.relevance_negatives, seed, langs, exclude_articles,
                                    log=log)  # fmt: skip


@dataclass(frozen=True)
class RankingGroup:
    """``query`` in ``lang``; ``docs`` the positive first, then the negatives; ``keys`` what each says."""

    query: str
    lang: str
    docs: tuple[str, ...]
    doc_langs: tuple[str, ...]
    keys: tuple[str, ...]
    source: str


@dataclass
class _Collection:
    docs: list[Document]
    text: dict[str, str]  # doc id -> text
    lang: dict[str, str]
    key: dict[str, str]
    by_key_lang: dict[tuple[str, str], str]  # (key, language) -> doc id
    same_article: dict[str, list[str]]  # key -> the other keys of its article (XQuAD) or document (parallel)
    by_source_lang: dict[tuple[str, str], list[str]]  # (source, language) -> doc ids

    def add(self, doc_id: str, text: str, lang: str, key: str, source: str) -> None:
        self.docs.append(Document(doc_id, text, lang, None, {"key": key}))
        self.text[doc_id], self.lang[doc_id], self.key[doc_id] = text, lang, key
        self.by_key_lang[(key, lang)] = doc_id
        self.by_source_lang.setdefault((source, lang), []).append(doc_id)


def training_collection(views: Views | None, langs: tuple[str, ...], exclude_articles: tuple[int, ...]) -> _Collection:
    """The XQuAD train paragraphs (``exclude_articles`` held out) and the corpus's train parallel
    passages, in every language of ``langs``, unlabelled as a user's collection is."""
    col = _Collection([], {}, {}, {}, {}, {}, {})
    for lang in langs:
        for p in load_xquad([lang], split="train").paragraphs:
            if p.article not in exclude_articles:
                col.add(f"xquad-{lang}-{p.group}", p.text, lang, p.group, "xquad")
    articles: dict[int, list[str]] = {}
    for p in load_xquad(["en"], split="train").paragraphs:
        if p.article not in exclude_articles:
            articles.setdefault(p.article, []).append(p.group)
    for groups in articles.values():
        for g in groups:
            col.same_article[g] = [x for x in groups if x != g]
    for p in views.parallel if views is not None else ():
        for lang in langs:
            col.add(f"par-{lang}-{p.id}", p.text(lang), lang, p.id, p.source)
    return col


def _queries(views: Views | None, langs: tuple[str, ...], exclude_articles: tuple[int, ...]) -> list[MiningQuery]:
    out = []
    for lang in langs:
        for q in load_xquad([lang], split="train").questions:
            if q.article not in exclude_articles:
                out.append(MiningQuery(f"xquad-{lang}-{q.id}", q.text, lang, q.group))
    if views is not None:
        out += [MiningQuery(q.id, q.query, q.query_lang, q.passage) for q in views.ict
                if q.split == "train" and q.query_lang in langs and q.positive_lang in langs]  # fmt: skip
    return out


def mined_wrong_passages(
    views: Views | None,
    home: Path,
    retriever: Retriever,
    langs=XQUAD_LANGS,
    exclude_articles: tuple[int, ...] = (),
    depth: int = 20,
    log: Callable[[str], None] = print,
) -> dict[str, list[str]]:
    """``"xquad-<lang>-<question id>" -> texts of the wrong passages`` the retriever ranks for each XQuAD train
    question over the training collection, in rank order, any language. The very mining of the ranking
    groups (:func:`build_ranking_groups`: the same queries, collection and cache), so that one mined list,
    cached, serves every trainer that mines with one retriever."""
    langs = check_langs(langs)
    col = training_collection(views, langs, exclude_articles)
    queries = _queries(views, langs, exclude_articles)
    mined = mine_negatives(queries, col.docs, retriever, home, depth=depth, log=log)
    return {q.id: [col.text[d] for d in mined.get(q.id, [])] for q in queries if q.id.startswith("xquad-")}


def build_ranking_groups(
    views: Views | None,
    home: Path,
    retriever: Retriever,
    k: int = 3,
    seed: int = 0,
    langs=XQUAD_LANGS,
    exclude_articles: tuple[int, ...] = (),
    depth: int = 20,
    log: Callable[[str], None] = print,
) -> list[RankingGroup]:
    """Every group, shuffled: ``k`` negatives each (fewer only where the collection has fewer), all but the
    last in the query's language (the last the retriever's first wrong passage in any other language, where
    it mined one). ``views`` None: XQuAD's train articles alone."""
    langs = check_langs(langs)
    if len(langs) < 2:
        raise ValueError("relevance-before-language groups need at least two languages")
    col = training_collection(views, langs, exclude_articles)
    queries = _queries(views, langs, exclude_articles)
    mined = mine_negatives(queries, col.docs, retriever, home, depth=depth, log=log)
    rng = random.Random(f"relevance-first-{seed}")
    ict = {q.id: q for q in views.ict} if views is not None else {}
    out = []
    for q in queries:
        if q.id in ict:  # the inverse cloze task: its positive is the passage without the query sentence
            x = ict[q.id]
            positive, positive_lang, source = x.positive, x.positive_lang, x.source
        else:
            positive_lang = rng.choice([x for x in langs if x != q.lang])
            positive, source = col.text[col.by_key_lang[(q.key, positive_lang)]], "xquad"
        wrong = mined.get(q.id, [])
        same = [d for d in wrong if col.lang[d] == q.lang]
        near = [col.by_key_lang[(g, q.lang)] for g in col.same_article.get(q.key, [])]
        rng.shuffle(near)
        pool = col.by_source_lang.get((source, q.lang), [])
        some = rng.sample(pool, min(len(pool), 4 * k))
        own = [d for d in dict.fromkeys([*same, *near, *some]) if col.key[d] != q.key]
        elsewhere = [d for d in wrong if col.lang[d] != q.lang][:1]
        chosen = own[: k - len(elsewhere)] + elsewhere  # no wrong passage mined elsewhere: one more of its own
        out.append(RankingGroup(
            q.text, q.lang, (positive, *(col.text[d] for d in chosen)), (positive_lang, *(col.lang[d] for d in chosen)),
            (q.key, *(col.key[d] for d in chosen)), source,
        ))  # fmt: skip
    rng.shuffle(out)
    return out


class RankingBatches:
    """The relevance-first groups in one seeded order, ``n`` a step (cycling)."""

    def __init__(self, groups: list[RankingGroup], n: int, seed: int):
        self.groups, self.n = groups, n
        self.order = [int(i) for i in np.random.default_rng([seed, 7]).permutation(len(groups))]

    def __bool__(self) -> bool:
        return bool(self.groups)

    def __call__(self, step: int) -> list[RankingGroup]:
        """The ``step``-th window of ``n`` groups, rows whose positive says what an earlier row's says
        left out (they would be each other's false negatives)."""
        start = (step * self.n) % len(self.order)
        rows, seen = [], set()
        for i in (self.order + self.order)[start : start + self.n]:
            if self.groups[i].keys[0] not in seen:
                rows.append(self.groups[i])
                seen.add(self.groups[i].keys[0])
        return rows
