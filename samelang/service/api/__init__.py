"""The HTTP face of the service: per API dialect (:mod:`.native`, :mod:`.openai` with Cohere's and
Jina's rerank, :mod:`.tei`) a pydantic protocol, a thin router and handlers built once on
``app.state`` over the same pipeline; the pipeline never sees HTTP types."""
