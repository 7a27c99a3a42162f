"""Section "milvus": the same vectors in FAISS (in process) and in Milvus (milvus-lite, through the product's
:class:`samelang.indexes.stores.MilvusStore`), built and searched side by side.

Vectors and queries are the "scale" section's (perturbed real paragraph embeddings, ``samelang/bench/scale.py``).
Per store and index kind: the time to build (FAISS: add; Milvus: create the collection, upsert in the product's
batches, flush, build and load the index), bytes on disk per vector, recall@10 against exact search, and the
one-query latency ``/search`` pays (p50, p95; FAISS rows are the scale section's, timed after a warm pass; Milvus
after ten warm-up queries). Milvus's searches carry the product's filter (the generation's rows, no deleted row), as
serving does. IVF on both: nlist as the scale section's, nprobe the smallest that meets the recall target. The rows
say what the same client code costs on one host; ``docs/scale-out.md`` says what milvus-lite is and is not for.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from samelang.bench.scale import (
    CHUNK,
    _measure,
    ivf_nlist,
    latencies_ms,
    make_queries,
    make_vectors,
    nprobe_sweep,
    recall_at_k,
    smallest_meeting,
)
from samelang.indexes import vectors as V
from samelang.indexes.stores import MilvusStore


def _milvus_row(x, q, truth, k, target, kind: str, folder: Path, progress: bool) -> dict:
    folder = folder / kind
    folder.mkdir()
    uri, coll, nlist = str(folder / "bench.db"), f"bench_{kind}", ivf_nlist(len(x))
    spec = V.IndexSpec(kind=kind, ivf_nlist=nlist)
    t0 = time.perf_counter()
    MilvusStore.create(uri, coll, x.shape[1], spec)
    empty = [""] * CHUNK
    for start in tqdm(range(0, len(x), CHUNK), desc=f"milvus {kind} upsert", leave=False, disable=not progress):
        stop = min(start + CHUNK, len(x))
        MilvusStore.upsert(uri, coll, x[start:stop], np.arange(start, stop), empty, empty)
    store = MilvusStore(uri, coll, len(x), x.shape[1])  # loads the collection: its index is built by then
    build_s = time.perf_counter() - t0
    try:
        if kind == "flat":
            value, recall, met = None, recall_at_k(store.search(q, k)[1], truth), None
        else:
            recall_with = lambda p: recall_at_k(store.search(q, k, nprobe=p)[1], truth)  # noqa: E731
            value, recall, met = smallest_meeting(nprobe_sweep(nlist), recall_with, target)
        # ten warm-up queries, not a pass: a milvus-lite query over 1M rows takes about a second
        lat = latencies_ms(lambda one: store.search(one, k, nprobe=value), q, warm=10)
        described = store.client.describe_index(coll, "vector").get("index_type", "?")
    finally:
        store.close()
    nbytes = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    params = f"{described}" + (f" nlist={nlist} nprobe={value}" if kind == "ivf" else "")
    return {"store": "milvus-lite", "kind": kind, "params": params, "build_s": build_s,
            "bytes_per_vector": nbytes / len(x), "recall_at_10": recall, "p50_ms": float(np.percentile(lat, 50)),
            "p95_ms": float(np.percentile(lat, 95)), "target_met": met}  # fmt: skip


def run_milvus(seeds: np.ndarray, n: int, n_queries: int = 200, k: int = 10, target: float = 0.95, seed: int = 0,
               progress: bool = True) -> list[dict]:  # fmt: skip
    """Rows for FAISS flat and IVF, then milvus-lite FLAT and IVF_FLAT, over the same ``n`` vectors."""
    corpus_ss, query_ss, build_ss = np.random.SeedSequence(seed).spawn(3)
    x = make_vectors(seeds, n, np.random.default_rng(corpus_ss))
    q = make_queries(seeds, n_queries, np.random.default_rng(query_ss))
    rows, truth, build_rng = [], None, np.random.default_rng(build_ss)
    for kind in ("flat", "ivf"):  # the scale section's rows (flat's results are the ground truth)
        row, truth = _measure(kind, x, q, truth, k, target, build_rng, progress)
        rows.append({"store": "faiss", **row})
    folder = Path(tempfile.mkdtemp(prefix="samelang-bench-milvus-"))
    try:
        for kind in ("flat", "ivf"):
            rows.append(_milvus_row(x, q, truth, k, target, kind, folder, progress))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for r in rows:
        r["n"] = n
    return rows


def format_milvus_table(rows: list[dict]) -> str:
    lines = ["| vectors | store | index | params | build s | disk bytes/vector | recall@10 | p50 ms | p95 ms |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        mark = "*" if r["target_met"] is False else ""
        lines.append(f"| {r['n']:,} | {r['store']} | {r['kind']} | {r['params']} | {r['build_s']:.1f} "
                     f"| {r['bytes_per_vector']:,.0f} | {r['recall_at_10']:.3f}{mark} | {r['p50_ms']:.2f} "
                     f"| {r['p95_ms']:.2f} |")  # fmt: skip
    return "\n".join(lines)
