"""What a user's collection teaches without labels: its translations, its sentences as queries, and the
retriever's own mistakes on them (``samelang adapt``'s training data).

* **Translations** (pairs for L_JSD): documents that share a ``group``, and unlabelled documents in two
  languages that are each other's nearest neighbour with a ratio margin of at least ``MARGIN`` over their
  ``K`` nearest neighbours (Artetxe & Schwenk, 2019, "Margin-based parallel corpus mining"):
  ``margin(x, y) = cos(x, y) / (sum_{z in NN_K(x)} cos(x, z) / 2K + sum_{z in NN_K(y)} cos(y, z) / 2K)``,
  on the served model's cross-language vectors (the aligned half of a fused index). A margin, not a
  cosine threshold, because models differ in where their cosines lie (e5's unrelated pairs sit near 0.8).
* **Inverse cloze queries** (L_NCE): a sentence of a document, its positive the rest of the document in
  its language and, when the document has a translation, the translation (Lee et al., 2019).
* **Hard negatives**: each query searched by :meth:`Pipeline.search` over the index itself (the served model
  and BM25 weight, no reranker: :func:`.mining.search_ids`); its first hits that are neither its document nor a
  translation.
* A fixed, seeded **held-out slice** of the documents, whose queries only measure (the adaptation's dev).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import numpy as np

from samelang.indexes.index import OpenIndex
from samelang.training.data import AlignPair
from samelang.training.relevance_first import RankingGroup

MARGIN, K = 1.06, 4  # LASER's bitext-mining threshold and neighbourhood (Artetxe & Schwenk, 2019)
MIN_QUERY_CHARS, MAX_QUERY_CHARS = 12, 300
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；؟।])\s+|(?<=[。！？；])")


@dataclass(frozen=True)
class Doc:
    row: int
    id: str
    text: str
    lang: str | None
    group: str | None


@dataclass(frozen=True)
class ClozeQuery:
    """A sentence of ``doc`` (a row) asked of the collection; ``positive``: the rest of ``doc`` (``positive_row``
    ``doc``) or its translation (``positive_row`` that row)."""

    id: str
    text: str
    lang: str | None
    doc: int
    positive: str
    positive_row: int
    positive_lang: str | None


def read_documents(index: OpenIndex) -> list[Doc]:
    """Every document of the index's live generation, in row order."""
    rows = index.docs.rows()
    return [Doc(d.row, d.id, d.text, d.lang, d.group) for d in index.docs.get_rows(rows) if d is not None]


def held_out(docs: list[Doc], share: float, seed: int, at_most: int = 500) -> set[int]:
    """A fixed slice of the rows (``share`` of them, at least 1, at most ``at_most``), seeded."""
    n = min(at_most, max(1, round(share * len(docs))))
    return {d.row for d in random.Random(f"adapt-dev-{seed}").sample(docs, n)}


def mutual_margin_pairs(vectors: np.ndarray, langs: list[str | None], margin: float = MARGIN, k: int = K,
                        block: int = 2048) -> list[tuple[int, int, float]]:  # fmt: skip
    """``(i, j, margin)`` for positions ``i < j`` in two different known languages that are each other's
    nearest neighbour among the other languages' documents, with a ratio margin of at least ``margin``
    (module docstring). ``vectors`` unit length; memory bounded by ``block`` rows at a time."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    lang = np.array([x_ or "" for x_ in langs])
    n = len(x)
    best, best_cos, knn_mean = np.full(n, -1), np.full(n, -np.inf, np.float32), np.zeros(n, np.float32)
    for start in range(0, n, block):
        sims = x[start : start + block] @ x.T
        rows = np.arange(start, min(n, start + block))
        sims[rows - start, rows] = -np.inf  # never itself
        top = np.sort(sims, axis=1)[:, -k:]
        knn_mean[rows] = np.where(np.isfinite(top), top, 0).mean(axis=1)
        other = (lang[None, :] != lang[rows, None]) & (lang[None, :] != "") & (lang[rows, None] != "")
        masked = np.where(other, sims, -np.inf)
        best[rows] = masked.argmax(axis=1)
        best_cos[rows] = masked.max(axis=1)
    out = []
    for i in range(n):
        j = int(best[i])
        if np.isfinite(best_cos[i]) and i < j and best[j] == i:
            m = float(best_cos[i] / max((knn_mean[i] + knn_mean[j]) / 2, 1e-6))
            if m >= margin:
                out.append((i, j, m))
    return out


def translations(docs: list[Doc], vectors: np.ndarray) -> dict[int, list[int]]:
    """Row -> the rows found to be its translations: shared ``group`` labels, then margin pairs among the
    unlabelled documents."""
    out: dict[int, list[int]] = {}
    by_group: dict[str, list[Doc]] = {}
    for d in docs:
        if d.group:
            by_group.setdefault(d.group, []).append(d)
    for members in by_group.values():
        for a in members:
            out[a.row] = [b.row for b in members if b.row != a.row and b.lang != a.lang]
    free = [i for i, d in enumerate(docs) if not d.group]
    for i, j, _ in mutual_margin_pairs(vectors[free], [docs[p].lang for p in free]):
        a, b = docs[free[i]].row, docs[free[j]].row
        out.setdefault(a, []).append(b)
        out.setdefault(b, []).append(a)
    return {r: v for r, v in out.items() if v}


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` usable as queries (a punctuation split: the query need not be a perfect
    sentence, only a piece of the document that someone could ask about)."""
    parts = [s.strip() for s in _SENTENCE_END.split(text)]
    return [s for s in parts if MIN_QUERY_CHARS <= len(s) <= MAX_QUERY_CHARS]


