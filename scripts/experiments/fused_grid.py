"""How the fused retriever's knobs were chosen (``models/e5-small-fused/fused.json``): a grid over
the train-article shapes of ``samelang eval pipeline --shapes`` (the same constructions, from
:mod:`samelang.training.evaluation.shapes`), every document of each pool scored, so the numbers are exact.

Run: ``python scripts/experiments/fused_grid.py`` (about 8 min on 2 cores once the embedding caches
of ``samelang eval biencoder`` exist; the test articles are never read). Rows:

* ``mix a``: ``a * cos_aligned + (1 - a) * cos_base + w * bm25 / max bm25`` (a linear mix);
* ``fused c``: the fused score (:mod:`samelang.core.models.fused`): base cosine + BM25 in z-units for
  documents in the query's language, aligned cosine in z-units + ``c`` for the others;
* ``tau``: translations inferred among the top 40 at aligned cosine >= tau, the reader's version shown.

Columns: partial found@1 / reader@1 / cross@1, one-language-each found@1, parallel reader-gold
nDCG@1 (groups labelled), Mono-Same nDCG@10, and the mean of the four primary metrics. This is the
tuning record, not a served path: the judge itself runs every row through ``Pipeline.search``.
``--calibrate`` writes the fused retriever's reference vectors (``models/e5-small-fused/calibration.npz``,
:func:`samelang.core.models.fused.write_calibration`) instead.
"""

from __future__ import annotations

import numpy as np

from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.encoder import Encoder
from samelang.core.settings import settings
from samelang.indexes.corpora import XQUAD_LANGS, load_xquad
from samelang.indexes.lexical import LexicalIndex
from samelang.service.registry import ALIGNED_BIENCODER
from samelang.training.evaluation.biencoder import embed_xquad
from samelang.training.evaluation.shapes import present_versions

LANGS = list(XQUAD_LANGS)


def load():
    home = settings().home
    docs = [p for x in XQUAD_LANGS for p in load_xquad([x], split="train").paragraphs]
    qs = [q for x in XQUAD_LANGS for q in load_xquad([x], split="train").questions]
    index_of = {p.id: i for i, p in enumerate(p for x in XQUAD_LANGS for p in load_xquad([x]).paragraphs)}
    keep = np.array([index_of[p.id] for p in docs])
    out = {"doc_lang": np.array([p.lang for p in docs]), "doc_group": np.array([p.group for p in docs]),
           "q_lang": np.array([q.lang for q in qs]), "q_group": np.array([q.group for q in qs])}  # fmt: skip
    for name, path in (("base", ensure_base_model(home)), ("aligned", ALIGNED_BIENCODER)):
        enc = Encoder(path, home=home)
        emb = embed_xquad(enc, home / "cache", split="train")
        P = np.concatenate([emb.passages[x] for x in XQUAD_LANGS])[keep]
        Q = np.concatenate([emb.queries[x] for x in XQUAD_LANGS])
        out[f"{name}_P"] = P / np.linalg.norm(P, axis=1, keepdims=True)
        out[f"{name}_cos"] = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ out[f"{name}_P"].T
        if name == "base":
            analyze = enc.analyzer[1]
            out["doc_terms"] = [analyze(p.text) for p in docs]
            out["q_terms"] = [analyze(q.text) for q in qs]
    return out


def bm25(d, pool):
    lex = LexicalIndex.build([d["doc_terms"][i] for i in pool], lambda t: t, "grid")
    return np.stack([lex.scores(t) for t in d["q_terms"]]).astype(np.float64)


def top_norm(bm):
    return bm / np.maximum(bm.max(1, keepdims=True), 1e-9)


def moments(C_ref):
    """Mean and std of each query's cosines over the reference passages (every other train paragraph:
    what ``calibration.npz`` holds, :func:`samelang.core.models.fused.reference_passages`)."""
    return C_ref.mean(1, keepdims=True), C_ref.std(1, keepdims=True)


def grouped(d, S, pool, tau, depth=40, k=10):
    """Inferred translation groups among the top ``depth`` (as the pipeline infers them)."""
    dl, V = d["doc_lang"][pool], d["aligned_P"][pool]
    top = np.argsort(-S, axis=1, kind="stable")[:, :depth]
    out = np.zeros((len(S), k), np.int64)
    for i in range(len(S)):
        rows = top[i]
        C = V[rows] @ V[rows].T
        heads, members = [], []
        for j in range(len(rows)):
            at = next((g for g, h in enumerate(heads)
                       if C[h, j] >= tau and dl[rows[j]] not in {dl[rows[m]] for m in members[g]}), None)  # fmt: skip
            if at is None:
                heads.append(j)
                members.append([j])
            else:
                members[at].append(j)
        reps = [rows[next((m for m in mem if dl[rows[m]] == d["q_lang"][i]), mem[0])] for mem in members]
        out[i] = (reps + [rows[-1]] * k)[:k]
    return out


def shape_metrics(d, top, pool, present):
    dg, dl = d["doc_group"][pool], d["doc_lang"][pool]
    found1 = dg[top[:, 0]] == d["q_group"]
    reader = np.array([(g, x) in present for g, x in zip(d["q_group"], d["q_lang"])])
    reader1 = found1 & (dl[top[:, 0]] == d["q_lang"])
    return 100 * found1.mean(), 100 * reader1[reader].mean(), 100 * found1[~reader].mean()


