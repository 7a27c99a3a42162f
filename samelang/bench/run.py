"""``samelang bench``: every speed number of ``docs/performance.md``, measured side by side in one run.

Each section prints a Markdown table (medians over ``repeats``; ours and the reference alternate within each
repetition, so machine noise hits both alike): ``embed`` (passages/s and tokens/s per precision vs
sentence-transformers ``encode`` fp32, and the share of the CPU's FLOP peak), ``rerank`` (one query x 20 paragraphs
vs ``CrossEncoder.predict``), ``http`` (``/search`` and ``/rerank`` latency and throughput at concurrency 1/8/32
against ``samelang serve`` on localhost), ``build`` (embed and index XQuAD), ``scale`` (Flat vs HNSW vs IVF at
10k-1M vectors grown from real embeddings), ``memory`` (``samelang serve``'s RSS per component, with and without
the generator), ``peers`` (infinity-emb's engines, :mod:`samelang.bench.peers`), ``stream`` (what a reader of a
streamed ``/answer`` waits for, :mod:`samelang.bench.stream`); only when asked: ``soak`` (10 minutes of mixed
traffic), ``burst`` and ``mixed`` (a burst against admission control; a soak with writes, :mod:`.mixed`),
``scale-10m`` (:mod:`samelang.bench.scale_pq`) and ``train`` (:mod:`samelang.bench.train`).
``--tiny`` shrinks every section to a handful of inputs so a test can run each end to end: it measures nothing.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import httpx
import numpy as np

from samelang.bench.common import (
    TINY_LANGS,
    BenchConfig,
    cpu_line,
    encoder_flops_per_token,
    fp32_peak_gflops,
    median_alternating,
    precisions,
    serve_command,
    table,
    torch_threads,
)
from samelang.bench.http_load import ServerProcess, format_http_table, free_port, load
from samelang.bench.milvus import format_milvus_table, run_milvus
from samelang.bench.mixed import bench_burst, bench_mixed
from samelang.bench.peers import bench_peers
from samelang.bench.profile import rerank_profile, search_profile
from samelang.bench.scale import format_scale_table, run_scale
from samelang.bench.scale_pq import format_pq_table, run_scale_pq
from samelang.bench.soak import format_soak, soak
from samelang.bench.stream import bench_stream
from samelang.bench.train import format_train_table, run_train
from samelang.core.catalogue import (
    REPO_MODELS,
    default_biencoder,
    default_cross_encoder,
    default_weights,
    demo_index_path,
    model_parts,
    open_encoder,
)
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.fused import is_fused_folder
from samelang.core.paths import PERFORMANCE_DOC
from samelang.core.runtime.precision import EngineOptions, cpu_has_bf16, resolve
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.indexes.generations import IndexNotFound, current_generation
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.atomic import atomic_dir, atomic_write_text

# ------------------------------------------------------------------------------------------ machine


# ------------------------------------------------------------------------------------------ sections
def bench_embed(cfg: BenchConfig) -> str:
    home = cfg.home
    path = default_weights(home)
    n = 8 if cfg.tiny else 64 if cfg.quick else 160
    texts = [d.text for d in load_xquad(["en"], split="test").documents()[:n]]
    ours = {p: Encoder(path, home=home, options=EngineOptions(precision=p)) for p in precisions(cfg)}
    default = resolve(EngineOptions(), "cpu", Path(path)).precision  # what the service serves
    st = next(iter(ours.values())).model  # the same merged SentenceTransformer
    tok = st.tokenizer
    lengths = [len(x) for x in tok(["passage: " + t for t in texts], truncation=True, max_length=512)["input_ids"]]
    tokens = sum(lengths)
    fns = {"st32": lambda: st.encode(texts, prompt_name="passage", batch_size=32, normalize_embeddings=True)}
    if not cfg.quick:  # how much of the gain is batch size alone
        fns["st8"] = lambda: st.encode(texts, prompt_name="passage", batch_size=8, normalize_embeddings=True)
    for p, enc in ours.items():
        fns[p] = lambda enc=enc: enc.encode_passages(texts)
    sec = median_alternating(fns, cfg.repeats)
    flops = encoder_flops_per_token(st[0].auto_model, statistics.mean(lengths)) * tokens
    peak = fp32_peak_gflops(cfg)
    names = {"st32": "sentence-transformers encode fp32, batch 32 (reference)", "st8": "sentence-transformers "
             "encode fp32, batch 8"}  # fmt: skip
    rows = []
    for k, s in sec.items():
        label = names.get(k) or f"samelang engine {k} ({ours[k].engine.backend_name})" + (
            " **default**" if k == default else ""
        )
        gflops = flops / s / 1e9
        rows.append(
            [label, f"{n / s:.1f}", f"{tokens / s:,.0f}", f"{sec['st32'] / s:.2f}x", f"{100 * gflops / peak:.0f}%"]
        )
    head = [f"encoder ({Path(path).name}, {n} en paragraphs, {tokens} tokens)", "passages/s", "tokens/s",
            "vs ST fp32", f"% of fp32 peak ({peak:.0f} GFLOP/s)"]  # fmt: skip
    return table(head, rows) + (
        f"\n\nFLOPs: {flops / tokens / 1e6:.1f} MFLOP per token (Linear weights x 2 + attention). "
        + ("bf16 peak = 2x fp32 here." if cpu_has_bf16() else "No native bf16 on this CPU: bf16 not offered.")
    )


def bench_rerank(cfg: BenchConfig) -> str:
    path = default_cross_encoder()
    if path is None:
        return "(no cross-encoder in models/: skipped)"
    x = load_xquad(["en"], split="test")
    docs = [d.text for d in x.documents()[: 4 if cfg.tiny else 20]]
    query = x.questions[0].text
    ours = {p: CrossEncoderReranker(path, home=cfg.home, options=EngineOptions(precision=p)) for p in precisions(cfg)}
    default = resolve(EngineOptions(), "cpu", Path(path)).precision
    ce = next(iter(ours.values())).model
    pairs = [(query, d) for d in docs]
    fns = {"ce": lambda: ce.predict(pairs, batch_size=32, convert_to_numpy=True)}
    for p, rr in ours.items():
        fns[p] = lambda rr=rr: rr.score(query, docs)
    sec = median_alternating(fns, cfg.repeats)
    rows = []
    for k, s in sec.items():
        label = (
            "sentence-transformers CrossEncoder.predict fp32, batch 32 (reference)"
            if k == "ce"
            else f"samelang engine {k} ({ours[k].engine.backend_name})" + (" **default**" if k == default else "")
        )
        rows.append([label, f"{s:.3f}", f"{len(docs) / s:.1f}", f"{sec['ce'] / s:.2f}x"])
    head = [f"reranker ({Path(path).name}, 1 query x {len(docs)} en paragraphs, max length 256)", "latency s",
            "pairs/s", "vs CrossEncoder"]  # fmt: skip

    served = ours.get(default) or CrossEncoderReranker(path, home=cfg.home, options=EngineOptions(default))
    return (
        table(head, rows)
        + "\n\nProfile of the default engine on this request (ONNX Runtime):\n\n"
        + (rerank_profile(served, query, docs))
    )


def bench_http(cfg: BenchConfig) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
    cmd = serve_command(cfg, port)
    log_path = Path(cfg.out) / "server.log"
    x = load_xquad(["en", "zh"], split="test")
    search = [{"query": q.text, "k": 10} for q in x.questions[:200]]
    paragraphs = [d.text for d in x.documents()]
    per_rerank = 2 if cfg.tiny else 20
    rerank = [{"query": q.text, "documents": paragraphs[(7 * i) % 140 : (7 * i) % 140 + per_rerank]}
              for i, q in enumerate(x.questions[:50])]  # fmt: skip
    if cfg.tiny:
        plan = {"/search": {1: 2, 8: 8}, "/rerank": {1: 1, 8: 4}}
    else:  # requests per concurrency level
        plan = {
            "/search": {1: 40, 8: 120, 32: 320} if cfg.quick else {1: 100, 8: 400, 32: 1000},
            "/rerank": {1: 4, 8: 8, 32: 32} if cfg.quick else {1: 10, 8: 24, 32: 64},
        }
    rows = []
    with ServerProcess(cmd, url, log_path, env=env) as server:
        for path, payloads in (("/search", search), ("/rerank", rerank)):
            for c, n in plan[path].items():
                row = load(url, path, payloads, concurrency=c, requests=n, timeout=600, server_pid=server.proc.pid)
                rows.append(row)

    queries = [p["query"] for p in search]
    if cfg.tiny:
        profile = search_profile(cfg.home, queries, repeats=3, demo_langs=TINY_LANGS)
        served = f"`samelang serve --generator none --langs {TINY_LANGS}` (bundled {TINY_LANGS} demo index"
    else:
        profile = search_profile(cfg.home, queries)
        served = "`samelang serve --generator none` (bundled en+zh demo index, 480 paragraphs"
    return format_http_table(rows) + (
        f"\n\nServer: {served}; defaults: "
        "micro-batching on, 2 ms window); the load generator runs on the same cores. CPU ms/req: user + system "
        "time per request of the server (all its threads) and of the load generator; their sum x req/s is the "
        "cores in use, so a row near the machine's core count is bound by compute, not by waiting.\n\n"
        "Where a /search request's time goes (in process, same models and index, no HTTP):\n\n" + profile
    )


MEMORY_COMPONENTS = ("encoder", "index", "reranker", "generator", "language_id")


def bench_memory(cfg: BenchConfig) -> str:
    """``samelang serve`` with ``--generator none`` and with the embedded generator: each component's
    load-time RSS growth, then the process's RSS after 40 ``/search``, 4 ``/rerank`` (20 paragraphs)
    and, with the generator, 12 ``/answer`` in 12 languages (what a server holds once warm)."""

    x = load_xquad(["en", "zh"], split="test")
    searches = [q.text for q in x.questions[: 4 if cfg.tiny else 40]]
    paragraphs = [d.text for d in x.documents()][:20]
    langs = [TINY_LANGS] if cfg.tiny else ["en", "ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh"]
    answers = [load_xquad([lang], split="test").questions[0].text for lang in langs]
    rows = []
    for generator in ("none", "llamacpp"):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
        cmd = serve_command(cfg, port)
        cmd[cmd.index("--generator") + 1] = generator
        # this section measures memory, not latency: a first answer that pages the generator's weights
        # in on a busy machine must not be cut by the default 30 s request budget
        cmd += ["--request-timeout-s", "600"]
        with ServerProcess(cmd, url, Path(cfg.out) / f"server-memory-{generator}.log", env=env):
            with httpx.Client(base_url=url, timeout=600) as client:
                for q in searches:
                    client.post("/search", json={"query": q, "k": 10}).raise_for_status()
                for q in searches[: 1 if cfg.tiny else 4]:
                    client.post("/rerank", json={"query": q, "documents": paragraphs}).raise_for_status()
                if generator != "none":
                    for q in answers[: 1 if cfg.tiny else len(answers)]:
                        client.post(
                            "/answer", json={"query": q, "max_tokens": 8 if cfg.tiny else 48}
                        ).raise_for_status()
                mem = client.get("/info").raise_for_status().json()["memory"]
        load = mem["load_rss_mb"]
        label = "--generator none" if generator == "none" else "embedded generator (default)"
        rows.append([label, f"{mem['before_load_rss_mb']:.0f}",
                     *(f"{load.get(c) or 0:.0f}" for c in MEMORY_COMPONENTS),
                     f"**{mem['process_rss_mb']:.0f}**", f"{mem['process_peak_rss_mb']:.0f}",
                     "yes" if mem["torch_imported"] else "no"])  # fmt: skip
    head = ["server", "python + libraries", *MEMORY_COMPONENTS, "RSS after traffic", "peak", "torch imported"]
    return table(head, rows) + (
        "\n\nMB. Per component: the growth of the server's resident set while it loads (in the order "
        "shown); the encoder's ONNX weights are memory-mapped, so its share grows with the tokens requests "
        "touch, which the RSS after traffic includes. Traffic: "
        f"{len(searches)} /search, /rerank of 20 paragraphs, and with the generator one /answer per language. "
        "The ONNX export and the demo index are made by a child process on a first start, so they never "
        "stay in the server's memory."
    )


def bench_train(cfg: BenchConfig) -> str:
    steps = 1 if cfg.tiny else 3
    rows = run_train(Path(cfg.home), steps, tiny=cfg.tiny, log=lambda m: print(m, file=sys.stderr, flush=True))
    return format_train_table(rows) + (
        f"\n\nThe bi-encoder recipe (seed 000's objective + target-language queries + hard negatives; LoRA r 16; "
        f"batch {2 if cfg.tiny else 16}, max length {32 if cfg.tiny else 256}): one step is its 5 forward passes, "
        f"the backward and AdamW; median of {steps} steps after a warm-up, each configuration in its own process "
        "(samelang/bench/train.py)."
    )


def bench_soak(cfg: BenchConfig) -> str:
    """``soak_seconds`` of mixed traffic against ``samelang serve`` (loopback): errors and RSS drift."""

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
    cmd = serve_command(cfg, port)
    with ServerProcess(cmd, url, Path(cfg.out) / "server-soak.log", env=env) as server:
        langs = (TINY_LANGS,) if cfg.tiny else ("en", "zh")
        out = soak(url, server.proc.pid, seconds=cfg.soak_seconds, concurrency=8, index_langs=langs)
    return format_soak(out) + (
        "\n\nServer: `samelang serve --generator none` (bundled demo index), 8 concurrent clients on the same cores."
    )


@dataclass
class Built:
    table: str
    vectors: np.ndarray


def build_models(home: Path) -> list[tuple[str, Path]]:
    """(label, folder) of the bi-encoders whose index builds are timed side by side: the base model (whose
    vectors seed the scale sections), the served default, and the newest fused pair (two models, an index
    embedded twice) when the served default is not it: what one encoder saves at build time."""
    served = default_biencoder(home)
    pairs = sorted(f for f in REPO_MODELS.iterdir() if is_fused_folder(f) and len(set(model_parts(f, home))) == 2)
    rows = [("base", Path(default_weights(home))), ("served", served)]
    if pairs and pairs[-1].resolve() != Path(served).resolve():
        rows.append(("fused pair", pairs[-1]))
    return rows


def _timed_build(folder: Path, docs: list, source: str, home: Path, tmp: Path):
    """(encoder, load s, build s, index folder) of one build of ``docs`` with the bi-encoder at ``folder``."""
    t0 = time.perf_counter()
    enc = open_encoder(folder, home=home, options=EngineOptions())
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_index(tmp, docs, enc.encode_passages, enc.info, source=source, analyzer=enc.analyzer)
    return enc, load_s, time.perf_counter() - t0, tmp


def bench_build(cfg: BenchConfig) -> Built:
    langs = ["en"] if cfg.tiny else ["en", "zh"] if cfg.quick else list(XQUAD_LANGS)
    # tiny: a slice, so the demo index (all 240 paragraphs per language) is not written from it
    docs = load_xquad(langs, split="test").documents()[:24] if cfg.tiny else load_xquad(langs, split="all").documents()
    corpus = f"XQuAD {'+'.join(langs) if len(langs) < 12 else 'all 12 languages'}" + (" (slice)" if cfg.tiny else "")
    source = f"xquad:{','.join(langs)}:all"  # what `samelang serve` builds for its demo index
    rows, vectors, base_rate = [], None, None
    with tempfile.TemporaryDirectory(prefix="samelang-bench-") as tmp:
        for i, (label, folder) in enumerate(build_models(cfg.home)):
            enc, load_s, build_s, idx = _timed_build(folder, docs, source, cfg.home, Path(tmp) / f"idx{i}")
            rate = len(docs) / build_s
            base_rate = base_rate or rate
            rows.append([corpus, f"{Path(folder).name} ({label})", f"{len(docs):,}", f"{build_s:.1f}", f"{rate:.1f}",
                         f"{rate / base_rate:.2f}", f"{build_s / len(docs) * 2880:.0f}", f"{load_s:.1f}",
                         enc.cache_tag])  # fmt: skip
            if label == "base":
                index = open_index(idx, enc.info)
                vectors = faiss.downcast_index(index.faiss_index.index).reconstruct_n(0, index.size)  # flat: row = id
                index.close()
                _keep_as_demo(cfg, langs, enc, idx)
    head = ["corpus", "bi-encoder", "paragraphs", "build s", "paragraphs/s", "x vs base", "2,880 paragraphs s "
            "(projected)", "model load s", "precision"]  # fmt: skip
    return Built(table(head, rows), np.asarray(vectors, dtype=np.float32))


def _keep_as_demo(cfg: BenchConfig, langs: list[str], enc, idx: Path) -> None:
    """The en+zh build is the server's demo index: the http section need not redo it."""
    demo = demo_index_path(cfg.home, ",".join(langs), enc.fingerprint, enc.cache_tag)
    try:
        current_generation(demo)
    except IndexNotFound:
        if not cfg.tiny:
            with atomic_dir(demo) as scratch:
                shutil.copytree(idx, scratch, dirs_exist_ok=True)


