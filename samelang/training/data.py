"""Training data for the aligned bi-encoder (seed 000): ``(q_en, p_en, p_tgt)`` triplets.

Built from the XQuAD **train** articles only (never a test article): an English
question, its English gold paragraph, and the same paragraph in a target
language. A few train articles can be held out as a dev slice for periodic
evaluation. Optional Tatoeba ``(s_en, s_tgt)`` pairs feed the alignment term
only. Deterministic under ``seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from samelang.corpora import XQUAD_LANGS, load_tatoeba, load_xquad

TARGET_LANGS: tuple[str, ...] = tuple(x for x in XQUAD_LANGS if x != "en")


@dataclass(frozen=True)
class Triplet:
    q_en: str
    p_en: str
    p_tgt: str
    lang: str
    group: str
    article: int
    q_tgt: str = ""  # the same question in the target language (XQuAD questions are parallel: same id)
    p_neg: str = ""  # another paragraph of the same article, in the target language (a hard negative)
    neg_group: str = ""  # p_neg's paragraph group


@dataclass(frozen=True)
class AlignPair:
    en: str
    tgt: str
    lang: str


def build_triplets(
    langs=TARGET_LANGS,
    split: str = "train",
    seed: int = 0,
    per_lang: int | None = None,
    exclude_articles: tuple[int, ...] = (),
) -> list[Triplet]:
    """All (or ``per_lang`` sampled) triplets per target language, shuffled.

    Each triplet also carries a hard negative ``p_neg``: another paragraph of the question's own
    article, in the target language (XQuAD's paragraphs of one article share their topic, the
    confusion that costs the retriever its top-1). Negatives come from their own random stream, so
    the triplets a seed draws are the same as before they were added."""
    if split == "test" or split == "all":
        raise ValueError("training triplets come from the train articles only")
    langs = tuple(x for x in (langs.split(",") if isinstance(langs, str) else langs) if x != "en")
    en = load_xquad(["en"], split=split)
    p_en = {p.group: p.text for p in en.paragraphs}
    rng, neg_rng = random.Random(seed), random.Random(f"hard-negatives-{seed}")
    siblings: dict[int, list[str]] = {}
    for p in en.paragraphs:
        siblings.setdefault(p.article, []).append(p.group)
    out: list[Triplet] = []
    for lang in langs:
        tgt = load_xquad([lang], split=split)
        p_tgt = {p.group: p.text for p in tgt.paragraphs}
        q_tgt = {q.id: q.text for q in tgt.questions}

        def negative(q, p_tgt=p_tgt) -> tuple[str, str]:
            others = [g for g in siblings[q.article] if g != q.group]
            g = neg_rng.choice(others) if others else ""
            return (p_tgt[g], g) if g else ("", "")

        rows = [
            Triplet(q.text, p_en[q.group], p_tgt[q.group], lang, q.group, q.article, q_tgt.get(q.id, ""), *negative(q))
            for q in en.questions
            if q.article not in exclude_articles
        ]
        if per_lang is not None and per_lang < len(rows):
            rows = rng.sample(rows, per_lang)
        out += rows
    rng.shuffle(out)
    return out


def group_unique_batches(groups: list[str], batch_size: int, seed: int) -> list[list[int]]:
    """Shuffle, then pack indices into batches in which no paragraph group repeats.

    InfoNCE uses the other rows of a batch as negatives. XQuAD has ~5 questions per
    paragraph and each question is paired with 11 target languages, so a plain
    shuffled batch of 16 holds on average about one row whose "negative" is in fact
    the same paragraph (or the very same English question): a false negative that
    pushes queries away from their own gold passage. Like sentence-transformers'
    ``NoDuplicatesBatchSampler``, a row whose group is already in the batch waits
    for the next one. Every index appears exactly once; only the last batch may be
    short. Deterministic under ``seed``.
    """
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    batches: list[list[int]] = []
    pending = order
    while pending:
        batch, seen, rest = [], set(), []
        for i in pending:
            if len(batch) < batch_size and groups[i] not in seen:
                batch.append(i)
                seen.add(groups[i])
            else:
                rest.append(i)
        batches.append(batch)
        pending = rest
    return batches


def build_align_pairs(langs=TARGET_LANGS, seed: int = 0, per_lang: int | None = None) -> list[AlignPair]:
    """Tatoeba English/target sentence pairs for the L_JSD term."""
    langs = [x for x in (langs.split(",") if isinstance(langs, str) else langs) if x != "en"]
    rng = random.Random(seed)
    out = []
    for lang in langs:
        rows = [AlignPair(p.en, p.tgt, lang) for p in load_tatoeba([lang])]
        if per_lang is not None and per_lang < len(rows):
            rows = rng.sample(rows, per_lang)
        out += rows
    rng.shuffle(out)
    return out
