"""What a search is asked (options, defaults) and what it returns (hits with their versions, the
ranked list, an answer): plain data shared by the pipeline, the diagnosis, the prompts and the route
handlers, which map them to and from the HTTP protocol."""

from __future__ import annotations

from dataclasses import dataclass, field

from samelang.indexes.docstore import StoredDoc

READER, ANY = "reader", "any"  # language preferences: the query's language first, or none


@dataclass
class SearchParams:
    """Approximate-index knobs (ignored by exact Flat indexes)."""

    ef_search: int | None = None  # HNSW
    nprobe: int | None = None  # IVF


@dataclass(frozen=True)
class Defaults:
    """What a request gets when it does not say: the served row of ``samelang eval pipeline``."""

    rerank: bool = False  # /search and /answer rerank their candidates
    rerank_k: int = 20  # candidates given to the reranker
    # the retriever's weight beside the reranker's: the order is z(reranker) + w * z(retriever) over the
    # reranked candidates, z over one query's candidates (0: the reranker alone)
    rerank_fusion: float = 0.0
    group_candidates: bool = True  # collapse parallel versions into one candidate per group
    lexical_weight: float = 0.0  # hybrid retrieval: cos + w * bm25 / max bm25 (0: dense only)
    answer_mode: str = "generative"  # /answer: "generative" (the generator writes) or "extractive" (a span)


@dataclass(frozen=True)
class SearchOptions:
    """One search; ``None`` fields take the pipeline's :class:`Defaults`."""

    k: int = 10
    lang: str | None = None  # query language; detected when None
    langs: tuple[str, ...] | None = None  # restrict document languages
    rerank: bool | None = None
    rerank_k: int | None = None
    group_candidates: bool | None = None
    language_preference: str | tuple[str, ...] = READER  # "reader", "any", or languages in order
    lexical_weight: float | None = None  # BM25's weight in hybrid retrieval (0: dense only)


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