def bench_scale(cfg: BenchConfig, seeds: np.ndarray) -> str:
    sizes = (1_000,) if cfg.tiny else (10_000, 100_000) if cfg.quick else (10_000, 100_000, 1_000_000)
    rows = run_scale(seeds, sizes=sizes, n_queries=20 if cfg.tiny else 200, k=10)
    return format_scale_table(rows) + (
        f"\n\nVectors: perturbations of the {len(seeds):,} real paragraph embeddings of the build section "
        "(clustered like real data, not iid Gaussian); latency = one query per search call, as /search does."
    )


def bench_scale_pq(cfg: BenchConfig, seeds: np.ndarray) -> str:
    n = 20_000 if cfg.tiny else 1_000_000 if cfg.quick else 10_000_000
    # tiny: a factory that trains in seconds (PQ refine codes take minutes to train even on 20k vectors)
    tiny = {"factory": "IVF64,PQ16x4fs,Refine(SQ8)", "n_queries": 20, "train_size": 20_000} if cfg.tiny else {}
    rows = run_scale_pq(seeds, n=n, **tiny)
    return format_pq_table(rows) + (
        f"\n\nVectors: made from the {len(seeds):,} real paragraph embeddings of the build section, chunk by chunk "
        "(never all in memory); ground truth: a streamed exact search; latency: one query per search call "
        "(samelang/bench/scale_pq.py: the data model, and why a compressed index cannot pass on it)."
    )


