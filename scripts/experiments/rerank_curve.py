"""The reranker's speed levers against its quality (issue 43): candidates reranked (``k``) x precision,
on the dev articles' questions (every trainer holds them out) over the served retriever, with the CPU
it ran on.

Quality: the shape judge's dev questions (:class:`samelang.evaluation.collection_shapes.ShapeJudge`,
all 58 per language), partial translations and one language each, the served retriever's candidate
groups reranked by the cross-encoder's first ``k`` (scores from the judge's cache, misses scored at
the precision ``samelang serve`` picks). Speed: p50 ms of ``Pipeline.search`` with the real models
(nothing looked up), one search at a time over the partial-translation index, 2 questions per
language, at each precision the CPU supports, per ``k``. Why not layers: the 12-layer model's p50
already fits the serving rule's ceiling at int8 (the table shows it), and a reranker with fewer
layers must be trained (``samelang train reranker --layers N``) before its quality means anything.

Run: ``python scripts/experiments/rerank_curve.py --reranker lamar-e5-small-v3`` (about 10 min on 2
cores once the judge's score cache holds the model's dev scores). This is a probe, not a served path.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from samelang.core.catalogue import resolve_model, served_defaults
from samelang.core.model_folder import replace_section
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.runtime.precision import EngineOptions, cpu_flags, cpu_summary
from samelang.core.settings import settings
from samelang.corpora import dev_articles
from samelang.evaluation.cached_models import search_p50_ms
from samelang.evaluation.collection_shapes import ShapeJudge
from samelang.evaluation.judge import DEV_ARTICLES
from samelang.evaluation.serving_rule import ShapeRow

KS = (5, 10, 20)
SECTION = "## Speed against quality (dev articles)"


def precisions() -> list[str]:
    """fp32 and int8 everywhere; bf16 where the CPU computes it natively."""
    flags = cpu_flags()
    return ["fp32", "int8"] + (["bf16"] if {"avx512_bf16", "amx_bf16"} & flags else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reranker", required=True)
    ap.add_argument("--retriever", default="e5-small-fused-v3")
    ap.add_argument("--lexical", type=float, default=0.04)
    ap.add_argument(
        "--fusion",
        type=float,
        default=None,
        help="the retriever's z-score weight beside the reranker's (default: the served rerank_fusion)",
    )
    ap.add_argument("--card", action="store_true", help="also write the table into the reranker's README")
    args = ap.parse_args()
    home = settings().home
    fusion = served_defaults().rerank_fusion if args.fusion is None else args.fusion
    judge = ShapeJudge(home, split="train", shapes=("partial", "one"), articles=dev_articles(DEV_ARTICLES),
                       log=lambda *_: None)  # fmt: skip
    retriever = ShapeRow(args.retriever, args.lexical)
    rows = {"retriever alone": retriever} | {
        f"k={k}": replace(retriever, reranker=args.reranker, rerank_k=k, fusion=fusion) for k in KS
    }
    quality = {name: judge.evaluate(row) for name, row in rows.items()}  # each row's p50 too (judge.latency)
    path = resolve_model(args.reranker, home)
    speed = {}
    for precision in precisions():
        model = CrossEncoderReranker(path, home=home, options=EngineOptions(precision=precision))
        for k in KS:
            pipe = judge.pipeline(replace(retriever, reranker=args.reranker, rerank_k=k, fusion=fusion), "partial")
            real = pipe.replace(encoder=pipe.encoder._encoder, reranker=model)
            which = np.flatnonzero(judge.reranked_questions)
            firsts = [i for x in sorted(set(judge.qlang)) for i in which[judge.qlang[which] == x][:2]]
            speed[(precision, k)] = search_p50_ms(real, [judge.queries[i].query for i in firsts], k=10)
            pipe.index.close()
    head = ["| row | partial found@1 | partial reader@1 | one found@1 | " + " | ".join(
        f"p50 ms {p}" for p in precisions()) + " |", "|---|---|---|---|" + "---|" * len(precisions())]  # fmt: skip
    lines = list(head)
    for name, res in quality.items():
        k = rows[name].rerank_k if rows[name].reranked else None
        cells = [f"{res['partial']['found_at_1']['mean']:.1f}", f"{res['partial']['reader_at_1']['mean']:.1f}",
                 f"{res['one']['found_at_1']['mean']:.1f}"]  # fmt: skip
        cells += [f"{speed[(p, k)]:.0f}" if k else f"{judge.latency[retriever]:.0f}" for p in precisions()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    n = int(judge.reranked_questions.sum())
    command = f"python scripts/experiments/rerank_curve.py --reranker {args.reranker} --fusion {fusion:g}"
    out = (f"{args.reranker} over {retriever.name}, fused w={fusion:g}: dev articles, {n} questions; p50 of "
           f"Pipeline.search (one search at a time, real models) on {cpu_summary()}; quality at the precision "
           f"`samelang serve` picks ({judge.cross_encoder(args.reranker).model.precision}; the other columns are speed "
           "only).\n\n" + "\n".join(lines)
           + f"\n\nCommand: `{command}`")  # fmt: skip
    print(out)
    if args.card:
        replace_section(path / "README.md", SECTION, out + "\n")


if __name__ == "__main__":
    main()
