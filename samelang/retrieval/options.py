"""What a search is asked: its options, and the defaults a request gets when it does not say (the served
row of ``samelang eval pipeline``); plain data shared by the pipeline, the judge and the route handlers."""

from __future__ import annotations

from dataclasses import dataclass

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
class Resolved:
    """A request's effective options: its own where it says, else the served :class:`Defaults`. Worked out
    once (:func:`resolve`) and read by the search, the diagnosis, the components every response names, and
    ``/info`` (the defaults a request with no options gets), so that what a response says ran is what ran."""

    rerank: bool
    rerank_k: int
    rerank_fusion: float
    grouped: bool
    lexical_weight: float  # BM25's weight (0: dense only)


def resolve(opts: SearchOptions, defaults: Defaults, has_lexical: bool) -> Resolved:
    """``opts`` over ``defaults``. The served default is hybrid only over an index with the lexical half
    (``has_lexical``; an older index serves dense and says so at start); a request that asks for hybrid
    gets it or a 422."""
    d = defaults
    default_weight = d.lexical_weight if has_lexical else 0.0
    return Resolved(
        rerank=d.rerank if opts.rerank is None else opts.rerank,
        rerank_k=d.rerank_k if opts.rerank_k is None else opts.rerank_k,
        rerank_fusion=d.rerank_fusion,
        grouped=d.group_candidates if opts.group_candidates is None else opts.group_candidates,
        lexical_weight=default_weight if opts.lexical_weight is None else opts.lexical_weight,
    )
