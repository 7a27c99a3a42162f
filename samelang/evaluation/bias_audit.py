"""``samelang eval bias``: the label-free language-bias audit of ``/diagnose``, run by its own code
(:func:`samelang.retrieval.diagnosis.diagnose`) on the shape judge's test-article collections
(:mod:`.collection_shapes`): the partial-translation collection users have and the 12-language parallel pool, for the
served default (``models/serving.json``) beside the base model and the base model + BM25 that wins the parallel pool.

Two query sets per index: **sampled, no labels** (what a user without questions runs: :data:`SAMPLE` queries from the
index's own documents by :func:`~samelang.retrieval.diagnosis.sample_queries`, seed 0, the same number per language, the
source left out of its own list) and **labelled** (the judge's :data:`~.collection_shapes.RERANK_PER_LANG` fixed XQuAD
test questions per language; relevant = the versions of the gold paragraph the index holds, for Max@R). Per row: the
mean over query languages of ``JSD(P_q || P_D)`` (bits) and the share of queries whose top 10 holds another language,
with 95% percentile-bootstrap intervals (1,000 resamples within each query language, seed 0); Comp@10 and mean Max@R
over the labelled questions."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import Field

from samelang.core.catalogue import REPO_MODELS
from samelang.core.metrics.language_bias import language_bias
from samelang.core.model_folder import replace_section
from samelang.core.runtime.precision import cpu_summary
from samelang.evaluation.cached_models import bootstrap_ci
from samelang.evaluation.collection_shapes import RERANK_PER_LANG, ShapeJudge
from samelang.evaluation.common import EvalOptions
from samelang.evaluation.serving_rule import ShapeRow
from samelang.retrieval.diagnosis import BIAS_K, diagnose, live_rows, sample_queries
from samelang.retrieval.options import SearchOptions

SAMPLE = 240  # 20 per language on a 12-language index
SHAPES = ("partial", "parallel")
SECTION = "## Language bias without labels (`samelang eval bias`)"


class BiasEvalOptions(EvalOptions):
    """Options of ``samelang eval bias``."""

    write: bool = Field(False, description="Write the table to docs/evaluation.md's section.")
    out: Path = Field(Path("runs/eval-bias"), description="Folder for results.json and results.md.")


def served_row() -> ShapeRow:
    """Today's default, as ``samelang serve`` loads it (``models/serving.json``)."""
    s = json.loads((REPO_MODELS / "serving.json").read_text())["served"]
    return ShapeRow(s["retriever"], s.get("lexical_weight") or 0.0, s["candidates"], s.get("reranker", "none"))


def rows() -> list[tuple[str, ShapeRow]]:
    return [
        ("base (not fine-tuned)", ShapeRow("base")),
        ("base + BM25 0.08 (wins the parallel pool)", ShapeRow("base", 0.08)),
        ("served default", served_row()),
    ]


def bias_interval(qlangs: list[str], tops: list[list[str]], doc_langs: list[str], seed: int = 0, n: int = 1000):
    """95% bootstrap intervals (queries resampled within each query language, 1,000 times):
    the mean JSD as its value +- 1.96 bootstrap standard errors (a pooled divergence is biased upward
    by resampling, so its percentile interval can miss the value itself), the share seeing another
    language as its percentile interval."""
    rng = np.random.default_rng(seed)
    by_lang = {x: np.flatnonzero(np.array(qlangs) == x) for x in sorted(set(qlangs))}
    jsd, other = [], []
    for _ in range(n):
        pick = np.concatenate([rng.choice(ix, size=len(ix)) for ix in by_lang.values()])
        b = language_bias([qlangs[i] for i in pick], [tops[i] for i in pick], doc_langs, BIAS_K)
        jsd.append(b.mean_jsd)
        other.append(b.sees_other_all)
    value = language_bias(qlangs, tops, doc_langs, BIAS_K).mean_jsd
    se = float(np.std(jsd))
    return (max(0.0, value - 1.96 * se), value + 1.96 * se), tuple(np.percentile(other, [2.5, 97.5]))


def language_blind(qlangs: list[str], tops: list[list[str]], doc_langs: list[str], seed: int = 0, n: int = 200):
    """The mean JSD a ranking that ignores language would show on the same queries: each query's
    top-k drawn uniformly from the index (as many results as it had), averaged over ``n`` draws.
    A finite sample never matches the index exactly, so this floor is above 0."""
    rng = np.random.default_rng(seed)
    pool = np.array(doc_langs, dtype=object)
    draws = [language_bias(qlangs, [list(rng.choice(pool, size=len(t), replace=False)) for t in tops], doc_langs,
                           BIAS_K).mean_jsd for _ in range(n)]  # fmt: skip
    return float(np.mean(draws))


