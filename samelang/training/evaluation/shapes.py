"""The collection-shape judge (``samelang eval pipeline --shapes``): what the reader gets on every
shape of collection users have, through :meth:`samelang.service.pipeline.Pipeline.search` (the served
rows also through a real HTTP server's ``POST /search``).

Why shapes. A default chosen on one shape can collapse another: on the 12-language parallel pool
BM25's same-language word overlap wins, but over a collection that is mostly English with some
translations it hides answers written in another language. Each shape is a fixed construction over
the XQuAD paragraphs of one split (train articles tune and select, test articles report), decided
by a seeded hash of (shape, paragraph group, language), so it is the same on every machine:

* ``parallel``: every paragraph in all 12 languages, with its ``group`` label (today's pool);
* ``partial``: partial translations, no labels: English present with p = 0.6, each other
  language with p = 0.25, at least one version per paragraph (the likeliest, ``u / p`` lowest);
* ``one``: one language each, no labels: every paragraph in exactly one language (uniform);
* ``mono``: each language alone (Mono-Same): the parallel index searched with ``langs=[q]``.

Queries: every question of the split in all 12 languages (test: 374 x 12 = 4,488). Metrics, in %:

* ``found@1``: the first hit is a version (any language) of the gold paragraph;
* ``reader@1``: over questions whose gold exists in the reader's language, the first hit is that version;
* ``cross@1``: over questions whose gold is absent in the reader's language, ``found@1``;
* ``found@10``: a version of the gold is among the first 10 hits;
* parallel: reader-gold nDCG@1, nDCG@10 and MRR@10 (relevant: the gold in the reader's language;
  as ``eval pipeline``'s rows) and found@1; mono: reader-gold nDCG@10 with the search restricted
  to the query's language.

The primary metric of each shape (what the serving rule averages): parallel nDCG@1, partial
found@1, one found@1, mono nDCG@10. 95% intervals: percentile bootstrap over queries (1,000
resamples, seed 0). Model outputs are memoised (query and passage vectors from the caches of
``samelang eval biencoder``: the same model, the same engine), so a row costs only its searches.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from tqdm.auto import tqdm

from samelang.core.metrics import audit as A
from samelang.core.models.folder import replace_section
from samelang.core.models.generation import NoGenerator
from samelang.core.models.precision import EngineOptions
from samelang.core.models.reranker import CosineReranker
from samelang.indexes.corpora import XQUAD_LANGS, load_xquad
from samelang.indexes.corpora.records import Document
from samelang.indexes.index import open_index
from samelang.indexes.langid import get_identifier
from samelang.indexes.writes import build_index
from samelang.service.components import Components, load_components
from samelang.service.config import ServiceSettings
from samelang.service.limits import Limits
from samelang.service.pipeline import Pipeline
from samelang.service.registry import (
    BASE,
    REPO_MODELS,
    SERVED_DEFAULTS,
    open_encoder,
    resolve_model,
    shipped_biencoders,
)
from samelang.service.results import Defaults, SearchOptions
from samelang.training.data import dev_articles
from samelang.training.evaluation.biencoder import embed_xquad
from samelang.training.evaluation.common import Report
from samelang.training.evaluation.memo import MemoEncoder, bootstrap_ci
from samelang.training.evaluation.serving_rule import (
    PRIMARY,
    SHAPES,
    ShapeRow,
    markdown,
    primary_table,
    reader_table,
    serving_rule,
    to_json,
    write_serving,
)

P_EN, P_OTHER = 0.6, 0.25
# BM25 weights the shipped bi-encoders' hybrid rows run with (the fused grid's range,
# scripts/experiments/fused_grid.py: 0.04 keeps more cross-language answers, 0.08 ranks the reader's language best)
HYBRID_WEIGHTS = (0.04, 0.08)
DEV_ARTICLES = 3  # the trainers' default --dev-n-articles: the train articles no model here trains on
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
    """Whose paragraphs a split's shapes hold: the test questions search all 240 paragraphs (today's
    pool, so the parallel numbers compare with the earlier ones); the train questions only the train
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
    return {
        "found_at_1": found1,
        "reader_at_1": np.where(has_reader, reader1, np.nan),
        "cross_at_1": np.where(~has_reader, found1, np.nan),
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
    log: Callable[[str], None] = print
    memo: bool = True  # vectors of every split text from the embedding caches (False: tiny runs encode what they use)
    encoders: dict = field(default_factory=dict)  # retriever name -> memoised encoder
    per_query: dict = field(default_factory=dict)  # row -> shape -> per-query metric arrays (for held_out)

    def __post_init__(self):
        per_lang = {x: A.xquad_queries([x], self.split) for x in XQUAD_LANGS}
        groups = set(pool_groups(self.split, self.max_paragraphs))
        keep = {x: [q for q in per_lang[x] if q.group in groups][: self.max_questions] for x in XQUAD_LANGS}
        self.queries = [q for x in XQUAD_LANGS for q in keep[x]]
        self.qlang = np.array([q.lang for q in self.queries])

    # -- encoders and indexes ---------------------------------------------------------------
    def encoder(self, name: str):
        """The retriever ``name`` with its query and passage vectors looked up (computed once, in
        batches, by the same model; cached on disk by ``samelang eval biencoder``'s cache)."""
        if name not in self.encoders:
            enc = open_encoder(resolve_model(name, self.home), home=self.home, options=EngineOptions(precision="fp32"))
            self.encoders[name] = MemoEncoder(enc, self._vectors(enc) if self.memo else {})
        return self.encoders[name]

    def _vectors(self, enc) -> dict[str, np.ndarray]:
        parts = [enc.same, enc.cross] if hasattr(enc, "fusion") else [enc]
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
        ident = f"{SHAPES_VERSION}:{held}:{enc.fingerprint}:{enc.cache_tag}"
        out = self.home / "cache" / "shapes" / hashlib.sha256(ident.encode()).hexdigest()[:20]
        if not (out / "CURRENT").exists():
            build_index(out, docs, enc.encode_passages, enc.info,
                        source=f"xquad-shape:{shape}:{self.split}", analyzer=enc.analyzer)  # fmt: skip
        return out

    def pipeline(self, row: ShapeRow, shape: str) -> Pipeline:
        enc = self.encoder(row.retriever)
        index = open_index(self.index("parallel" if shape == "mono" else shape, enc), enc.info)
        defaults = Defaults(rerank=False, group_candidates=row.candidates == "groups", lexical_weight=row.lexical)
        return Pipeline(enc, index, CosineReranker(enc), NoGenerator(), get_identifier(), Limits(), defaults=defaults)

    # -- one row ------------------------------------------------------------------------------
    def search_lists(self, pipe: Pipeline, shape: str, desc: str) -> list[list[str]]:
        lists = []
        for q in tqdm(self.queries, desc=desc, unit="q", leave=False):
            langs = (q.lang,) if shape == "mono" else None
            res = pipe.search(q.query, SearchOptions(k=10, langs=langs))
            lists.append([h.doc.id for h in res.hits])
        return lists

    def evaluate(self, row: ShapeRow) -> dict:
        out = {}
        for shape in self.shapes:
            t0 = time.perf_counter()
            pipe = self.pipeline(row, shape)
            lists = self.search_lists(pipe, shape, f"{row.name}: {shape}")
            per = score_lists(shape, lists, self.queries, self.present(shape))
            self.per_query.setdefault(row, {})[shape] = per
            out[shape] = summarise(per, self.qlang)
            out[shape]["seconds"] = round(time.perf_counter() - t0, 1)
            pipe.index.close()
        return out

    def held_out(self, articles: tuple[int, ...]) -> dict[ShapeRow, dict] | None:
        """Every row's metrics on the questions of ``articles`` only, over the same pools (``None``
        when no question is theirs: a tiny run). Why: the trainers here train on every train
        article but the dev ones (:func:`samelang.training.data.dev_articles`), so a trained model
        is judged in-sample on the others; the dev articles' questions are the train side's only
        questions that no compared model has seen."""
        keep = np.array([int(q.group.split("-")[1]) in articles for q in self.queries])
        if not keep.any():
            return None
        return {row: {s: summarise({m: v[keep] for m, v in per.items()}, self.qlang[keep]) for s, per in shapes.items()}
                for row, shapes in self.per_query.items()}  # fmt: skip

    def present(self, shape: str) -> set:
        return present_versions(shape, pool_groups(self.split, self.max_paragraphs))

    def run(self, rows: list[ShapeRow]) -> dict[ShapeRow, dict]:
        results = {}
        for row in rows:
            results[row] = self.evaluate(row)
            self.log(f"{row.name}: " + ", ".join(f"{s} {results[row][s][PRIMARY[s]]['mean']:.1f}" for s in self.shapes))
        return results


# ----------------------------------------------------------------------------- the serving rule


def served_over_http(judge: ShapeJudge, row: ShapeRow, shipped: bool = False) -> dict:
    """The served row as a client gets it: the app ``samelang serve`` builds (``create_app``) over
    each shape's index, a real uvicorn server, ``POST /search`` for every query (the shape's
    language filter for mono); metrics as for the rows. ``shipped``: the components are loaded as
    ``samelang serve`` loads them with no flag but ``--index`` (``models/serving.json``'s defaults),
    and checked to be ``row``'s. The model outputs come from the same memo as the rows'."""

    from samelang.service.api.app import create_app  # deferred: brings fastapi, starlette only when this runs
    from samelang.service.api.server import serve_in_thread  # deferred: brings fastapi only when this runs

    out = {}
    for shape in judge.shapes:
        pipe = judge.pipeline(row, shape)
        cfg = ServiceSettings(home=judge.home, index=pipe.index.path, generator="none", micro_batching=False,
                              index_reload_s=0)  # fmt: skip
        if shipped:
            loaded = load_components(cfg).pipeline
            got = (loaded.encoder.fingerprint, loaded.defaults.lexical_weight, loaded.defaults.group_candidates)
            want = (pipe.encoder.fingerprint, row.lexical, row.candidates == "groups")
            if got != want or loaded.defaults.rerank:
                raise RuntimeError(f"samelang serve loads {got} (rerank {loaded.defaults.rerank}), not {row.name}")
            pipe.index.close()
            pipe = loaded.replace(encoder=pipe.encoder, reranker=pipe.reranker)  # the memo: the same model's outputs
        app = create_app(cfg, Components(pipe))
        lists = []
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=600) as client:
            for q in tqdm(judge.queries, desc=f"HTTP /search: {shape}", unit="q", leave=False):
                body = {"query": q.query, "k": 10, **({"langs": [q.lang]} if shape == "mono" else {})}
                hits = client.post("/search", json=body).raise_for_status().json()["hits"]
                lists.append([h["id"] for h in hits])
        out[shape] = summarise(score_lists(shape, lists, judge.queries, judge.present(shape)), judge.qlang)
        pipe.index.close()
    return out


