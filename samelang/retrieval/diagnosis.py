"""``/diagnose``: audit what the served pipeline ranks, each query searched exactly as ``/search``
serves it. With or without labels, the language bias of the top-k (:mod:`samelang.core.metrics.
language_bias`: the results' languages against the collection's, Jensen-Shannon divergence, the
share of readers who ever see another language) and the top-1 language; where labels exist, Max@R,
Max@R_norm and Comp@10 too. Queries come from the user, from XQuAD, or are sampled from the index's
own documents (:func:`sample_queries`). Apart from the pipeline, which only searches, reranks and
answers; this reads its lists."""

from __future__ import annotations

import re
from dataclasses import asdict, replace

import numpy as np

from samelang.core import budget
from samelang.core import metrics as M
from samelang.core.metrics import audit as A
from samelang.core.metrics.language_bias import language_bias
from samelang.retrieval.errors import BadRequest
from samelang.retrieval.options import SearchOptions
from samelang.retrieval.pipeline import Pipeline

MAX_DIAGNOSE_DEPTH = 10000
BIAS_K = 10  # the top-k whose languages are audited (what a reader looks at)
SENTENCE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")
MIN_QUERY_CHARS, MAX_QUERY_CHARS = 12, 300


def dataset_queries(pair: str, split: str) -> list[A.LabelledQuery]:
    a, b = pair.split("-")
    return A.xquad_queries([a, b], split=split, relevant_langs=[a, b])


def live_rows(pipe: Pipeline) -> np.ndarray:
    """The rows of the index's documents (rows of deleted documents are not in the pool)."""
    n = pipe.index.size
    return np.arange(n) if pipe.index.documents == n else np.asarray(pipe.index.docs.rows(), dtype=np.int64)


def sample_queries(pipe: Pipeline, n: int, seed: int = 0) -> tuple[list[A.LabelledQuery], list[int]]:
    """``n`` unlabelled queries drawn from the index's own documents, for a collection that has no
    questions: (the queries, the row each came from).

    The same number from every language the index holds (a language with fewer documents gives
    what it has, the rest go to the others), so a minority language is audited as closely as the
    majority one; documents drawn without replacement by a seeded generator (``seed``: the same
    sample from the same index). The query is one sentence of its document, in its document's
    language: the inverse cloze task's pseudo-query (Lee et al., 2019), a question-like span that
    the rest of the collection, its translations included, can answer. :func:`diagnose` leaves
    the source document out of its own list: it would otherwise come first by copying."""
    rows = live_rows(pipe)
    langs = np.array([x or "und" for x in pipe.doc_langs[rows]], dtype=object)
    pools = {x: rows[langs == x] for x in sorted(set(langs.tolist()))}
    quota = dict.fromkeys(pools, 0)
    left = min(n, len(rows))
    while left:  # one more for every language that still has documents, until n are given out
        open_ = [x for x in pools if quota[x] < len(pools[x])]
        for x in open_[:left]:
            quota[x] += 1
        left -= min(left, len(open_))
    rng = np.random.default_rng(seed)
    chosen = [int(r) for x in pools for r in rng.choice(pools[x], size=quota[x], replace=False)]
    docs = pipe.index.docs.get_rows(chosen)
    queries = [A.LabelledQuery(pseudo_query(d.text, rng), d.lang or "", "", (), "") for d in docs]
    return queries, chosen


def pseudo_query(text: str, rng: np.random.Generator) -> str:
    """One sentence of ``text`` (:data:`MIN_QUERY_CHARS` to :data:`MAX_QUERY_CHARS` characters, drawn
    by ``rng``), else its beginning, cut at a space where there is one."""
    sentences = [x.strip() for x in SENTENCE.split(" ".join(text.split())) if x.strip()]
    fit = [x for x in sentences if MIN_QUERY_CHARS <= len(x) <= MAX_QUERY_CHARS]
    if fit:
        return fit[int(rng.integers(len(fit)))]
    head = " ".join(text.split())[:MAX_QUERY_CHARS]
    return head.rsplit(" ", 1)[0] if " " in head[MIN_QUERY_CHARS:] else head


