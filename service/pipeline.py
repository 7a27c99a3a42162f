"""The retrieval core behind every route: search (group-aware, optionally reranked), rerank,
answer, diagnose. It knows no HTTP types: the route handlers (``service.api.handlers``) map
requests to these calls and results to responses, and ``samelang eval pipeline`` calls the very
same methods, so what is evaluated is what is served.

Group-aware candidates. An index may hold several language versions of one document (documents
sharing a ``group``). A plain top-k then spends its slots on translations of one paragraph, and
the reranker sees the English version beside the reader's. So by default the pipeline retrieves,
collapses documents that share a group (a document without a group is its own group; a group's
score is its best version's), represents each group by the version the reader prefers
(``language_preference``: the query's language by default) whether or not that version was
retrieved, reranks those N distinct groups, and lists each hit's other versions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from indexes.docstore import StoredDoc
from indexes.index import OpenIndex
from indexes.langid import LanguageIdentifier
from indexes.lexical import best_rows, fuse
from indexes.vectors import normalise

from . import metrics as M
from . import work
from .config import ServiceSettings
from .errors import AnswerUnavailable, BadRequest
from .metrics import audit as A
from .models.encoder import Encoder
from .models.generation import GeneratorUnavailable, join_answer

MAX_DIAGNOSE_DEPTH = 10000
READER, ANY = "reader", "any"
INFERRED = "inferred"  # the key of a translation group inferred by a fused retriever
# Below this detector confidence a *detected* query language does not choose a group's version: the
# retriever's best version does. On the XQuAD train questions (9,792, 12 languages) 57% of the wrong
# detections and 1% of the right ones fall below 0.5 (the test articles were not looked at).
MIN_READER_CONFIDENCE = 0.5


def _declared(name: str):
    """The default of a ``samelang serve`` option: declared (with its doc and env twin) once, in
    :class:`service.config.ServiceSettings`."""
    return ServiceSettings.model_fields[name].default


@dataclass
class Limits:
    """Work one request may ask for; each is a 422 naming the limit (the ``samelang serve`` flags
    of the same names, documented there)."""

    max_rerank_documents: int = _declared("max_rerank_documents")
    max_document_chars: int = _declared("max_document_chars")
    max_diagnose_queries: int = _declared("max_diagnose_queries")
    max_rerank_pairs: int = _declared("max_rerank_pairs")
    max_answer_tokens: int = _declared("max_answer_tokens")
    max_embedding_inputs: int = _declared("max_embedding_inputs")

    @classmethod
    def from_settings(cls, cfg: ServiceSettings) -> Limits:
        return cls(**{name: getattr(cfg, name) for name in cls.__dataclass_fields__})


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
    group_candidates: bool = True  # collapse parallel versions into one candidate per group
    lexical_weight: float = 0.0  # hybrid retrieval: cos + w * bm25 / max bm25 (0: dense only)


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
class LexicalQuery:
    """One query's lexical side in a hybrid search."""

    scores: np.ndarray  # BM25 of every row; 0 where the language filter excludes the row
    top: float  # the query's best BM25 over the whole index (the scale, see indexes.lexical.fuse)
    weight: float


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
    """The end of :meth:`Pipeline.answer_stream`: the whole answer (``None``: no generator)."""

    text: str | None


@dataclass
class Ranked:
    query_lang: str | None
    lang_detected: bool
    hits: list[Hit]
    candidates: list[Hit]  # before reranking, in the retriever's order
    reranked: bool
    grouped: bool
    lexical_weight: float | None = None  # BM25's weight in the retriever's score (None: dense only)


