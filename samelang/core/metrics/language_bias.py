"""A language-bias audit without relevance labels: the languages of a reader's top-k against the collection's.
For queries in language ``q`` (``Q_q`` of them), top-k lists ``L_i`` (``k_i <= k`` results each), collection ``D``:

* collection: ``P_D(l) = |{d in D : lang(d) = l}| / |D|``
* results: ``P_q(l) = sum_{i in Q_q} |{d in L_i : lang(d) = l}| / sum_{i in Q_q} k_i`` (pooled: each result once)
* divergence: ``JSD(P_q || P_D) = 1/2 KL(P_q || M) + 1/2 KL(P_D || M)``, ``M = (P_q + P_D) / 2``, in bits: 0 when the
  results' languages are spread as the collection's, 1 when they share none (comparable only at one base, pooling, k)
* exposure: ``sees_other(q) = |{i in Q_q : exists d in L_i, lang(d) != q}| / |Q_q|``, queries seeing another language

Neither is "lower is better" alone: a reader whose language holds the answer wants it first, one whose language
does not wants the others. Max@R (:mod:`.audit`) says, where labels exist, whether the ranking finds every version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import jensenshannon


def distribution(counts: Counter, langs: Sequence[str]) -> np.ndarray:
    """``counts`` as shares over ``langs`` (all zeros for an empty counter)."""
    v = np.array([counts.get(x, 0) for x in langs], dtype=np.float64)
    return v / v.sum() if v.sum() else v


def jsd_bits(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence of two distributions, in bits (scipy's distance is its square root)."""
    return float(jensenshannon(p, q, base=2) ** 2)


@dataclass(frozen=True)
class LanguageBias:
    """The audit of one set of lists (see the module's formulas); shares in %."""

    k: int
    index_langs: dict[str, float]  # P_D, in %
    queries: dict[str, int]  # per query language
    result_langs: dict[str, dict[str, float]]  # P_q, in % (query language -> result language -> share)
    jsd: dict[str, float | None]  # JSD(P_q || P_D), bits (None: that language's lists are empty)
    sees_other: dict[str, float]  # in %
    mean_jsd: float | None  # over query languages, each weighing the same
    sees_other_all: float | None  # over all queries, in %


def language_bias(query_langs: Sequence[str], result_langs: Sequence[Sequence[str]], doc_langs: Sequence[str],
                  k: int) -> LanguageBias:  # fmt: skip
    """Audit the first ``k`` of each query's ``result_langs`` (languages of its ranked results, best
    first) against ``doc_langs`` (the language of every document in the collection)."""
    if len(query_langs) != len(result_langs):
        raise ValueError(f"{len(query_langs)} query languages for {len(result_langs)} lists")
    index = Counter(doc_langs)
    langs = sorted(set(index) | {x for r in result_langs for x in r[:k]} | set(query_langs))
    p_d = distribution(index, langs)
    per: dict[str, Counter] = {}
    seen: dict[str, list[bool]] = {}
    for q, results in zip(query_langs, result_langs):
        top = list(results[:k])
        per.setdefault(q, Counter()).update(top)
        seen.setdefault(q, []).append(any(x != q for x in top))
    qls = sorted(per)
    p_q = {q: distribution(per[q], langs) for q in qls}
    jsd = {q: round(jsd_bits(p_q[q], p_d), 4) if p_q[q].sum() and p_d.sum() else None for q in qls}
    known = [v for v in jsd.values() if v is not None]
    return LanguageBias(
        k=k,
        index_langs={x: round(100 * float(v), 3) for x, v in zip(langs, p_d) if v},
        queries={q: len(seen[q]) for q in qls},
        result_langs={q: {x: round(100 * float(v), 3) for x, v in zip(langs, p_q[q])} for q in qls},
        jsd=jsd,
        sees_other={q: round(100 * float(np.mean(seen[q])), 2) for q in qls},
        mean_jsd=round(float(np.mean(known)), 4) if known else None,
        sees_other_all=round(100 * float(np.mean([s for q in qls for s in seen[q]])), 2) if qls else None,
    )