# ----------------------------------------------------------------------------- the command
def default_rows(lexical: dict[str, float]) -> list[ShapeRow]:
    """The rows judged: the base model dense (the rule's floor), the base model's hybrid at its
    tuned weight, every shipped bi-encoder (seed 000's, :func:`shipped_biencoders`) dense and hybrid
    at each of :data:`HYBRID_WEIGHTS` (the train-article shapes choose among them, as they choose
    the row), and every fused retriever with the BM25 weight it was tuned with."""

    rows = [ShapeRow(BASE), ShapeRow(BASE, lexical.get(BASE, 0.08))]
    for folder in shipped_biencoders():
        rows += [ShapeRow(folder.name), *(ShapeRow(folder.name, w) for w in HYBRID_WEIGHTS)]
    for folder in sorted(REPO_MODELS.glob("*/fused.json")):
        rows.append(ShapeRow(folder.parent.name, fused_weight(folder.parent.name)))
    return rows


def fused_weight(name: str) -> float | None:
    """The BM25 weight a fused retriever (``models/<name>/fused.json``) was tuned with and is served
    with; ``None`` for any other retriever."""
    cfg = REPO_MODELS / name / "fused.json"
    return float(json.loads(cfg.read_text()).get("lexical_weight", 0.0)) if cfg.exists() else None