def bench_milvus(cfg: BenchConfig, seeds: np.ndarray) -> str:
    n = 2_000 if cfg.tiny else 100_000 if cfg.quick else 1_000_000
    rows = run_milvus(seeds, n=n, n_queries=20 if cfg.tiny else 200 if cfg.quick else 100)
    return format_milvus_table(rows) + (
        f"\n\nVectors and queries: the scale section's (perturbations of the {len(seeds):,} real paragraph "
        "embeddings); recall@10 against exact search; latency: one query per call, Milvus through the product's "
        "MilvusStore (samelang/bench/milvus.py). Needs the extra `milvus`."
    )


# where the tables a run writes into docs/performance.md end; what follows, up to the next section, is kept
DOC_END = "<!-- end of the command's tables; the notes below are kept when it runs again -->"


def run(cfg: BenchConfig) -> str:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    size = " --tiny" if cfg.tiny else " --quick" if cfg.quick else ""
    parts = [f"# samelang bench{size}\n\nMachine: {cpu_line()}; torch threads: "
             f"{torch_threads()}; repeats: {cfg.repeats} (medians)."]  # fmt: skip
    seeds = None
    plain = {"embed": bench_embed, "rerank": bench_rerank, "http": bench_http, "memory": bench_memory,
             "soak": bench_soak, "stream": bench_stream, "peers": lambda c: bench_peers(c, table),
             "train": bench_train, "burst": bench_burst, "mixed": bench_mixed}  # fmt: skip
    on_vectors = {"scale": bench_scale, "milvus": bench_milvus, "scale-10m": bench_scale_pq}  # the build's vectors
    for name in cfg.sections:
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        if name == "build":
            built = bench_build(cfg)
            seeds, text = built.vectors, built.table
        elif name in plain:
            text = plain[name](cfg)
        elif name in on_vectors:
            seeds = bench_build(cfg).vectors if seeds is None else seeds
            text = on_vectors[name](cfg, seeds)
        else:
            raise ValueError(f"unknown section {name!r}")
        parts.append(f"## {name} ({time.perf_counter() - t0:.0f} s)\n\n{text}")
        (out / "bench.md").write_text("\n\n".join(parts) + "\n")
    if cfg.doc:
        write_doc(cfg, parts)
    return "\n\n".join(parts)


