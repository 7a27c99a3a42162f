"""samelang's own routes: /search, /rerank, /answer (plain and streamed), /diagnose, and the operational ones."""
