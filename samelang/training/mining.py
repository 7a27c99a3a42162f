"""Hard negatives mined by the served retriever: every training query searched, as a user's query is,
over a training collection without group labels, and its first wrong passages kept, in every language.

Why: the passages a ranking model must learn to put below the answer are the ones the served retriever
puts above it. Measured on a user-shaped collection, a wrong passage in the reader's own language came
first in 54% of the misses: random or same-article negatives do not show a model that confusion.
The search is :meth:`~samelang.retrieval.pipeline.Pipeline.search` with the served retriever and BM25
weight, documents not grouped (each version its own hit), no reranker. Results are cached on disk
under the retriever's fingerprint and the collection's and queries' identity.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from samelang.core.catalogue import open_encoder, resolve_model, served_defaults, served_fingerprint
from samelang.core.models.cross_encoder import CosineReranker
from samelang.core.models.generation import NoGenerator
from samelang.corpora.records import Document
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.atomic import atomic_write_text
from samelang.primitives.langid import get_identifier
from samelang.retrieval.limits import Limits
from samelang.retrieval.options import Defaults, SearchOptions
from samelang.retrieval.pipeline import Pipeline

MINING_VERSION = "mining-v1"  # bump when what a cached list means changes


class MiningOptions(BaseModel):
    """The mining retriever's option, declared once for every trainer that mines (a plain model: each
    trainer's settings class keeps its own ``SAMELANG_*`` prefix)."""

    mine_with: str = Field(
        "served",
        description="The retriever that mines hard negatives (--relevance-first's groups, the reader's "
        "--mined-negatives): served (models/serving.json's), a model (dense) or MODEL+bm25=W.",
    )


@dataclass(frozen=True)
class MiningQuery:
    """A training query: its id, text, language and the key of what answers it (``Document.metadata
    ["key"]`` of the collection: every language version of the gold shares one key)."""

    id: str
    text: str
    lang: str
    key: str


@dataclass(frozen=True)
class Retriever:
    """The retriever that mines: a model (a models/ folder name, ``base`` or a path) and its BM25 weight."""

    model: str
    lexical_weight: float

    @classmethod
    def parse(cls, spec: str) -> Retriever:
        """``served`` (``models/serving.json``'s retriever and weight), ``NAME`` (dense) or ``NAME+bm25=W``."""
        if spec == "served":
            d = served_defaults()
            return cls(d.retriever, d.lexical_weight)
        name, _, weight = spec.partition("+bm25=")
        return cls(name, float(weight) if weight else 0.0)


def mine_negatives(
    queries: Sequence[MiningQuery],
    docs: Sequence[Document],
    retriever: Retriever,
    home: Path,
    depth: int = 20,
    log: Callable[[str], None] = print,
) -> dict[str, list[str]]:
    """``query id -> ids of the wrong documents among the first `depth` hits``, in rank order (a
    document is wrong when its ``metadata["key"]`` is not the query's). Cached on disk."""
    model = resolve_model(retriever.model, home)
    ident = hashlib.sha256()
    for part in (MINING_VERSION, served_fingerprint(model, home), retriever.lexical_weight, depth):
        ident.update(f"{part}\n".encode())
    for d in docs:
        ident.update(f"d|{d.id}|{d.lang}|{d.metadata['key']}|{len(d.text)}\n".encode())
    for q in queries:
        ident.update(f"q|{q.id}|{q.lang}|{q.key}|{q.text}\n".encode())
    cache = Path(home) / "cache" / "mining" / f"{ident.hexdigest()[:20]}.json"
    if cache.is_file():
        return json.loads(cache.read_text(encoding="utf-8"))
    log(f"mining hard negatives: {len(queries)} queries over {len(docs)} documents with {retriever.model} "
        f"(BM25 w={retriever.lexical_weight}, first {depth} hits)")  # fmt: skip
    encoder = open_encoder(model, home=home)
    index_dir = cache.with_suffix(".index")
    if not (index_dir / "CURRENT").exists():
        build_index(index_dir, list(docs), encoder.encode_passages, encoder.info, source="mining",
                    analyzer=encoder.analyzer)  # fmt: skip
    key_of = {d.id: d.metadata["key"] for d in docs}
    index = open_index(index_dir, encoder.info)
    try:
        lists = search_ids(index, encoder, retriever.lexical_weight, queries, depth, desc="mining")
        out = {q.id: [i for i in ids if key_of[i] != q.key] for q, ids in zip(queries, lists, strict=True)}
    finally:
        index.close()
    atomic_write_text(cache, json.dumps(out, ensure_ascii=False))
    return out


def search_ids(index, encoder, lexical_weight: float, queries: Sequence, depth: int = 20,
               desc: str = "searching") -> list[list[str]]:  # fmt: skip
    """The document ids :meth:`Pipeline.search` lists for each query (``.text``, ``.lang``) over ``index``: the
    served path with documents not grouped and no reranker, query vectors encoded in one batch."""
    defaults = Defaults(rerank=False, group_candidates=False, lexical_weight=lexical_weight)
    pipe = Pipeline(encoder, index, CosineReranker(encoder), NoGenerator(), get_identifier(), Limits(),
                    defaults=defaults)  # fmt: skip
    qvecs = encoder.encode_queries([q.text for q in queries], progress=True) if queries else []
    out = []
    for q, v in zip(tqdm(queries, desc=desc, unit="q"), qvecs, strict=True):
        res = pipe.search(q.text, SearchOptions(k=depth, lang=q.lang), qvec=np.asarray(v, np.float32)[None])
        out.append([h.doc.id for h in res.hits])
    return out
