"""Issue 53's next lever, measured before it is built: rank by an aligned model (relevance before language) and
show each result in the reader's version through inferred translation links, on the train-article shapes of
``samelang eval pipeline --shapes``, the dev articles' questions (every document of each pool scored).

Run: ``python scripts/experiments/group_links.py --model models/e5-small-aligned-v4`` (a few minutes once the
embedding caches of ``samelang eval biencoder`` exist). Ranking rows: the aligned cosine alone, and the fused
score of ``--fused`` (its ``fused.json`` knobs). Link rows, how two retrieved documents are taken as one text:

* ``tau t``: aligned cosine >= t among the top ``depth`` (what the fused retriever does today, t = 0.8);
* ``margin m``: the ratio margin of bitext mining (Artetxe & Schwenk 2019),
  ``cos(a, b) / ((knn(a) + knn(b)) / 2)`` with ``knn(x)`` the mean cosine of ``x``'s 4 nearest documents in the
  collection: precomputable once per index, so a threshold means the same in a dense and a sparse collection;
* ``labels (oracle)``: the XQuAD groups themselves, the ceiling of any linking;
* ``mutual m``: links made at index time, each document's best match in every other language when the match is
  mutual and its margin >= m (what ``samelang adapt`` mines), grouped by connected components.

A group is ranked by its best retrieved version and shown in the reader's language when it has one. Columns:
partial found@1 / reader@1 / cross@1 / same_language_first, one-language-each found@1 / same_language_first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from fused_grid import bm25, load, moments, top_norm  # noqa: E402

from samelang.core.catalogue import REPO_MODELS  # noqa: E402
from samelang.core.models.fused import FusionConfig  # noqa: E402
from samelang.corpora.xquad import dev_articles  # noqa: E402
from samelang.evaluation.collection_shapes import present_versions  # noqa: E402


def knn_mean(V: np.ndarray, k: int = 4) -> np.ndarray:
    C = V @ V.T
    np.fill_diagonal(C, -np.inf)
    return np.sort(C, axis=1)[:, -k:].mean(1)


def mutual_components(V, langs, knn, m) -> np.ndarray:
    """Each document's component id under index-time links (mutual best per language pair, margin >= m)."""
    n = len(V)
    C = V @ V.T
    np.fill_diagonal(C, -np.inf)
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_lang = {x: np.flatnonzero(langs == x) for x in np.unique(langs)}
    best = {x: idx[np.argmax(C[:, idx], axis=1)] for x, idx in by_lang.items()}  # each doc's best in language x
    for a in range(n):
        for x, b_of in best.items():
            if x == langs[a]:
                continue
            b = b_of[a]
            if best[langs[a]][b] == a and a < b and C[a, b] / ((knn[a] + knn[b]) / 2) >= m:
                parent[find(a)] = find(b)
    return np.array([find(i) for i in range(n)])


def grouped(S, qlang, dl, link, depth=40, k=10):
    """Top ``k`` groups per query: ``link(rows) -> group key per row`` over the top ``depth``."""
    top = np.argsort(-S, axis=1, kind="stable")[:, :depth]
    out = np.zeros((len(S), k), np.int64)
    for i in range(len(S)):
        rows = top[i]
        keys = link(rows)
        order, members = [], {}
        for r, key in zip(rows, keys):
            if key not in members:
                order.append(key)
                members[key] = []
            members[key].append(r)
        reps = [next((r for r in members[g] if dl[r] == qlang[i]), members[g][0]) for g in order[:k]]
        out[i] = (reps + [rows[-1]] * k)[:k]
    return out


def greedy_link(V, dl, sim, thr):
    def link(rows):
        C = sim(rows)
        heads, has, keys = [], [], []
        for j in range(len(rows)):
            at = next((g for g, h in enumerate(heads) if C[h, j] >= thr and dl[rows[j]] not in has[g]), None)
            if at is None:
                heads.append(j)
                has.append(set())
                at = len(heads) - 1
            has[at].add(dl[rows[j]])
            keys.append(at)
        return keys

    return link