def audit_row(judge: ShapeJudge, row: ShapeRow, shape: str) -> dict:
    """The audit of one row on one shape: sampled queries, then the labelled ones."""
    pipe = judge.pipeline(row, shape)
    try:
        live = live_rows(pipe)
        ids = {d.id for d in pipe.index.docs.get_rows([int(r) for r in live])}
        doc_langs = [x or "und" for x in pipe.doc_langs[live]]
        sampled, sources = sample_queries(pipe, SAMPLE, seed=0)
        s = diagnose(pipe, sampled, None, SearchOptions(), "sample", bias_k=BIAS_K, sources=sources)
        asked = [judge.queries[i] for i in np.flatnonzero(judge.reranked_questions)]
        labelled = [replace(q, relevant=tuple(x for x in q.relevant if x in ids)) for q in asked]
        lab = diagnose(pipe, labelled, None, SearchOptions(), "queries", bias_k=BIAS_K)
    finally:
        pipe.index.close()
    out = {"index_langs": s["bias"]["index_langs"], "pool": s["pool_size"]}
    for name, d in (("sampled", s), ("labelled", lab)):
        ql, tops = [q["lang"] or "und" for q in d["queries"]], [q["top_langs"] for q in d["queries"]]
        jsd_ci, other_ci = bias_interval(ql, tops, doc_langs)
        out[name] = {"queries": len(ql), "mean_jsd": d["bias"]["mean_jsd"], "jsd_ci": jsd_ci,
                     "language_blind_jsd": language_blind(ql, tops, doc_langs),
                     "sees_other": d["bias"]["sees_other_all"], "sees_other_ci": other_ci, "jsd": d["bias"]["jsd"],
                     "result_langs": d["bias"]["result_langs"]}  # fmt: skip
    comp = np.array([q["comp_at_10"] for q in lab["queries"] if q["comp_at_10"] is not None], dtype=float)
    agg = lab["aggregate"]
    out["labelled"].update(comp_at_10=agg["comp_at_10"], comp_ci=bootstrap_ci(100 * comp),
                           mean_max_r=agg["mean_max_r"], censored=agg["censored"])  # fmt: skip
    return out


def _ci(value: float, ci, digits: int) -> str:
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def table(results: dict) -> str:
    """One line per shape and row: the sampled queries' bias, the labelled questions' bias and Max@R."""
    lines = ["| shape | row | sampled: mean JSD (language-blind) | sampled: sees another language % | "
             "labelled: mean JSD (language-blind) | labelled: sees another % | Comp@10 % | mean Max@R |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for shape, per in results.items():
        for name, r in per.items():
            cells = []
            for part in (r["sampled"], r["labelled"]):
                cells += [f"{_ci(part['mean_jsd'], part['jsd_ci'], 3)} ({part['language_blind_jsd']:.3f})",
                          _ci(part["sees_other"], part["sees_other_ci"], 1)]  # fmt: skip
            lab = r["labelled"]
            cells += [_ci(lab["comp_at_10"], lab["comp_ci"], 1), f"{lab['mean_max_r']:.1f}"]
            lines.append(f"| {shape} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_language(results: dict, shape: str, name: str) -> str:
    """Per query language, for one row on one shape (sampled queries): JSD and the top-10's English share."""
    r = results[shape][name]["sampled"]
    langs = sorted(r["jsd"])
    head = "| query language | " + " | ".join(langs) + " |\n|---|" + "---|" * len(langs)
    jsd = "| JSD (bits) | " + " | ".join(f"{r['jsd'][x]:.3f}" for x in langs) + " |"
    en = "| English share of the top 10 % | " + " | ".join(f"{r['result_langs'][x].get('en', 0):.0f}" for x in langs)
    return "\n".join([head, jsd, en + " |"])


def run_bias_audit(options: BiasEvalOptions, doc: Path | None = None, log=print) -> str:
    """Every row on every shape; prints the table, keeps results.json and results.md, and with
    ``--write`` replaces docs/evaluation.md's section."""
    t0 = time.perf_counter()
    judge = ShapeJudge(options.home, split="test", shapes=SHAPES, log=log)
    results: dict = {}
    for shape in SHAPES:
        for name, row in rows():
            log(f"bias audit: {shape}: {name} ({row.name}) ...")
            results.setdefault(shape, {})[name] = audit_row(judge, row, shape)
    minutes = (time.perf_counter() - t0) / 60
    served = rows()[-1][1].name
    index = results["partial"]["served default"]["index_langs"]
    body = (
        f"Command: `samelang eval bias --write` ({minutes:.0f} min on {cpu_summary()}). The audit of `/diagnose` "
        "(its own code) on the test-article shapes: the partial-translation collection "
        f"({results['partial']['served default']['pool']} documents; English {index.get('en', 0):.0f}%, each other "
        f"language about {np.mean([v for k, v in index.items() if k != 'en']):.0f}%) and the 12-language parallel "
        f"pool, for today's served default (`{served}`) beside the rows it replaced. Sampled: {SAMPLE} queries "
        "drawn from each index's own documents (seed 0, 20 per language, one sentence each, the source left out of "
        f"its own list), no labels. Labelled: the shape judge's {12 * RERANK_PER_LANG} fixed XQuAD test questions "
        f"({RERANK_PER_LANG} per language), "
        "relevant = the gold paragraph's versions the index holds. JSD: Jensen-Shannon divergence in bits of the top "
        "10's languages from the index's, per query language, then averaged over the 12 (formulas: "
        "`samelang/core/metrics/language_bias.py`); 95% bootstrap intervals over queries in brackets; in "
        "parentheses, the JSD of a language-blind ranking on the same queries (each top 10 drawn at random from "
        "the index), the floor a finite sample sits on. On the parallel pool every hit is shown in the reader's "
        "language with its other versions attached (group-aware candidates), so every top 10 holds one language "
        "and the JSD is that index's maximum for every row; there the 12 versions of an answer cannot all be in "
        "a top 10, so Comp@10 is 0 by construction and Max@R (12 at best) tells the rows apart.\n\n"
        f"{table(results)}\n\nPer query language, the served default on the partial-translation collection "
        f"(sampled queries):\n\n{per_language(results, 'partial', 'served default')}\n\n"
        "The same for the base model + BM25:\n\n"
        f"{per_language(results, 'partial', 'base + BM25 0.08 (wins the parallel pool)')}\n"
    )
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    (options.out / "results.md").write_text(body)
    if options.write and doc is not None:
        replace_section(doc, SECTION, body)
    return body
