"""``samelang eval adapt``: the judge's ``adapt`` row, on the out-of-domain shape.

``samelang adapt`` runs over the shape's passages alone (TyDi QA GoldP, held out of every training run; its
questions never seen, no labels), with its guard on the XQuAD dev shapes; then the shape's questions are asked
of the adapted retriever, alone and under the served reranker, beside the base model's dense row and the served
default. It trains, so it lives with the trainers, above the judge. Nothing is chosen here: the adaptation's
own guard decides whether a user's index would serve the adapted model, and this table says what that buys.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

from pydantic import Field

from samelang.core.catalogue import served_defaults
from samelang.core.paths import EVALUATION_DOC
from samelang.core.runtime.precision import cpu_summary
from samelang.corpora.store import CorporaOption
from samelang.evaluation.answers import served_row
from samelang.evaluation.collection_shapes import ShapeJudge
from samelang.evaluation.common import EvalOptions, Report
from samelang.evaluation.ood import OutOfDomain, ood_table
from samelang.evaluation.serving_rule import ShapeRow
from samelang.primitives.atomic import atomic_write_text
from samelang.training.adapt import Adaptation, AdaptOptions

SECTION = "## Adapting to a collection (`samelang eval adapt`)"


class AdaptEvalOptions(EvalOptions, CorporaOption):
    """Options of ``samelang eval adapt``."""

    out: Path = Field(Path("runs/eval-adapt"), description="Folder for the collection's copy, the model, results.")
    minutes: float = Field(30.0, gt=0, description="The adaptation's training time budget (`samelang adapt`).")
    max_steps: int = Field(300, ge=1, description="The adaptation's training steps at most.")
    card: bool = Field(False, description="Write the table to docs/evaluation.md (its own section).")


def rows_for(adapted: Path) -> list[ShapeRow]:
    """Base dense, the served retriever and the served default, then the adapted retriever alone and under the
    served reranker."""
    served = served_row()
    rows = [ShapeRow("base"), served.unreranked, served, replace(served.unreranked, retriever=str(adapted))]
    if served.reranked:
        rows.append(replace(served, retriever=str(adapted)))
    return list(dict.fromkeys(rows))


def run_adapt_eval(opts: AdaptEvalOptions, log=print) -> Report:
    t0 = time.perf_counter()
    judge = ShapeJudge(opts.home, split="test", log=log, memo=False)
    ood = OutOfDomain(judge, opts.store())
    s = served_defaults()
    collection = opts.out / "collection"  # a copy: the adaptation writes its generation there, not in the cache
    if not (collection / "CURRENT").exists():
        shutil.copytree(ood.index(judge.encoder(s.retriever)), collection, dirs_exist_ok=True)
    log(f"adapting to {len(ood.documents)} {ood.source} passages (its {len(ood.queries)} questions never seen)")
    adapt = AdaptOptions(index=collection, out=opts.out / "adapted", minutes=opts.minutes, max_steps=opts.max_steps,
                         home=opts.home)  # fmt: skip
    report = Adaptation(adapt, log=log).run()
    adapted = Path(report["adapted"])
    results = {}
    for row in rows_for(adapted):
        results[row] = ood.evaluate(row)
        log(f"{row.name}: ood found@1 {results[row]['found_at_1']['mean']:.1f}")
    served = served_row()
    table = ood_table(results, served, ShapeRow("base"), ood.source).replace(str(adapted), "adapted")
    text = "\n".join([SECTION, "", table, "", guard_lines(report), "",
                      f"Command: `samelang eval adapt --minutes {opts.minutes:g} --max-steps {opts.max_steps}` "
                      f"({(time.perf_counter() - t0) / 60:.0f} min on {cpu_summary()}; the adaptation's own times: "
                      + ", ".join(f"{k} {v:g} s" for k, v in report["seconds"].items()) + ")."])  # fmt: skip
    out = Report(text, {"adapt": report, "rows": {r.name: v for r, v in results.items()}})
    out.write(opts.out)
    if opts.card:
        write_section(EVALUATION_DOC, text)
    return out


def guard_lines(report: dict) -> str:
    """What the adaptation measured and decided: its held-out slice and the XQuAD dev shapes, before and after."""
    dev, guard, verdict = report["dev"], report["guard"], report["verdict"]
    lines = [f"`samelang adapt` on the passages alone: {report['documents']:,} documents, "
             f"{report['translation_links']:,} translation links, {report['training_groups']:,} inverse-cloze "
             f"queries; held-out cross-language found@1 {dev['before'].get('found_at_1', 0):.1f} -> "
             f"{dev['after'].get('found_at_1', 0):.1f} ({dev['after'].get('queries', 0)} queries)."]  # fmt: skip
    if guard:
        shapes = list(guard["before"])
        lines += ["", "| XQuAD dev shapes | " + " | ".join(shapes) + " |", "|---" * (len(shapes) + 1) + "|"]
        lines += [f"| {n} | " + " | ".join(f"{guard[n][x]:.1f}" for x in shapes) + " |" for n in ("before", "after")]
    lines += ["", f"The guard's decision: {'serve' if verdict['serve'] else 'do not serve'} ({verdict['why']})."]
    return "\n".join(lines)


def write_section(doc: Path, text: str) -> None:
    """Replace the section in ``doc`` (up to the next ``## `` heading), or append it."""
    body = doc.read_text()
    pattern = re.compile(re.escape(SECTION) + r".*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(lambda _: text.rstrip() + "\n\n", body, count=1) if pattern.search(body) else (
        body.rstrip() + "\n\n" + text.rstrip() + "\n")  # fmt: skip
    atomic_write_text(doc, new)
