"""The lexical half of hybrid retrieval: Okapi BM25 over the indexed documents' texts (bm25s).

Why words beside the vectors: questions people type over a collection repeat the document's own words (names,
numbers, rare terms), which a small bi-encoder blurs and BM25 keeps; and BM25 is language-coherent by construction
(a Thai question shares tokens with the Thai version of a paragraph, not with the English one). Fused with the
cosine (:func:`samelang.retrieval.candidates.fuse`) it beats either alone (``docs/design.md``).

Terms come from an *analyzer* the caller gives (this package knows no model): the service passes its encoder's
subword tokenizer (XLM-R sentencepiece for e5), which segments every script, Thai and Chinese included, and acts as
a light stemmer. The analyzer's name is recorded with the index, so queries are analysed as the documents were.
The index is rebuilt from all the generation's texts on every add (BM25's document frequencies change with every
document), into the generation's ``lexical/`` folder, so it is as crash-safe as the vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Analyzer = Callable[[str], list[str]]
FOLDER = "lexical"
K1, B = 1.2, 0.75  # Robertson / Lucene defaults; k1 in {0.9, 1.2, 1.5, 2}, b in {0.4, 0.75, 0.9} moved fusion <= 0.5 pt


@dataclass
class LexicalIndex:
    """BM25 scores of a query against every document row (row = docstore row)."""

    bm25: object  # bm25s.BM25
    analyzer: str  # the name of the analyzer that made its terms
    n_docs: int

    @classmethod
    def build(cls, texts: Sequence[str], analyze: Analyzer, analyzer: str) -> LexicalIndex:
        import bm25s  # deferred: keeps bm25s out of start-up

        bm25 = bm25s.BM25(k1=K1, b=B)
        bm25.index([analyze(t) for t in texts], show_progress=False)
        return cls(bm25, analyzer, len(texts))

    def save(self, folder: Path) -> None:
        self.bm25.save(str(folder))

    @classmethod
    def load(cls, folder: Path, analyzer: str, n_docs: int) -> LexicalIndex:
        import bm25s  # deferred: keeps bm25s out of start-up

        return cls(bm25s.BM25.load(str(folder), mmap=False), analyzer, n_docs)

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 of the query's terms for every row (0 for a document sharing none)."""
        known = [t for t in terms if t in self.bm25.vocab_dict]
        if not known:
            return np.zeros(self.n_docs, np.float32)
        return np.asarray(self.bm25.get_scores(known), dtype=np.float32)
