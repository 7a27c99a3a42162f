"""The routes shaped like Hugging Face text-embeddings-inference (/embed, /, /tokenize, /rerank with texts)."""