def diagnose(
    pipe: Pipeline,
    queries: list[A.LabelledQuery],
    k: int | None,
    opts: SearchOptions,
    field_name: str,
    bias_k: int = BIAS_K,
    sources: list[int] | None = None,
) -> dict:
    """Rank the pool for each query exactly as :meth:`Pipeline.search` serves it (candidates,
    reranking, versions listed after their hit) and audit the lists: the languages of every
    query's first ``bias_k`` hits, the documents ``/search`` shows (their other-language versions,
    attached to a hit, are not counted: they would make every labelled pool look mixed;
    :func:`~samelang.core.metrics.language_bias.language_bias`) and its top-1; for the labelled
    queries (a ``relevant`` list) Max@R, Max@R_norm and Comp@10 over the first ``k`` (default: the
    whole pool) with :mod:`samelang.core.metrics.audit`. ``sources``:
    the row each query was drawn from (:func:`sample_queries`), left out of that query's list."""
    row_of = _check(pipe, queries, opts, field_name)
    labelled = np.array([bool(q.relevant) for q in queries])
    live = live_rows(pipe)
    depth = min(k or len(live), len(live), MAX_DIAGNOSE_DEPTH) if labelled.any() else min(bias_k, len(live))
    qvecs = pipe.encoder.encode_queries([q.query for q in queries])  # one batched pass
    rankings, tops, qlangs = [], [], []
    for i, (q, qvec) in enumerate(zip(queries, qvecs)):
        budget.check()  # a spent budget or a gone client stops the audit between queries
        want = max(depth, bias_k) + (sources is not None)
        r = pipe.search(q.query, replace(opts, k=want, lang=q.lang or None), qvec=qvec[None, :])
        hits = [h for h in r.hits if sources is None or h.doc.row != sources[i]]
        rankings.append([row for h in hits for row in h.rows][:depth])  # versions count where found (Max@R)
        tops.append([h.doc.row for h in hits][:bias_k])  # the hits the reader is shown, in order (the bias)
        qlangs.append(r.query_lang)
    col_of = {int(r): j for j, r in enumerate(live)}
    S = A.score_matrix([[col_of[r] for r in ranking] for ranking in rankings], len(live))
    langs = np.array([x or "und" for x in pipe.doc_langs[live]], dtype=object)
    ql = np.array([x or "und" for x in qlangs], dtype=object)
    bias = language_bias(ql.tolist(), [[langs[col_of[r]] for r in top] for top in tops], langs.tolist(), bias_k)
    matrix, rows_l, cols_l = M.top1_language_matrix(S, ql, langs)
    found = np.isfinite(S).any(axis=1)
    top1 = [int(live[t]) if ok else None for t, ok in zip(M.ranking(S)[:, 0], found)]
    out = {
        "pool_size": len(live),
        "k": depth,
        "labelled": int(labelled.sum()),
        "bias": asdict(bias),
        "aggregate": None,
        "per_query_lang": {},
        "top1_lang_matrix": {r: {c: float(matrix[a, b]) for b, c in enumerate(cols_l)} for a, r in enumerate(rows_l)},
    }
    au = _labelled_audit(out, queries, labelled, S, col_of, row_of, qlangs, ql, top1, langs, len(live))
    out["queries"] = _per_query(pipe, queries, qlangs, au, labelled, col_of, row_of, top1, langs, sources, tops)
    return out


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
    resolved = pipe.resolve(opts)
    if resolved.rerank:
        rk = resolved.rerank_k
        pairs = len(queries) * rk
        if pairs > lim.max_rerank_pairs:
            raise BadRequest(
                "rerank_k",
                f"{len(queries)} queries x rerank_k {rk} = {pairs} reranker pairs, at most "
                f"{lim.max_rerank_pairs} per request (fewer queries, a lower rerank_k, or no rerank)",
            )
    rel_ids = sorted({rid for q in queries for rid in q.relevant or ()})
    row_of = pipe.index.docs.rows_for_ids(rel_ids)
    missing = [rid for rid in rel_ids if rid not in row_of]
    if missing:
        raise BadRequest(field_name, f"{len(missing)} relevant ids are not in the served index, e.g. {missing[:3]}")
    return row_of


def _labelled_audit(out, queries, labelled, S, col_of, row_of, qlangs, ql, top1, langs, n):
    """Max@R, Max@R_norm and Comp@10 of the labelled queries (their rows of ``S``), into ``out``'s
    ``aggregate`` and ``per_query_lang``; the audit (``None`` when no query is labelled)."""
    if not labelled.any():
        return None
    which = np.flatnonzero(labelled)
    R = np.zeros((len(which), n))
    for j, i in enumerate(which):
        R[j, [col_of[row_of[x]] for x in queries[i].relevant]] = 1
    au = A.audit_lists(S[which], R)
    lq = [qlangs[i] for i in which]
    top1_l = [langs[col_of[top1[i]]] if top1[i] is not None else None for i in which]
    out["aggregate"] = au.aggregate(np.ones(len(which), bool), lq, top1_l)
    out["per_query_lang"] = {x: au.aggregate(ql[which] == x, lq, top1_l) for x in sorted(set(ql[which].tolist()))}
    return au


def _per_query(pipe, queries, qlangs, au, labelled, col_of, row_of, top1, langs, sources, tops):
    """Each query's audit: its top-1 (id, language), whether its top hits (``tops``) hold another
    language, the document it was drawn from; for a labelled one its relevant ids' ranks, Max@R
    (None when censored) and Comp@10. ``au``: the audit of the labelled queries, in their order."""
    docs = pipe.index.docs.get_rows([t for t in top1 if t is not None])
    top1_doc = dict(zip([t for t in top1 if t is not None], docs))
    source_ids = [d.id for d in pipe.index.docs.get_rows(sources)] if sources is not None else None
    j = np.cumsum(labelled) - 1  # each labelled query's row in ``au``
    out = []
    for i, q in enumerate(queries):
        t = top1[i]
        entry = {
            "query": q.query,
            "lang": qlangs[i],
            "top1_id": top1_doc[t].id if t is not None and top1_doc.get(t) else None,
            "top1_lang": langs[col_of[t]] if t is not None else None,
            "top_langs": [langs[col_of[r]] for r in tops[i]],
            "sees_other_lang": any(langs[col_of[r]] != (qlangs[i] or "und") for r in tops[i]),
            "source_id": source_ids[i] if source_ids else None,
            "ranks": {}, "max_r": None, "max_r_norm": None, "comp_at_10": None, "censored": None,
        }  # fmt: skip
        if labelled[i]:
            a = int(j[i])
            entry.update(
                ranks={
                    rid: int(au.ranks[a, col_of[row_of[rid]]]) if au.ranked[a, col_of[row_of[rid]]] else None
                    for rid in q.relevant
                },  # fmt: skip
                max_r=None if au.censored[a] else int(au.max_r[a]),
                max_r_norm=None if np.isnan(au.max_r_norm[a]) else float(au.max_r_norm[a]),
                comp_at_10=bool(au.comp_at_10[a]),
                censored=bool(au.censored[a]),
            )
        out.append(entry)
    return out
