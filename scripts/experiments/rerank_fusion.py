"""Can a cross-encoder's score, fused with the retriever's, reach issue 31's shape targets? A probe
over the shape judge's own reranked questions (:class:`samelang.evaluation.collection_shapes.ShapeJudge`,
24 fixed question positions x 12 languages per split), the served retriever's first 20 candidate
groups (``Pipeline.search`` with ``rerank=False``: groups inferred, the reader's version as each
group's representative, exactly what a served reranker is given), and the cross-encoder's scores
from the judge's score cache (misses are scored by the model: ~20 min per cross-encoder per split
on 2 cores when the cache is cold).

A candidate's score is ``z(ce - delta * [lang == reader]) + beta * z(retriever)``, z over the 20
candidates of one question: ``beta`` fuses the retriever's score back in (``beta = inf``: the
retriever alone; ``beta = 0``: the cross-encoder alone, as the judge's reranked rows), ``delta``
takes back the reader-language bonus that LAMAR's language-coherence loss teaches (it is what
drops answers that exist only in another language). The grid is read on the dev articles'
questions (every trainer holds them out); the test articles print only the retriever, the cross-encoder
alone and the dev choice (:func:`choose`; ``--test``).

Run: ``python scripts/experiments/rerank_fusion.py --reranker lamar-e5-small-v2 [--test]``
(seconds once the caches exist). This is a probe, not a served path: nothing here is served.
"""

from __future__ import annotations

import argparse
import itertools
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np

from samelang.core.catalogue import REPO_MODELS
from samelang.core.model_folder import replace_section
from samelang.core.settings import settings
from samelang.corpora import dev_articles
from samelang.evaluation.collection_shapes import ShapeJudge, score_lists
from samelang.evaluation.judge import DEV_ARTICLES
from samelang.evaluation.serving_rule import PRIMARY, ShapeRow
from samelang.retrieval.options import SearchOptions
from samelang.retrieval.pipeline import fuse_scores

COLUMNS = [("parallel", "ndcg_at_1"), ("partial", "found_at_1"), ("partial", "reader_at_1"),
           ("partial", "cross_at_1"), ("one", "found_at_1"), ("mono", "ndcg_at_10")]  # fmt: skip
SECTION = "## Fusing a reranker's score with the retriever's (probe)"
BETAS, DELTAS = (0.0, 1.0, 2.0, 4.0, 8.0, np.inf), (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)


def candidates(judge: ShapeJudge, retriever: ShapeRow, reranker: str) -> dict[str, list[dict]]:
    """Per shape, per reranked question: the retriever's first 20 groups, their scores and languages,
    and the cross-encoder's scores of each group's representative."""
    ce = judge.cross_encoder(reranker)
    which = judge.row_questions(replace(retriever, reranker=reranker))
    out = {}
    for shape in judge.shapes:
        pipe = judge.pipeline(retriever, shape)
        rows = []
        for i in which:
            q = judge.queries[i]
            langs = (q.lang,) if shape == "mono" else None
            hits = pipe.search(q.query, SearchOptions(k=20, rerank=False, langs=langs)).candidates[:20]
            rows.append({"ids": [h.doc.id for h in hits], "retriever": np.array([h.score for h in hits]),
                         "reader": np.array([h.doc.lang == q.lang for h in hits]),
                         "ce": ce.score(q.query, [h.doc.text for h in hits])})  # fmt: skip
        ce.save()
        pipe.index.close()
        out[shape] = rows
    out["_queries"] = [judge.queries[i] for i in which]
    return out


DOC_INTRO = (
    "Could the served retriever's score, fused back into a cross-encoder's, make reranking worth its cost on the "
    "shapes? The candidates and scores are the shape judge's (its reranked questions, the served retriever's first "
    "20 groups); `beta` weighs the retriever's z-score, `delta` takes back the reader-language bonus that LAMAR's "
    "coherence loss teaches. The grid is read on the dev articles; the test articles print the dev choice only. "
    "Each sample is 24 distinct questions asked in 12 languages, so intervals are wide (about +-5 points on "
    "found@1) and a 1-point difference means little.\n\n"
)


def metrics(judge: ShapeJudge, cands: dict, beta: float, delta: float) -> dict[tuple[str, str], float]:
    out = {}
    for shape in judge.shapes:
        lists = []
        for c in cands[shape]:
            s = c["retriever"] if np.isinf(beta) else fuse_scores(c["ce"] - delta * c["reader"], c["retriever"], beta)
            lists.append([c["ids"][j] for j in np.argsort(-s, kind="stable")[:10]])
        per = score_lists(shape, lists, cands["_queries"], judge.present(shape))
        out |= {(shape, m): 100 * float(np.nanmean(v)) for m, v in per.items()}
    return out


def rows(judge: ShapeJudge, cands: dict, grid) -> dict[tuple[float, float], dict]:
    return {(beta, delta): metrics(judge, cands, beta, delta) for beta, delta in grid}


def mean_primary(r: dict) -> float:
    return float(np.mean([r[(s, PRIMARY[s])] for s in PRIMARY if (s, PRIMARY[s]) in r]))


def choose(results: dict) -> tuple[float, float]:
    """The dev choice: the best mean of the primaries among the variants that keep the reader's own
    version first at least as often as the retriever alone does (partial reader@1)."""
    floor = results[(np.inf, 0.0)][("partial", "reader_at_1")]
    ok = [k for k, r in results.items() if r[("partial", "reader_at_1")] >= floor]
    return max(ok, key=lambda k: mean_primary(results[k]))