class Pipeline:
    def __init__(
        self,
        encoder: Encoder,
        index: OpenIndex,
        reranker,
        generator,
        langid: LanguageIdentifier,
        limits: Limits,
        search_params: SearchParams | None = None,
        defaults: Defaults | None = None,
    ):
        self.encoder, self.index, self.reranker, self.generator = encoder, index, reranker, generator
        self.langid, self.limits, self.search_params = langid, limits, search_params or SearchParams()
        self.defaults = defaults or Defaults()
        self._doc_langs = np.array(index.docs.langs(index.size), dtype=object)  # by row (None: deleted too)
        self._doc_groups = index.docs.groups(index.size)
        self.lexical = self._lexical_half(index, encoder)
        self.fusion = getattr(encoder, "fusion", None)  # a fused retriever (service.models.fused)
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
                     defaults=self.defaults)  # fmt: skip
        return Pipeline(**{**parts, **changes})

    def components(self) -> dict:
        """The names of what serves a default request (every response carries them)."""
        d = self.defaults
        return {
            "retriever": self.encoder.name,
            "lexical_weight": d.lexical_weight if d.lexical_weight and self.lexical else None,
            "reranker": self.reranker.name if d.rerank else None,
            "rerank_k": d.rerank_k if d.rerank else None,
            "candidates": "groups" if d.group_candidates else "documents",
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
        """The ``k`` best rows by the fused retriever's score (:mod:`service.models.fused`): the
        store's best ``candidate_depth`` rows for ``[q_same*a; q_cross*b]`` and BM25's best as many,
        each scored by the reader's-language model (base cosine + BM25) when it is in ``qlang``,
        else by the cross-language model (+ ``cross_offset``), both in z-units of the query's
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
        mu_s, sd_s = _moments(cal_same @ q_same)
        mu_c, sd_c = _moments(cal_cross @ q_cross)
        same = (d_same @ q_same).astype(np.float64)
        if lexical is not None:
            same = same + lexical.weight * lexical.scores[rows].astype(np.float64) / max(lexical.top, 1e-9)
        in_reader = self._doc_langs[rows] == qlang if qlang else np.zeros(rows.size, bool)
        cross = (d_cross @ q_cross - mu_c) / sd_c + self.fusion.cross_offset
        return np.where(in_reader, (same - mu_s) / sd_s, cross)

    def _hybrid_rows(self, qvec: np.ndarray, k: int, langs, lexical: LexicalQuery | None, qlang: str | None = None):
        """The ``k`` best rows by the retriever's score: the cosine, or with ``lexical`` the hybrid
        :func:`indexes.lexical.fuse` of cosine and BM25.

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
        near = np.triu((cross @ cross.T) >= self.fusion.translation_threshold, k=1)
        earlier = [np.flatnonzero(near[:, j]).tolist() for j in range(len(free))]  # hits before j it matches
        langs = self._doc_langs[rows[free]].tolist()
        group_of_head: dict[int, int] = {}  # a head's position in ``free`` -> its group
        heads: list[int] = []  # each inferred group's first hit (a position in ``free``)
        has: list[set] = []  # the languages each inferred group has
        of = []  # each hit's group
        for j in range(len(free)):
            at = None
            if langs[j] is not None:
                at = next((group_of_head[h] for h in earlier[j] if h in group_of_head
                           and langs[j] not in has[group_of_head[h]]), None)  # fmt: skip
            if at is None:
                group_of_head[j] = len(heads)
                at = len(heads)
                heads.append(j)
                has.append(set())
            has[at].add(langs[j])
            of.append(at)
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
        # first-ranked of each group (a no-op for group-aware hits; never changes the first passage)
        seen: set = set()
        cited = []
        for h in ranked.hits:
            key = h.doc.group or ("row", h.doc.row)
            if key not in seen:
                seen.add(key)
                cited.append(h)
            if len(cited) == passages:
                break
        cited, prompt = fit_prompt(self.generator, query, cited, max_tokens)
        return replace(ranked, hits=cited), prompt

    def answer(self, query: str, opts: SearchOptions, passages: int, max_tokens: int) -> tuple[Ranked, str | None]:
        """The cited hits (:meth:`prepare_answer`) and the generator's answer over them."""
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        try:
            text = self.generator.generate(prompt, max_tokens)
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits) from e
        return ranked, text

    def answer_stream(self, query: str, opts: SearchOptions, passages: int, max_tokens: int) -> Iterator:
        """:meth:`answer` as it happens: the cited hits (a :class:`Ranked`) as soon as retrieval is
        done, then each piece of text (a ``str``) as the generator decodes it, then the whole
        answer (an :class:`Answered`; the same text :meth:`answer` gives, greedy decoding)."""
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        yield ranked
        pieces = []
        try:
            for piece in self.generator.stream(prompt, max_tokens):
                pieces.append(piece)
                yield piece
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits) from e
        yield Answered(join_answer(pieces) if getattr(self.generator, "generates", True) else None)

    # -- /diagnose --------------------------------------------------------------------------
    def dataset_queries(self, pair: str, split: str) -> list[A.LabelledQuery]:
        a, b = pair.split("-")
        return A.xquad_queries([a, b], split=split, relevant_langs=[a, b])

    def diagnose(self, queries: list[A.LabelledQuery], k: int | None, opts: SearchOptions, field_name: str) -> dict:
        """Rank the pool for each labelled query exactly as :meth:`search` serves it (candidates,
        reranking, versions listed after their hit) and audit the lists (Max@R, Max@R_norm,
        Comp@10, top-1 language) with :mod:`service.metrics.audit`."""
        row_of = self._check_diagnose(queries, opts, field_name)
        n = self.index.size  # the row space
        depth = min(k or n, self.index.documents, MAX_DIAGNOSE_DEPTH)
        qvecs = self.encoder.encode_queries([q.query for q in queries])  # one batched pass
        rankings, qlangs = [], []
        for q, qvec in zip(queries, qvecs):
            work.check()  # a spent budget or a gone client stops the audit between queries
            r = self.search(q.query, replace(opts, k=depth, lang=q.lang or None), qvec=qvec[None, :])
            rankings.append([row for h in r.hits for row in h.rows][:depth])
            qlangs.append(r.query_lang)
        # the pool is the documents: columns are the live rows (rows of deleted documents are not in it)
        live = np.arange(n) if self.index.documents == n else np.asarray(self.index.docs.rows(), dtype=np.int64)
        col_of = {int(r): j for j, r in enumerate(live)}
        col_of_id = {x: col_of[r] for x, r in row_of.items()}
        S = A.score_matrix([[col_of[r] for r in ranking] for ranking in rankings], len(live))
        R = np.zeros_like(S)
        for i, q in enumerate(queries):
            R[i, [col_of_id[x] for x in q.relevant]] = 1
        au = A.audit_lists(S, R)
        langs = self._doc_langs[live]
        top1_langs = [langs[t] if au.ranked[i, t] else None for i, t in enumerate(au.top1)]
        ql = np.array([x or "und" for x in qlangs], dtype=object)
        matrix, rows_l, cols_l = M.top1_language_matrix(S, ql, np.array([x or "und" for x in langs], dtype=object))
        return {
            "pool_size": len(live),
            "k": depth,
            "aggregate": au.aggregate(np.ones(len(queries), bool), qlangs, top1_langs),
            "per_query_lang": {x: au.aggregate(ql == x, qlangs, top1_langs) for x in sorted(set(ql.tolist()))},
            "top1_lang_matrix": {
                r: {c: float(matrix[a, b]) for b, c in enumerate(cols_l)} for a, r in enumerate(rows_l)
            },
            "queries": self._per_query(queries, qlangs, au, col_of_id, top1_langs, live),
        }

    def _check_diagnose(self, queries: list[A.LabelledQuery], opts: SearchOptions, field_name: str) -> dict[str, int]:
        """The request's limits (a 4xx naming the field before any work), and the pool row of
        every relevant id."""
        lim = self.limits
        if len(queries) > lim.max_diagnose_queries:
            raise BadRequest(
                field_name.split("[")[0] if field_name != "pair" else "split",
                f"{len(queries)} queries, at most {lim.max_diagnose_queries} per request "
                "(send labelled queries in parts, or a smaller split)",
            )
        if self.defaults.rerank if opts.rerank is None else opts.rerank:
            rk = opts.rerank_k or self.defaults.rerank_k
            pairs = len(queries) * rk
            if pairs > lim.max_rerank_pairs:
                raise BadRequest(
                    "rerank_k",
                    f"{len(queries)} queries x rerank_k {rk} = {pairs} reranker pairs, at most "
                    f"{lim.max_rerank_pairs} per request (fewer queries, a lower rerank_k, or no rerank)",
                )
        rel_ids = sorted({rid for q in queries for rid in q.relevant})
        row_of = self.index.docs.rows_for_ids(rel_ids)
        missing = [rid for rid in rel_ids if rid not in row_of]
        if missing:
            raise BadRequest(field_name, f"{len(missing)} relevant ids are not in the served index, e.g. {missing[:3]}")
        return row_of

    def _per_query(self, queries, qlangs, au, row_of, top1_langs, live) -> list[dict]:
        """Each query's audit: its relevant ids' ranks, Max@R (None when censored), Comp@10, top-1.
        ``row_of``: the pool column of each relevant id; ``live``: the row of each column."""
        top1_ids = self.index.docs.get_rows([int(live[t]) for t in au.top1])
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


