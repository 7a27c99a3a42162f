"""Training-free ceiling probe: can sentence max-sim and cross-version evidence lift the
hybrid retriever's reader-gold nDCG@1 towards 97 without a new model?

Run: ``python scripts/experiments/sentence_maxsim.py`` (about 5 min on 2 cores the first time, then
cached). It measures on the **train** articles only (the questions ``samelang eval fusion`` tunes
on: 9,792 questions, 12 languages, over the 2,880-paragraph pool); the test articles are never read.

Scores per (question, paragraph), all from the base multilingual-e5-small:
- ``dense``: cosine with the whole paragraph (what the index serves today);
- ``maxsim``: the best cosine with one of the paragraph's sentences (split on sentence punctuation;
  Thai on spaces; pieces under 25 characters merged into the previous one);
- ``group``: the mean of ``a*dense + (1-a)*maxsim`` over the paragraph's 12 language versions;
- ``bm25``: the served lexical half, fused as :func:`samelang.retrieval.candidates.fuse`.

``score = fuse(a*dense + (1-a)*maxsim + b*group, bm25, w)``; the table prints reader-gold nDCG@1
(the argmax is the gold paragraph in the question's language) per language. This is an
experiment, not a served path: it is kept so that the note's numbers can be reproduced.
"""

from __future__ import annotations

import re

import numpy as np

from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.encoder import Encoder
from samelang.core.settings import settings
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.evaluation.biencoder import embed_xquad
from samelang.evaluation.fusion import FusionEvalOptions, FusionTuning, tuning_articles
from samelang.indexes.lexical import LexicalIndex
from samelang.primitives.atomic import cached_array
from samelang.retrieval.candidates import fuse

SPLIT = re.compile(r"(?<=[.!?。！？؟।])\s+|(?<=[。！？])")
GRID = [(1.0, 0.0, 0.0), (1.0, 0.0, 0.08), (0.5, 0.0, 0.0), (0.5, 0.0, 0.04), (0.3, 0.0, 0.08),
        (0.5, 0.25, 0.06), (0.5, 0.5, 0.06), (0.5, 1.0, 0.08)]  # fmt: skip


def sentences(lang: str, text: str) -> list[str]:
    parts = [p.strip() for p in (re.split(r"\s+", text) if lang == "th" else SPLIT.split(text)) if p.strip()]
    out: list[str] = []
    for p in parts:
        if out and len(p) < 25:
            out[-1] += " " + p
        else:
            out.append(p)
    return out or [text]


def main() -> None:
    home = settings().home
    model = ensure_base_model(home)
    enc = Encoder(model, home=home)
    tuning = FusionTuning(FusionEvalOptions())
    qs = tuning._questions(tuning_articles(model)[0])
    qv = tuning._query_vectors(enc, qs, home / "cache")
    pool = [(x, p.group, p.text) for x in XQUAD_LANGS for p in load_xquad([x]).paragraphs]
    col = {(x, g): i for i, (x, g, _) in enumerate(pool)}
    emb = embed_xquad(enc, home / "cache")
    P = np.concatenate([emb.passages[x] for x in XQUAD_LANGS])
    S, owner = [], []
    for i, (x, _, t) in enumerate(pool):
        for s in sentences(x, t):
            S.append(s)
            owner.append(i)
    owner = np.array(owner)
    SV = cached_array(home / "cache" / f"exp-sentences-{enc.fingerprint[:12]}-{len(S)}.npy",
                      lambda: enc.encode_passages(S, progress=True))  # fmt: skip
    lex = LexicalIndex.build([t for _, _, t in pool], enc.analyzer[1], enc.analyzer[0])
    _, ginv = np.unique([g for _, g, _ in pool], return_inverse=True)
    G = np.zeros((len(pool), ginv.max() + 1), np.float32)
    G[np.arange(len(pool)), ginv] = 1 / len(XQUAD_LANGS)
    res: dict[tuple, dict[str, float]] = {}
    for x in XQUAD_LANGS:
        dense = qv[x] @ P.T
        mx = np.full((len(qs[x]), len(pool)), -1.0, dtype=np.float32)
        np.maximum.at(mx.T, owner, (qv[x] @ SV.T).T)
        bm = np.stack([lex.scores(enc.analyzer[1](q.text)) for q in qs[x]])
        gold = np.array([col[(x, q.group)] for q in qs[x]])
        for a, b, w in GRID:
            base = a * dense + (1 - a) * mx
            comb = base + b * (base @ G)[:, ginv]
            res.setdefault((a, b, w), {})[x] = 100 * float((fuse(comb, bm, w).argmax(1) == gold).mean())
    n = sum(len(v) for v in qs.values())
    print(f"Reader-gold nDCG@1, {n} train-article questions, {len(pool)} paragraphs, {len(S)} sentences\n")
    print("| a (dense) | b (group) | w (bm25) | avg | " + " | ".join(XQUAD_LANGS) + " |")
    print("|---|---|---|---|" + "---|" * len(XQUAD_LANGS))
    for (a, b, w), v in res.items():
        cells = " | ".join(f"{v[x]:.1f}" for x in XQUAD_LANGS)
        print(f"| {a:g} | {b:g} | {w:g} | {np.mean(list(v.values())):.2f} | {cells} |")


if __name__ == "__main__":
    main()
