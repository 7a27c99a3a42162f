"""The retrieval engine: the pipeline (retrieve, group, rerank, read, answer, diagnose) over an index and the
served models, with its options, limits and errors. No HTTP types: every dialect of ``samelang.service.api``
calls it."""
