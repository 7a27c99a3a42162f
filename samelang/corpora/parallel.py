"""The parallel sources' readers: documents of sentences in all 12 languages, cut into passages.

FLORES-200 devtest and NTREX-128 hold the same sentences, line by line, in every language, with a
document id per line (FLORES: the article's URL; NTREX: ``DOCUMENT_IDS.tsv``). A passage is
``PASSAGE_SENTENCES`` consecutive sentences of one document; a document's last short piece joins the
passage before it, so that no passage is a lone sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from samelang.corpora.sources import BY_NAME
from samelang.corpora.store import CorpusStore

PASSAGE_SENTENCES = 4
FLORES_CODES = {
    "en": "eng_Latn", "ar": "arb_Arab", "de": "deu_Latn", "el": "ell_Grek", "es": "spa_Latn", "hi": "hin_Deva",
    "ro": "ron_Latn", "ru": "rus_Cyrl", "th": "tha_Thai", "tr": "tur_Latn", "vi": "vie_Latn", "zh": "zho_Hans",
}  # fmt: skip
NTREX_CODES = {
    "en": "eng-US", "ar": "arb", "de": "deu", "el": "ell", "es": "spa", "hi": "hin",
    "ro": "ron", "ru": "rus", "th": "tha", "tr": "tur", "vi": "vie", "zh": "zho-CN",
}  # fmt: skip
FLORES_DIR = "datasets/facebook/flores/flores200_dataset/"


@dataclass(frozen=True)
class ParallelPassage:
    """Consecutive sentences of one document, the same in every language."""

    id: str
    source: str
    doc: str
    sentences: dict[str, tuple[str, ...]]  # language -> its sentences, aligned across languages

    def text(self, lang: str, skip: int | None = None) -> str:
        """The passage in ``lang`` (``skip``: without that sentence, the inverse cloze task's positive)."""
        parts = [s for i, s in enumerate(self.sentences[lang]) if i != skip]
        return ("" if lang == "zh" else " ").join(parts)


def _lines(store: CorpusStore, source: str, path: str) -> list[str]:
    return store.read(BY_NAME[source], path).decode("utf-8").rstrip("\n").split("\n")


def _passages(source: str, docs: list[str], by_lang: dict[str, list[str]]) -> list[ParallelPassage]:
    n = len(docs)
    bad = {lang: len(lines) for lang, lines in by_lang.items() if len(lines) != n}
    if bad:
        raise ValueError(f"{source}: {n} document ids but {bad} lines: the files are not aligned")
    runs: list[tuple[str, list[int]]] = []
    for i, doc in enumerate(docs):
        if runs and runs[-1][0] == doc:
            runs[-1][1].append(i)
        else:
            runs.append((doc, [i]))
    out = []
    for doc, rows in runs:
        cuts = [rows[k : k + PASSAGE_SENTENCES] for k in range(0, len(rows), PASSAGE_SENTENCES)]
        if len(cuts) > 1 and len(cuts[-1]) < PASSAGE_SENTENCES // 2:
            last = cuts.pop()
            cuts[-1] += last
        for cut in cuts:
            sentences = {lang: tuple(lines[i].strip() for i in cut) for lang, lines in by_lang.items()}
            out.append(ParallelPassage(f"{source}-{cut[0]:04d}", source, doc, sentences))
    return out


def read_flores(store: CorpusStore) -> list[ParallelPassage]:
    meta = _lines(store, "flores200", FLORES_DIR + "metadata_devtest.tsv")[1:]  # header: URL domain topic ...
    docs = [row.split("\t")[0] for row in meta]
    by_lang = {
        lang: _lines(store, "flores200", f"{FLORES_DIR}devtest/{code}.devtest") for lang, code in FLORES_CODES.items()
    }
    return _passages("flores200", docs, by_lang)


def read_ntrex(store: CorpusStore) -> list[ParallelPassage]:
    docs = [row.strip() for row in _lines(store, "ntrex128", "DOCUMENT_IDS.tsv")]
    by_lang = {
        lang: _lines(store, "ntrex128", f"NTREX-128/newstest2019-ref.{code}.txt") for lang, code in NTREX_CODES.items()
    }
    return _passages("ntrex128", docs, by_lang)


READERS = {"flores200": read_flores, "ntrex128": read_ntrex}


def read_parallel(store: CorpusStore, source: str) -> list[ParallelPassage]:
    return READERS[source](store)