def run_shapes(options, doc: Path | None = None, log=print):
    """``samelang eval pipeline --shapes``: every row on the train-article shapes (the serving rule
    chooses on their dev articles' questions, :meth:`ShapeJudge.held_out`), then on the
    test-article shapes (the report), the chosen row also through HTTP; ``--card`` writes
    ``models/serving.json`` and ``docs/evaluation.md``'s section; ``--tiny``: a few paragraphs
    and questions of each shape, nothing written but the report (seconds)."""
    from samelang.training.evaluation.fusion import tuned_weights  # deferred: keeps torch out of start-up

    home = options.home
    t0 = time.perf_counter()
    tiny = dict(max_paragraphs=3, max_questions=2, memo=False) if options.tiny else {}
    rows = default_rows(tuned_weights())
    train = ShapeJudge(home, split="train", log=log, **tiny)
    log(f"train-article shapes ({len(train.queries)} questions): the serving rule chooses on the dev articles'")
    train_res = train.run(rows)
    dev_res = train.held_out(dev_articles(DEV_ARTICLES))
    chosen, verdict = serving_rule(dev_res or train_res, rows[0])
    log(f"chosen on the dev articles' questions: {chosen.name}" if dev_res else f"chosen (tiny: all): {chosen.name}")
    test = ShapeJudge(home, split="test", log=log, encoders=train.encoders if options.tiny else {}, **tiny)
    log(f"test-article shapes ({len(test.queries)} questions): the report")
    test_res = test.run(rows)
    command = (
        "samelang eval pipeline --shapes" + (" --tiny" if options.tiny else "") + (" --card" if options.card else "")
    )
    card = options.card and not options.tiny
    if card:  # written before the HTTP check, which then loads what `samelang serve` loads
        write_serving(SERVED_DEFAULTS, chosen, dev_res or train_res, test_res, verdict, command)
    http = served_over_http(test, chosen, shipped=card) if options.http else None
    minutes = (time.perf_counter() - t0) / 60
    how = (f"Questions: {len(test.queries)} test-article questions in 12 languages ({len(train.queries)} train-article "
           f"questions chose the row); 10 hits per search. Command: `{command}` ({minutes:.0f} min).")  # fmt: skip
    dev_table = ("### Chosen on the dev articles' questions\n\n" + "\n".join(primary_table(dev_res, chosen)) + "\n\n"
                 if dev_res else "")  # fmt: skip
    table = (dev_table + "### The train-article shapes (every train question: in-sample for trained models)\n\n"
             + markdown(train_res, chosen, "train")
             + "\n\n### Reported on the test-article shapes\n\n" + markdown(test_res, chosen, "test", http)
             + "\n\n" + how)  # fmt: skip
    data = {"chosen": chosen.name, "served": chosen.served, "train": to_json(train_res), "test": to_json(test_res),
            "dev": to_json(dev_res) if dev_res else None,
            "http": http, "verdict": {r.name: v for r, v in verdict.items()}, "minutes": round(minutes, 1),
            "command": command}  # fmt: skip
    report = Report(table, data)
    report.write(options.out / ("shapes-tiny" if options.tiny else "shapes"))
    if card:
        if doc is not None:
            replace_section(doc, SHAPES_SECTION, table + "\n")
        for name in dict.fromkeys(r.retriever for r in rows):  # every judged model's own card
            card = REPO_MODELS / name / "README.md"
            if card.exists():
                body = "\n".join(["On the test-article shapes (`samelang eval pipeline --shapes`).", "",
                                   *reader_table(test_res, chosen, name), "", *primary_table(test_res, chosen),
                                   "", how])  # fmt: skip
                replace_section(card, SHAPES_SECTION, body + "\n")
        log(f"served defaults -> {SERVED_DEFAULTS}")
    return report


SHAPES_SECTION = "## What the reader gets, per collection shape"
