"""The retrieval pipeline behind every route: search, rerank, answer, diagnose.

Routes are thin; the logic is here so that ``/diagnose`` audits exactly the
retrieval (and reranking) path that ``/search`` and ``/answer`` serve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from indexes.corpora import load_xquad
from indexes.corpora.xquad import paragraph_id
from indexes.docstore import StoredDoc
from indexes.index import OpenIndex
from indexes.langid import LanguageIdentifier

from . import metrics as M
from .api import protocol as P
from .models.encoder import Encoder
from .models.generators import GeneratorUnavailable

MAX_DIAGNOSE_DEPTH = 10000


class BadRequest(ValueError):
    """A request that is well-formed but cannot be served (a 422 naming the field)."""

    def __init__(self, field: str, detail: str):
        self.field = field
        super().__init__(f"{field}: {detail}")


class AnswerUnavailable(RuntimeError):
    def __init__(self, detail: str, passages: list[P.CitedPassage]):
        super().__init__(detail)
        self.passages = passages


@dataclass
class Limits:
    max_rerank_documents: int = 100
    max_document_chars: int = 20000


@dataclass
class SearchParams:
    """Approximate-index knobs (ignored by exact Flat indexes)."""

    ef_search: int | None = None  # HNSW
    nprobe: int | None = None  # IVF


@dataclass
class Retrieved:
    query_lang: str | None
    lang_detected: bool
    docs: list[StoredDoc]
    scores: np.ndarray


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
    ):
        self.encoder, self.index, self.reranker, self.generator = encoder, index, reranker, generator
        self.langid, self.limits, self.search_params = langid, limits, search_params or SearchParams()
        self._doc_langs = np.array(index.docs.langs(), dtype=object)

    def replace(self, **changes) -> Pipeline:
        """A pipeline sharing these components except ``changes`` (e.g. another generator)."""
        parts = dict(encoder=self.encoder, index=self.index, reranker=self.reranker, generator=self.generator,
                     langid=self.langid, limits=self.limits, search_params=self.search_params)  # fmt: skip
        return Pipeline(**{**parts, **changes})

    # -- helpers -----------------------------------------------------------------------------
    def query_language(self, query: str, lang: str | None) -> tuple[str | None, bool]:
        if lang:
            return lang, False
        det = self.langid.detect(query)
        return (det.lang if det else None), True

    def _faiss(self, qvecs: np.ndarray, k: int):
        p = self.search_params
        return self.index.search(qvecs, k, ef_search=p.ef_search, nprobe=p.nprobe)

    def _search_rows(self, qvecs: np.ndarray, k: int, langs: list[str] | None):
        """FAISS search with an optional document-language filter (over-fetch until k pass)."""
        n = self.index.size
        if not langs:
            return self._faiss(qvecs, min(k, n))
        allowed = np.isin(self._doc_langs, langs)
        if not allowed.any():
            return np.zeros((len(qvecs), 0), np.float32), np.zeros((len(qvecs), 0), np.int64)
        depth = min(n, max(k * 4, 64))
        while True:
            scores, rows = self._faiss(qvecs, depth)
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

    def retrieve(self, query: str, k: int, lang: str | None = None, langs: list[str] | None = None) -> Retrieved:
        qlang, detected = self.query_language(query, lang)
        qvec = self.encoder.encode_queries([query])
        scores, rows = self._search_rows(qvec, k, langs)
        valid = rows[0] >= 0
        docs = self.index.docs.get_rows(rows[0][valid].tolist())
        return Retrieved(qlang, detected, [d for d in docs if d is not None], scores[0][valid])

    # -- routes ------------------------------------------------------------------------------
    def search(self, req: P.SearchRequest) -> P.SearchResponse:
        r = self.retrieve(req.query, req.k, req.lang, req.langs)
        hits = [
            P.Hit(id=d.id, score=float(s), lang=d.lang, group=d.group, text=d.text, metadata=d.metadata)
            for d, s in zip(r.docs, r.scores)
        ]
        return P.SearchResponse(query_lang=r.query_lang, query_lang_detected=r.lang_detected, hits=hits)

    def rerank(self, req: P.RerankRequest) -> P.RerankResponse:
        docs = req.normalised_documents()
        lim = self.limits
        if len(docs) > lim.max_rerank_documents:
            raise BadRequest("documents", f"{len(docs)} documents, at most {lim.max_rerank_documents} per request")
        for i, d in enumerate(docs):
            if not d.text.strip():
                raise BadRequest(f"documents[{i}].text", "must not be empty or only whitespace")
            if len(d.text) > lim.max_document_chars:
                raise BadRequest(
                    f"documents[{i}].text", f"{len(d.text)} characters, at most {lim.max_document_chars} per document"
                )
        scores = self.reranker.score(req.query, [d.text for d in docs])
        order = np.argsort(-scores, kind="stable")[: req.top_n or len(docs)]
        langs = [d.lang or (det.lang if (det := self.langid.detect(d.text)) else None) for d in docs]
        results = [
            P.RerankResult(
                index=int(i),
                id=docs[i].id,
                score=float(scores[i]),
                lang=langs[i],
                text=docs[i].text if req.return_documents else None,
            )
            for i in order
        ]
        return P.RerankResponse(reranker=self.reranker.name, results=results)

    def _rerank_retrieved(self, query: str, r: Retrieved, rerank_k: int) -> tuple[list[StoredDoc], np.ndarray]:
        head = r.docs[:rerank_k]
        s = self.reranker.score(query, [d.text for d in head])
        order = np.argsort(-s, kind="stable")
        return [head[i] for i in order] + r.docs[rerank_k:], np.concatenate([s[order], r.scores[rerank_k:]])

    def answer(self, req: P.AnswerRequest) -> P.AnswerResponse:
        r = self.retrieve(req.query, req.k, req.lang)
        docs, scores = self._rerank_retrieved(req.query, r, req.rerank_k)
        # among equivalent documents (same parallel group) keep the one in the reader's language
        best: dict[str, int] = {}
        for i, d in enumerate(docs):
            key = d.group or d.id
            if key not in best or (d.lang == r.query_lang and docs[best[key]].lang != r.query_lang):
                best[key] = i
        chosen = sorted(best.values())[: req.passages]
        cited = [
            P.CitedPassage(
                id=docs[i].id, lang=docs[i].lang, group=docs[i].group, score=float(scores[i]), text=docs[i].text
            )
            for i in chosen
        ]
        prompt = build_prompt(req.query, [c.text for c in cited])
        try:
            text = self.generator.generate(prompt, req.max_tokens)
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), cited) from e
        answer_lang = None
        if text:
            det = self.langid.detect(text)
            answer_lang = det.lang if det else None
        return P.AnswerResponse(
            answer=text,
            answer_lang=answer_lang,
            query_lang=r.query_lang,
            generator=self.generator.name,
            reranker=self.reranker.name,
            passages=cited,
        )

    # -- bias audit ---------------------------------------------------------------------------
    def _dataset_queries(self, req: P.DiagnoseRequest) -> list[P.LabelledQueryIn]:
        a, b = req.pair.split("-")
        x = load_xquad([a, b], split=req.split)
        out = []
        for q in x.questions:
            art, par = (int(v) for v in q.group.split("-")[1:])
            rel = [paragraph_id(a, art, par), paragraph_id(b, art, par)]
            out.append(P.LabelledQueryIn(query=q.text, lang=q.lang, relevant=rel))
        return out

    def diagnose(self, req: P.DiagnoseRequest) -> P.DiagnoseResponse:
        queries = req.queries if req.queries is not None else self._dataset_queries(req)
        n = self.index.size
        rel_ids = sorted({rid for q in queries for rid in q.relevant})
        row_of = self.index.docs.rows_for_ids(rel_ids)
        missing = [rid for rid in rel_ids if rid not in row_of]
        if missing:
            field = "queries[].relevant" if req.queries is not None else "pair"
            raise BadRequest(field, f"{len(missing)} relevant ids are not in the served index, e.g. {missing[:3]}")
        k = min(req.k or n, n, MAX_DIAGNOSE_DEPTH)
        qlangs = [self.query_language(q.query, q.lang)[0] for q in queries]
        qvecs = self.encoder.encode_queries([q.query for q in queries])
        scores, rows = self._faiss(qvecs, k)
        # dense score matrix over the pool: retrieved documents keep their rank order, the rest are -inf
        S = np.full((len(queries), n), -np.inf)
        for i in range(len(queries)):
            valid = rows[i] >= 0
            r_i, s_i = rows[i][valid], scores[i][valid].astype(np.float64)
            if req.rerank:
                docs = self.index.docs.get_rows(r_i[: req.rerank_k].tolist())
                rs = self.reranker.score(queries[i].query, [d.text for d in docs])
                head = np.argsort(-rs, kind="stable")
                r_i = np.concatenate([r_i[: req.rerank_k][head], r_i[req.rerank_k :]])
                s_i = -np.arange(len(r_i), dtype=np.float64)  # the final order is the score
            S[i, r_i] = s_i
        R = np.zeros_like(S)
        for i, q in enumerate(queries):
            R[i, [row_of[x] for x in q.relevant]] = 1
        ranks = M.rank_matrix(S)
        retrieved = np.isfinite(S)
        censored = ((R > 0) & ~retrieved).any(axis=1)
        max_r = M.max_at_r(S, R)
        n_rel = (R > 0).sum(axis=1)
        norm = np.full(len(queries), np.nan)
        ok = ~censored & (n_rel < n)
        if ok.any():
            norm[ok] = M.max_at_r_norm(max_r[ok], n, n_rel[ok])
        comp = M.comp_at_k(S, R, 10).astype(bool) & ~censored
        top1 = M.ranking(S)[:, 0]
        top1_docs = self.index.docs.get_rows(top1.tolist())
        top1_lang = [d.lang for d in top1_docs]

        per_query = []
        for i, q in enumerate(queries):
            per_query.append(
                P.QueryDiagnosis(
                    query=q.query,
                    lang=qlangs[i],
                    ranks={
                        rid: (int(ranks[i, row_of[rid]]) if retrieved[i, row_of[rid]] else None) for rid in q.relevant
                    },
                    max_r=None if censored[i] else int(max_r[i]),
                    max_r_norm=None if np.isnan(norm[i]) else float(norm[i]),
                    comp_at_10=bool(comp[i]),
                    top1_id=top1_docs[i].id,
                    top1_lang=top1_lang[i],
                    censored=bool(censored[i]),
                )
            )

        def aggregate(sel: np.ndarray) -> P.Aggregate:
            ok_sel = sel & ~censored
            same = [top1_lang[i] == qlangs[i] for i in np.flatnonzero(sel) if qlangs[i]]
            valid_norm = norm[sel & ~np.isnan(norm)]
            return P.Aggregate(
                queries=int(sel.sum()),
                mean_max_r=float(max_r[ok_sel].mean()) if ok_sel.any() else None,
                max_r_norm=float(valid_norm.mean()) if valid_norm.size else None,
                comp_at_10=100.0 * float(comp[sel].mean()),
                same_lang_top1=100.0 * float(np.mean(same)) if same else None,
                censored=int((sel & censored).sum()),
            )

        ql = np.array([x or "und" for x in qlangs], dtype=object)
        matrix, rows_l, cols_l = M.top1_language_matrix(
            S, ql, np.array([x or "und" for x in self._doc_langs], dtype=object)
        )
        return P.DiagnoseResponse(
            pool_size=n,
            k=k,
            reranker=self.reranker.name if req.rerank else None,
            aggregate=aggregate(np.ones(len(queries), bool)),
            per_query_lang={lang: aggregate(ql == lang) for lang in sorted(set(ql.tolist()))},
            top1_lang_matrix={r: {c: float(matrix[a, b]) for b, c in enumerate(cols_l)} for a, r in enumerate(rows_l)},
            queries=per_query,
        )


def build_prompt(query: str, passages: list[str]) -> str:
    """Reading-comprehension prompt that base and instruct models both complete with
    a one-line answer; the passages are in the reader's language where one exists,
    which is what makes a small model answer in that language."""
    return "\n\n".join(passages) + f"\n\nQuestion: {query}\nAnswer:"