def metrics(d, top, pool, present):
    dg, dl = d["doc_group"][pool], d["doc_lang"][pool]
    found1 = dg[top[:, 0]] == d["q_group"]
    reader = np.array([(g, x) in present for g, x in zip(d["q_group"], d["q_lang"])])
    reader1 = found1 & (dl[top[:, 0]] == d["q_lang"])
    slf = ~found1 & (dl[top[:, 0]] == d["q_lang"])
    return 100 * found1.mean(), 100 * reader1[reader].mean(), 100 * found1[~reader].mean(), 100 * slf[~reader].mean()


def main(model: Path, fused: Path, every: int) -> None:
    d = load(model, model)  # both halves the aligned model: "base_*" and "aligned_*" are the same vectors
    dev = set(dev_articles(3))  # the judge's dev articles: held out of every training run
    keep = np.array([i for i, g in enumerate(d["q_group"]) if int(g.split("-")[1]) in dev])[::every]
    for key in ("q_lang", "q_group", "base_cos", "aligned_cos"):
        d[key] = d[key][keep]
    d["q_terms"] = [d["q_terms"][i] for i in keep]
    cfg = FusionConfig.read(fused)
    groups = sorted(set(d["doc_group"]))
    everything = np.arange(len(d["doc_lang"]))
    mb, sb = moments(d["base_cos"][:, ::2])
    print("| ranking | links | partial found@1 | reader@1 | cross@1 | slf | one found@1 | one slf |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for shape in ("partial", "one"):
        present = present_versions(shape, groups)
        pool = np.array([i for i in everything if (d["doc_group"][i], d["doc_lang"][i]) in present])
        d[f"{shape}_pool"], d[f"{shape}_present"] = pool, present
        d[f"{shape}_bm"] = bm25(d, pool)
    results = {}
    for shape in ("partial", "one"):
        pool, present, bm = d[f"{shape}_pool"], d[f"{shape}_present"], d[f"{shape}_bm"]
        V, dl = d["aligned_P"][pool], d["doc_lang"][pool]
        cos = d["aligned_cos"][:, pool]
        same = dl[None, :] == d["q_lang"][:, None]
        z = (cos - mb) / sb
        fused_s = np.where(same, z + cfg.lexical_weight * top_norm(bm) / sb + cfg.same_cross_weight * z,
                           z + cfg.cross_offset)  # fmt: skip
        knn = knn_mean(V)
        rankings = {"aligned cosine": cos, f"fused (c={cfg.cross_offset:g})": fused_s}

        def cosine(r, V=V):
            return V[r] @ V[r].T

        def margin(r, V=V, knn=knn):
            return (V[r] @ V[r].T) / ((knn[r][:, None] + knn[r][None]) / 2)

        links = {f"tau {t}": greedy_link(V, dl, cosine, t) for t in (0.75, 0.8, 0.85, 0.9)}
        links |= {f"margin {m}": greedy_link(V, dl, margin, m) for m in (1.0, 1.05, 1.1)}
        for m in (1.0, 1.05):
            comp = mutual_components(V, dl, knn, m)
            links[f"mutual {m}"] = lambda r, comp=comp: comp[r].tolist()
        dg = d["doc_group"][pool]
        links["labels (oracle)"] = lambda r, dg=dg: dg[r].tolist()  # the ceiling: every translation linked
        for rname, S in rankings.items():
            for lname, link in links.items():
                results.setdefault((rname, lname), {})[shape] = metrics(d, grouped(S, d["q_lang"], dl, link), pool,
                                                                        present)  # fmt: skip
    for (rname, lname), res in results.items():
        p, o = res["partial"], res["one"]
        print(f"| {rname} | {lname} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {p[3]:.1f} | {o[0]:.1f} | {o[3]:.1f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=REPO_MODELS / "e5-small-aligned-v4")
    ap.add_argument("--fused", type=Path, default=REPO_MODELS / "e5-small-fused-v4-single")
    ap.add_argument("--every", type=int, default=1, help="every n-th dev question")
    a = ap.parse_args()
    main(a.model.resolve(), a.fused.resolve(), a.every)
