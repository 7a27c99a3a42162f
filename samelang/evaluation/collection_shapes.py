"""The collection-shape judge (``samelang eval pipeline --shapes``): what the reader gets on every shape of collection
users have, through :meth:`samelang.retrieval.pipeline.Pipeline.search` (the served rows also over HTTP). Why shapes:
a default chosen on one shape can collapse another (BM25 wins the 12-language parallel pool but, over a mostly
English collection with some translations, hides answers written in another language). Each shape is a fixed, seeded
construction over one split's XQuAD paragraphs (train articles tune and select, test articles report): ``parallel``
(all 12 languages, grouped), ``partial`` (no labels; English with p = :data:`P_EN`, the others :data:`P_OTHER`,
at least one version), ``one`` (one language each), ``mono`` (each language alone). Metrics, in %: ``found@1``,
``reader@1``, ``cross@1``, ``same_language_first`` (lower is better), ``found@10`` and the parallel pool's
reader-gold nDCG and MRR; each shape's primary metric is what the serving rule averages. Model outputs are
memoised; reranked rows run on :data:`RERANK_PER_LANG` fixed questions per language with cached scores
(:class:`~.cached_models.CachedReranker`) and are compared with their retriever on those questions; p50 is timed
with the real models on :data:`LATENCY_PER_LANG` questions per language over the partial index (the users' shape).
The shapes and metrics are spelled out in ``docs/evaluation.md``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from samelang.core.catalogue import open_encoder, resolve_model
from samelang.core.metrics import audit as A
from samelang.core.models.cross_encoder import CosineReranker
from samelang.core.models.generation import NoGenerator
from samelang.core.runtime.precision import EngineOptions
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.corpora.records import Document
from samelang.evaluation.biencoder import embed_xquad
from samelang.evaluation.cached_models import CachedReranker, MemoEncoder, bootstrap_ci, search_p50_ms
from samelang.evaluation.serving_rule import PRIMARY, SHAPES, ShapeRow
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.langid import get_identifier
from samelang.retrieval.limits import Limits
from samelang.retrieval.options import Defaults, SearchOptions
from samelang.retrieval.pipeline import Pipeline

P_EN, P_OTHER = 0.6, 0.25
# questions per language a reranked row runs on (1,152 test questions in all: a found@1 near 70% has a 95%
# interval of about +-2.6 points, a paired difference with its retriever less; the dev articles hold 58
# per language, all asked), and of those, questions per language each row's p50 is measured on (24 searches)
RERANK_PER_LANG, LATENCY_PER_LANG = 96, 2
SHAPES_VERSION = "shapes-v1"  # the constructions' identity (part of every shape index's folder name)


def _u(*parts) -> float:
    """A uniform number in [0, 1) from a seeded hash: the same on every machine and Python."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big") / 2.0**64


def _p(lang: str) -> float:
    return P_EN if lang == "en" else P_OTHER


def present_versions(shape: str, groups: list[str], langs=XQUAD_LANGS) -> set[tuple[str, str]]:
    """The (group, language) versions a shape holds (``mono`` and ``parallel``: all of them)."""
    if shape in ("parallel", "mono"):
        return {(g, x) for g in groups for x in langs}
    if shape == "partial":
        out = set()
        for g in groups:
            chosen = [x for x in langs if _u(shape, g, x) < _p(x)]
            out |= {(g, x) for x in chosen or [min(langs, key=lambda x: _u(shape, g, x) / _p(x))]}
        return out
    if shape == "one":
        return {(g, langs[int(_u(shape, g) * len(langs))]) for g in groups}
    raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")


def pool_split(split: str, max_paragraphs: int | None = None) -> str:
    """Whose paragraphs a split's shapes hold: the test questions search all 240 paragraphs (the
    pool of the seeds' tables, so the parallel numbers compare with them); the train questions only the train
    articles' paragraphs, so that nothing tuned has ever seen a test paragraph. A tiny run (the
    first ``max_paragraphs``) takes its split's own."""
    return "all" if split == "test" and not max_paragraphs else split


def pool_groups(split: str, max_paragraphs: int | None = None) -> list[str]:
    """The paragraph groups a split's shapes are built over (:func:`pool_split`), in file order."""
    return [p.group for p in load_xquad(["en"], split=pool_split(split, max_paragraphs)).paragraphs[:max_paragraphs]]


