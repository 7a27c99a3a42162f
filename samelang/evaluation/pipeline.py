"""End-to-end evaluation of what the service serves (``samelang eval pipeline``): for a held-out XQuAD test question,
is the first passage the gold paragraph *in the reader's language*? Every row is a
:class:`samelang.retrieval.pipeline.Pipeline` called as the routes call it (the served row also through a real HTTP
server), over a real FAISS index of the pool (240 paragraphs x 12 languages); only the models' outputs are memoised,
keyed so that a stale one is never reused (:mod:`.cached_models`). Rows: every retriever x reranker (``none``, the
retriever's own cosine, each cross-encoder) x candidates (the top-20 ``documents`` or ``groups``), plus hybrid rows
with a BM25 weight tuned on train articles (``models/fusion.json``). Metrics per query language and their mean:
reader-gold nDCG@1, nDCG@10, MRR@10, candidate recall@20, graded nDCG@10, Mono-Same nDCG@10, bilingual Max@R and
Comp@10, p50 latency. Cross-encoder rows run on a fixed sample (:func:`sample_indices`) unless ``full``; every row is
also reported on it; 95% intervals are percentile bootstraps over queries (``docs/evaluation.md`` has the details).
Long because it is the evaluation's specification (rows, metrics, samples); the report and the memoised models are
apart (:mod:`.pipeline_table`, :mod:`.cached_models`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from pydantic import Field, field_validator, model_validator
from tqdm.auto import tqdm

from samelang.core.catalogue import ALIGNED_BIENCODER, BASE, LAMAR_RERANKER, ensure_demo_index, served_defaults
from samelang.core.metrics import audit as A
from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.cross_encoder import CosineReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.generation import NoGenerator
from samelang.core.options import IntList, StrList
from samelang.core.runtime.precision import EngineOptions
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.corpora.store import CorporaOption
from samelang.evaluation.biencoder import embed_xquad
from samelang.evaluation.cached_models import CachedReranker, MemoEncoder, bootstrap_ci, search_p50_ms
from samelang.evaluation.common import EvalOptions, Report
from samelang.evaluation.pipeline_table import (
    STRATEGIES,
    Row,
    best_row,
    cpu_flags,
    markdown,
    write_doc_section,
)
from samelang.indexes.index import open_index
from samelang.primitives.langid import get_identifier
from samelang.retrieval.limits import Limits
from samelang.retrieval.options import Defaults, SearchOptions
from samelang.retrieval.pipeline import Pipeline
from samelang.service.components import Components, load_components
from samelang.service.config import ServiceSettings

TOP_K, CANDIDATES, SAMPLE_PER_LANG = 10, 20, 48
TARGETS = tuple(x for x in XQUAD_LANGS if x != "en")


def sample_indices(n_questions: int, per_lang: int = SAMPLE_PER_LANG) -> np.ndarray:
    """``per_lang`` evenly spaced positions among a language's test questions (file order: every
    test article is represented); the same positions in every language."""
    if per_lang >= n_questions:
        return np.arange(n_questions)
    return np.unique(np.round(np.linspace(0, n_questions - 1, per_lang)).astype(int))


@dataclass
class Retriever:
    name: str
    encoder: object  # the real Encoder (latency) ...
    memo: MemoEncoder  # ... and the same model with memoised query embeddings
    index: object  # OpenIndex over the 12-language pool, built by this encoder


def pool_index(home: Path, encoder, embeddings) -> Path:
    """The 12-language pool index of ``encoder`` (the demo index ``samelang serve --langs`` with
    all 12 languages builds), from the cached XQuAD embeddings of that same encoder."""

    vec = {}
    for lang in XQUAD_LANGS:
        for p, v in zip(load_xquad([lang]).paragraphs, embeddings.passages[lang]):
            vec[p.text] = v
    embed = lambda texts: np.stack([vec[t] for t in texts])  # noqa: E731
    return ensure_demo_index(home, ",".join(XQUAD_LANGS), encoder, log=lambda m: None, embed=embed)


@dataclass
class PipelineEvaluation:
    """Runs the rows, owns their metrics, the table and the served-row choice."""

    home: Path
    retrievers: dict[str, Path]
    cross_encoders: dict[str, Path]
    full: bool = False
    per_lang: int = SAMPLE_PER_LANG
    latency_queries: int = 1  # per language
    langs: tuple[str, ...] = XQUAD_LANGS
    precision: str = "auto"
    cache: bool = True
    log: Callable[[str], None] = print
    served: tuple[str, str, str, float] | None = None  # (retriever, reranker, strategy, lexical) served now
    lexical: dict[str, float] = field(default_factory=dict)  # retriever -> tuned BM25 weight
    max_questions: int | None = None  # first N test questions per language (smoke runs and tests only)

    def __post_init__(self):
        queries = A.xquad_queries(self.langs, "test")
        per = len(queries) // len(self.langs)
        keep = min(per, self.max_questions or per)
        self.queries = [q for li in range(len(self.langs)) for q in queries[li * per : li * per + keep]]
        self.n_per_lang = keep
        self.sample = sample_indices(self.n_per_lang, self.per_lang)

    # -- set-up ---------------------------------------------------------------------------
    def _retriever(self, name: str, path: Path) -> Retriever:
        enc = Encoder(path, home=self.home, options=EngineOptions(precision=self.precision))
        emb = embed_xquad(enc, self.home / "cache")
        known = {}
        for lang in XQUAD_LANGS:
            for q, v in zip(load_xquad([lang], split="test").questions, emb.queries[lang]):
                known[("query", q.text)] = v
        index = open_index(pool_index(self.home, enc, emb), enc.info)
        return Retriever(name, enc, MemoEncoder(enc, known), index)

    def _rerankers(self) -> dict[str, CachedReranker]:
        out = {}
        for name, path in self.cross_encoders.items():
            out[name] = CachedReranker.open(path, self.home, self.precision, self.cache)
        return out

    def pipeline(self, r: Retriever, reranker, strategy: str, memo: bool = True, lexical: float = 0.0) -> Pipeline:
        enc = r.memo if memo else r.encoder
        if reranker in ("none", "cosine"):
            model = CosineReranker(enc)
        else:
            model = reranker if memo else reranker._reranker
        defaults = Defaults(
            rerank=reranker != "none",
            rerank_k=CANDIDATES,
            group_candidates=strategy == "groups",
            lexical_weight=lexical,
        )
        pipe = Pipeline(enc, r.index, model, NoGenerator(), get_identifier(), Limits(), defaults=defaults)
        if lexical and pipe.lexical is None:
            raise RuntimeError(f"the pool index of {r.name} has no lexical half: a hybrid row would run dense")
        return pipe

    # -- one row ---------------------------------------------------------------------------
    def _queries(self, sampled: bool) -> list[int]:
        """Indices into ``self.queries``: all of them, or the sample positions in every language."""
        if self.full or not sampled:
            return list(range(len(self.queries)))
        return [li * self.n_per_lang + int(i) for li in range(len(self.langs)) for i in self.sample]

    def evaluate_row(self, row: Row, r: Retriever, reranker) -> dict:
        pipe = self.pipeline(r, reranker, row.strategy, lexical=row.lexical)
        costly = isinstance(reranker, CachedReranker)  # cross-encoder rows: the sample, unless full
        qidx = self._queries(costly)
        n = r.index.size
        row_of = r.index.docs.rows_for_ids([pid for q in self.queries for pid in q.relevant])
        per_q: dict[str, np.ndarray] = {}
        lists, shown, cands, mono = [], [], [], []
        for j, i in enumerate(tqdm(qidx, desc=f"{row.name}: 12-language pool", unit="q", leave=False)):
            if isinstance(reranker, CachedReranker) and j % 48 == 47:
                reranker.save()  # a long row that is stopped keeps what it scored
            q = self.queries[i]
            res = pipe.search(q.query, SearchOptions(k=TOP_K))
            lists.append([h.doc.row for h in res.hits])
            shown.append([rw for h in res.hits for rw in h.rows])
            cands.append([h.doc.row for h in res.candidates[:CANDIDATES]])
            m = pipe.search(q.query, SearchOptions(k=TOP_K, langs=(q.lang,)))
            mono.append([h.doc.row for h in m.hits])
        reader_col = np.array([row_of[self.queries[i].reader_gold] for i in qidx])
        graded = np.zeros((len(qidx), n))
        for j, i in enumerate(qidx):
            graded[j, [row_of[x] for x in self.queries[i].relevant]] = 1
            graded[j, reader_col[j]] = 2
        S = A.score_matrix(lists, n)
        per_q.update(A.reader_metrics(S, reader_col))
        per_q["graded_ndcg_at_10"] = A.reader_metrics(A.score_matrix(shown, n), reader_col, graded)["graded_ndcg_at_10"]
        per_q["recall_at_20"] = np.array([float(reader_col[j] in c) for j, c in enumerate(cands)])
        per_q["mono_same_ndcg_at_10"] = A.reader_metrics(A.score_matrix(mono, n), reader_col)["ndcg_at_10"]
        qlang = np.array([self.queries[i].lang for i in qidx])
        in_sample = np.isin(np.array([i % self.n_per_lang for i in qidx]), self.sample)
        out = {"questions_per_lang": len(qidx) // len(self.langs), "sample_per_lang": len(self.sample),
               "metrics": {}, "sample": {}, "per_lang": {}}  # fmt: skip
        for m, v in per_q.items():
            out["metrics"][m] = 100 * float(v.mean())
            s = v[in_sample]
            lo, hi = bootstrap_ci(100 * s)
            out["sample"][m] = {"mean": 100 * float(s.mean()), "ci95": [lo, hi]}
            out["per_lang"][m] = {x: 100 * float(s[qlang[in_sample] == x].mean()) for x in self.langs}
        if not costly or self.full:
            out["bilingual"] = self._bilingual(pipe, r, qidx)
        return out

    def _bilingual(self, pipe: Pipeline, r: Retriever, qidx: list[int]) -> dict:
        """Max@R / Comp@10 of the list the client sees on each en+t pool (the whole pool ranked)."""
        out = {}
        positions = sorted({i % self.n_per_lang for i in qidx})
        by_lang = {x: self.langs.index(x) for x in self.langs}
        for t in TARGETS:
            if t not in by_lang:
                continue
            pool_rows = np.flatnonzero(np.isin(pipe.doc_langs, ["en", t]))
            col = {int(rw): j for j, rw in enumerate(pool_rows)}
            for ql in ("en", t):
                qs = [self.queries[by_lang[ql] * self.n_per_lang + p] for p in positions]
                rankings = []
                for q in tqdm(qs, desc=f"en+{t} | {ql}", unit="q", leave=False):
                    res = pipe.search(q.query, SearchOptions(k=len(pool_rows), langs=("en", t)))
                    rankings.append([col[rw] for h in res.hits for rw in h.rows if rw in col])
                S = A.score_matrix(rankings, len(pool_rows))
                R = np.zeros_like(S)
                rel = r.index.docs.rows_for_ids([x for q in qs for x in q.relevant if x.split("-")[1] in ("en", t)])
                for j, q in enumerate(qs):
                    R[j, [col[rel[x]] for x in q.relevant if x in rel]] = 1
                au = A.audit_lists(S, R)
                ok = ~au.censored
                out[f"en+{t}|{ql}"] = {
                    "max_r": float(au.max_r[ok].mean()) if ok.any() else None,
                    "comp_at_10": 100 * float(au.comp_at_10.mean()),
                    "censored": int(au.censored.sum()),
                }
        if out:
            vals = [v for v in out.values() if v["max_r"] is not None]
            out["average"] = {
                "max_r": float(np.mean([v["max_r"] for v in vals])) if vals else None,
                "comp_at_10": float(np.mean([v["comp_at_10"] for v in out.values()])),
            }
        return out

    def latency(self, row: Row, r: Retriever, reranker) -> float:
        """p50 ms of ``Pipeline.search`` with the real models (nothing memoised), one at a time."""
        pipe = self.pipeline(r, reranker, row.strategy, memo=False, lexical=row.lexical)
        qs = [self.queries[li * self.n_per_lang + int(i)].query for li in range(len(self.langs))
              for i in self.sample[: self.latency_queries]]  # fmt: skip
        return search_p50_ms(pipe, qs, TOP_K)

    # -- all rows --------------------------------------------------------------------------
    def run(self) -> list[Row]:
        t0 = time.perf_counter()
        ces = self._rerankers()
        rows: list[Row] = []
        self.built: dict[str, Retriever] = {}
        self.ces = ces
        for rname, path in self.retrievers.items():
            self.log(f"retriever {rname}: embeddings and 12-language pool index ...")
            r = self.built[rname] = self._retriever(rname, path)
            variants = [(0.0, rr) for rr in ["none", "cosine", *ces]]
            if self.lexical.get(rname):
                variants += [(self.lexical[rname], rr) for rr in ["none", *ces]]
            for strategy in STRATEGIES:
                for lexical, rr in variants:
                    row = Row(rname, rr, strategy, lexical=lexical)
                    row.served = row.key == self.served
                    model = ces.get(rr, rr)
                    t1 = time.perf_counter()
                    row.results = self.evaluate_row(row, r, model)
                    row.results["latency_ms_p50"] = self.latency(row, r, model)
                    row.results["eval_seconds"] = round(time.perf_counter() - t1, 1)
                    if isinstance(model, CachedReranker):
                        model.save()
                    s = row.results["sample"]
                    self.log(
                        f"{row.name}: reader-gold nDCG@1 {s['ndcg_at_1']['mean']:.1f} "
                        f"[{s['ndcg_at_1']['ci95'][0]:.1f}, {s['ndcg_at_1']['ci95'][1]:.1f}], "
                        f"recall@20 {s['recall_at_20']['mean']:.1f}, {row.results['latency_ms_p50']:.0f} ms "
                        f"({row.results['eval_seconds']:.0f} s)"
                    )
                    rows.append(row)
        self.seconds = round(time.perf_counter() - t0, 1)
        return rows


def served_over_http(ev: PipelineEvaluation, retriever: Retriever, rerankers: dict) -> dict:
    """The served defaults as a client gets them: ``load_components`` with no flag but the
    12-language pool index and ``--generator none``, a real uvicorn server, ``POST /answer`` for
    every sample query; reader-gold nDCG@1 of the first passage. Model outputs come from the same
    memo / score cache as the rows (same models, same numbers)."""

    from samelang.service.api.app import create_app  # deferred: brings fastapi, starlette only when this runs
    from samelang.service.api.server import serve_in_thread  # deferred: brings fastapi only when this runs

    cfg = ServiceSettings(home=ev.home, index=retriever.index.path, generator="none", micro_batching=False)
    comps = load_components(cfg)
    pipe = comps.pipeline
    if pipe.encoder.fingerprint != retriever.encoder.fingerprint:
        raise RuntimeError(f"the served retriever is {pipe.encoder.name}, not {retriever.name}")
    if isinstance(pipe.reranker, CosineReranker):
        reranker = CosineReranker(retriever.memo)
    else:
        reranker = next((r for r in rerankers.values() if r.fingerprint == pipe.reranker.fingerprint), pipe.reranker)
    app = create_app(cfg, Components(pipe.replace(encoder=retriever.memo, reranker=reranker)))
    qidx = [li * ev.n_per_lang + int(i) for li in range(len(ev.langs)) for i in ev.sample]
    hits, components = [], None
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=600) as client:
        for i in tqdm(qidx, desc="served defaults over HTTP /answer", unit="q", leave=False):
            q = ev.queries[i]
            body = client.post("/answer", json={"query": q.query}).raise_for_status().json()
            components = body["components"]
            hits.append(100.0 * (bool(body["passages"]) and body["passages"][0]["id"] == q.reader_gold))
    v = np.array(hits)
    return {"queries": len(v), "ndcg_at_1": float(v.mean()), "ci95": list(bootstrap_ci(v)), "components": components}


def how_text(ev: PipelineEvaluation, minutes: float, card: bool = False) -> str:
    return (
        f"XQuAD test articles, pool = all 2,880 paragraphs (240 x 12 languages); rows without a cross-encoder on all "
        f"{ev.n_per_lang} questions per language, every row also on the fixed sample of {len(ev.sample)} "
        f"evenly spaced questions per language ({len(ev.sample) * len(ev.langs)} queries; the columns before "
        "'all questions' are on the sample, 95% percentile-bootstrap interval); query language detected as "
        "the service does; 10 hits from 20 candidates; bilingual Max@R / Comp@10 = mean over the 22 en+t "
        "settings of the whole pool ranked (rows without a cross-encoder, or with `--full`). p50 ms: one "
        f"`Pipeline.search` at a time, nothing memoised, on {cpu_flags()} with {os.cpu_count()} cores. "
        f"Command: `{'samelang eval pipeline' + (' --full' if ev.full else '') + (' --card' if card else '')}` "
        f"({minutes:.0f} min)."
    )


# ----------------------------------------------------------------------------- the command's object
PIPELINE_SECTION = "## The 12-language parallel pool in detail: rerankers, candidates, bilingual pools"


NO_RERANKER = "none"  # --cross-encoder none: the retriever rows judged alone (an hour less on 2 cores)


class PipelineEvalOptions(EvalOptions, CorporaOption):
    """Options of ``samelang eval pipeline``."""

    retriever: StrList = Field(
        default_factory=list,
        description="Bi-encoder NAME=DIR (or 'base'); repeat. Default: base and every bi-encoder in models/. With "
        "--shapes: a models/ retriever's NAME, judged beside the base model's rows only (and the served one's "
        "with --card, whose tables then hold these rows).",
    )
    cross_encoder: StrList = Field(
        default_factory=list,
        description="Cross-encoder NAME=DIR (with --shapes: a models/ name or DIR); repeat. Default: every "
        "cross-encoder in models/ (with --shapes: every shipped one; 'none': the retriever rows alone, no --card).",
    )
    rerank_k: IntList = Field(
        default_factory=list,
        description="With --shapes: the candidates a reranked row's cross-encoder scores, each in [1, 100]; repeat. "
        "Default: the tuned grid (grids.json's rerank_ks). Fewer or smaller ks: fewer rows and fewer scored pairs "
        "(the pairs of the largest k are scored once, every smaller k reuses them).",
    )
    full: bool = Field(False, description="Reranked rows on all 374 questions per language too.")
    per_lang: int = Field(SAMPLE_PER_LANG, ge=1, le=374, description="Sample: questions per language (>= 48).")
    http: bool = Field(True, description="Also measure the served defaults over HTTP /answer.")
    card: bool = Field(
        False,
        description="Write the tables to docs/evaluation.md (with --shapes: also serve the chosen row: "
        "models/serving.json).",
    )
    cache: bool = Field(True, description="Reuse cross-encoder scores kept in the cache.")
    lexical: bool = Field(
        True, description="Also run each retriever as a hybrid with its BM25 weight from models/fusion.json."
    )
    max_questions: int | None = Field(
        None, ge=1, description="Smoke runs only: the first N test questions per language (the table then says so)."
    )
    out: Path = Field(Path("runs/eval-pipeline"), description="Folder for results.json and results.md.")
    shapes: bool = Field(
        False, description="Judge on every collection shape (parallel, partial translations, one language each, "
        "Mono-Same): choose the served row on train articles, report on test articles (with --card: serve it).",
    )  # fmt: skip
    tiny: bool = Field(False, description="With --shapes: a few paragraphs and questions per shape (seconds).")
    ood: bool = Field(
        True, description="With --shapes: also the out-of-domain shape, the corpus source every training run holds "
        "out (skipped, saying how to import it, when the corpus store lacks it).",
    )  # fmt: skip
    ood_only: bool = Field(
        False, description="With --shapes: only the out-of-domain shape, for the rows the last judge chose among "
        "(models/serving.json); with --card its table replaces the one in docs/evaluation.md and serving.json.",
    )  # fmt: skip

    @field_validator("rerank_k")
    @classmethod
    def _rerank_ks(cls, ks: list[int]) -> list[int]:
        """Each k in [1, 100], each once (a repeated k would judge the same rows twice): what the judge's rows and
        its command line both read."""
        bad = [k for k in ks if not 1 <= k <= 100]
        if bad:
            raise ValueError(f"rerank_k {bad}: each must be in [1, 100] (candidates a cross-encoder scores)")
        return list(dict.fromkeys(ks))

    @model_validator(mode="after")
    def _card_needs_the_sample(self) -> PipelineEvalOptions:
        if self.card and (self.max_questions or self.per_lang < SAMPLE_PER_LANG):
            raise ValueError(
                f"--card needs the documented sample (>= {SAMPLE_PER_LANG} per language, no --max-questions)"
            )
        if self.card and self.cross_encoder == [NO_RERANKER]:
            raise ValueError("--cross-encoder none with --card: the served row is chosen among the reranked rows too")
        return self


def _named(items: list[str], found: dict[str, Path]) -> dict[str, Path]:
    """``NAME=DIR`` items (a bare ``NAME`` is its own path), or what was ``found`` when none."""
    if not items:
        return found
    return {name: Path(path or name) for name, _, path in (item.partition("=") for item in items)}


def evaluation_from(options: PipelineEvalOptions, log=print) -> PipelineEvaluation:
    """The evaluation of the retrievers and cross-encoders the options name (default: the base
    model and every model in ``models/``), aware of what is served now."""

    home = options.home
    base = ensure_base_model(home)
    from samelang.evaluation.fusion import tuned_weights  # deferred: keeps torch out of start-up

    found = {BASE: base, **({ALIGNED_BIENCODER.name: ALIGNED_BIENCODER} if ALIGNED_BIENCODER.exists() else {})}
    retrievers = {k: (base if str(v) == BASE else v) for k, v in _named(options.retriever, found).items()}
    ces = _named(options.cross_encoder, {LAMAR_RERANKER.name: LAMAR_RERANKER} if LAMAR_RERANKER.exists() else {})
    if options.per_lang < SAMPLE_PER_LANG and not options.full:
        log(f"note: --per-lang {options.per_lang} is below the documented sample of {SAMPLE_PER_LANG} per language")
    now = served_defaults()
    return PipelineEvaluation(
        home, retrievers, ces, full=options.full, per_lang=options.per_lang, cache=options.cache, log=log,
        max_questions=options.max_questions,
        served=(now.retriever, now.search_reranker, now.candidates, now.lexical_weight),
        lexical={} if not options.lexical else tuned_weights(),
    )  # fmt: skip


def run_pipeline_evaluation(options: PipelineEvalOptions, doc: Path, log=print) -> Report:
    """Every row, the best on this pool, the served defaults over HTTP, and (with ``card``) the
    section of ``docs/evaluation.md``; the report also lands in ``options.out``. What is served is
    chosen on every collection shape (``--shapes``, :mod:`.collection_shapes`), not here."""

    t0 = time.perf_counter()
    evaluation = evaluation_from(options, log)
    rows = evaluation.run()
    chosen = best_row(rows)
    baseline = next((r for r in rows if r.key == (BASE, "none", "documents", 0.0)), None)
    http = None
    if options.http:
        served = served_defaults()
        retriever = evaluation.built.get(served.retriever)
        if retriever is None:
            log(f"served retriever {served.retriever!r} was not evaluated: no HTTP check")
        else:
            http = served_over_http(evaluation, retriever, evaluation.ces)
    table = markdown(rows, chosen, http)
    minutes = (time.perf_counter() - t0) / 60
    how = how_text(evaluation, minutes, options.card)
    data = {
        "rows": [{"name": r.name, "retriever": r.retriever, "reranker": r.reranker, "strategy": r.strategy,
                  "lexical_weight": r.lexical, **r.results} for r in rows],
        "chosen": chosen.name, "http": http, "minutes": round(minutes, 1),
        "sample_positions": evaluation.sample.tolist(),
    }  # fmt: skip
    report = Report(table + "\n\n" + how, data)
    report.write(options.out)
    if options.card:
        write_doc_section(doc, PIPELINE_SECTION, table, how, chosen, baseline)
        log(f"table -> {doc} ({PIPELINE_SECTION[3:]})")
    return report
