"""Which runtime serves the embedded generator: llama.cpp on the shipped Q4_K_M GGUF, or transformers
on the same weights dequantised to fp32 (round 1's server). Same prompts, same greedy decoding.

Sample: 12 questions per language (144) from the TRAIN articles of XQuAD's fixed split (seeded, so
the sample is the same every run; the test articles are never read), each asked over its gold
paragraph in the question's language (what a reader-language /answer puts first), with the
prompt the service builds (``samelang.retrieval.prompts.build_prompt``). Metric: the answer contains a gold
answer string (case-folded): a small base model's answers are short spans, so containment is
what "it answered" means here; plus how often both runtimes say exactly the same thing, seconds
per answer (median) and the process's resident-set growth while each loads and answers.

    python scripts/experiments/generator_runtime.py [--per-lang 12] [--max-tokens 32]

Run alone (two CPU-heavy jobs on 2 cores slow each other 3x).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from samelang.core.models.gemma_checkpoint import prepare_generator
from samelang.core.models.generation import LlamaCppGenerator, join_answer, until_stop
from samelang.core.resources import rss_mb
from samelang.corpora import load_xquad
from samelang.retrieval.prompts import build_prompt
from samelang.service.config import ServiceSettings


def sample(per_lang: int, seed: int = 17):
    data = load_xquad(split="train")
    para = {(p.group, p.lang): p.text for p in data.paragraphs}
    by_lang: dict[str, list] = {}
    for q in data.questions:
        by_lang.setdefault(q.lang, []).append(q)
    rng = random.Random(seed)
    out = []
    for lang in sorted(by_lang):
        for q in rng.sample(by_lang[lang], per_lang):
            out.append((q, build_prompt(q.text, [para[(q.group, q.lang)]])))
    return out


class Transformers:
    """Round 1's embedded generator: the GGUF dequantised to fp32 by transformers, greedy."""

    def __init__(self, gguf: Path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        self.model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()

    def generate(self, prompt: str, max_tokens: int) -> str:
        inputs = self.tok(prompt, return_tensors="pt")
        with self.torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id)  # fmt: skip
        text = self.tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        return join_answer(until_stop([text]))


def run(name, make, items, max_tokens):
    before = rss_mb()
    gen = make()
    answers, times = [], []
    for i, (_, prompt) in enumerate(items):
        t0 = time.perf_counter()
        answers.append(gen.generate(prompt, max_tokens))
        times.append(time.perf_counter() - t0)
        if (i + 1) % 24 == 0:
            print(f"  {name}: {i + 1}/{len(items)}", file=sys.stderr, flush=True)
    return answers, statistics.median(times), rss_mb() - before


def contains_gold(q, answer: str) -> bool:
    a = answer.casefold()
    return bool(a) and any(g.text.casefold() in a for g in q.answers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-lang", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    gguf = prepare_generator(ServiceSettings().home)
    items = sample(args.per_lang)
    results = {}
    # llama.cpp first: its RSS growth is measured before torch is imported
    results["llama.cpp, Q4_K_M GGUF (served)"] = run(
        "llama.cpp", lambda: LlamaCppGenerator(gguf), items, args.max_tokens
    )
    results["transformers, fp32 dequantised (round 1)"] = run("transformers", lambda: Transformers(gguf), items,
                                                              args.max_tokens)  # fmt: skip
    n = len(items)
    print(f"\n{n} train-article questions ({args.per_lang} per language), gold paragraph in the question's language, "
          f"max_tokens {args.max_tokens}, greedy\n")  # fmt: skip
    print("| runtime | contains gold | 95% interval | median s / answer | RSS growth MB |")
    print("|---|---:|---|---:|---:|")
    for name, (answers, med, mb) in results.items():
        hits = [contains_gold(q, a) for (q, _), a in zip(items, answers)]
        p = sum(hits) / n
        half = 1.96 * (p * (1 - p) / n) ** 0.5
        print(f"| {name} | {100 * p:.1f}% | [{100 * (p - half):.1f}, {100 * (p + half):.1f}] | {med:.2f} | {mb:,.0f} |")
    (a, *_), (b, *_) = results.values()
    same = sum(x == y for x, y in zip(a, b))
    ha = [contains_gold(q, x) for (q, _), x in zip(items, a)]
    hb = [contains_gold(q, y) for (q, _), y in zip(items, b)]
    only_a, only_b = sum(x and not y for x, y in zip(ha, hb)), sum(y and not x for x, y in zip(ha, hb))
    print(f"\nidentical answers: {same}/{n}; gold only with llama.cpp: {only_a}, only with transformers: {only_b}")
    langs = sorted({q.lang for q, _ in items})
    print("\n| lang | " + " | ".join(langs) + " |\n|---|" + "---:|" * len(langs))
    for name, (answers, *_) in results.items():
        per = [sum(contains_gold(q, x) for (q, _), x in zip(items, answers) if q.lang == lg) for lg in langs]
        print(f"| {name.split(',')[0]} | " + " | ".join(str(v) for v in per) + " |")


if __name__ == "__main__":
    main()
