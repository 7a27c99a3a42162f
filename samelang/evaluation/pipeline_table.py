"""The parallel-pool evaluation's rows and their report: which row is best on that one pool (reader-gold
nDCG@1, then graded nDCG@10, latency and simplicity), the Markdown table, and the section of
``docs/evaluation.md`` it replaces."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from samelang.core.model_folder import replace_section
from samelang.core.runtime.precision import cpu_summary

GRADED_TIE = 1.0  # graded nDCG@10 points within which tied rows count as equal (best_row)
STRATEGIES = ("documents", "groups")


@dataclass
class Row:
    retriever: str
    reranker: str  # "none", "cosine" or a cross-encoder name
    strategy: str
    served: bool = False
    results: dict = field(default_factory=dict)
    lexical: float = 0.0  # BM25's weight in the retriever's score (0: dense only)

    @property
    def name(self) -> str:
        rr = {"none": "no rerank", "cosine": f"{self.retriever} cosine"}.get(self.reranker, self.reranker)
        hybrid = f" + BM25 (w={self.lexical:g})" if self.lexical else ""
        return f"{self.retriever}{hybrid} -> {self.strategy} -> {rr}"

    @property
    def key(self) -> tuple[str, str, str, float]:
        return (self.retriever, self.reranker, self.strategy, self.lexical)


def _complexity(r: Row) -> tuple[int, int, int]:
    return ({"none": 0, "cosine": 1}.get(r.reranker, 2), int(r.lexical > 0), STRATEGIES.index(r.strategy))


def best_row(rows: list[Row]) -> Row:
    """The row to serve: best reader-gold nDCG@1 on the sample (every row has it on the same
    queries). Among rows tied on it (equal to 0.01 points), the mission's second half decides
    first: the gold's other language versions shown after it (graded nDCG@10; rows within
    :data:`GRADED_TIE` points of the best count as equal); then the lower latency, where latencies
    within 25% of each other count as equal (timing noise) and the simpler pipeline wins (no
    reranker before the cosine before a cross-encoder; dense before hybrid; plain documents before
    groups)."""
    top = max(round(r.results["sample"]["ndcg_at_1"]["mean"], 2) for r in rows)
    tied = [r for r in rows if round(r.results["sample"]["ndcg_at_1"]["mean"], 2) == top]
    graded = [r.results["sample"].get("graded_ndcg_at_10", {}).get("mean", 0.0) for r in tied]
    tied = [r for r, g in zip(tied, graded) if g >= max(graded) - GRADED_TIE]
    fastest = min(r.results["latency_ms_p50"] for r in tied)
    near = [r for r in tied if r.results["latency_ms_p50"] <= 1.25 * fastest]
    return min(near, key=lambda r: (_complexity(r), r.results["latency_ms_p50"]))


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(rows: list[Row], chosen: Row | None = None, http: dict | None = None) -> str:
    """The table: one line per row, sample metrics with 95% intervals, full-set nDCG@1 for rows
    that ran on every question, bilingual Max@R / Comp@10 where run, latency; then per language."""
    lines = [
        "| pipeline (retriever -> candidates -> reranker) | reader-gold nDCG@1 [95% CI] | nDCG@10 | MRR@10 "
        "| candidate recall@20 | graded nDCG@10 | Mono-Same nDCG@10 | nDCG@1, all questions | bilingual Max@R "
        "| bilingual Comp@10 | p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s, res = r.results["sample"], r.results
        full = res["metrics"]["ndcg_at_1"] if res["questions_per_lang"] > res["sample_per_lang"] else None
        bi = res.get("bilingual", {}).get("average") or {}
        mark = []
        if chosen is not None and r is chosen:
            mark.append("**best on this pool**")
        if r.served:
            mark.append("(served)")
        name = " ".join([r.name, *mark])
        ci = s["ndcg_at_1"]["ci95"]
        lines.append(
            f"| {name} | {s['ndcg_at_1']['mean']:.2f} [{ci[0]:.1f}, {ci[1]:.1f}] | {s['ndcg_at_10']['mean']:.2f} "
            f"| {s['mrr_at_10']['mean']:.2f} | {s['recall_at_20']['mean']:.2f} | {s['graded_ndcg_at_10']['mean']:.2f} "
            f"| {s['mono_same_ndcg_at_10']['mean']:.2f} | {_fmt(full)} | {_fmt(bi.get('max_r'))} "
            f"| {_fmt(bi.get('comp_at_10'))} | {res['latency_ms_p50']:.0f} |"
        )
    if http:
        lines += [
            "",
            f"Served defaults through HTTP (`POST /answer`, first passage, {http['queries']} sample queries): "
            f"reader-gold nDCG@1 {http['ndcg_at_1']:.2f} [{http['ci95'][0]:.1f}, {http['ci95'][1]:.1f}], "
            f"components {http['components']}.",
        ]
    langs = list(rows[0].results["per_lang"]["ndcg_at_1"])
    lines += ["", "Reader-gold nDCG@1 per query language (sample):", ""]
    lines.append("| pipeline | " + " | ".join(langs) + " |")
    lines.append("|---|" + "---|" * len(langs))
    for r in rows:
        per = r.results["per_lang"]["ndcg_at_1"]
        lines.append(f"| {r.name} | " + " | ".join(f"{per[x]:.1f}" for x in langs) + " |")
    return "\n".join(lines)


def cpu_flags() -> str:
    """The CPU and its speed-relevant SIMD features (:func:`~samelang.core.runtime.precision.cpu_summary`)."""
    return cpu_summary()


def write_doc_section(doc: Path, heading: str, table: str, how: str, chosen: Row, baseline: Row | None) -> None:
    """Replace (or append) the section of ``docs/evaluation.md`` that details the parallel pool."""
    s = chosen.results["sample"]["ndcg_at_1"]["mean"]
    b = baseline.results["sample"]["ndcg_at_1"]["mean"] if baseline else None
    body = (
        f"On this one shape (every paragraph in all 12 languages, labelled groups) the best row is `{chosen.name}` "
        f"(reader-gold nDCG@1 {s:.2f}"
        + (f" vs {b:.2f} for the base model's plain top-k" if b is not None else "")
        + "). What is served is chosen on every collection shape (the section above). Hybrid rows (`+ BM25 (w=...)`) "
        "use the weight `samelang eval fusion` tuned on train articles (`models/fusion.json`).\n\n"
        f"{table}\n\n{how}\n"
    )
    replace_section(doc, heading, body)
