"""What a search returns: hits with their versions, the ranked list, an answer; plain data that the route
handlers map to their protocol."""

from __future__ import annotations

from dataclasses import dataclass, field

from samelang.indexes.docstore import StoredDoc


@dataclass(frozen=True)
class Version:
    row: int
    id: str
    lang: str | None


@dataclass
class Hit:
    doc: StoredDoc
    score: float  # the reranker's score in the reranked head, else the retriever's
    retrieval_score: float  # the retriever's score: cosine, or hybrid (a group's: its best version's)
    versions: list[Version] = field(default_factory=list)  # the group's other versions in the index

    @property
    def rows(self) -> list[int]:
        """This hit's documents as the reader sees them: the hit, then its other versions."""
        return [self.doc.row] + [v.row for v in self.versions]


@dataclass(frozen=True)
class Answered:
    """The end of :meth:`Pipeline.answer_stream` (and what :meth:`Pipeline.answer` returns): the whole
    answer (``None``: none), how it was made, and, for an extracted span, the language and id of the
    passage it was copied from (a generated answer's are read back from its text)."""

    text: str | None
    mode: str = "generative"
    lang: str | None = None
    cited: tuple[str, ...] | None = None


@dataclass
class Ranked:
    query_lang: str | None
    lang_detected: bool
    hits: list[Hit]
    candidates: list[Hit]  # before reranking, in the retriever's order
    reranked: bool
    grouped: bool
    lexical_weight: float | None = None  # BM25's weight in the retriever's score (None: dense only)
