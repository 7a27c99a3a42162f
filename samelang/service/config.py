"""The options of ``samelang serve`` (and the store options ``samelang index`` shares): each a field with its
``SAMELANG_*`` twin, over the shared :class:`~samelang.core.settings.Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from samelang.core.settings import Settings, settings
from samelang.primitives.langid import DEFAULT_DETECT_LANGS
from samelang.retrieval.limits import Limits
from samelang.retrieval.options import Defaults

__all__ = ["Settings", "settings"]


class MilvusOptions(Settings):
    """Where a Milvus-stored index's Milvus is (``samelang.indexes.stores``)."""

    milvus_uri: str | None = Field(
        None,
        description="Milvus of --store milvus: a milvus-lite file such as ./index.db (embedded; one process at a "
        "time) or http://host:19530; for an existing index, where its Milvus is reached from here (default: the "
        "URI it was built with)",
        json_schema_extra={"cli_aliases": ["--uri"]},
    )


class StoreOptions(MilvusOptions):
    """Which vector store a new index writes to."""

    store: Literal["faiss", "milvus"] = Field(
        "faiss",
        description="where a new index keeps its vectors: faiss (a file in the index folder) or milvus (a "
        "collection at --uri); an existing index's store is in its manifest",
    )

    def store_spec(self):
        from samelang.indexes.stores import StoreSpec  # deferred: keeps faiss out of the CLI's start-up

        return StoreSpec(self.store, self.milvus_uri)


