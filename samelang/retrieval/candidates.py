"""Candidate generation: the best rows for a query (dense, hybrid with BM25, or the fused
retriever's score), then the hits a reranker sees (documents, or one version per group of
translations). A query's BM25 is scored once (:class:`LexicalQuery`) and every fusion with it is
:func:`fuse`; :class:`~samelang.retrieval.pipeline.Pipeline` orchestrates search, rerank and answer
over this.

Group-aware candidates. An index may hold several language versions of one document (documents
sharing a ``group``). A plain top-k spends its slots on translations of one paragraph, and the
reranker sees the English version beside the reader's. So the candidates collapse documents that
share a group (a group's score is its best version's), represent each group by the version the
reader prefers (``language_preference``: the query's language by default) whether or not that
version was retrieved, and list each hit's other versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from samelang.core.models.contracts import TextEncoder
from samelang.indexes.index import OpenIndex
from samelang.indexes.vectors import normalise
from samelang.retrieval.errors import BadRequest
from samelang.retrieval.hits import Hit, Version
from samelang.retrieval.options import ANY, READER, SearchParams
from samelang.retrieval.translations import infer_translation_groups

INFERRED = "inferred"  # the key of a translation group inferred by a fused retriever


def fuse(dense: np.ndarray, lexical: np.ndarray, weight: float, top: float | None = None) -> np.ndarray:
    """Hybrid score: ``cos(q, d) + weight * bm25(q, d) / max_d' bm25(q, d')`` (per query row).

    Dividing BM25 by the query's best BM25 score puts it on [0, 1] whatever the query's length
    and rarity, next to a cosine; ``weight`` is tuned on the train articles
    (``samelang eval fusion``). ``top``: the query's best BM25 over the whole index, when
    ``lexical`` holds only some documents' scores (default: the row maximum). The whole index's
    best, not the best among documents a language filter allows: a Thai question filtered to
    English documents shares only stray subwords with them, and those must not weigh as much as a
    real match."""
    dense, lexical = np.atleast_2d(dense).astype(np.float64), np.atleast_2d(lexical).astype(np.float64)
    best = lexical.max(axis=1, keepdims=True) if top is None and lexical.size else np.array([[top or 0.0]])
    return dense + weight * lexical / np.maximum(best, 1e-9)


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` highest positive scores, best first (linear selection, then a sort of
    those ``k``: cheap on a large index)."""
    k = min(k, int((scores > 0).sum()))
    if k <= 0:
        return np.zeros(0, np.int64)
    rows = np.argpartition(-scores, k - 1)[:k]
    return rows[np.argsort(-scores[rows], kind="stable")].astype(np.int64)


