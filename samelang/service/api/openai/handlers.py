"""The handlers of the OpenAI-shaped routes (``/v1/embeddings``, ``/v1/models``) and of Cohere's and
Jina's rerank (``/v1/rerank``, ``/v2/rerank``): the served models' vectors and scores, in the bodies
those SDKs read."""

from __future__ import annotations

import base64
from pathlib import Path

from samelang.indexes.vectors import normalise
from samelang.retrieval.errors import BadRequest
from samelang.retrieval.pipeline import Pipeline
from samelang.service.api.common import check_inputs, check_model, ranked
from samelang.service.api.openai import protocol as C


class OpenAIHandlers:
    """Built once per app (:class:`~samelang.service.api.dialects.Dialects`) over one pipeline."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def embeddings(self, req: C.EmbeddingsRequest) -> C.EmbeddingsResponse:
        enc = self.pipeline.encoder
        check_model(req.model, enc.name)
        if req.dimensions is not None and req.dimensions != enc.dim:
            raise BadRequest("dimensions", f"{req.dimensions} is not supported: {enc.name} has {enc.dim} dimensions "
                             "and cannot shorten them; omit the field")  # fmt: skip
        texts = req.texts()
        check_inputs(self.pipeline, "input", texts)
        passages, direct = req.input_type == "passage", enc.unbatched  # up to 256 texts of any length: no batcher
        vecs = normalise(direct.encode_passages(texts) if passages else direct.encode_queries(texts)).astype("<f4")
        tokens = sum(enc.count_tokens(texts, passages=passages))
        data = [
            C.Embedding(
                index=i,
                embedding=base64.b64encode(v.tobytes()).decode() if req.encoding_format == "base64" else v.tolist(),
            )  # fmt: skip
            for i, v in enumerate(vecs)
        ]
        return C.EmbeddingsResponse(data=data, model=enc.name, usage=C.Usage(prompt_tokens=tokens, total_tokens=tokens))

    def rerank(self, req: C.CompatRerankRequest) -> C.CompatRerankResponse:
        reranker = self.pipeline.reranker
        check_model(req.model, reranker.name)
        given = docs = req.normalised_documents()
        self.pipeline.check_rerank([d.text for d in docs])  # the limits hold for the documents as sent
        if req.max_tokens_per_doc is not None:
            docs = [d.model_copy(update={"text": reranker.truncate(d.text, req.max_tokens_per_doc)}) for d in docs]
        results = [
            C.CompatRerankResult(
                index=i,
                relevance_score=score,
                lang=lang,
                document=C.RerankedDocument(text=given[i].text) if req.return_documents else None,
            )  # fmt: skip
            for i, score, lang in ranked(self.pipeline, req.query, docs, req.top_n)
        ]
        usage = C.RerankUsage(total_tokens=reranker.count_tokens(req.query, [d.text for d in docs]))
        return C.CompatRerankResponse(model=reranker.name, results=results, usage=usage)

    def models(self) -> C.ModelList:
        enc, reranker = self.pipeline.encoder, self.pipeline.reranker
        made = int(Path(enc.path).stat().st_mtime)
        rerank_path = reranker.path
        return C.ModelList(data=[
            C.ModelCard(id=enc.name, created=made, task="embeddings", dimensions=enc.dim),
            C.ModelCard(id=reranker.name, created=int(Path(rerank_path).stat().st_mtime) if rerank_path else made,
                        task="rerank"),
        ])  # fmt: skip