def shape_documents(shape: str, split: str, max_paragraphs: int | None = None) -> list[Document]:
    """The documents of ``shape`` for ``split``'s questions (:func:`pool_split`): labelled groups
    only in ``parallel`` (and ``mono``, the same index). ``max_paragraphs``: the first N (tiny runs)."""
    paragraphs = {
        x: load_xquad([x], split=pool_split(split, max_paragraphs)).paragraphs[:max_paragraphs] for x in XQUAD_LANGS
    }
    keep = present_versions(shape, [p.group for p in paragraphs["en"]])  # the groups of pool_groups()
    labelled = shape in ("parallel", "mono")
    return [
        Document(p.id, p.text, p.lang, p.group if labelled else None, {"article": p.article})
        for x in XQUAD_LANGS for p in paragraphs[x] if (p.group, x) in keep
    ]  # fmt: skip


def summarise(per_query: dict[str, np.ndarray], qlang: np.ndarray) -> dict:
    """Mean, 95% interval, count and per-language mean of each per-query metric (NaN: not counted)."""
    out = {}
    for m, v in per_query.items():
        ok = ~np.isnan(v)
        lo, hi = bootstrap_ci(100 * v[ok])
        out[m] = {
            "mean": 100 * float(v[ok].mean()) if ok.any() else float("nan"),
            "ci95": [lo, hi],
            "n": int(ok.sum()),
            "per_lang": {
                x: (100 * float(v[ok & (qlang == x)].mean()) if (ok & (qlang == x)).any() else None)
                for x in XQUAD_LANGS
            },  # fmt: skip
        }
    return out


def score_lists(shape: str, lists: list[list[str]], queries: list, present: set) -> dict[str, np.ndarray]:
    """Per-query metrics of the id lists a shape's searches returned (ids ``xquad-{lang}-{a}-{p}``)."""

    def group_of(pid: str) -> str:
        _, _, a, p = pid.split("-")
        return f"xquad-{a}-{p}"

    first = [ids[0] if ids else None for ids in lists]
    found1 = np.array([f is not None and group_of(f) == q.group for f, q in zip(first, queries)], float)
    reader1 = np.array([f == q.reader_gold for f, q in zip(first, queries)], float)
    rank = [next((i for i, x in enumerate(ids[:10]) if x == q.reader_gold), None) for ids, q in zip(lists, queries)]
    ndcg10 = np.array([0.0 if r is None else 1 / np.log2(r + 2) for r in rank])
    if shape == "parallel":
        mrr10 = np.array([0.0 if r is None else 1 / (r + 1) for r in rank])
        return {"ndcg_at_1": reader1, "ndcg_at_10": ndcg10, "mrr_at_10": mrr10, "found_at_1": found1}
    if shape == "mono":
        return {"ndcg_at_10": ndcg10}
    has_reader = np.array([(q.group, q.lang) in present for q in queries], dtype=bool)
    found10 = np.array([any(group_of(x) == q.group for x in ids[:10]) for ids, q in zip(lists, queries)], float)
    # the bias both seeds are about: the answer exists only in other languages, and a wrong passage in the
    # reader's own language comes first
    own_wrong = np.array([f is not None and f.split("-")[1] == q.lang and group_of(f) != q.group
                          for f, q in zip(first, queries)], float)  # fmt: skip
    return {
        "found_at_1": found1,
        "reader_at_1": np.where(has_reader, reader1, np.nan),
        "cross_at_1": np.where(~has_reader, found1, np.nan),
        "same_language_first": np.where(~has_reader, own_wrong, np.nan),
        "found_at_10": found10,
    }