def parallel_metrics(d, S):
    ug, inv = np.unique(d["doc_group"], return_inverse=True)
    G = np.stack([S[:, inv == j].max(1) for j in range(len(ug))], axis=1)
    return 100 * (ug[G.argmax(1)] == d["q_group"]).mean()


def mono(d, S):
    out = []
    for x in LANGS:
        qm, cm = d["q_lang"] == x, d["doc_lang"] == x
        s = S[np.ix_(qm, cm)]
        col = {g: j for j, g in enumerate(d["doc_group"][cm])}
        gold = s[np.arange(len(s)), [col[g] for g in d["q_group"][qm]]]
        r = (s > gold[:, None]).sum(1)
        out.append(np.where(r < 10, 1 / np.log2(r + 2), 0))
    return 100 * np.concatenate(out).mean()


def main():
    d = load()
    groups = sorted(set(d["doc_group"]))
    everything = np.arange(len(d["doc_lang"]))
    pools = {}
    for shape in ("partial", "one"):
        present = present_versions(shape, groups)
        pool = np.array([i for i in everything if (d["doc_group"][i], d["doc_lang"][i]) in present])
        pools[shape] = (pool, present, bm25(d, pool))
    bm_all = bm25(d, everything)

    def mix(a, w):
        return lambda cb, ca, bm, pool: a * ca + (1 - a) * cb + w * top_norm(bm)

    mb, sb = moments(d["base_cos"][:, ::2])
    ma, sa = moments(d["aligned_cos"][:, ::2])

    def fused(c, w):
        def score(cb, ca, bm, pool):
            same = d["doc_lang"][pool][None, :] == d["q_lang"][:, None]
            return np.where(same, (cb + w * top_norm(bm) - mb) / sb, (ca - ma) / sa + c)

        return score

    rows = [(f"mix a={a} w={w}", mix(a, w), None) for a in (1.0, 0.75, 0.5) for w in (0.0, 0.04, 0.08)]
    rows += [(f"mix a={a} w={w}", mix(a, w), 0.8) for a in (0.75, 0.5) for w in (0.04, 0.08)]
    rows += [(f"fused c={c} w={w}", fused(c, w), tau) for w in (0.04, 0.08) for c in (1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
             for tau in (None, 0.8)]  # fmt: skip
    rows += [("fused c=2.0 w=0.04", fused(2.0, 0.04), tau) for tau in (0.75, 0.85)]
    head = "| row | tau | partial found@1 | reader@1 | cross@1 | one found@1 | parallel nDCG@1 | Mono-Same nDCG@10 |"
    lines = [head + " mean |", "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for name, f, tau in rows:
        res = {}
        for shape, (pool, present, bm) in pools.items():
            S = f(d["base_cos"][:, pool], d["aligned_cos"][:, pool], bm, pool)
            top = grouped(d, S, pool, tau) if tau else np.argsort(-S, axis=1, kind="stable")[:, :10]
            res[shape] = shape_metrics(d, top, pool, present)
        S = f(d["base_cos"], d["aligned_cos"], bm_all, everything)
        par, mo = parallel_metrics(d, S), mono(d, S)
        mean = np.mean([par, res["partial"][0], res["one"][0], mo])
        p = res["partial"]
        lines.append(
            f"| {name} | {tau or '-'} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {res['one'][0]:.1f} | {par:.1f} "
            f"| {mo:.1f} | {mean:.2f} |"
        )
        print(lines[-1], flush=True)
    write_section("\n".join(lines))


GRID_SECTION = "## How the fused retriever was tuned (train articles)"


def write_section(table: str) -> None:
    """The grid into ``docs/evaluation.md``, with what was chosen and why."""
    from pathlib import Path

    from samelang.core.models.folder import replace_section

    body = (
        "`python scripts/experiments/fused_grid.py`: every document of each train-article shape scored (exact), "
        "the shapes of `samelang eval pipeline --shapes`; z-units from the reference passages (`calibration.npz`). "
        "Parallel here ranks a group by its best version (the pipeline ranks a labelled group by its reader's "
        "version: 92.6 at the chosen knobs, `--shapes` train table).\n\n"
        "Chosen: `c = 2.0, w = 0.04, tau = 0.8`: the largest offset that keeps the reader's own version first for "
        "at least 93% of partial-translation questions (the product's promise: the answer in the reader's "
        "language); the best mean alone (`c = 2.5`, 85.7) shows it first for 89.9% only. Any linear mix of "
        "the two models stays below (best mean 84.3).\n\n" + table + "\n"
    )
    replace_section(Path(__file__).resolve().parents[2] / "docs" / "evaluation.md", GRID_SECTION, body)


if __name__ == "__main__":
    import sys

    if "--calibrate" in sys.argv:
        from samelang.core.models.fused import write_calibration
        from samelang.service.registry import REPO_MODELS, open_encoder

        print(write_calibration(open_encoder(REPO_MODELS / "e5-small-fused", home=settings().home)))
    else:
        main()
