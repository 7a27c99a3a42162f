"""Training data for the LAMAR cross-encoder (seed 002, appendix A), built from XQuAD's **train** articles (a few of
them can be held out as a dev slice); deterministic under ``seed``. XQuAD is parallel: question ``i`` and paragraph
``j`` exist in all 12 languages, so every English (query, document) relation has a realisation in any (query
language, document language) combination. ``LangPair(c, L)`` cycles through the ordered Cartesian product ``L x L``
(same-language pairs included), so every combination is balanced.

* Stage 1 (Algorithm 1, English-anchored distillation): per question, ``rounds`` times, its gold paragraph plus
  ``n_sampled`` paragraphs drawn without replacement from *other* examples; the student reads the pair in
  ``LangPair(c)``, the teacher its English realisation; each document slot keeps its own counter ``c``.
* Stage 2 (Algorithm 2, language-coherence groups): per question, ``repeats`` groups ``(q_src, d+_src, d+_tgt,
  d-_src, d-_tgt)`` with ``(src, tgt) = LangPair(c)``; the negative is another paragraph of the same article (fixed
  per question, as MIRACL's one negative per row) or, given a retriever's lists, its best-ranked wrong paragraphs.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from samelang.corpora import XQUAD_LANGS, check_langs, load_xquad
from samelang.corpora.parallel import ParallelPassage
from samelang.primitives.atomic import atomic_write_text


def lang_pair(c: int, langs: tuple[str, ...]) -> tuple[str, str]:
    """The ``c``-th pair of the ordered Cartesian product ``langs x langs``, cycling."""
    n = len(langs)
    c %= n * n
    return langs[c // n], langs[c % n]


@dataclass(frozen=True)
class DistillInstance:
    """Teacher input ``(q_en, d_en)``; student input ``(query, doc)`` in ``(q_lang, d_lang)``."""

    q_en: str
    d_en: str
    query: str
    doc: str
    q_lang: str
    d_lang: str
    qid: str
    doc_group: str
    gold: bool


@dataclass(frozen=True)
class CoherenceGroup:
    """``query`` in ``src``; documents in the order ``[d+_src, d+_tgt, d-_src, d-_tgt]``, labels [1, 1, 0, 0]."""

    query: str
    docs: tuple[str, str, str, str]
    src: str
    tgt: str
    qid: str
    pos_group: str
    neg_group: str


class _Parallel:
    """Questions by id and paragraphs by group, in every language, for the chosen articles."""

    def __init__(self, langs, split: str, exclude_articles: tuple[int, ...]):
        if split in ("test", "all"):
            raise ValueError("reranker training data comes from the train articles only")
        self.langs = check_langs(langs or XQUAD_LANGS)
        if "en" not in self.langs:
            raise ValueError("the English anchor needs 'en' among the languages")
        data = {x: load_xquad([x], split=split) for x in self.langs}
        self.questions = [q for q in data["en"].questions if q.article not in exclude_articles]
        self.q = {x: {q.id: q.text for q in data[x].questions} for x in self.langs}
        self.p = {x: {p.group: p.text for p in data[x].paragraphs} for x in self.langs}
        self.by_article: dict[int, list[str]] = {}
        for p in data["en"].paragraphs:
            if p.article not in exclude_articles:
                self.by_article.setdefault(p.article, []).append(p.group)
        self.groups = sorted({q.group for q in self.questions})


def build_distill_instances(
    langs=XQUAD_LANGS, split: str = "train", seed: int = 0, n_sampled: int = 3, rounds: int = 1,
    exclude_articles: tuple[int, ...] = (), negatives: Mapping[tuple[str, str], list[str]] | None = None,
) -> list[DistillInstance]:  # fmt: skip
    """Algorithm 1: ``rounds * (1 + n_sampled)`` instances per train question. The documents beside
    the gold are sampled from the other questions' (the paper's); with ``negatives`` (``(language,
    question) -> wrong paragraph groups, best-ranked first``, what a retriever returns) the English
    question's best-ranked wrong paragraphs come first (round ``r`` takes the next ``n_sampled`` of
    them), topped up by sampling: the teacher then tells the student how little the paragraphs a
    retriever confuses with the answer are worth, in every language pair."""
    data = _Parallel(langs, split, exclude_articles)
    rng = random.Random(seed)
    out: list[DistillInstance] = []
    # one LangPair counter per slot (gold, 1st sampled, ...): with a single counter and 4 documents
    # per question, 4 | 12 would give the gold document only 3 of the 12 document languages
    counters = [0] * (1 + n_sampled)
    for q in data.questions:
        listed = [g for g in (negatives or {}).get(("en", q.text), []) if g in data.p["en"] and g != q.group]
        for r in range(rounds):
            hard = listed[r * n_sampled : (r + 1) * n_sampled]
            pool = [g for g in data.groups if g != q.group and g not in hard]
            others = hard + rng.sample(pool, n_sampled - len(hard))
            for slot, group in enumerate([q.group, *others]):
                lq, ld = lang_pair(counters[slot] + slot, data.langs)
                counters[slot] += 1
                out.append(
                    DistillInstance(
                        q_en=q.text, d_en=data.p["en"][group], query=data.q[lq][q.id], doc=data.p[ld][group],
                        q_lang=lq, d_lang=ld, qid=q.id, doc_group=group, gold=group == q.group,
                    )
                )  # fmt: skip
    return out


def build_coherence_groups(
    langs=XQUAD_LANGS,
    split: str = "train",
    seed: int = 0,
    repeats: int = 3,
    exclude_articles: tuple[int, ...] = (),
    negatives: Mapping[tuple[str, str], list[str]] | None = None,
) -> list[CoherenceGroup]:
    """Algorithm 2: ``repeats`` groups per train question, language pairs cycling. ``negatives``:
    ``(query language, query text) -> wrong paragraph groups, best-ranked first`` (what a retriever
    returns); the ``r``-th group of a question then takes the ``r``-th of its query's list (cycling),
    and a question without any keeps its same-article negative."""
    data = _Parallel(langs, split, exclude_articles)
    rng = random.Random(seed)
    out: list[CoherenceGroup] = []
    c = 0
    for q in data.questions:
        same_article = [g for g in data.by_article[q.article] if g != q.group]
        fallback = rng.choice(same_article)
        for r in range(repeats):
            src, tgt = lang_pair(c, data.langs)
            listed = [g for g in (negatives or {}).get((src, data.q[src][q.id]), []) if g in data.p[src]]
            neg = listed[r % len(listed)] if listed else fallback
            docs = (data.p[src][q.group], data.p[tgt][q.group], data.p[src][neg], data.p[tgt][neg])
            out.append(CoherenceGroup(data.q[src][q.id], docs, src, tgt, q.id, q.group, neg))
            c += 1
    return out


def retrieved_negatives(retriever: str, home: Path, dev: tuple[int, ...], log=print) -> dict:
    """``(language, question) -> wrong paragraph groups, best-ranked first``: what ``retriever``
    (served as ``samelang serve`` serves it: its BM25 weight, group-aware candidates) returns for
    every train-article question on the train-article partial-translation and parallel pools of
    ``samelang eval pipeline --shapes`` (:mod:`samelang.evaluation.collection_shapes`). Why: the
    reranker reranks these lists; the paper's one same-article negative is rarely what the
    retriever puts above the answer. Cached under ``$SAMELANG_HOME/cache``."""
    from samelang.evaluation.collection_shapes import ShapeJudge  # deferred: as above
    from samelang.evaluation.fusion import tuned_weights  # deferred: evaluation code only for this
    from samelang.evaluation.judge import fused_weight  # deferred: as above
    from samelang.evaluation.serving_rule import ShapeRow  # deferred: as above

    weight = fused_weight(retriever) if fused_weight(retriever) is not None else tuned_weights().get(retriever, 0.0)
    row = ShapeRow(retriever, weight)
    key = hashlib.sha256(f"negatives-v1:{row.name}:{dev}".encode()).hexdigest()[:20]
    cache = Path(home) / "cache" / f"negatives-{key}.json"
    if cache.exists():
        return {tuple(k.split("|", 1)): v for k, v in json.loads(cache.read_text()).items()}
    judge = ShapeJudge(home, split="train", shapes=("partial", "parallel"), log=log)
    out: dict[tuple[str, str], list[str]] = {}
    for shape in judge.shapes:
        pipe = judge.pipeline(row, shape)
        lists = judge.search_lists(pipe, shape, f"negatives: {row.name} on {shape}")
        pipe.index.close()
        for q, ids in zip(judge.queries, lists, strict=True):
            wrong = ["xquad-" + i.split("-", 2)[2] for i in ids]
            wrong = [g for g in dict.fromkeys(wrong) if g != q.group and int(g.split("-")[1]) not in dev]
            have = out.setdefault((q.lang, q.query), [])
            have += [g for g in wrong if g not in have]
    atomic_write_text(cache, json.dumps({f"{a}|{b}": v for (a, b), v in out.items()}))
    return out


def ict_coherence_groups(
    parallel: list[ParallelPassage], n: int, langs=XQUAD_LANGS, seed: int = 0
) -> list[CoherenceGroup]:
    """Algorithm 2's groups from the corpus's parallel passages (the cross-language inverse cloze
    task), ``n`` of them: the query is one sentence of a passage in ``src``; ``d+`` is the rest of
    that passage in ``src`` and ``tgt``; ``d-`` is another passage of the same document (the same
    story, another part: what a reranker confuses) in both, else one of another document. Language
    pairs cycle over ``langs x langs`` as for the XQuAD groups. Why: the XQuAD train articles give
    about 800 questions; the parallel passages give groups in every language pair from text no
    test article holds."""
    langs = check_langs(langs)
    rng = random.Random(f"ict-coherence-{seed}")
    by_doc: dict[tuple[str, str], list[ParallelPassage]] = {}
    for p in parallel:
        by_doc.setdefault((p.source, p.doc), []).append(p)
    order = list(parallel)
    rng.shuffle(order)
    out: list[CoherenceGroup] = []
    for c in range(min(n, len(order) * len(langs))):
        p = order[c % len(order)]
        src, tgt = lang_pair(c, langs)
        i = rng.randrange(len(p.sentences[src]))
        siblings = [x for x in by_doc[(p.source, p.doc)] if x.id != p.id]
        neg = rng.choice(siblings) if siblings else rng.choice([x for x in parallel if x.doc != p.doc])
        docs = (p.text(src, skip=i), p.text(tgt, skip=i), neg.text(src), neg.text(tgt))
        out.append(CoherenceGroup(p.sentences[src][i], docs, src, tgt, f"{p.id}-{i}", p.id, neg.id))
    return out