def cloze_queries(docs: list[Doc], trans: dict[int, list[int]], rows: set[int], seed: int) -> list[ClozeQuery]:
    """For each document of ``rows`` with two sentences or more: one sentence as the query against the rest of
    the document, and, when it has translations, one more against a translation (a seeded choice)."""
    rng = random.Random(f"adapt-ict-{seed}")
    by_row = {d.row: d for d in docs}
    out = []
    for d in docs:
        if d.row not in rows:
            continue
        parts = sentences(d.text)
        if len(parts) < 2:
            continue
        i = rng.randrange(len(parts))
        rest = " ".join(p for k, p in enumerate(parts) if k != i)
        out.append(ClozeQuery(f"{d.row}-same", parts[i], d.lang, d.row, rest, d.row, d.lang))
        if trans.get(d.row):
            t = by_row[rng.choice(trans[d.row])]
            out.append(ClozeQuery(f"{d.row}-cross", parts[i], d.lang, d.row, t.text, t.row, t.lang))
    return out


def right_rows(q: ClozeQuery, trans: dict[int, list[int]]) -> set[int]:
    """What answers ``q``: its document and every translation of it."""
    return {q.doc, *trans.get(q.doc, [])}


def ranking_groups(queries: list[ClozeQuery], lists: list[list[int]], docs: list[Doc], trans: dict[int, list[int]],
                   k: int) -> list[RankingGroup]:  # fmt: skip
    """Each query against its positive and its first ``k`` wrong hits; keys: a row's translation cluster (the
    smallest row of it), so that a translation is never another query's negative."""
    by_row = {d.row: d for d in docs}

    def key(row: int) -> str:
        return str(min([row, *trans.get(row, [])]))

    out = []
    for q, hits in zip(queries, lists, strict=True):
        wrong = [r for r in hits if r not in right_rows(q, trans)][:k]
        docs_ = (q.positive, *(by_row[r].text for r in wrong))
        langs = (q.positive_lang or "und", *(by_row[r].lang or "und" for r in wrong))
        out.append(RankingGroup(q.text, q.lang or "und", docs_, langs, (key(q.doc), *(key(r) for r in wrong)), "adapt"))
    return out


def translation_pairs(docs: list[Doc], trans: dict[int, list[int]], rows: set[int]) -> list[AlignPair]:
    """One pair per translation link within ``rows`` (each link once)."""
    by_row = {d.row: d for d in docs}
    return [AlignPair(by_row[a].text, by_row[b].text, by_row[b].lang or "und")
            for a in sorted(trans) for b in trans[a] if a < b and a in rows and b in rows]  # fmt: skip


def dev_metrics(queries: list[ClozeQuery], lists: list[list[int]], trans: dict[int, list[int]]) -> dict[str, float]:
    """The held-out slice: each cross-language query (a sentence of a document that has a translation) with its
    own document left out of its list, so that only a translation answers it: found@1 and MRR@10 (in %)."""
    ranks = []
    for q, hits in zip(queries, lists, strict=True):
        if q.id.endswith("-cross"):
            rest = [r for r in hits if r != q.doc][:10]
            ranks.append(next((i for i, r in enumerate(rest) if r in trans.get(q.doc, ())), None))
    if not ranks:
        return {"queries": 0}
    return {
        "found_at_1": 100 * float(np.mean([r == 0 for r in ranks])),
        "mrr_at_10": 100 * float(np.mean([1 / (r + 1) if r is not None else 0.0 for r in ranks])),
        "queries": len(ranks),
    }
