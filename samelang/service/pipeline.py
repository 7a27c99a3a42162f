"""The retrieval core behind every route: search (group-aware, optionally reranked), rerank and
answer; the diagnosis (:mod:`.diagnosis`) and the prompts (:mod:`.prompts`) live apart. It knows no
HTTP types: the route handlers (``samelang.service.api.<dialect>.handlers``) map requests to these calls and
results to responses, and ``samelang eval pipeline`` calls the very same methods, so what is
evaluated is what is served.

Group-aware candidates. An index may hold several language versions of one document (documents
sharing a ``group``). A plain top-k then spends its slots on translations of one paragraph, and
the reranker sees the English version beside the reader's. So by default the pipeline retrieves,
collapses documents that share a group (a document without a group is its own group; a group's
score is its best version's), represents each group by the version the reader prefers
(``language_preference``: the query's language by default) whether or not that version was
retrieved, reranks those N distinct groups, and lists each hit's other versions.

Long because search is one path over shared state (the index, the encoder, the query's vector, its
language and lexical scores): dense, hybrid and fused candidates, groups labelled or inferred, and
reranking call each other; what stands alone is apart (:mod:`.results`, :mod:`.translations`,
:mod:`.prompts`, :mod:`.diagnosis`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from samelang.core.models.fused import query_moments
from samelang.core.models.generation import GeneratorRefused, GeneratorUnavailable, join_answer
from samelang.core.models.protocols import Reranker, TextEncoder
from samelang.ground.langid import LanguageIdentifier
from samelang.indexes.index import OpenIndex
from samelang.indexes.lexical import best_rows, fuse
from samelang.indexes.vectors import normalise
from samelang.service.errors import AnswerUnavailable, BadRequest
from samelang.service.limits import Limits
from samelang.service.prompts import fit_prompt
from samelang.service.reading import EXTRACTIVE, extract, prepare_extract, read
from samelang.service.results import (
    ANY,
    READER,
    Answered,
    Defaults,
    Hit,
    LexicalQuery,
    Ranked,
    SearchOptions,
    SearchParams,
    Version,
)
from samelang.service.translations import infer_translation_groups

INFERRED = "inferred"  # the key of a translation group inferred by a fused retriever
# Below this detector confidence a *detected* query language does not choose a group's version: the
# retriever's best version does. On the XQuAD train questions (9,792, 12 languages) 57% of the wrong
# detections and 1% of the right ones fall below 0.5 (the test articles were not looked at).
MIN_READER_CONFIDENCE = 0.5


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-6)


def fuse_scores(reranker: np.ndarray, retriever: np.ndarray, weight: float) -> np.ndarray:
    """``z(reranker) + weight * z(retriever)`` over one query's reranked candidates. Why: a
    cross-encoder and the retriever err on different candidates (the cross-encoder judges the words of
    one pair, the fused retriever knows where each language's answer tends to be), and their z-scores
    share a scale whatever either model's range; the weight is chosen by the shape judge on the dev
    articles (``samelang eval pipeline --shapes``)."""
    return _z(np.asarray(reranker, np.float64)) + weight * _z(np.asarray(retriever, np.float64))


class Pipeline:
    def __init__(
        self,
        encoder: TextEncoder,
        index: OpenIndex,
        reranker: Reranker,
        generator,
        langid: LanguageIdentifier,
        limits: Limits,
        search_params: SearchParams | None = None,
        defaults: Defaults | None = None,
        reader=None,
    ):
        self.encoder, self.index, self.reranker, self.generator = encoder, index, reranker, generator
        self.reader = reader  # an extractive reader (samelang.core.models.reader), or None
        self.langid, self.limits, self.search_params = langid, limits, search_params or SearchParams()
        self.defaults = defaults or Defaults()
        self._doc_langs = np.array(index.docs.langs(index.size), dtype=object)  # by row (None: deleted too)
        self._doc_groups = index.docs.groups(index.size)
        self.lexical = self._lexical_half(index, encoder)
        self.fusion = getattr(encoder, "fusion", None)  # a fused retriever (samelang.core.models.fused)
        self._calibration = self._calibration_sample() if self.fusion else None

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

    @property
    def doc_langs(self) -> np.ndarray:
        """Language of every indexed document, in row order (``None`` where unknown)."""
        return self._doc_langs

    def replace(self, **changes) -> Pipeline:
        """A pipeline sharing these components except ``changes`` (e.g. another generator)."""
        parts = dict(encoder=self.encoder, index=self.index, reranker=self.reranker, generator=self.generator,
                     langid=self.langid, limits=self.limits, search_params=self.search_params,
                     defaults=self.defaults, reader=self.reader)  # fmt: skip
        return Pipeline(**{**parts, **changes})

    def components(self) -> dict:
        """The names of what serves a default request (every response carries them)."""
        d = self.defaults
        return {
            "retriever": self.encoder.name,
            "lexical_weight": d.lexical_weight if d.lexical_weight and self.lexical else None,
            "reranker": self.reranker.name if d.rerank else None,
            "rerank_k": d.rerank_k if d.rerank else None,
            "rerank_fusion": d.rerank_fusion if d.rerank else None,
            "candidates": "groups" if d.group_candidates else "documents",
            "reader": self.reader.name if self.reader is not None else None,
        }

    # -- retrieval -------------------------------------------------------------------------
    def query_language(self, query: str, lang: str | None) -> tuple[str | None, bool]:
        lang, detected, _ = self._query_language(query, lang)
        return lang, detected

    def _query_language(self, query: str, lang: str | None) -> tuple[str | None, bool, float]:
        """(language, detected?, confidence): a given language is certain."""
        if lang:
            return lang, False, 1.0
        det = self.langid.detect(query)
        return (det.lang, True, det.confidence) if det else (None, True, 0.0)

    def _vector_search(self, qvecs: np.ndarray, k: int, langs: Sequence[str] | None = None):
        p = self.search_params
        return self.index.search(qvecs, k, ef_search=p.ef_search, nprobe=p.nprobe, langs=langs)

    def _calibration_sample(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The vectors whose cosines with a query put the fused retriever's two models on one scale
        (both halves): its reference passages, or without them up to ``calibration_rows`` evenly
        spaced live documents of the index."""
        if getattr(self.encoder, "calibration", None) is not None:
            return self.encoder.calibration
        live = np.asarray(self.index.docs.rows(), dtype=np.int64)
        if live.size == 0:
            return None
        take = min(live.size, self.fusion.calibration_rows)
        rows = live[np.unique(np.round(np.linspace(0, live.size - 1, take)).astype(np.int64))]
        return self.encoder.halves(self._stored_vectors(rows.tolist()))

    def _stored_vectors(self, rows: list[int]) -> np.ndarray:
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
        _, found = self._search_rows(enc.store_query(qvec), depth, langs)
        cand = found[0][found[0] >= 0].tolist()
        if lexical is not None:
            cand += best_rows(lexical.scores, depth).tolist()
        cand = np.array(list(dict.fromkeys(cand)), dtype=np.int64)
        if cand.size == 0:
            return np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)
        score = self._fused_scores(qvec, cand, lexical, qlang)
        order = np.argsort(-score, kind="stable")[:k]
        return score[order][None, :].astype(np.float32), cand[order][None, :]

    def _fused_scores(self, qvec: np.ndarray, rows: np.ndarray, lexical: LexicalQuery | None, qlang: str | None):
        """The fused score of ``rows`` (see :meth:`_fused_rows`)."""
        enc = self.encoder
        d_same, d_cross = enc.halves(self._stored_vectors(rows.tolist()))
        q_same, q_cross = (h.reshape(-1) for h in enc.halves(qvec[:1]))
        cal_same, cal_cross = self._calibration  # None only for an index without documents: no rows here
        mu_s, sd_s = query_moments(cal_same @ q_same)
        mu_c, sd_c = query_moments(cal_cross @ q_cross)
        same = (d_same @ q_same).astype(np.float64)
        if lexical is not None:
            same = same + lexical.weight * lexical.scores[rows].astype(np.float64) / max(lexical.top, 1e-9)
        in_reader = self._doc_langs[rows] == qlang if qlang else np.zeros(rows.size, bool)
        cross = (d_cross @ q_cross - mu_c) / sd_c
        f = self.fusion
        return np.where(in_reader, (same - mu_s) / sd_s + f.same_cross_weight * cross, cross + f.cross_offset)

    def _hybrid_rows(self, qvec: np.ndarray, k: int, langs, lexical: LexicalQuery | None, qlang: str | None = None):
        """The ``k`` best rows by the retriever's score: the cosine, or with ``lexical`` the hybrid
        :func:`samelang.indexes.lexical.fuse` of cosine and BM25.

        Hybrid: the union of the dense and the BM25 top ``depth``, each row's missing score computed
        (its stored vector's cosine, or its BM25). A row outside both lists scores at most the
        ``depth``-th cosine plus the weighted ``depth``-th BM25; while the ``k``-th fused score is
        below that bound, ``depth`` doubles. So the ``k`` rows are exactly the index's best. A fused
        retriever scores its own way (:meth:`_fused_rows`)."""
        if self.fusion is not None:
            return self._fused_rows(qvec, k, langs, lexical, qlang)
        if lexical is None:
            return self._search_rows(qvec, k, langs)
        n, depth = self.index.size, k
        while True:
            scores, rows = self._search_rows(qvec, depth, langs)
            ok = rows[0] >= 0
            dense = dict(zip(rows[0][ok].tolist(), scores[0][ok].astype(np.float64).tolist()))
            lex_rows = best_rows(lexical.scores, depth)
            union = np.array(list(dict.fromkeys([*dense, *lex_rows.tolist()])), dtype=np.int64)
            self._fill_cosines(qvec, dense, [int(r) for r in union if int(r) not in dense])
            cos = np.array([dense[int(r)] for r in union], dtype=np.float64)
            fused = fuse(cos, lexical.scores[union], lexical.weight, top=lexical.top)[0]
            order = np.argsort(-fused, kind="stable")[:k]
            # what a row in neither list can reach (-inf when a list already holds every candidate)
            c_out = scores[0][ok][-1] if ok.sum() >= depth else -np.inf
            b_out = lexical.scores[lex_rows[-1]] if len(lex_rows) >= depth else 0.0
            bound = c_out + lexical.weight * b_out / max(lexical.top, 1e-9)
            if depth >= n or (len(order) == k and fused[order[-1]] >= bound) or c_out == -np.inf:
                return fused[order][None, :].astype(np.float32), union[order][None, :]
            depth = min(n, depth * 2)

    def _fill_cosines(self, qvec: np.ndarray, dense: dict[int, float], rows: list[int]) -> None:
        """The cosine of ``rows`` that the dense search did not return (:meth:`_stored_vectors`)."""
        if not rows:
            return
        vecs = self._stored_vectors(rows)
        dense.update(zip(rows, (vecs @ normalise(qvec)[0]).astype(np.float64).tolist()))

    def _search_rows(self, qvecs: np.ndarray, k: int, langs: Sequence[str] | None):
        """Vector search with an optional document-language filter: in the store where it filters
        (Milvus), else by over-fetching until k pass (FAISS)."""
        n = self.index.size
        if not langs or self.index.filters_langs:
            return self._vector_search(qvecs, min(k, n), langs)
        allowed = np.isin(self._doc_langs, list(langs))
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

    def _document_candidates(self, qvec, n: int, langs, lexical=None, qlang=None) -> list[Hit]:
        scores, rows = self._hybrid_rows(qvec, n, langs, lexical, qlang)
        valid = rows[0] >= 0
        docs = self.index.docs.get_rows(rows[0][valid].tolist())
        return [Hit(d, float(s), float(s)) for d, s in zip(docs, scores[0][valid]) if d is not None]

    def _group_candidates(
        self, qvec, n_groups: int, langs, prefer: tuple[str, ...], lexical=None, qlang=None
    ) -> list[Hit]:
        """The best ``n_groups`` distinct groups, each as the version ``prefer`` picks (the first
        preferred language the group has in the index, else its best retrieved version)."""
        size = self.index.size
        depth = min(size, max(n_groups * 4, 64))
        while True:
            scores, rows = self._hybrid_rows(qvec, depth, langs, lexical, qlang)
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
        members = self.index.docs.members_of_groups(named) if named else {}
        allowed = set(langs) if langs else None
        rank_pref = {lg: i for i, lg in enumerate(prefer)}
        chosen, versions = [], []
        for key in keys:
            retrieved = best[key]
            scored = dict(retrieved)
            pool = members.get(key) if isinstance(key, str) else None
            if isinstance(key, tuple) and key[0] == INFERRED:
                pool = [(r, ids[r], self._doc_langs[r]) for r, _ in retrieved]
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
        docs = self.index.docs.get_rows(chosen)
        scores = [best[k][0][1] for k in keys]
        if self.fusion is not None and qlang:
            scores = self._labelled_by_reader(qvec, keys, chosen, scores, lexical, qlang)
        hits = [Hit(d, s, s, v) for d, s, v in zip(docs, scores, versions, strict=True) if d]
        return sorted(hits, key=lambda h: -h.score) if self.fusion is not None else hits

    def _labelled_by_reader(self, qvec, keys, reps, scores, lexical, qlang) -> list[float]:
        """A fused retriever ranks a labelled group that has a version in the reader's language by
        that version's own score: it is what the reader is shown, and a document in the reader's
        language is judged best by the reader's-language model (on the parallel train-article pool
        ranking by the best version put a wrong group first for 1.4 more questions in 100: 91.2 vs 92.6). Inferred
        groups keep their best version's score (the measured choice for unlabelled collections)."""
        at = [i for i, (k, r) in enumerate(zip(keys, reps)) if isinstance(k, str) and self._doc_langs[r] == qlang]
        if not at:
            return scores
        own = self._fused_scores(qvec, np.array([reps[i] for i in at], dtype=np.int64), lexical, qlang)
        out = list(scores)
        for i, v in zip(at, own.tolist()):
            out[i] = float(v)
        return out

    def _group_key(self, row: int):
        g = self._doc_groups[row] if 0 <= row < len(self._doc_groups) else None
        return g if g is not None else ("row", row)

    def _group_keys(self, rows: np.ndarray, ids: dict[int, str]) -> list:
        """Each retrieved row's group: its label; without one, under a fused retriever, the
        translation group it is inferred into (``(INFERRED, first row)``: it joins the first earlier
        unlabelled hit whose cross-language cosine with it is at least ``translation_threshold`` and
        whose group has no version in its language yet); else itself. Fills ``ids`` with the ids
        of the rows in inferred groups."""
        keys = [self._group_key(r) for r in rows.tolist()]
        free = [i for i, k in enumerate(keys) if not isinstance(k, str)]
        if self.fusion is None or len(free) < 2:
            return keys
        _, cross = self.encoder.halves(self._stored_vectors(rows[free].tolist()))
        langs = self._doc_langs[rows[free]].tolist()
        of, heads = infer_translation_groups(cross, langs, self.fusion.translation_threshold)
        sizes = np.bincount(np.array(of), minlength=len(heads))
        joined = [int(rows[free[j]]) for j in range(len(free)) if sizes[of[j]] > 1]
        for doc in self.index.docs.get_rows(joined) if joined else []:
            if doc is not None:
                ids[doc.row] = doc.id
        for j, g in enumerate(of):
            if sizes[g] > 1:
                keys[free[j]] = (INFERRED, int(rows[free[heads[g]]]))
        return keys

    def _rerank_scores(self, query: str, qvec: np.ndarray, hits: list[Hit]) -> np.ndarray:
        """The reranker's scores of ``hits``; the bi-encoder cosine reuses the index's vectors
        (same model) instead of embedding the passages again."""
        r = self.reranker
        if getattr(r, "encoder", None) is self.encoder and hasattr(r, "score_vectors"):
            vecs = self.index.vectors([h.doc.row for h in hits])
            if vecs is not None:
                return r.score_vectors(qvec[0], vecs)
        return np.asarray(r.score(query, [h.doc.text for h in hits]), dtype=np.float64)

    def search(self, query: str, opts: SearchOptions, qvec: np.ndarray | None = None) -> Ranked:
        d = self.defaults
        rerank = d.rerank if opts.rerank is None else opts.rerank
        rerank_k = d.rerank_k if opts.rerank_k is None else opts.rerank_k
        grouped = d.group_candidates if opts.group_candidates is None else opts.group_candidates
        if rerank and rerank_k > self.limits.max_rerank_pairs:
            raise BadRequest(
                "rerank_k", f"{rerank_k} reranker pairs, at most {self.limits.max_rerank_pairs} per request"
            )
        qlang, detected, confidence = self._query_language(query, opts.lang)
        if qvec is None:
            qvec = self.encoder.encode_queries([query])
        # the server's default is hybrid only over an index that has the lexical half (an index built
        # before it serves dense, and says so at start); a request that asks for it gets it or a 422
        default = d.lexical_weight if self.lexical else 0.0
        weight = default if opts.lexical_weight is None else opts.lexical_weight
        lexical = self._lexical_scores(query, weight, opts.langs)
        n = max(opts.k, rerank_k)  # the candidates a reranker sees, whether or not one runs (candidate recall)
        reader = qlang if confidence >= MIN_READER_CONFIDENCE else None
        if grouped:
            prefer = self._preference(opts.language_preference, reader)
            cands = self._group_candidates(qvec, n, opts.langs, prefer, lexical, reader)
        else:
            cands = self._document_candidates(qvec, n, opts.langs, lexical, reader)
        hits = list(cands)
        if rerank and cands:
            head = cands[:rerank_k]
            s = self._rerank_scores(query, qvec, head)
            if d.rerank_fusion:
                s = fuse_scores(s, np.array([h.score for h in head]), d.rerank_fusion)
            order = np.argsort(-s, kind="stable")
            hits = [replace(head[i], score=float(s[i])) for i in order] + cands[rerank_k:]
        weight = lexical.weight if lexical else None
        return Ranked(qlang, detected, hits[: opts.k], cands, bool(rerank), bool(grouped), weight)

    def _lexical_scores(self, query: str, weight: float, langs) -> LexicalQuery | None:
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
            scores = np.where(np.isin(self._doc_langs[: len(scores)], list(langs)), scores, 0.0)
        return LexicalQuery(scores, top, float(weight))

    @staticmethod
    def _preference(pref: str | Sequence[str], qlang: str | None) -> tuple[str, ...]:
        if isinstance(pref, str):
            if pref == ANY:
                return ()
            if pref == READER:
                return (qlang,) if qlang else ()
            raise BadRequest("language_preference", f"must be 'reader', 'any' or a list of languages, got {pref!r}")
        return tuple(pref)

    # -- /rerank ----------------------------------------------------------------------------
    def rerank(self, query: str, texts: list[str]) -> np.ndarray:
        """Scores of ``texts`` for ``query`` by the served reranker (limits checked first)."""
        self.check_rerank(texts)
        return np.asarray(self.reranker.score(query, texts), dtype=np.float64)

    def check_rerank(self, texts: list[str]) -> None:
        """The limits of one rerank request: a 422 naming the field and the limit."""
        lim = self.limits
        if len(texts) > min(lim.max_rerank_documents, lim.max_rerank_pairs):
            cap = min(lim.max_rerank_documents, lim.max_rerank_pairs)
            raise BadRequest("documents", f"{len(texts)} documents, at most {cap} per request")
        for i, t in enumerate(texts):
            if not t.strip():
                raise BadRequest(f"documents[{i}].text", "must not be empty or only whitespace")
            if len(t) > lim.max_document_chars:
                raise BadRequest(
                    f"documents[{i}].text", f"{len(t)} characters, at most {lim.max_document_chars} per document"
                )

    def detect_language(self, text: str) -> str | None:
        det = self.langid.detect(text)
        return det.lang if det else None

    # -- /answer ----------------------------------------------------------------------------
    def answer_mode(self, mode: str | None) -> str:
        """The mode a request gets (its own, else the server's default); extractive needs a reader."""
        mode = mode or self.defaults.answer_mode
        if mode == EXTRACTIVE and self.reader is None:
            raise BadRequest("answer_mode", "extractive needs a reader: start the server with --reader DIR (train one "
                             "with `samelang train reader`), or ask answer_mode 'generative'")  # fmt: skip
        return mode

    def cite(self, ranked: Ranked, passages: int) -> list[Hit]:
        """The first ``passages`` hits of distinct groups (group-aware hits are distinct already; never
        changes the first passage): what ``/answer`` reads and cites."""
        seen: set = set()
        cited = []
        for h in ranked.hits:
            key = h.doc.group or ("row", h.doc.row)
            if key not in seen:
                seen.add(key)
                cited.append(h)
            if len(cited) == passages:
                break
        return cited

    def prepare_answer(self, query: str, opts: SearchOptions, passages: int, max_tokens: int) -> tuple[Ranked, str]:
        """Search as ``/search`` does, keep the first ``passages`` hits of distinct groups (with
        group-aware candidates: distinct documents in the reader's language where the index has
        them), and the prompt over those that fits the generator: (the cited hits, the prompt)."""
        cost, cap = passages * max_tokens, self.limits.max_answer_tokens
        if cost > cap:
            raise BadRequest(
                "max_tokens", f"passages x max_tokens = {passages} x {max_tokens} = {cost}, at most {cap} per request"
            )
        ranked = self.search(query, opts)
        # two language versions of one paragraph would spend the generator's context twice: keep the
        # first-ranked of each group
        cited, prompt = fit_prompt(self.generator, query, self.cite(ranked, passages), max_tokens)
        return replace(ranked, hits=cited), prompt

    def answer(
        self, query: str, opts: SearchOptions, passages: int, max_tokens: int, mode: str | None = None
    ) -> tuple[Ranked, Answered]:
        """The cited hits and the answer over them: the generator's (:meth:`prepare_answer`), or with
        ``mode`` extractive (the default's when ``None``) the reader's span (:func:`.reading.extract`)."""
        if self.answer_mode(mode) == EXTRACTIVE:
            return extract(self, query, opts, passages)
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        try:
            text = self.generator.generate(prompt, max_tokens)
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits, refused=isinstance(e, GeneratorRefused)) from e
        return ranked, Answered(text)

    def answer_stream(
        self, query: str, opts: SearchOptions, passages: int, max_tokens: int, mode: str | None = None
    ) -> Iterator:
        """:meth:`answer` as it happens: the cited hits (a :class:`Ranked`) as soon as retrieval is
        done, then each piece of text (a ``str``) as the generator decodes it (an extracted span is
        one piece), then the whole answer (an :class:`Answered`; the same :meth:`answer` gives)."""
        if self.answer_mode(mode) == EXTRACTIVE:
            ranked = prepare_extract(self, query, opts, passages)
            yield ranked
            answered = read(self, query, ranked)
            if answered.text:
                yield answered.text
            yield answered
            return
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        yield ranked
        pieces = []
        try:
            for piece in self.generator.stream(prompt, max_tokens):
                pieces.append(piece)
                yield piece
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits, refused=isinstance(e, GeneratorRefused)) from e
        yield Answered(join_answer(pieces) if getattr(self.generator, "generates", True) else None)
