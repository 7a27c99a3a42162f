"""The OpenAI-shaped routes (/v1/embeddings, /v1/models) and Cohere's and Jina's rerank (/v1/rerank, /v2/rerank)."""
