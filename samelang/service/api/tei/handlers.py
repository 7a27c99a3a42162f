"""The handlers of the routes shaped like text-embeddings-inference (``/embed``, ``/``, ``/tokenize``,
``/rerank`` with ``texts``, TEI's fields of ``/info``): the other routes' vectors and scores, computed
by the same code, in TEI's bodies."""

from __future__ import annotations

import numpy as np

from samelang.retrieval.pipeline import Pipeline
from samelang.service.api.tei import protocol as T


class TeiHandlers:
    """Built once per app (:class:`~samelang.service.api.dialects.Dialects`) over one pipeline."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def embed(self, req: T.EmbedRequest) -> list[list[float]]:
        """``POST /embed``: ``/v1/embeddings``' vectors for the same texts and prompt, as TEI's list
        (``normalize: false``, Haystack's TEI embedders' default: the pooled vectors before L2 normalisation)."""
        p = self.pipeline
        vecs = p.embed(list(req.inputs), "inputs", prompt=p.prompt_of(req.prompt_name), normalize=req.normalize,
                       truncate=bool(req.truncate))  # fmt: skip
        return vecs.astype("<f4").tolist()

    def tokenize(self, req: T.TokenizeRequest) -> list[list[T.SimpleToken]]:
        """``POST /tokenize``: the served bi-encoder's tokens of each text (the named prompt's first, the
        special ones unless ``add_special_tokens`` is false); offsets are into the text as sent."""
        p = self.pipeline
        tokens = p.tokenize(req.inputs, "inputs", p.prompt_of(req.prompt_name), req.add_special_tokens)
        return [[T.SimpleToken(id=t.id, text=t.text, special=t.special, start=t.start, stop=t.stop) for t in toks]
                for toks in tokens]  # fmt: skip

    def rerank(self, req: T.TeiRerankRequest) -> list[T.Rank]:
        """``POST /rerank`` with ``texts``: ``/rerank``'s scores as TEI's list, best first."""
        scores = self.pipeline.rerank_texts(req.query, req.texts, "texts", raw=req.raw_scores,
                                            truncate=bool(req.truncate))  # fmt: skip
        order = np.argsort(-scores, kind="stable")
        return [T.Rank(index=int(i), score=float(scores[i]), text=req.texts[i] if req.return_text else None)
                for i in order]  # fmt: skip

    def info(self, concurrent: int, version: str) -> T.TeiInfo:
        """TEI's ``GET /info`` fields for the served bi-encoder (``concurrent``: the requests admitted to model
        work at once, ``--max-concurrent-requests``; ``version``: the app's)."""
        f = self.pipeline.encoder_facts()
        return T.TeiInfo(
            model_id=f.name, model_sha=f.fingerprint, model_dtype=f.precision,
            model_type=T.ModelType(embedding={"pooling": "mean"}), max_concurrent_requests=concurrent,
            max_input_length=f.max_length, max_batch_tokens=f.max_batch_tokens, max_batch_requests=None,
            max_client_batch_size=self.pipeline.limits.max_embedding_inputs, auto_truncate=False,
            tokenization_workers=1, version=version,
        )  # fmt: skip