def table(results: dict, chosen=None) -> list[str]:
    cols = [c for c in COLUMNS if c in next(iter(results.values()))]
    head = "| beta | delta | mean of primaries | " + " | ".join(f"{s} {m}" for s, m in cols) + " |"
    lines = [head, "|" + "---|" * (3 + len(cols))]
    for (beta, delta), r in results.items():
        name = "retriever alone" if np.isinf(beta) else f"{beta:g}"
        mark = "**" if (beta, delta) == chosen else ""
        cells = [f"{mean_primary(r):.1f}"] + [f"{r[c]:.1f}" for c in cols]
        lines.append(f"| {mark}{name}{mark} | {delta:g} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reranker", default="lamar-e5-small-v2")
    ap.add_argument("--retriever", default="e5-small-fused-v3")
    ap.add_argument("--lexical", type=float, default=0.04)
    ap.add_argument("--test", action="store_true", help="also the named variants on the test articles")
    ap.add_argument("--per-lang", type=int, default=24, help="question positions per language (the judge's first)")
    ap.add_argument("--shapes", default="parallel,partial,one,mono")
    ap.add_argument("--write", action="store_true", help=f"write the tables into docs/evaluation.md's {SECTION!r}")
    ap.add_argument("--compare", default="",
                    help="NAME=MODEL,...: instead of the grid, each reranker alone and at its dev choice, side by side "
                         "(an ablation)")  # fmt: skip
    ap.add_argument("--card", default=None, help="with --compare: write the table into this model folder's README")
    args = ap.parse_args()
    home = settings().home
    if args.compare:
        return compare(args, home)
    retriever = ShapeRow(args.retriever, args.lexical)
    grid = [(b, d) for b, d in itertools.product(BETAS, DELTAS) if not (np.isinf(b) and d)]
    shapes = tuple(args.shapes.split(","))
    dev = ShapeJudge(home, split="train", articles=dev_articles(DEV_ARTICLES), log=lambda *_: None,
                     rerank_per_lang=args.per_lang, shapes=shapes)  # fmt: skip
    cands = candidates(dev, retriever, args.reranker)
    results = rows(dev, cands, grid)
    chosen = choose(results)
    n = len(cands["_queries"])
    out = []
    out.append(
        f"Dev articles, {n} questions ({n // 12} positions x 12 languages), {retriever.name} -> {args.reranker}; "
        f"chosen (bold): the best mean keeping partial reader@1 at least the retriever's own:\n"
    )
    out.append("\n".join(table(results, chosen)))
    if args.test:
        test = ShapeJudge(home, split="test", log=lambda *_: None, rerank_per_lang=args.per_lang, shapes=shapes)
        cands = candidates(test, retriever, args.reranker)
        named = [(np.inf, 0.0), (0.0, 0.0), chosen]
        n = len(cands["_queries"])
        out.append(f"\nTest articles, {n} questions: the retriever, the cross-encoder alone, the dev choice:\n")
        out.append("\n".join(table(rows(test, cands, named), chosen)))
    command = "python scripts/experiments/rerank_fusion.py" + " --test" * args.test + f" --reranker {args.reranker}"
    out.append(f"\nCommand: `{command}`; score: `z(ce - delta * [lang == reader]) + beta * z(retriever)`.")
    print("\n".join(out))
    if args.write:
        replace_section(REPO_MODELS.parent / "docs" / "evaluation.md", SECTION, DOC_INTRO + "\n".join(out) + "\n")


ABLATION_SECTION = "## Ablation (dev articles)"


def compare(args, home) -> None:
    """``--compare``: the retriever alone, then each named reranker alone (``beta = 0``) and at the
    fusion its own grid chooses on the same dev questions, one table (the ablation of a recipe's
    stages: each model's training command is in its card)."""
    shapes = tuple(args.shapes.split(","))
    retriever = ShapeRow(args.retriever, args.lexical)
    dev = ShapeJudge(home, split="train", articles=dev_articles(DEV_ARTICLES), log=lambda *_: None,
                     rerank_per_lang=args.per_lang, shapes=shapes)  # fmt: skip
    grid = [(b, d) for b, d in itertools.product(BETAS, DELTAS) if not (np.isinf(b) and d)]
    measured, n = [], 0
    for item in args.compare.split(","):
        name, _, model = item.partition("=")
        cands = candidates(dev, retriever, model or name)
        n = len(cands["_queries"])
        results = rows(dev, cands, grid)
        if not measured:
            measured.append((f"{retriever.name} alone", "", results[(np.inf, 0.0)]))
        beta, delta = choose(results)
        measured.append((f"{name} alone", "0 / 0", results[(0.0, 0.0)]))
        measured.append((f"{name} fused", f"{beta:g} / {delta:g}", results[(beta, delta)]))
    cols = [c for c in COLUMNS if c in measured[0][2]]
    lines = ["| row | beta / delta | mean of primaries | " + " | ".join(f"{s} {m}" for s, m in cols) + " |",
             "|" + "---|" * (3 + len(cols))]  # fmt: skip
    for label, knobs, r in measured:
        lines.append(f"| {label} | {knobs} | {mean_primary(r):.1f} | " + " | ".join(f"{r[c]:.1f}" for c in cols) + " |")
    out = (f"Dev articles, {n} questions ({n // 12} positions x 12 languages); each reranker over the first 20 "
           f"candidate groups of {retriever.name}, alone and fused with the retriever at the knobs its own grid "
           "chooses on these same questions (so each fused row is its best case; score "
           "`z(ce - delta * [lang == reader]) + beta * z(retriever)`).\n\n" + "\n".join(lines)
           + f"\n\nCommand: `python scripts/experiments/rerank_fusion.py --per-lang {args.per_lang} --compare "
           f"{shlex.quote(args.compare)}`")  # fmt: skip
    print(out)
    if args.card:
        replace_section(Path(args.card) / "README.md", ABLATION_SECTION, out + "\n")


if __name__ == "__main__":
    main()