def _moments(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation (floored: a one-document sample) of a query's cosines."""
    return float(x.mean()), max(float(x.std()), 1e-3)


def fit_prompt(generator, query: str, cited: list, max_tokens: int) -> tuple[list, str]:
    """The prompt over ``cited`` hits that fits the generator's context with ``max_tokens`` to spare:
    the last passages are dropped first (they are the least relevant), and a first passage that is
    alone too long is cut. A generator without a context limit (a remote server that checks its own)
    takes every passage."""
    texts = [h.doc.text for h in cited]
    prompt = build_prompt(query, texts)
    fits = getattr(generator, "fits", None)
    if fits is None or fits(prompt, max_tokens):
        return cited, prompt
    while len(texts) > 1 and not fits(prompt, max_tokens):
        texts.pop()
        prompt = build_prompt(query, texts)
    if not fits(prompt, max_tokens):
        # 8 tokens of slack: a cut text can tokenise a little differently where it meets the question
        spare = generator.n_ctx - max_tokens - generator.count_tokens(build_prompt(query, [""])) - 8
        if spare >= 1:
            texts = [generator.truncate(texts[0], spare)]
            prompt = build_prompt(query, texts)
        if spare < 1 or not fits(prompt, max_tokens):
            raise BadRequest("max_tokens", f"the question and max_tokens={max_tokens} leave no room for a passage in "
                             f"the generator's context ({generator.n_ctx} tokens, --generator-ctx)")  # fmt: skip
    return cited[: len(texts)], prompt


def build_prompt(query: str, passages: list[str]) -> str:
    """Reading-comprehension prompt that base and instruct models both complete with
    a one-line answer; the passages are in the reader's language where one exists,
    which is what makes a small model answer in that language."""
    return "\n\n".join(passages) + f"\n\nQuestion: {query}\nAnswer:"


def citations(answer: str | None, hits: list[Hit]) -> list[str]:
    """Ids of the passages the answer used. The prompt asks for a short reading-comprehension
    answer, which a model copies out of a passage: a passage is cited when it holds the answer
    (case and spacing ignored), else when it shares the answer's longest run of characters that
    covers at least half of it (a model that changed an ending or a word). Characters, not words,
    so that languages written without spaces are judged alike. No answer cites nothing."""
    from difflib import SequenceMatcher

    def norm(t: str) -> str:
        return " ".join(t.casefold().split())

    a = norm(answer or "")
    if not a:
        return []
    texts = [norm(h.doc.text) for h in hits]
    held = [h.doc.id for h, t in zip(hits, texts) if a in t]
    if held:
        return held
    runs = []
    for t in texts:
        m = SequenceMatcher(None, a, t, autojunk=False).find_longest_match(0, len(a), 0, len(t))
        runs.append(m.size)
    best = max(runs, default=0)
    if 2 * best < len(a):
        return []
    return [h.doc.id for h, n in zip(hits, runs) if n == best]