def doc_heading(cfg: BenchConfig) -> str:
    """The heading of the section of ``docs/performance.md`` a run writes: its own command (pyserini's
    rule: the command and its numbers together), so that each measured combination keeps its section."""
    size = " --tiny" if cfg.tiny else " --quick" if cfg.quick else ""
    default = BenchConfig.__dataclass_fields__["sections"].default
    sections = "" if cfg.sections == default else "".join(f" --section {s}" for s in cfg.sections)
    return f"## `samelang bench{size}{sections}`"


def write_doc(cfg: BenchConfig, parts: list[str], doc: Path = PERFORMANCE_DOC) -> None:
    """Write the run's tables (the machine line with the CPU flags, then each section's table) under the
    line that is exactly this command's heading, up to :data:`DOC_END`: the notes a person wrote after
    that marker stay. A command without a section gets one at the end of the page."""
    machine = parts[0].split("\n\n", 1)[1]
    tables = "\n\n".join([machine, *("#" + p for p in parts[1:])])
    heading = doc_heading(cfg)
    lines = doc.read_text().split("\n") if doc.exists() else ["# Performance", ""]
    if heading in lines:
        start = lines.index(heading)
        nxt = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        end = next((i for i in range(start + 1, nxt) if lines[i] == DOC_END), None)
        kept = lines[end + 1 : nxt] if end is not None else ["", *lines[nxt:nxt]]
        new = [*lines[:start], heading, "", tables, "", DOC_END, *kept, *lines[nxt:]]
    else:
        new = [*lines, *([""] if lines and lines[-1] else []), heading, "", tables, "", DOC_END, ""]
    atomic_write_text(doc, "\n".join(new))
