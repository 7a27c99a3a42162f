"""``/diagnose``: audit what the served pipeline ranks for labelled queries (Max@R, Max@R_norm,
Comp@10, the top-1 language), each query searched exactly as ``/search`` serves it. Apart from the
pipeline, which only searches, reranks and answers; this reads its lists."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from samelang.core import metrics as M
from samelang.core import work
from samelang.core.metrics import audit as A
from samelang.service.errors import BadRequest
from samelang.service.pipeline import Pipeline
from samelang.service.results import SearchOptions

MAX_DIAGNOSE_DEPTH = 10000


def dataset_queries(pair: str, split: str) -> list[A.LabelledQuery]:
    a, b = pair.split("-")
    return A.xquad_queries([a, b], split=split, relevant_langs=[a, b])


def diagnose(
    pipe: Pipeline, queries: list[A.LabelledQuery], k: int | None, opts: SearchOptions, field_name: str
) -> dict:
    """Rank the pool for each labelled query exactly as :meth:`Pipeline.search` serves it
    (candidates, reranking, versions listed after their hit) and audit the lists (Max@R,
    Max@R_norm, Comp@10, top-1 language) with :mod:`samelang.core.metrics.audit`."""
    row_of = _check(pipe, queries, opts, field_name)
    n = pipe.index.size  # the row space
    depth = min(k or n, pipe.index.documents, MAX_DIAGNOSE_DEPTH)
    qvecs = pipe.encoder.encode_queries([q.query for q in queries])  # one batched pass
    rankings, qlangs = [], []
    for q, qvec in zip(queries, qvecs):
        work.check()  # a spent budget or a gone client stops the audit between queries
        r = pipe.search(q.query, replace(opts, k=depth, lang=q.lang or None), qvec=qvec[None, :])
        rankings.append([row for h in r.hits for row in h.rows][:depth])
        qlangs.append(r.query_lang)
    # the pool is the documents: columns are the live rows (rows of deleted documents are not in it)
    live = np.arange(n) if pipe.index.documents == n else np.asarray(pipe.index.docs.rows(), dtype=np.int64)
    col_of = {int(r): j for j, r in enumerate(live)}
    col_of_id = {x: col_of[r] for x, r in row_of.items()}
    S = A.score_matrix([[col_of[r] for r in ranking] for ranking in rankings], len(live))
    R = np.zeros_like(S)
    for i, q in enumerate(queries):
        R[i, [col_of_id[x] for x in q.relevant]] = 1
    au = A.audit_lists(S, R)
    langs = pipe.doc_langs[live]
    top1_langs = [langs[t] if au.ranked[i, t] else None for i, t in enumerate(au.top1)]
    ql = np.array([x or "und" for x in qlangs], dtype=object)
    matrix, rows_l, cols_l = M.top1_language_matrix(S, ql, np.array([x or "und" for x in langs], dtype=object))
    return {
        "pool_size": len(live),
        "k": depth,
        "aggregate": au.aggregate(np.ones(len(queries), bool), qlangs, top1_langs),
        "per_query_lang": {x: au.aggregate(ql == x, qlangs, top1_langs) for x in sorted(set(ql.tolist()))},
        "top1_lang_matrix": {r: {c: float(matrix[a, b]) for b, c in enumerate(cols_l)} for a, r in enumerate(rows_l)},
        "queries": _per_query(pipe, queries, qlangs, au, col_of_id, top1_langs, live),
    }


def _check(pipe: Pipeline, queries: list[A.LabelledQuery], opts: SearchOptions, field_name: str) -> dict[str, int]:
    """The request's limits (a 4xx naming the field before any work), and the pool row of
    every relevant id."""
    lim = pipe.limits
    if len(queries) > lim.max_diagnose_queries:
        raise BadRequest(
            field_name.split("[")[0] if field_name != "pair" else "split",
            f"{len(queries)} queries, at most {lim.max_diagnose_queries} per request "
            "(send labelled queries in parts, or a smaller split)",
        )
    if pipe.defaults.rerank if opts.rerank is None else opts.rerank:
        rk = opts.rerank_k or pipe.defaults.rerank_k
        pairs = len(queries) * rk
        if pairs > lim.max_rerank_pairs:
            raise BadRequest(
                "rerank_k",
                f"{len(queries)} queries x rerank_k {rk} = {pairs} reranker pairs, at most "
                f"{lim.max_rerank_pairs} per request (fewer queries, a lower rerank_k, or no rerank)",
            )
    rel_ids = sorted({rid for q in queries for rid in q.relevant})
    row_of = pipe.index.docs.rows_for_ids(rel_ids)
    missing = [rid for rid in rel_ids if rid not in row_of]
    if missing:
        raise BadRequest(field_name, f"{len(missing)} relevant ids are not in the served index, e.g. {missing[:3]}")
    return row_of


def _per_query(pipe: Pipeline, queries, qlangs, au, row_of, top1_langs, live) -> list[dict]:
    """Each query's audit: its relevant ids' ranks, Max@R (None when censored), Comp@10, top-1.
    ``row_of``: the pool column of each relevant id; ``live``: the row of each column."""
    top1_ids = pipe.index.docs.get_rows([int(live[t]) for t in au.top1])
    return [
        {
            "query": q.query,
            "lang": qlangs[i],
            "ranks": {
                rid: (int(au.ranks[i, row_of[rid]]) if au.ranked[i, row_of[rid]] else None) for rid in q.relevant
            },  # fmt: skip
            "max_r": None if au.censored[i] else int(au.max_r[i]),
            "max_r_norm": None if np.isnan(au.max_r_norm[i]) else float(au.max_r_norm[i]),
            "comp_at_10": bool(au.comp_at_10[i]),
            "top1_id": top1_ids[i].id if top1_ids[i] else None,
            "top1_lang": top1_langs[i],
            "censored": bool(au.censored[i]),
        }
        for i, q in enumerate(queries)
    ]
