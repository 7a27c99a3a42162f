"""The shipped Gemma 3 270M as a Qwen3-Reranker-style yes/no reranker: untrained, then after a short
LAMAR run on the CPU (stage 1 distilling the base bi-encoder's English cosine, then stage 2 with the
language-coherence loss, LoRA over Gemma), each scored through the served engine
(``CrossEncoderReranker``: the pair in Qwen3-Reranker's instruction, "yes" minus "no" at the last token).

Held-out set: questions of the dev articles (held out of every training run), each against its gold
paragraph and the other paragraphs of its article, in the question's language; top-1 accuracy (%) and
MRR. Speed: p50 of one call scoring 20 candidates (a question against 20 paragraphs), CPU flags printed.

    python scripts/experiments/gemma_reranker.py [--steps 40] [--steps2 N] [--questions 48] [--out runs/gemma-reranker]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.gemma_checkpoint import prepare_generator_hf
from samelang.core.runtime.precision import EngineOptions, cpu_summary
from samelang.core.settings import Settings
from samelang.corpora import dev_articles, load_xquad
from samelang.training.lamar import RerankerArgs, train_reranker

LANGS = ("en", "de", "zh", "ar", "ru", "hi")


def held_out(n: int) -> list[tuple[str, list[str], int]]:
    """(question, candidate paragraphs, gold index): dev-article questions, languages in turn."""
    dev, out = set(dev_articles(3)), []
    for i, lang in enumerate(LANGS):
        data = load_xquad([lang], split="train")
        paras = {p.group: p.text for p in data.paragraphs}
        qs = [q for q in data.questions if q.article in dev][i :: len(LANGS)]
        for q in qs[: max(1, n // len(LANGS))]:
            article = q.group.split("-")[1]
            cands = [g for g in paras if g.split("-")[1] == article]
            out.append((q.text, [paras[g] for g in cands], cands.index(q.group)))
    return out


def judge(path: Path, home: Path, questions) -> dict:
    rr = CrossEncoderReranker(path, home=home, max_length=256, options=EngineOptions(precision="fp32"))
    top1, rr_ = [], []
    for query, cands, gold in questions:
        s = rr.score(query, cands)
        rank = int((s > s[gold]).sum())
        top1.append(rank == 0)
        rr_.append(1 / (rank + 1))
    pool = [p for _, c, _ in questions for p in c][:20]
    ms = []
    for query, _, _ in questions[:12]:
        t0 = time.perf_counter()
        rr.score(query, pool)
        ms.append((time.perf_counter() - t0) * 1000)
    n_cands = float(np.mean([len(c) for _, c, _ in questions]))
    return {"top1": 100 * float(np.mean(top1)), "mrr": 100 * float(np.mean(rr_)), "p50_ms_20": float(np.median(ms)),
            "backend": rr.engine.backend_name, "candidates": n_cands}  # fmt: skip


def mean_candidates(questions) -> float:
    """The mean number of candidates per question (a random order ranks the gold first 1 / n of the time)."""
    return float(np.mean([len(c) for _, c, _ in questions]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps of LAMAR stage 1 (and of stage 2 unless --steps2)")
    ap.add_argument("--steps2", type=int, default=None, help="steps of LAMAR stage 2 (default: --steps)")
    ap.add_argument("--questions", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("runs/gemma-reranker"))
    a = ap.parse_args()
    home = Settings().home
    base = prepare_generator_hf(home)
    questions = held_out(a.questions)
    t0 = time.perf_counter()
    steps2 = a.steps if a.steps2 is None else a.steps2
    common = dict(langs=",".join(LANGS), batch_size=a.batch_size, max_length=192, dev_questions=0, home=home)
    s1 = a.out / "stage1"
    train_reranker(RerankerArgs(out=s1, stage=1, n_sampled=1, init=str(base), lr=2e-4, max_steps=a.steps, **common))
    s2 = a.out / "stage2"
    train_reranker(RerankerArgs(out=s2, stage=2, init=str(s1), lr=1e-4, teacher="unused", max_steps=steps2, **common))
    minutes = (time.perf_counter() - t0) / 60
    rows = {"Gemma 3 270M untrained": judge(base, home, questions), "after LAMAR (LoRA)": judge(s2, home, questions)}
    lines = [f"Held-out: {len(questions)} dev-article questions ({', '.join(LANGS)}), each against its article's "
             f"paragraphs in its language (chance: top-1 {100 / mean_candidates(questions):.1f}); training {a.steps} + "
             f"{steps2} steps x {a.batch_size} in {minutes:.0f} min; "
             f"{cpu_summary()}", "", "| reranker | top-1 % | MRR | p50 ms (20 candidates) | backend |",
             "|---|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {k} | {v['top1']:.1f} | {v['mrr']:.1f} | {v['p50_ms_20']:.0f} | {v['backend']} |" for k, v in rows.items()
    ]
    print("\n".join(lines))
    a.out.mkdir(parents=True, exist_ok=True)
    record = {"rows": rows, "minutes": minutes, "steps": a.steps, "steps2": steps2}
    (a.out / "results.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
