"""XQuAD in 12 languages, vendored (CC-BY-SA 4.0) with its fixed article split.

Paragraph ``i`` of an article is the translation of paragraph ``i`` in every
language, so ``group = "xquad-{article}-{paragraph}"`` ties the 12 versions.
``SPLIT.json``: article index % 3 == 2 -> test, else train.
"""

from __future__ import annotations

import json
import lzma
import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from samelang.corpora.records import SPLITS, Answer, Document, Paragraph, Question, Split

XQUAD_LANGS: tuple[str, ...] = ("en", "ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")
BOM = "\ufeff"


def _data_file(name: str):
    return resources.files("samelang.corpora").joinpath("data", "xquad", name)


@lru_cache(maxsize=1)
def load_split() -> dict:
    """The vendored ``SPLIT.json``."""
    return json.loads(_data_file("SPLIT.json").read_text(encoding="utf-8"))


def split_articles(split: Split) -> frozenset[int]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    s = load_split()
    if split == "all":
        return frozenset(s["train_articles"]) | frozenset(s["test_articles"])
    return frozenset(s[f"{split}_articles"])


def check_langs(langs) -> tuple[str, ...]:
    """Normalise a language selection (None = all 12) and reject unknown codes."""
    if langs is None:
        return XQUAD_LANGS
    if isinstance(langs, str):
        langs = [x for x in langs.split(",") if x.strip()]
    out = tuple(x.strip().lower() for x in langs)
    bad = [x for x in out if x not in XQUAD_LANGS]
    if bad or not out:
        raise ValueError(f"unknown XQuAD language(s) {bad or out}; choose from {','.join(XQUAD_LANGS)}")
    return out


@lru_cache(maxsize=16)
def _raw(lang: str) -> dict:
    with _data_file(f"xquad.{lang}.json.xz").open("rb") as fh:
        return json.loads(lzma.decompress(fh.read()).decode("utf-8"))


def paragraph_group(article: int, paragraph: int) -> str:
    return f"xquad-{article}-{paragraph}"


def paragraph_id(lang: str, article: int, paragraph: int) -> str:
    return f"xquad-{lang}-{article}-{paragraph}"


@dataclass(frozen=True)
class XQuAD:
    paragraphs: tuple[Paragraph, ...]
    questions: tuple[Question, ...]

    def documents(self) -> list[Document]:
        """The paragraphs as index documents (id, text, lang, parallel group)."""
        return [
            Document(p.id, p.text, p.lang, p.group, {"title": p.title, "article": p.article, "paragraph": p.paragraph})
            for p in self.paragraphs
        ]


def _load_lang(lang: str, articles: frozenset[int]) -> tuple[list[Paragraph], list[Question]]:
    titles = load_split()["titles_en"]
    paragraphs, questions = [], []
    for a, art in enumerate(_raw(lang)["data"]):
        if a not in articles:
            continue
        for i, par in enumerate(art["paragraphs"]):
            ctx = par["context"]
            shift = 0
            if ctx.startswith(BOM):
                # answer_start counts the BOM: drop it and shift every offset with it
                shift = len(ctx) - len(ctx.lstrip(BOM))
                ctx = ctx[shift:]
            group = paragraph_group(a, i)
            paragraphs.append(Paragraph(paragraph_id(lang, a, i), a, i, lang, ctx, group, titles[str(a)]))
            for qa in par["qas"]:
                answers = tuple(Answer(x["text"], x["answer_start"] - shift) for x in qa["answers"])
                questions.append(Question(qa["id"], lang, qa["question"].strip(), group, a, answers))
    return paragraphs, questions


def load_xquad(langs=None, split: Split = "all") -> XQuAD:
    """Paragraphs and questions for ``langs`` (default all 12) in ``split``."""
    articles = split_articles(split)
    paragraphs: list[Paragraph] = []
    questions: list[Question] = []
    for lang in check_langs(langs):
        p, q = _load_lang(lang, articles)
        paragraphs += p
        questions += q
    return XQuAD(tuple(paragraphs), tuple(questions))


def dev_articles(n: int = 3) -> tuple[int, ...]:
    """The last ``n`` train articles: the dev slice (train split, held out of training)."""
    return tuple(sorted(load_split()["train_articles"])[-n:]) if n else ()


def dev_reading(
    langs=None,
    articles: tuple[int, ...] | None = None,
    per_lang: int | None = None,
    distractors: int = 2,
    seed: int = 0,
) -> list[tuple[Question, str, tuple[str, ...]]]:
    """``(question, its gold paragraph, distractors)`` for the dev articles' questions (the first ``per_lang``
    per language, XQuAD's order), each with ``distractors`` other paragraphs of its article that hold none of
    its answers (a sample seeded once for the whole list). One list for every reader check on dev: the
    trainer's threshold calibration reads the gold with the first distractor (as ``/answer`` reads two
    passages), and ``samelang eval precision --reader`` reads the very same pairs, so its fp32 row repeats
    the trainer's dev F1."""
    articles = dev_articles() if articles is None else articles
    x = load_xquad(langs, split="train")
    text = {(p.lang, p.group): p.text for p in x.paragraphs}
    by_article: dict[tuple[str, int], list[str]] = {}
    for p in x.paragraphs:
        by_article.setdefault((p.lang, p.article), []).append(p.text)
    rng, counts, out = random.Random(seed), Counter(), []
    for q in x.questions:
        if q.article not in articles or (per_lang is not None and counts[q.lang] >= per_lang):
            continue
        counts[q.lang] += 1
        gold = text[(q.lang, q.group)]
        pool = [c for c in by_article[(q.lang, q.article)] if c != gold and not _holds(c, q.answers)]
        out.append((q, gold, tuple(rng.sample(pool, min(distractors, len(pool))))))
    return out


def _holds(context: str, answers: tuple[Answer, ...]) -> bool:
    return any(a.text and a.text in context for a in answers)