@dataclass
class ShapeJudge:
    """Runs rows over the shapes of one split; owns the shape indexes, metrics and table."""

    home: Path
    split: str = "test"
    shapes: tuple[str, ...] = SHAPES
    max_paragraphs: int | None = None  # tiny runs: the first N paragraphs per language ...
    max_questions: int | None = None  # ... and the first N questions per language
    articles: tuple[int, ...] | None = None  # only these articles' questions (the pools stay the split's)
    log: Callable[[str], None] = print
    memo: bool = True  # vectors of every split text from the embedding caches (False: tiny runs encode what they use)
    encoders: dict = field(default_factory=dict)  # retriever name -> memoised encoder
    per_query: dict = field(default_factory=dict)  # row -> shape -> per-query metric arrays (for held_out)
    rerankers: dict = field(default_factory=dict)  # cross-encoder name -> its scores kept on disk
    latency: dict = field(default_factory=dict)  # row -> p50 ms of Pipeline.search, real models
    latency_per_lang: int = LATENCY_PER_LANG  # searches per language each p50 is the median of
    latency_langs: tuple[str, ...] = XQUAD_LANGS  # ... in these query languages (tiny runs: a few)
    rerank_per_lang: int = RERANK_PER_LANG  # question positions reranked rows run on (probes: fewer)

    def __post_init__(self):
        per_lang = {x: A.xquad_queries([x], self.split) for x in XQUAD_LANGS}
        groups = set(pool_groups(self.split, self.max_paragraphs))
        keep = {x: [q for q in per_lang[x] if q.group in groups and self._asked(q)][: self.max_questions]
                for x in XQUAD_LANGS}  # fmt: skip
        self.queries = [q for x in XQUAD_LANGS for q in keep[x]]
        self.qlang = np.array([q.lang for q in self.queries])
        self.position = np.array([i for x in XQUAD_LANGS for i in range(len(keep[x]))])  # the question, any language
        self.reranked_questions = self._reranked_questions()

    def _asked(self, q) -> bool:
        return self.articles is None or int(q.group.split("-")[1]) in self.articles

    def _reranked_questions(self) -> np.ndarray:
        """Where reranked rows run (a mask over ``queries``): ``rerank_per_lang`` fixed positions (the
        first of one seeded order, so a smaller sample is part of a larger one)."""
        n = int(self.position.max()) + 1 if self.queries else 0
        chosen = sorted(range(n), key=lambda i: _u("rerank-sample", self.split, i))[: self.rerank_per_lang]
        return np.isin(self.position, chosen)

    def row_questions(self, row: ShapeRow) -> np.ndarray:
        """Indices into ``queries`` that ``row`` runs on (reranked rows: :meth:`_reranked_questions`)."""
        return np.flatnonzero(self.reranked_questions) if row.reranked else np.arange(len(self.queries))

    # -- encoders and indexes ---------------------------------------------------------------
    def encoder(self, name: str):
        """The retriever ``name`` with its query and passage vectors looked up (computed once, in
        batches, by the same model; cached on disk by ``samelang eval biencoder``'s cache)."""
        if name not in self.encoders:
            enc = open_encoder(resolve_model(name, self.home), home=self.home, options=EngineOptions(precision="fp32"))
            self.encoders[name] = MemoEncoder(enc, self._vectors(enc) if self.memo else {})
        return self.encoders[name]

    def _vectors(self, enc) -> dict[str, np.ndarray]:
        parts = [enc.same, enc.cross] if enc.capabilities.fused else [enc]
        known: list[dict[str, np.ndarray]] = []
        for part in parts:
            emb = embed_xquad(part, self.home / "cache", split=self.split)
            k = {}
            for x in XQUAD_LANGS:
                k.update(zip((("passage", p.text) for p in load_xquad([x]).paragraphs), emb.passages[x]))
                k.update(zip((("query", q.text) for q in load_xquad([x], split=self.split).questions), emb.queries[x]))
            known.append(k)
        if len(parts) == 1:
            return known[0]
        return {key: enc.join(known[0][key][None], known[1][key][None])[0] for key in known[0]}

    def index(self, shape: str, enc) -> Path:
        """The shape's index for ``enc`` (built once from the memoised passage vectors; ``mono``
        searches the ``parallel`` one)."""
        docs = shape_documents(shape, self.split, self.max_paragraphs)
        # keyed on the documents themselves (ids and labels), so a changed construction never reuses an index
        held = "\n".join(f"{d.id}:{d.group}" for d in docs)
        return self.cached_index(f"{SHAPES_VERSION}:{held}", docs, enc, f"xquad-shape:{shape}:{self.split}")

    def cached_index(self, ident: str, docs: list[Document], enc, source: str) -> Path:
        """The index of ``docs`` for ``enc``, built once and kept in the cache under ``ident`` (the
        collection's identity) and the model's."""
        key = f"{ident}:{enc.fingerprint}:{enc.cache_tag}"
        out = self.home / "cache" / "shapes" / hashlib.sha256(key.encode()).hexdigest()[:20]
        if not (out / "CURRENT").exists():
            build_index(out, docs, enc.encode_passages, enc.info, source=source, analyzer=enc.analyzer)
        return out

    def cross_encoder(self, name: str) -> CachedReranker:
        """The cross-encoder ``name`` (a folder under ``models/``) at the precision ``samelang serve``
        picks on this machine, its scores kept in the cache (misses scored by the model)."""
        if name not in self.rerankers:
            self.rerankers[name] = CachedReranker.open(resolve_model(name, self.home), self.home)
        return self.rerankers[name]

    def pipeline(self, row: ShapeRow, shape: str, index: Path | None = None) -> Pipeline:
        """``row`` served over ``shape``'s index (or the index folder ``index``: another collection)."""
        enc = self.encoder(row.retriever)
        index = open_index(index or self.index("parallel" if shape == "mono" else shape, enc), enc.info)
        reranker = self.cross_encoder(row.reranker) if row.reranked else CosineReranker(enc)
        defaults = Defaults(rerank=row.reranked, rerank_k=row.rerank_k, group_candidates=row.candidates == "groups",
                            lexical_weight=row.lexical, rerank_fusion=row.fusion)  # fmt: skip
        return Pipeline(enc, index, reranker, NoGenerator(), get_identifier(), Limits(), defaults=defaults)

    # -- one row ------------------------------------------------------------------------------
    def search_lists(self, pipe: Pipeline, shape: str, desc: str, which: np.ndarray | None = None) -> list[list[str]]:
        """The ids each question's search lists (``which``: indices into ``queries``; default all)."""
        lists = []
        which = np.arange(len(self.queries)) if which is None else which
        for j, i in enumerate(tqdm(which, desc=desc, unit="q", leave=False)):
            q = self.queries[i]
            langs = (q.lang,) if shape == "mono" else None
            res = pipe.search(q.query, SearchOptions(k=10, langs=langs))
            lists.append([h.doc.id for h in res.hits])
            if isinstance(pipe.reranker, CachedReranker) and j % 48 == 47:
                pipe.reranker.save()  # a long row that is stopped keeps what it scored
        if isinstance(pipe.reranker, CachedReranker):
            pipe.reranker.save()
        return lists

    def scores(self, shape: str, lists: list[list[str]], which: np.ndarray) -> dict[str, np.ndarray]:
        """Per-query metrics over all ``queries`` (NaN where a question was not run: not counted)."""
        per = score_lists(shape, lists, [self.queries[i] for i in which], self.present(shape))
        full = {m: np.full(len(self.queries), np.nan) for m in per}
        for m, v in per.items():
            full[m][which] = v
        return full

    def evaluate(self, row: ShapeRow) -> dict:
        out = {}
        which = self.row_questions(row)
        for shape in self.shapes:
            t0 = time.perf_counter()
            pipe = self.pipeline(row, shape)
            per = self.scores(shape, self.search_lists(pipe, shape, f"{row.name}: {shape}", which), which)
            self.per_query.setdefault(row, {})[shape] = per
            out[shape] = summarise(per, self.qlang)
            out[shape]["seconds"] = round(time.perf_counter() - t0, 1)
            pipe.index.close()
        self.latency[row] = self.p50_ms(row)
        return out

    def p50_ms(self, row: ShapeRow) -> float:
        """p50 ms of ``Pipeline.search`` for ``row`` with the real models (nothing looked up), one
        search at a time, over the partial-translation index, on ``latency_per_lang`` of the reranked
        rows' questions in each of ``latency_langs`` (after one warm-up search)."""
        pipe = self.pipeline(row, "partial" if "partial" in self.shapes else self.shapes[0])
        real = pipe.replace(encoder=pipe.encoder._encoder,
                            reranker=pipe.reranker.model if row.reranked else pipe.reranker)  # fmt: skip
        which = np.flatnonzero(self.reranked_questions)
        firsts = [i for x in self.latency_langs for i in which[self.qlang[which] == x][: self.latency_per_lang]]
        p50 = search_p50_ms(real, [self.queries[i].query for i in firsts], k=10)
        pipe.index.close()
        return p50

    def same_questions(self, row: ShapeRow, like: ShapeRow) -> dict:
        """``row``'s metrics on the questions ``like`` ran on (a reranked row's retriever, compared
        on its reranker's questions)."""
        keep = np.isin(np.arange(len(self.queries)), self.row_questions(like))
        return {s: summarise({m: np.where(keep, v, np.nan) for m, v in per.items()}, self.qlang)
                for s, per in self.per_query[row].items()}  # fmt: skip

    def present(self, shape: str) -> set:
        return present_versions(shape, pool_groups(self.split, self.max_paragraphs))

    def run(self, rows: list[ShapeRow]) -> dict[ShapeRow, dict]:
        results = {}
        for row in rows:
            results[row] = self.evaluate(row)
            p50 = f", p50 {self.latency[row]:.0f} ms" if row in self.latency else ""
            n = f" ({len(self.row_questions(row))} questions)" if row.reranked else ""
            self.log(f"{row.name}{n}: " + ", ".join(f"{s} {results[row][s][PRIMARY[s]]['mean']:.1f}"
                                                    for s in self.shapes) + p50)  # fmt: skip
        return results
