"""The QA sources' readers: passages and questions (with answer spans where the source has them).

Each reader turns its source's own format into :class:`QAPassage` and :class:`QAExample`. A passage's
id is derived from its source, language and text, so that the same paragraph read from two files is
one passage, and ids stay stable across imports. ``doc`` names the article a passage comes from: the
splits are by document, and the negatives of a question are the other passages of its document.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from functools import lru_cache

from samelang.corpora.records import Answer
from samelang.corpora.sources import BY_NAME
from samelang.corpora.store import CorpusStore


@dataclass(frozen=True)
class QAPassage:
    id: str
    source: str
    lang: str
    doc: str
    title: str  # the article's title as the source gives it ("" when it gives none)
    text: str
    original: str = ""  # the text as the source has it, where a reader converted it (DRCD: Traditional)


@dataclass(frozen=True)
class QAExample:
    id: str
    source: str
    lang: str
    question: str
    passage: str  # a QAPassage id
    answers: tuple[Answer, ...]  # empty where the source gives passage labels only


def passage_id(source: str, lang: str, text: str) -> str:
    return f"{source}-{hashlib.sha1(f'{lang}|{text}'.encode()).hexdigest()[:16]}"


class _Collect:
    """Builds the passages (deduplicated by id) and the questions of one source."""

    def __init__(self, source: str, lang: str):
        self.source, self.lang = source, lang
        self.passages: dict[str, QAPassage] = {}
        self.examples: list[QAExample] = []

    def add(self, doc, title, context, qid, question, answers, original="") -> None:
        context, question = context.strip("\ufeff"), question.strip(" -\u200f\u200e\n\t")
        if not context.strip() or not question:
            return
        pid = passage_id(self.source, self.lang, context)
        self.passages.setdefault(pid, QAPassage(pid, self.source, self.lang, doc, title, context, original))
        spans = tuple(
            Answer(text, start) for text, start in answers if text and context[start : start + len(text)] == text
        )
        self.examples.append(QAExample(f"{self.source}-{qid}", self.source, self.lang, question, pid, spans))


def _squad(c: _Collect, data: dict, stem: str, convert=None) -> None:
    """SQuAD v1.1 JSON; ``convert`` (DRCD's t2s) maps every text and moves answer offsets with it."""
    for a, article in enumerate(data["data"]):
        title = (article.get("title") or "").strip()
        doc = f"{stem}/{title or a}"
        for p, par in enumerate(article["paragraphs"]):
            context = par["context"]
            for q, qa in enumerate(par["qas"]):
                answers = _answers(qa)
                qid = qa.get("id") or f"{stem}-{a}-{p}-{q}"
                if convert is None:
                    c.add(doc, title, context, qid, qa["question"], answers)
                    continue
                ctx = convert(context)
                moved = [(convert(t), _moved_start(ctx, convert(t), s)) for t, s in answers if t]
                c.add(
                    f"{stem}/{convert(title) or a}", convert(title), ctx, qid, convert(qa["question"]), moved, context
                )


def _answers(qa: dict) -> list[tuple[str, int]]:
    """``(text, start)`` of a SQuAD-format question's answers (a blank text where a source blanked it)."""
    return [(x.get("text") or "", int(x.get("answer_start", -1))) for x in qa.get("answers", [])]


def _moved_start(context: str, answer: str, start: int) -> int:
    """The offset of ``answer`` in the converted ``context``: the occurrence nearest ``start``."""
    hits, i = [], context.find(answer)
    while i >= 0:
        hits.append(i)
        i = context.find(answer, i + 1)
    return min(hits, key=lambda h: abs(h - start)) if hits else -1


def _json(store: CorpusStore, source: str, path: str) -> dict:
    return json.loads(store.read(BY_NAME[source], path).decode("utf-8-sig"))


def read_cmrc2018(store: CorpusStore) -> _Collect:
    c = _Collect("cmrc2018", "zh")
    for stem in ("cmrc2018_dev", "cmrc2018_trial"):
        _squad(c, _json(store, "cmrc2018", f"squad-style-data/{stem}.json"), stem)
    return c


@lru_cache(maxsize=1)
def _t2s():
    import opencc  # deferred: only DRCD needs it

    return opencc.OpenCC("t2s").convert


def read_drcd(store: CorpusStore) -> _Collect:
    c = _Collect("drcd", "zh")
    for stem in ("DRCD_dev", "DRCD_test"):
        _squad(c, _json(store, "drcd", f"{stem}.json"), stem, convert=_t2s())
    return c


def read_arcd(store: CorpusStore) -> _Collect:
    c = _Collect("arcd", "ar")
    _squad(c, _json(store, "arcd", "data/arcd.json"), "arcd")
    return c


def read_iapp(store: CorpusStore) -> _Collect:
    """data.zip holds train/valid/test JSONL; ``answers`` is a Python literal of a dict of lists."""
    c = _Collect("iapp_wiki_qa", "th")
    with zipfile.ZipFile(io.BytesIO(store.read(BY_NAME["iapp_wiki_qa"], "squad_format/data.zip"))) as z:
        for name in ("data/train.jsonl", "data/valid.jsonl", "data/test.jsonl"):
            for line in z.read(name).decode("utf-8").splitlines():
                row = json.loads(line)
                ans = row["answers"]
                ans = ast.literal_eval(ans) if isinstance(ans, str) else ans
                pairs = list(zip(ans.get("text", []), ans.get("answer_start", []), strict=False))
                doc = f"iapp/{row['article_id']}"
                c.add(doc, row.get("title") or "", row["context"], row["question_id"], row["question"], pairs)
    return c


TYDI_FILES = {
    "en": (
        "data/tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.en.train.json",
        "data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.en.dev.json",
    ),
    "ar": ("data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ar.dev.json",),
    "ru": ("data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ru.dev.json",),
}  # fmt: skip


def read_tydiqa(store: CorpusStore) -> list[_Collect]:
    """TyDi QA GoldP has no titles: each passage is its own document."""
    out = []
    for lang, paths in TYDI_FILES.items():
        c = _Collect("tydiqa_goldp", lang)
        for path in paths:
            for article in _json(store, "tydiqa_goldp", path)["data"]:
                for par in article["paragraphs"]:
                    doc = passage_id("tydiqa_goldp", lang, par["context"])
                    for qa in par["qas"]:
                        answers = _answers(qa)
                        c.add(doc, "", par["context"], qa["id"], qa["question"], answers)
        out.append(c)
    return out


READERS = {
    "cmrc2018": read_cmrc2018,
    "drcd": read_drcd,
    "arcd": read_arcd,
    "iapp_wiki_qa": read_iapp,
    "tydiqa_goldp": read_tydiqa,
}


def read_qa(store: CorpusStore, source: str) -> tuple[list[QAPassage], list[QAExample]]:
    """One QA source's passages and questions."""
    got = READERS[source](store)
    parts = got if isinstance(got, list) else [got]
    return [p for c in parts for p in c.passages.values()], [e for c in parts for e in c.examples]
