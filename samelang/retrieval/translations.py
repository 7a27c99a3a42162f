"""Translation groups inferred without labels: which retrieved documents are one text in several
languages. A fused retriever (:mod:`samelang.core.models.fused`) lists such a group as one hit, in the
reader's version, with the others as its versions, as it does for documents that share a ``group``."""

from __future__ import annotations

import numpy as np


def infer_translation_groups(cross: np.ndarray, langs: list, threshold: float) -> tuple[list[int], list[int]]:
    """Each hit's inferred group and each group's first hit (positions in retrieval order).

    ``cross``: the hits' cross-language (aligned) vectors, unit length; ``langs``: their languages.
    A hit joins the group of the first earlier hit whose cosine with it is at least ``threshold``
    and whose group has no version in the hit's language yet; else it starts a group of its own.
    A hit of unknown language never joins one."""
    near = np.triu((cross @ cross.T) >= threshold, k=1)
    earlier = [np.flatnonzero(near[:, j]).tolist() for j in range(len(langs))]  # hits before j it matches
    group_of_head: dict[int, int] = {}  # a head's position -> its group
    heads: list[int] = []  # each group's first hit
    has: list[set] = []  # the languages each inferred group has
    of = []  # each hit's group
    for j in range(len(langs)):
        at = None
        if langs[j] is not None:
            at = next((group_of_head[h] for h in earlier[j] if h in group_of_head
                       and langs[j] not in has[group_of_head[h]]), None)  # fmt: skip
        if at is None:
            group_of_head[j] = len(heads)
            at = len(heads)
            heads.append(j)
            has.append(set())
        has[at].add(langs[j])
        of.append(at)
    return of, heads