class ServiceSettings(Limits, StoreOptions):
    """Options of ``samelang serve`` (each also ``SAMELANG_<NAME>``; the request limits are declared in
    :class:`~samelang.retrieval.limits.Limits`, which the pipeline holds)."""

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    index: Path | None = Field(None, description="index folder (default: the bundled demo index, built on first use)")
    demo_langs: str = Field(
        "en,zh", description="languages of the bundled XQuAD demo index", json_schema_extra={"cli_aliases": ["--langs"]}
    )
    model: Path | None = Field(None, description="bi-encoder checkpoint (default: the best one available locally)")
    reranker: str | None = Field(
        None,
        description="cross-encoder folder, or 'cosine' for the bi-encoder's cosine, used by /rerank and by "
        "reranked searches (default: the measured defaults' choice, models/serving.json; cosine when that "
        "reranks nothing)",
    )
    rerank: bool | None = Field(
        None,
        description="rerank /search and /answer candidates unless a request says otherwise (default: the "
        "measured defaults; on when --reranker is given)",
    )
    rerank_k: int | None = Field(None, ge=1, le=100, description="candidates reranked (default: measured, 20)")
    rerank_fusion: float | None = Field(
        None, ge=0, le=100,
        description="the retriever's weight beside the reranker's: candidates ordered by z(reranker) + W * "
        "z(retriever) (0: the reranker alone; default: measured, 0 with an explicit --reranker)",
    )  # fmt: skip
    group_candidates: bool | None = Field(
        None, description="one candidate per parallel group in the reader's language (default: measured)"
    )
    lexical_weight: float | None = Field(
        None,
        ge=0,
        le=10,
        description="hybrid retrieval: score = cosine + W * BM25 / the query's best BM25 (0: dense only; needs an "
        "index with its lexical half, which `samelang index build` writes; default: measured, models/serving.json)",
    )
    reranker_max_length: int = Field(256, ge=16, le=512, description="cross-encoder truncation (tokens per pair)")
    reader: str | None = Field(
        None,
        description="extractive reader folder (a models/ name or a path) for /answer's extractive mode, or 'none' "
        "(default: the shipped models/reader-e5-small-v3 when present)",
    )
    answer_mode: Literal["extractive", "generative"] | None = Field(
        None,
        description="/answer's default mode: extractive (the reader copies the answer out of the passages) or "
        "generative (the generator writes it); a request's answer_mode wins (default: measured, "
        "models/serving.json, when a reader is loaded and the generator is not --generator openai; else generative)",
    )
    reader_max_length: int | None = Field(
        None,
        ge=32,
        le=512,
        description="extractive reader window in tokens, question + passage (default: its own)",
    )
    generator: Literal["llamacpp", "openai", "none"] = Field(
        "llamacpp",
        description="/answer's generator: embedded Gemma 3 270M GGUF on llama.cpp, an OpenAI-compatible server, "
        "or none",
    )
    generator_model: Path | None = Field(None, description="GGUF file for --generator llamacpp (default: Gemma 3 270M)")
    generator_ctx: int = Field(
        4096,
        ge=256,
        le=32768,
        description="llama.cpp context (prompt + answer tokens); passages that do not fit are "
        "dropped, the last one cut",
    )
    openai_url: str = Field(
        "http://127.0.0.1:8001", description="OpenAI-compatible server (vLLM) for --generator openai"
    )
    openai_model: str = Field(
        "gemma-3-270m",
        description="model name the OpenAI-compatible server serves (scripts/vllm_cpu.sh and compose.yaml serve "
        "the shipped Gemma 3 270M under this name)",
    )
    openai_api_key: str | None = Field(None, description="bearer key of the OpenAI-compatible server")
    openai_timeout: float = Field(30.0, gt=0, description="seconds per generation request to that server")
    openai_retries: int = Field(2, ge=0, le=10, description="retries of a failed generation request")
    api_key: str | None = Field(
        None,
        description="if set, every route but /health, /ready and the audit page needs 'Authorization: Bearer <key>'",
    )
    ef_search: int | None = Field(None, ge=1, description="HNSW search depth (approximate indexes)")
    nprobe: int | None = Field(None, ge=1, description="IVF lists probed per query (approximate indexes)")
    search_threads: int = Field(
        1, ge=1, le=256,
        description="OpenMP threads of a FAISS search (1: /search asks one query at a time, and idle OpenMP "
        "workers spin on a core the encoder needs)",
    )  # fmt: skip
    use_gpu_index: bool = Field(True, description="move the FAISS index to GPU when faiss sees GPUs")
    micro_batching: bool = Field(True, description="gather concurrent queries / rerank pairs into one forward pass")
    batch_wait_ms: float = Field(2.0, ge=0, le=1000, description="how long a micro-batch waits for more requests")
    max_batch_items: int = Field(64, ge=1, description="inputs per micro-batch (queries or pairs)")
    max_body_bytes: int = Field(2_000_000, ge=1024, description="largest request body; else 413")
    request_timeout_s: float = Field(
        30.0, gt=0, description="time budget of one request's model work; then 503 and the work stops"
    )
    body_timeout_s: float = Field(15.0, gt=0, description="a request body must arrive within this; else 408")
    max_concurrent_requests: int = Field(
        32,
        ge=1,
        description="requests running model work at once (text-embeddings-inference's name; micro-batches gather "
        "from these, so it is their ceiling too); the rest queue",
    )
    max_queued_requests: int = Field(
        32, ge=0, description="requests waiting for a turn at most; past it a 429 at once, with Retry-After"
    )
    switch_interval_ms: float = Field(
        1.0,
        gt=0,
        le=100,
        description="how long a thread running Python keeps the interpreter before another gets it "
        "(sys.setswitchinterval; Python's default is 5): under load the event loop that answers 429 and /health waits "
        "for its turn behind the model work's threads; 1 cut the slow 429s of the Milvus mixed soak by 40% for ~7% "
        "of its throughput (docs/performance.md)",
    )
    front: bool = Field(
        True,
        description="answer 429s, /health, /ready and /metrics from a front process of their own, the models "
        "running in a server process behind it: a 429 then waits for a core, never for the model work's threads "
        "(docs/performance.md, the mixed soak)",
    )
    server_nice: int = Field(
        0, ge=0, le=19, description="with --front: the server process's niceness (higher: the front gets a core "
        "first; at 5 the Milvus mixed soak's /diagnose ran past its 30 s budget, docs/performance.md)",
    )  # fmt: skip
    shutdown_timeout_s: float = Field(
        8.0, ge=0, description="on SIGTERM, nothing more is admitted and running requests get this long"
    )
    index_reload_s: float = Field(
        1.0, ge=0, description="poll the index for a new generation this often (0: only POST /admin/reload)"
    )
    detect_langs: str = Field(",".join(DEFAULT_DETECT_LANGS), description="candidate languages for detection")

    def unmeasured_models(self) -> dict[str, str]:
        """``{"model" | "reranker": name}`` for each model named here that ``models/serving.json``'s
        defaults were not measured on (what ``/info`` and the start-up log say)."""
        from samelang.core.catalogue import is_measured_model, served_defaults  # deferred: keeps faiss out

        measured, out = served_defaults(), {}
        if self.model is not None and not is_measured_model(self.model, measured.retriever, self.home):
            out["model"] = str(self.model)
        if (
            self.reranker
            and str(self.reranker).lower() != "cosine"
            and not is_measured_model(self.reranker, measured.reranker, self.home)
        ):
            out["reranker"] = str(self.reranker)
        return out

    def pipeline_defaults(self) -> Defaults:
        """The request defaults: flags and variables over the measured ``models/serving.json``."""
        from samelang.core.catalogue import ServedDefaults, served_defaults  # deferred: keeps faiss out of start-up

        measured, foreign = served_defaults(), self.unmeasured_models()
        # the measured row belongs to the models it was measured on: another bi-encoder gets the neutral
        # row (dense only, no reranker unless named, the reranker alone), another reranker its neutral k
        row = ServedDefaults() if "model" in foreign else measured
        rerank = self.rerank
        if rerank is None:
            rerank = True if self.reranker else row.rerank
        group = row.candidates == "groups" if self.group_candidates is None else self.group_candidates
        lexical = row.lexical_weight if self.lexical_weight is None else self.lexical_weight
        # the measured weight was chosen for the measured reranker: an explicit --reranker is served alone
        fusion = self.rerank_fusion
        if fusion is None:
            fusion = 0.0 if self.reranker else row.rerank_fusion
        rerank_k = self.rerank_k or (ServedDefaults().rerank_k if foreign else row.rerank_k)
        mode = self.answer_mode
        if mode is None:
            from samelang.core.catalogue import default_reader  # deferred: keeps faiss out of start-up

            measured_mode = self.generator != "openai" and default_reader(self.reader, self.home) is not None
            mode = measured.answer_mode if measured_mode else "generative"
        return Defaults(
            rerank=rerank, rerank_k=rerank_k, group_candidates=group, lexical_weight=lexical,
            rerank_fusion=fusion, answer_mode=mode,
        )  # fmt: skip
