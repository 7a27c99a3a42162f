"""The handlers of the OpenAI-shaped routes (``/v1/embeddings``, ``/v1/models``) and of Cohere's and
Jina's rerank (``/v1/rerank``, ``/v2/rerank``): the served models' vectors and scores, in the bodies
those SDKs read."""

from __future__ import annotations

import base64

from samelang.retrieval.errors import BadRequest
from samelang.retrieval.pipeline import Pipeline
from samelang.service.api.common import check_model, ranked
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
        passages = req.input_type == "passage"
        vecs = self.pipeline.embed(texts, "input", role="passage" if passages else "query").astype("<f4")
        tokens = self.pipeline.count_tokens(texts, passages=passages)
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
            cut = self.pipeline.cut_for_reranker
            docs = [d.model_copy(update={"text": cut(d.text, req.max_tokens_per_doc)}) for d in docs]
        results = [
            C.CompatRerankResult(
                index=i,
                relevance_score=score,
                lang=lang,
                document=C.RerankedDocument(text=given[i].text) if req.return_documents else None,
            )  # fmt: skip
            for i, score, lang in ranked(self.pipeline, req.query, docs, req.top_n)
        ]
        usage = C.RerankUsage(total_tokens=self.pipeline.rerank_tokens(req.query, [d.text for d in docs]))
        return C.CompatRerankResponse(model=reranker.name, results=results, usage=usage)

    def models(self) -> C.ModelList:
        encoder, reranker = self.pipeline.served_models()
        made = int(encoder.path.stat().st_mtime)
        return C.ModelList(data=[
            C.ModelCard(id=encoder.name, created=made, task="embeddings", dimensions=encoder.dim),
            C.ModelCard(id=reranker.name, created=int(reranker.path.stat().st_mtime) if reranker.path else made,
                        task="rerank"),
        ])  # fmt: skip
