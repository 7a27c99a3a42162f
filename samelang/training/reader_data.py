"""The extractive reader's examples: a question, a passage, and where the answer lies in it (or
that it does not).

Sources: every XQuAD **train** article but the dev ones, in all 12 languages (each question over
its own language's paragraph), and every QA source of the corpus store with answer spans (docs/data.md;
the corpus's own dev documents and ``--hold-out`` sources left out). Nothing of the XQuAD test
articles, SQuAD dev or MLQA is in the store (the contamination filter, docs/data.md).

No-answer examples teach the reader to abstain: for a share of the questions (``negatives``), a
passage of the same article or document that does not hold the answer, labelled "no answer".
``/answer`` reads passages the retriever ranked, and the one that ranks first is not always the
one that answers; so, for another share (``mined``), the passage a retriever ranks first among
the wrong ones for that question, in any language: the distractor ``/answer`` really meets.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from samelang.corpora import dev_reading, load_xquad
from samelang.corpora.views import Views


@dataclass(frozen=True)
class ReadingExample:
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character start); empty: the passage does not answer
    lang: str
    source: str


def _holds(context: str, answers) -> bool:
    return any(text and text in context for text, _ in answers)


def xquad_examples(
    langs: tuple[str, ...], exclude_articles: tuple[int, ...] = ()
) -> tuple[list[ReadingExample], list[list[str]]]:
    """XQuAD train-split questions over their own language's paragraph (``exclude_articles``: not these),
    and for each the other paragraphs of its article."""
    x = load_xquad(list(langs), split="train")
    text = {(p.lang, p.group): p.text for p in x.paragraphs}
    by_article: dict[tuple[str, int], list[str]] = {}
    for p in x.paragraphs:
        by_article.setdefault((p.lang, p.article), []).append(p.text)
    examples, others = [], []
    for q in x.questions:
        if q.article in exclude_articles:
            continue
        examples.append(ReadingExample(q.text, text[(q.lang, q.group)], tuple((a.text, a.start) for a in q.answers),
                                       q.lang, "xquad"))  # fmt: skip
        others.append(by_article[(q.lang, q.article)])
    return examples, others


def cross_language_examples(
    langs: tuple[str, ...], share: float, seed: int, exclude_articles: tuple[int, ...] = ()
) -> list[ReadingExample]:
    """For ``share`` of the XQuAD train questions in each language A, the same question over its gold paragraph
    in another language B (a seeded choice), answered by B's own answer spans (XQuAD's questions are parallel:
    one id in every language). Why: ``/answer`` reads the passages the retriever ranks, in any language, and
    copies the answer out of the passage in that passage's language."""
    if share <= 0 or len(langs) < 2:
        return []
    x = load_xquad(list(langs), split="train")
    text = {(p.lang, p.group): p.text for p in x.paragraphs}
    by_id = {(q.lang, q.id): q for q in x.questions}
    rng, out = random.Random(f"reader-cross-{seed}"), []
    for q in x.questions:
        if q.article in exclude_articles or rng.random() >= share:
            continue
        other = rng.choice([b for b in langs if b != q.lang])
        answer = by_id.get((other, q.id))
        if answer is not None and answer.answers:
            out.append(ReadingExample(q.text, text[(other, q.group)], tuple((a.text, a.start) for a in answer.answers),
                                      q.lang, "xquad-cross"))  # fmt: skip
    return out


def mined_no_answer_examples(
    langs: tuple[str, ...],
    share: float,
    seed: int,
    wrong: Mapping[str, Sequence[str]],
    exclude_articles: tuple[int, ...] = (),
) -> list[ReadingExample]:
    """For ``share`` of the XQuAD train questions (a seeded draw), the question over the first of its mined
    wrong passages (``wrong["xquad-<lang>-<id>"]``, the retriever's rank order, any language) that holds
    none of its answers, labelled no answer; a question with no such passage adds nothing."""
    if share <= 0:
        return []
    rng, out = random.Random(f"reader-mined-{seed}"), []
    for q in load_xquad(list(langs), split="train").questions:
        if q.article in exclude_articles or rng.random() >= share:
            continue
        answers = tuple((a.text, a.start) for a in q.answers)
        passage = next((t for t in wrong.get(f"xquad-{q.lang}-{q.id}", ()) if not _holds(t, answers)), None)
        if passage is not None:
            out.append(ReadingExample(q.text, passage, (), q.lang, "xquad:mined-negative"))
    return out


def with_negatives(examples: list[ReadingExample], others: list[list[str]], share: float, seed: int):
    """``examples`` plus, for ``share`` of them, the same question over another passage of
    ``others[i]`` (its article's or document's) that holds none of its answers, labelled no answer."""
    rng = random.Random(seed)
    out = list(examples)
    for ex, pool in zip(examples, others, strict=True):
        pool = [c for c in pool if c != ex.context and not _holds(c, ex.answers)]
        if pool and rng.random() < share:
            out.append(ReadingExample(ex.question, rng.choice(pool), (), ex.lang, ex.source + ":negative"))
    return out


def build_reading_examples(
    views: Views | None,
    langs: tuple[str, ...],
    dev: tuple[int, ...],
    negatives: float,
    seed: int,
    user: tuple[list[ReadingExample], list[list[str]]] = ([], []),
    alone: bool = False,
    cross_language: float = 0.0,
    mined: Sequence[ReadingExample] = (),
) -> list[ReadingExample]:
    """The training examples, shuffled: XQuAD train articles but ``dev`` (not when ``alone``), the
    corpus's train rows with spans (``views``: None for none), the user's examples with their articles'
    other passages (``user``), and no-answer passages for ``negatives`` of the questions; with
    ``cross_language``, that share of the XQuAD questions also over their paragraph in another language,
    and the ``mined`` no-answer examples (:func:`mined_no_answer_examples`); both added after the no-answer
    passages are drawn: the draws of a run without them stay the same."""
    examples, others = ([], []) if alone else xquad_examples(langs, exclude_articles=dev)
    examples, others = examples + list(user[0]), others + list(user[1])
    if views is not None:
        for r in views.qa:
            if r.answers and r.split == "train":
                examples.append(ReadingExample(r.query, r.positive, tuple((a.text, a.start) for a in r.answers),
                                               r.lang, r.source))  # fmt: skip
                others.append(list(r.negatives))
    out = with_negatives(examples, others, negatives, seed)
    if not alone:
        out += cross_language_examples(langs, cross_language, seed, exclude_articles=dev)
        out += list(mined)
    random.Random(seed).shuffle(out)
    return out


def dev_questions(
    langs: tuple[str, ...], dev: tuple[int, ...], per_lang: int | None = None, distractors: int = 2, seed: int = 0
) -> list[tuple[ReadingExample, tuple[str, ...]]]:
    """The dev articles' questions over their gold paragraph (the first ``per_lang`` per language),
    each with ``distractors`` other paragraphs of its article that hold none of its answers (a fixed
    sample, :func:`samelang.corpora.dev_reading`): what the reader's threshold is calibrated on, as
    ``/answer`` reads several passages."""
    return [
        (ReadingExample(q.text, gold, tuple((a.text, a.start) for a in q.answers), q.lang, "xquad"), others)
        for q, gold, others in dev_reading(langs, dev, per_lang, distractors, seed)
    ]
