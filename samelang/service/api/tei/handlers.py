"""The handlers of the routes shaped like text-embeddings-inference (``/embed``, ``/``, ``/tokenize``,
``/rerank`` with ``texts``, TEI's fields of ``/info``): the other routes' vectors and scores, computed
by the same code, in TEI's bodies."""

from __future__ import annotations

import numpy as np

from samelang.core.models.reranker import BI_ENCODER_COSINE
from samelang.indexes.vectors import normalise
from samelang.retrieval.errors import BadRequest
from samelang.retrieval.pipeline import Pipeline
from samelang.service.api.common import check_inputs
from samelang.service.api.tei import protocol as T


class TeiHandlers:
    """Built once per app (:class:`~samelang.service.api.dialects.Dialects`) over one pipeline."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def _uncut(self, field: str, long: list[bool], window: int, what: str = "text") -> None:
        """TEI's ``truncate: false``: a 422 naming the first input over the model's window."""
        if any(long):
            i = long.index(True)
            raise BadRequest(f"{field}[{i}]", f"the {what} is longer than the model's {window}-token window; "
                             "send truncate: true to cut it")  # fmt: skip

    def embed(self, req: T.EmbedRequest) -> list[list[float]]:
        """``POST /embed``: ``/v1/embeddings``' vectors for the same texts and prompt, as TEI's list
        (``normalize: false``: the same vectors before their L2 normalisation)."""
        enc = self.pipeline.encoder.unbatched
        texts = list(req.inputs)
        check_inputs(self.pipeline, "inputs", texts)
        prompt = req.prompt(enc)
        if not req.truncate:
            self._uncut("inputs", enc.engine.overflowing([prompt + t for t in texts]), enc.engine.max_length)
        # normalize: false (Haystack's TEI embedders' default): the pooled vectors as they are
        vecs = enc.encode_text(texts, prompt, pooled=not req.normalize)
        return (normalise(vecs) if req.normalize else vecs).astype("<f4").tolist()

    def tokenize(self, req: T.TokenizeRequest) -> list[list[T.SimpleToken]]:
        """``POST /tokenize``: the served bi-encoder's tokens of each text (the named prompt's first, the
        special ones unless ``add_special_tokens`` is false); offsets are into the text as sent."""
        enc = self.pipeline.encoder.unbatched
        check_inputs(self.pipeline, "inputs", req.inputs)
        prompt = req.prompt(enc)
        out = []
        for text in req.inputs:
            e = enc.engine.tokenizer.encode(prompt + text, add_special_tokens=req.add_special_tokens)
            toks = []
            for tid, tok, (a, b), special in zip(e.ids, e.tokens, e.offsets, e.special_tokens_mask, strict=True):
                own = not special and b > len(prompt)  # a token of the text (not of the prompt)
                start, stop = (max(a - len(prompt), 0), b - len(prompt)) if own else (None, None)
                toks.append(T.SimpleToken(id=tid, text=text[start:stop] if own else tok, special=bool(special),
                                          start=start, stop=stop))  # fmt: skip
            out.append(toks)
        return out

    def rerank(self, req: T.TeiRerankRequest) -> list[T.Rank]:
        """``POST /rerank`` with ``texts``: ``/rerank``'s scores as TEI's list, best first."""
        reranker = self.pipeline.reranker
        self.pipeline.check_rerank(req.texts)
        if not req.truncate:
            long = reranker.overflowing(req.query, req.texts)
            self._uncut("texts", long, reranker.max_length, "query with this text")
        if req.raw_scores and reranker.kind != BI_ENCODER_COSINE:  # the logits under the sigmoid
            scores = np.asarray(reranker.logits(req.query, req.texts), dtype=np.float64)
        else:
            scores = self.pipeline.rerank(req.query, req.texts)
        order = np.argsort(-scores, kind="stable")
        return [T.Rank(index=int(i), score=float(scores[i]), text=req.texts[i] if req.return_text else None)
                for i in order]  # fmt: skip

    def info(self, concurrent: int, version: str) -> T.TeiInfo:
        """TEI's ``GET /info`` fields for the served bi-encoder (``concurrent``: the requests admitted to model
        work at once, ``--max-concurrent-requests``; ``version``: the app's)."""
        enc = self.pipeline.encoder.unbatched
        o = enc.engine.options
        return T.TeiInfo(
            model_id=enc.name, model_sha=enc.fingerprint, model_dtype=o.precision,
            model_type=T.ModelType(embedding={"pooling": "mean"}), max_concurrent_requests=concurrent,
            max_input_length=enc.engine.max_length, max_batch_tokens=o.max_batch_tokens, max_batch_requests=None,
            max_client_batch_size=self.pipeline.limits.max_embedding_inputs, auto_truncate=False,
            tokenization_workers=1, version=version,
        )  # fmt: skip
