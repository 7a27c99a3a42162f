"""Where the time of one forward pass goes: ONNX Runtime's own per-operator profile.

Run on the served reranker's /rerank workload (1 query x 20 XQuAD paragraphs) at the served
precision; the table groups kernel time by operator type (MatMulInteger / Attention / ...), so it
says whether a goal is bound by the dense layers (FLOPs: needs a faster GEMM, VNNI/AMX, fewer
tokens or a smaller model) or by something else.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from samelang.core.runtime.onnx_export import DISABLED_ORT_OPTIMIZERS
from samelang.retrieval.options import SearchOptions
from samelang.service.components import load_components
from samelang.service.config import ServiceSettings


def profile_session(model_path: Path, feeds: list[dict], threads: int | None = None) -> list[tuple[str, float, int]]:
    """(op type, total ms, calls) over ``feeds``, largest first, from ORT's profiler."""
    import onnxruntime as ort  # deferred: keeps onnxruntime out of start-up

    with tempfile.TemporaryDirectory(prefix="samelang-prof-") as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        so.intra_op_num_threads = threads or (os.cpu_count() or 1)
        sess = ort.InferenceSession(  # as the engine runs it (no re-fused layer norms)
            str(model_path), so, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_ORT_OPTIMIZERS
        )
        for f in feeds:
            sess.run(None, f)
        events = json.loads(Path(sess.end_profiling()).read_text())
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            totals[op][0] += e["dur"] / 1000.0
            totals[op][1] += 1
    return sorted(((k, v[0], int(v[1])) for k, v in totals.items()), key=lambda r: -r[1])


def rerank_profile(reranker, query: str, documents: list[str]) -> str:
    """Markdown table of the reranker engine's ONNX graph on one /rerank request."""
    engine = reranker.engine
    if engine.backend_name != "onnx":
        return "(profile needs the onnx backend)"
    batches = list(engine.padded_batches([(query, d) for d in documents]))
    feeds = [{"input_ids": ids, "attention_mask": mask} for _, ids, mask in batches]
    tokens = int(sum(mask.sum() for _, _, mask in batches))
    rows = profile_session(engine.backend.path, feeds, engine.options.threads)
    total = sum(r[1] for r in rows)
    lines = ["| operator | ms | share | calls |", "|---|---|---|---|"]
    lines += [f"| {op} | {ms:.0f} | {100 * ms / total:.1f}% | {n} |" for op, ms, n in rows[:10]]
    return "\n".join(lines) + (
        f"\n\n{len(documents)} pairs, {tokens:,} tokens in {len(feeds)} batches; kernel time {total:.0f} ms "
        f"({tokens / total * 1000:,.0f} tokens/s) at {engine.precision}."
    )


def search_profile(home: Path | None, queries: list[str], repeats: int = 40, demo_langs: str | None = None) -> str:
    """Median time of each stage of one /search request, in process (no HTTP), on the served
    components; and the encoder on a micro-batch of 32 queries (what batching buys)."""

    over = {**({"home": home} if home else {}), **({"demo_langs": demo_langs} if demo_langs else {})}
    cfg = ServiceSettings(generator="none", **over)
    pipe = load_components(cfg).pipeline
    qv = pipe.encoder.encode_queries(queries[:1])
    p, k = pipe.search_params, min(10, pipe.index.size)

    def faiss():  # what Pipeline.search asks of the index when no language filter is given
        return pipe.index.search(qv, k, ef_search=p.ef_search, nprobe=p.nprobe)

    rows = faiss()[1][0].tolist()
    stages = {
        "language id (lingua)": lambda q: pipe.langid.detect(q),
        "encode 1 query": lambda q: pipe.encoder.encode_queries([q]),
        "FAISS search k=10": lambda q: faiss(),
        "docstore fetch 10": lambda q: pipe.index.docs.get_rows(rows),
        "whole pipeline.search": lambda q: pipe.search(q, SearchOptions(k=10)),
    }
    lines = ["| stage | median ms |", "|---|---|"]
    for name, fn in stages.items():
        fn(queries[0])
        ts = []
        for q in queries[:repeats]:
            t0 = time.perf_counter()
            fn(q)
            ts.append(time.perf_counter() - t0)
        lines.append(f"| {name} | {1000 * statistics.median(ts):.2f} |")
    t0 = time.perf_counter()
    pipe.encoder.encode_queries(queries[:32])
    per_query = (time.perf_counter() - t0) * 1000 / 32
    lines.append(f"| encode 32 queries as one batch, per query | {per_query:.2f} |")
    return "\n".join(lines)