@dataclass(frozen=True)
class LexicalQuery:
    """One query's BM25 against every row, scored once; what a hybrid search fuses with it."""

    scores: np.ndarray  # BM25 of every row; 0 where the language filter excludes the row
    top: float  # the query's best BM25 over the whole index (the scale, see fuse)
    weight: float

    def best(self, k: int) -> np.ndarray:
        """The ``k`` best rows by BM25 alone."""
        return best_rows(self.scores, k)

    def hybrid(self, dense: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``dense`` (the rows' cosines) fused with their BM25 (:func:`fuse`)."""
        return fuse(dense, self.scores[rows], self.weight, top=self.top)[0]


def preference(pref: str | Sequence[str], qlang: str | None) -> tuple[str, ...]:
    """The languages a group's version is chosen by, in order (``reader``: the query's; ``any``: none)."""
    if isinstance(pref, str):
        if pref == ANY:
            return ()
        if pref == READER:
            return (qlang,) if qlang else ()
        raise BadRequest("language_preference", f"must be 'reader', 'any' or a list of languages, got {pref!r}")
    return tuple(pref)


class RowRetriever:
    """The best rows of the index for a query vector: by cosine, by the hybrid of cosine and BM25,
    or by the fused retriever's score (:mod:`samelang.core.models.fused`)."""

    def __init__(self, encoder: TextEncoder, index: OpenIndex, search_params: SearchParams):
        self.encoder, self.index, self.search_params = encoder, index, search_params
        self.doc_langs = np.array(index.docs.langs(index.size), dtype=object)  # by row (None: deleted too)
        self.lexical = self._lexical_half(index, encoder)
        self.fusion = encoder.fusion if encoder.capabilities.fused else None  # samelang.core.models.fused
        self.calibration = self._calibration_sample() if self.fusion else None

    @staticmethod
    def _lexical_half(index: OpenIndex, encoder):
        """The index's BM25 half with the encoder's analyzer, or ``None`` (dense only) when the index
        has none or was analysed otherwise (then a hybrid request is a 422 naming the fix)."""
        lex = getattr(index, "lexical", None)
        if lex is None:
            return None
        name, analyze = encoder.analyzer
        if name != lex.analyzer:
            return None
        return lex, analyze

    def _vector_search(self, qvecs: np.ndarray, k: int, langs: Sequence[str] | None = None):
        p = self.search_params
        return self.index.search(qvecs, k, ef_search=p.ef_search, nprobe=p.nprobe, langs=langs)

    def _calibration_sample(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The vectors whose cosines with a query put the fused retriever's two models on one scale
        (both halves): its reference passages, or without them up to ``calibration_rows`` evenly
        spaced live documents of the index."""
        if self.encoder.calibration is not None:
            return self.encoder.calibration
        live = np.asarray(self.index.docs.rows(), dtype=np.int64)
        if live.size == 0:
            return None
        take = min(live.size, self.fusion.calibration_rows)
        rows = live[np.unique(np.round(np.linspace(0, live.size - 1, take)).astype(np.int64))]
        return self.encoder.halves(self.stored_vectors(rows.tolist()))

    def stored_vectors(self, rows: list[int]) -> np.ndarray:
        """The stored vectors of ``rows``, or (a GPU copy, an IVF index without a direct map) their
        texts embedded again."""
        vecs = self.index.vectors(rows)
        if vecs is None:
            docs = self.index.docs.get_rows(rows)
            vecs = normalise(self.encoder.encode_passages([d.text for d in docs]))
        return np.asarray(vecs, dtype=np.float32)

    def _fused_rows(self, qvec: np.ndarray, k: int, langs, lexical: LexicalQuery | None, qlang: str | None):
        """The ``k`` best rows by the fused retriever's score (:mod:`samelang.core.models.fused`): the
        store's best ``candidate_depth`` rows for ``[q_same*a; q_cross*b]`` and BM25's best as many,
        each scored by the reader's-language model (base cosine + BM25, plus ``same_cross_weight``
        times the cross-language model's) when it is in ``qlang``, else by the cross-language
        model (+ ``cross_offset``), both in z-units of the query's
        cosines over the calibration sample."""
        enc, f = self.encoder, self.fusion
        depth = min(self.index.size, max(k, f.candidate_depth))
        _, found = self.search_rows(enc.store_query(qvec), depth, langs)
        cand = found[0][found[0] >= 0].tolist()
        if lexical is not None:
            cand += lexical.best(depth).tolist()
        cand = np.array(list(dict.fromkeys(cand)), dtype=np.int64)
        if cand.size == 0:
            return np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)
        score = self.fused_scores(qvec, cand, lexical, qlang)
        order = np.argsort(-score, kind="stable")[:k]
        return score[order][None, :].astype(np.float32), cand[order][None, :]

    def fused_scores(self, qvec: np.ndarray, rows: np.ndarray, lexical: LexicalQuery | None, qlang: str | None):
        """The fused score of ``rows`` (see :meth:`_fused_rows`)."""
        in_reader = self.doc_langs[rows] == qlang if qlang else np.zeros(rows.size, bool)
        hybrid = None if lexical is None else (lambda same: lexical.hybrid(same, rows))
        # the calibration is None only for an index without documents: no rows here
        vecs = self.stored_vectors(rows.tolist())
        return self.encoder.fused_scores(qvec, vecs, in_reader, self.calibration, hybrid, self.fusion)

    def rows(self, qvec: np.ndarray, k: int, langs, lexical: LexicalQuery | None, qlang: str | None = None):
        """The ``k`` best rows by the retriever's score: the cosine, or with ``lexical`` the hybrid
        :func:`fuse` of cosine and BM25.

        Hybrid: the union of the dense and the BM25 top ``depth``, each row's missing score computed
        (its stored vector's cosine, or its BM25). A row outside both lists scores at most the
        ``depth``-th cosine plus the weighted ``depth``-th BM25; while the ``k``-th fused score is
        below that bound, ``depth`` doubles. So the ``k`` rows are exactly the index's best. A fused
        retriever scores its own way (:meth:`_fused_rows`)."""
        if self.fusion is not None:
            return self._fused_rows(qvec, k, langs, lexical, qlang)
        if lexical is None:
            return self.search_rows(qvec, k, langs)
        n, depth = self.index.size, k
        while True:
            scores, rows = self.search_rows(qvec, depth, langs)
            ok = rows[0] >= 0
            dense = dict(zip(rows[0][ok].tolist(), scores[0][ok].astype(np.float64).tolist()))
            lex_rows = lexical.best(depth)
            union = np.array(list(dict.fromkeys([*dense, *lex_rows.tolist()])), dtype=np.int64)
            self._fill_cosines(qvec, dense, [int(r) for r in union if int(r) not in dense])
            cos = np.array([dense[int(r)] for r in union], dtype=np.float64)
            fused = lexical.hybrid(cos, union)
            order = np.argsort(-fused, kind="stable")[:k]
            # what a row in neither list can reach (-inf when a list already holds every candidate)
            c_out = scores[0][ok][-1] if ok.sum() >= depth else -np.inf
            b_out = lexical.scores[lex_rows[-1]] if len(lex_rows) >= depth else 0.0
            bound = c_out + lexical.weight * b_out / max(lexical.top, 1e-9)
            if depth >= n or (len(order) == k and fused[order[-1]] >= bound) or c_out == -np.inf:
                return fused[order][None, :].astype(np.float32), union[order][None, :]
            depth = min(n, depth * 2)

    def _fill_cosines(self, qvec: np.ndarray, dense: dict[int, float], rows: list[int]) -> None:
        """The cosine of ``rows`` that the dense search did not return (:meth:`stored_vectors`)."""
        if not rows:
            return
        vecs = self.stored_vectors(rows)
        dense.update(zip(rows, (vecs @ normalise(qvec)[0]).astype(np.float64).tolist()))

    def search_rows(self, qvecs: np.ndarray, k: int, langs: Sequence[str] | None):
        """Vector search with an optional document-language filter: in the store where it filters
        (Milvus), else by over-fetching until k pass (FAISS)."""
        n = self.index.size
        if not langs or self.index.filters_langs:
            return self._vector_search(qvecs, min(k, n), langs)
        allowed = np.isin(self.doc_langs, list(langs))
        if not allowed.any():
            return np.zeros((len(qvecs), 0), np.float32), np.zeros((len(qvecs), 0), np.int64)
        depth = min(n, max(k * 4, 64))
        while True:
            scores, rows = self._vector_search(qvecs, depth)
            keep = (rows >= 0) & allowed[np.clip(rows, 0, n - 1)]
            if depth >= n or (keep.sum(axis=1) >= k).all():
                break
            depth = min(n, depth * 4)
        out_s = np.full((len(qvecs), k), -np.inf, np.float32)
        out_r = np.full((len(qvecs), k), -1, np.int64)
        for i in range(len(qvecs)):
            sel_r, sel_s = rows[i][keep[i]][:k], scores[i][keep[i]][:k]
            out_r[i, : len(sel_r)], out_s[i, : len(sel_s)] = sel_r, sel_s
        return out_s, out_r

    def lexical_query(self, query: str, weight: float, langs) -> LexicalQuery | None:
        """The query's BM25 against every row (zero where ``langs`` excludes it) for a hybrid search,
        ``None`` for a dense one."""
        if not weight:
            return None
        if self.lexical is None:
            raise BadRequest(
                "lexical_weight",
                f"{weight} asks for hybrid retrieval, but the index has no lexical half built with this model's "
                "analyzer: rebuild it with `samelang index build` (or serve with --lexical-weight 0)",
            )
        lex, analyze = self.lexical
        scores = lex.scores(analyze(query))
        top = float(scores.max()) if scores.size else 0.0  # the whole index's best (see fuse)
        if langs:
            scores = np.where(np.isin(self.doc_langs[: len(scores)], list(langs)), scores, 0.0)
        return LexicalQuery(scores, top, float(weight))


class Candidates:
    """The hits a reranker sees: the best documents, or the best distinct groups each as the
    version the reader prefers (:class:`RowRetriever` finds the rows)."""

    def __init__(self, retriever: RowRetriever):
        self.retriever = retriever
        self.doc_langs = retriever.doc_langs
        self.doc_groups = retriever.index.docs.groups(retriever.index.size)

    def documents(self, qvec, n: int, langs, lexical=None, qlang=None) -> list[Hit]:
        scores, rows = self.retriever.rows(qvec, n, langs, lexical, qlang)
        valid = rows[0] >= 0
        docs = self.retriever.index.docs.get_rows(rows[0][valid].tolist())
        return [Hit(d, float(s), float(s)) for d, s in zip(docs, scores[0][valid]) if d is not None]

    def groups(self, qvec, n_groups: int, langs, prefer: tuple[str, ...], lexical=None, qlang=None) -> list[Hit]:
        """The best ``n_groups`` distinct groups, each as the version ``prefer`` picks (the first
        preferred language the group has in the index, else its best retrieved version)."""
        size = self.retriever.index.size
        depth = min(size, max(n_groups * 4, 64))
        while True:
            scores, rows = self.retriever.rows(qvec, depth, langs, lexical, qlang)
            valid = rows[0] >= 0
            rows_v, scores_v = rows[0][valid], scores[0][valid]
            best: dict[object, list[tuple[int, float]]] = {}
            ids: dict[int, str] = {}  # the ids of rows in inferred translation groups (listed as versions)
            for r, s, key in zip(rows_v.tolist(), scores_v.tolist(), self._group_keys(rows_v, ids)):
                best.setdefault(key, []).append((r, s))
            if len(best) >= n_groups or depth >= size or len(rows_v) < depth:
                break
            depth = min(size, depth * 4)
        keys = list(best)[:n_groups]
        named = [k for k in keys if isinstance(k, str)]
        members = self.retriever.index.docs.members_of_groups(named) if named else {}
        allowed = set(langs) if langs else None
        rank_pref = {lg: i for i, lg in enumerate(prefer)}
        chosen, versions = [], []
        for key in keys:
            retrieved = best[key]
            scored = dict(retrieved)
            pool = members.get(key) if isinstance(key, str) else None
            if isinstance(key, tuple) and key[0] == INFERRED:
                pool = [(r, ids[r], self.doc_langs[r]) for r, _ in retrieved]
            pool = [(r, i, lg) for r, i, lg in pool if allowed is None or lg in allowed] if pool else []
            rep = None
            for lang in prefer:
                rep = next((r for r, _, lg in pool if lg == lang), None)
                if rep is not None:
                    break
            if rep is None:
                rep = retrieved[0][0]
            others = sorted(
                (m for m in pool if m[0] != rep),
                key=lambda m: (rank_pref.get(m[2], len(prefer)), -scored.get(m[0], -np.inf), m[0]),
            )
            chosen.append(rep)
            versions.append([Version(r, i, lg) for r, i, lg in others])
        docs = self.retriever.index.docs.get_rows(chosen)
        scores = [best[k][0][1] for k in keys]
        if self.retriever.fusion is not None and qlang:
            scores = self._labelled_by_reader(qvec, keys, chosen, scores, lexical, qlang)
        hits = [Hit(d, s, s, v) for d, s, v in zip(docs, scores, versions, strict=True) if d]
        return sorted(hits, key=lambda h: -h.score) if self.retriever.fusion is not None else hits

    def _labelled_by_reader(self, qvec, keys, reps, scores, lexical, qlang) -> list[float]:
        """A fused retriever ranks a labelled group that has a version in the reader's language by
        that version's own score: it is what the reader is shown, and a document in the reader's
        language is judged best by the reader's-language model (on the parallel train-article pool
        ranking by the best version put a wrong group first for 1.4 more questions in 100: 91.2 vs 92.6). Inferred
        groups keep their best version's score (the measured choice for unlabelled collections)."""
        at = [i for i, (k, r) in enumerate(zip(keys, reps)) if isinstance(k, str) and self.doc_langs[r] == qlang]
        if not at:
            return scores
        own = self.retriever.fused_scores(qvec, np.array([reps[i] for i in at], dtype=np.int64), lexical, qlang)
        out = list(scores)
        for i, v in zip(at, own.tolist()):
            out[i] = float(v)
        return out

    def _group_key(self, row: int):
        g = self.doc_groups[row] if 0 <= row < len(self.doc_groups) else None
        return g if g is not None else ("row", row)

    def _group_keys(self, rows: np.ndarray, ids: dict[int, str]) -> list:
        """Each retrieved row's group: its label; without one, under a fused retriever, the
        translation group it is inferred into (``(INFERRED, first row)``: it joins the first earlier
        unlabelled hit whose cross-language cosine with it is at least ``translation_threshold`` and
        whose group has no version in its language yet); else itself. Fills ``ids`` with the ids
        of the rows in inferred groups."""
        keys = [self._group_key(r) for r in rows.tolist()]
        free = [i for i, k in enumerate(keys) if not isinstance(k, str)]
        if self.retriever.fusion is None or len(free) < 2:
            return keys
        _, cross = self.retriever.encoder.halves(self.retriever.stored_vectors(rows[free].tolist()))
        langs = self.doc_langs[rows[free]].tolist()
        of, heads = infer_translation_groups(cross, langs, self.retriever.fusion.translation_threshold)
        sizes = np.bincount(np.array(of), minlength=len(heads))
        joined = [int(rows[free[j]]) for j in range(len(free)) if sizes[of[j]] > 1]
        for doc in self.retriever.index.docs.get_rows(joined) if joined else []:
            if doc is not None:
                ids[doc.row] = doc.id
        for j, g in enumerate(of):
            if sizes[g] > 1:
                keys[free[j]] = (INFERRED, int(rows[free[heads[g]]]))
        return keys
