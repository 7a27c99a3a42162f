"""Corpora, the ground floor: the vendored XQuAD and Tatoeba data, a user's own JSONL, and the training
corpora (``sources``, ``store``, ``views``: imported from their own modules, not re-exported here)."""

from samelang.corpora.jsonl import CorpusFormatError, load_documents_jsonl, load_labelled_queries_jsonl
from samelang.corpora.records import (
    SPLITS,
    Answer,
    Document,
    LabelledQuery,
    Paragraph,
    Question,
    SentencePair,
    Split,
)
from samelang.corpora.tatoeba import TATOEBA_CODES, load_tatoeba
from samelang.corpora.xquad import (
    XQUAD_LANGS,
    XQuAD,
    check_langs,
    dev_articles,
    dev_reading,
    load_split,
    load_xquad,
    split_articles,
)

__all__ = [
    "Answer", "CorpusFormatError", "Document", "LabelledQuery", "Paragraph", "Question", "SPLITS",
    "SentencePair", "Split", "TATOEBA_CODES", "XQUAD_LANGS", "XQuAD", "check_langs", "dev_articles", "dev_reading",
    "load_documents_jsonl", "load_labelled_queries_jsonl", "load_split", "load_tatoeba", "load_xquad", "split_articles",
]  # fmt: skip
