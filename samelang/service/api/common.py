"""What the dialects' handlers share: the served reranker's ranking of a request's documents, and the check
that a request names the served model."""

from __future__ import annotations

import numpy as np

from samelang.retrieval.errors import BadRequest
from samelang.retrieval.pipeline import Pipeline


def ranked(pipeline: Pipeline, query: str, docs: list, top_n: int | None) -> list[tuple[int, float, str | None]]:
    """(index, score, language) of the best ``top_n`` documents by the served reranker: what
    ``/rerank`` and the Cohere-shaped route share."""
    scores = pipeline.rerank(query, [d.text for d in docs])
    order = np.argsort(-scores, kind="stable")[: top_n or len(docs)]
    return [(int(i), float(scores[i]), docs[i].lang or pipeline.detect_language(docs[i].text)) for i in order]


def check_model(given: str | None, served: str, field: str = "model") -> None:
    if given is not None and given != served:
        raise BadRequest(field, f"{given!r} is not served here; this server serves {served!r} (GET /v1/models)")
