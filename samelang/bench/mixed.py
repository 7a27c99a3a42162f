"""``samelang bench --section burst`` and ``--section mixed``: how ``samelang serve`` holds under load.

* ``burst``: the served default (en+zh) gets ``BURST`` ``/search`` requests at once with admission control on,
  ``/health`` asked every 20 ms meanwhile (from its own process), then SIGTERM. Checked: only 200s and 429s,
  every 429 within :data:`REJECT_MS`, ``/health`` p99 under :data:`HEALTH_MS`, the admitted p99 within the queue
  bound ((running + queued) / the throughput kept during the burst + one request alone: Little's law), exit
  within :data:`EXIT_S`.
* ``mixed``: ``--soak-seconds`` of every route (native, OpenAI ``/v1/embeddings``, TEI ``/embed`` and ``/rerank``)
  at concurrency 32 while documents are added and deleted every few seconds (the functions ``samelang index add``
  and ``index delete`` call, on a copy of the demo index), on FAISS and on Milvus (a milvus-lite server over
  gRPC, as a Milvus standalone: milvus-lite's file mode serves one process at a time). Checked: no 5xx, every
  429 within :data:`REJECT_MS`, every added document found by its own text and every deleted one gone, RSS after
  warm-up grown by less than :data:`RSS_GROWTH_PCT` %; p50/p99 per route. A client given a 429 waits its
  ``Retry-After``, as the OpenAI and TEI clients do. Both load the server through :class:`.http_load.RawConnection`
  (a load generator: a 429 is timed as the server answers it, not as a Python HTTP client queues it).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import httpx
import numpy as np

from samelang.bench.common import TINY_LANGS, BenchConfig, serve_command
from samelang.bench.http_load import RawConnection, ServerProcess, free_port
from samelang.bench.soak import payloads, sample_rss, weighted_kinds
from samelang.core import catalogue as R
from samelang.corpora import Document, load_xquad
from samelang.indexes.stores import StoreSpec
from samelang.indexes.writes import add_documents, delete_documents, export_index
from samelang.primitives.langid import get_identifier
from samelang.service.config import ServiceSettings

BURST = 200  # the burst: 200 searches at once
REJECT_MS = 50.0  # a 429 comes at once
HEALTH_MS = 100.0  # the probes never wait behind model work
EXIT_S = 10.0  # an operator's restart
RSS_GROWTH_PCT = 10.0
MIXED_LIMITS = (8, 8)  # (running, queued) for the mixed soak: 32 clients overflow it, so 429s are exercised
MIX = (("search", 6), ("search_rerank", 1), ("rerank", 1), ("answer", 1), ("diagnose", 1), ("openai_embed", 1),
       ("tei_embed", 1), ("tei_rerank", 1))  # fmt: skip
LABEL = {"search_rerank": " (reranked)", "tei_rerank": " (TEI body)"}
ROUTE = {"search_rerank": "/search", "openai_embed": "/v1/embeddings", "tei_embed": "/embed", "tei_rerank": "/rerank"}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# ------------------------------------------------------------------------------------------ burst
def _probe(url: str, started, stop, out) -> None:
    """``/health`` every 20 ms until ``stop``, in a process of its own (a load balancer's health check is not
    the burst's client: its latencies must not wait behind that client's own event loop)."""
    health = []
    with httpx.Client(base_url=url, timeout=30) as c:
        c.get("/health")
        started.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            r = c.get("/health")
            health.append((r.status_code, 1000 * (time.perf_counter() - t0)))
            time.sleep(0.02)
    out.put(health)


async def _burst(url: str, n: int) -> dict:
    """``n`` searches at once, each on a connection opened beforehand (a client's keep-alive pool), written
    as prepared bytes: a load generator, like wrk, so that on cores shared with the server the times are the
    server's and not a Python HTTP client's own queue (httpx took seconds to send 200 requests here);
    ``/health`` probed meanwhile by :func:`_probe` with httpx, the one-request-at-a-time time by httpx too."""
    import multiprocessing  # deferred: only the burst spawns a process

    queries = [q.text for q in load_xquad(["en", "zh"], split="test").questions][:n]
    conns = [await RawConnection.open(url) for _ in queries]
    requests = [c.request("/search", json.dumps({"query": q, "k": 10}).encode()) for c, q in zip(conns, queries)]
    ctx = multiprocessing.get_context("spawn")
    started, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    prober = ctx.Process(target=_probe, args=(url, started, stop, out), daemon=True)
    prober.start()
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
    t0 = time.perf_counter()
    answers = [(code, ms) for code, _, _, ms in await asyncio.gather(*(c.send(r) for c, r in zip(conns, requests)))]
    seconds = time.perf_counter() - t0
    stop.set()
    health = await asyncio.get_running_loop().run_in_executor(None, out.get, True, 60)
    prober.join(10)
    for c in conns:
        c.close()
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        alone = []
        for q in queries[:5]:
            t = time.perf_counter()
            (await client.post("/search", json={"query": q, "k": 10})).raise_for_status()
            alone.append(1000 * (time.perf_counter() - t))
    return {"answers": answers, "health": health, "seconds": seconds, "alone_ms": statistics.median(alone)}


def burst_check(out: dict, running: int, queued: int) -> dict:
    """The acceptance numbers of one burst: codes, 429 and /health latencies, and the queue bound."""
    codes = [c for c, _ in out["answers"]]
    admitted = [ms for c, ms in out["answers"] if c == 200]
    rejected = [ms for c, ms in out["answers"] if c == 429]
    throughput = len(admitted) / out["seconds"]  # requests/s the server finished while the burst lasted
    bound_ms = 1000 * (running + queued) / max(throughput, 1e-9) + out["alone_ms"]
    health = [ms for c, ms in out["health"]]
    return {
        "n": len(codes), "ok": codes.count(200), "rejected": len(rejected),
        "other": sorted({c for c in codes if c not in (200, 429)}), "max_429_ms": max(rejected, default=0.0),
        "health_p99_ms": pct(health, 99), "health_bad": sum(c != 200 for c, _ in out["health"]),
        "admitted_p50_ms": pct(admitted, 50), "admitted_p99_ms": pct(admitted, 99), "bound_ms": bound_ms,
    }  # fmt: skip


def sigterm_exit_s(proc: subprocess.Popen) -> float:
    """Seconds from SIGTERM to the process's exit (killed, and reported as such, past 60 s)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.monotonic() - t0


def bench_burst(cfg: BenchConfig) -> str:
    n, (running, queued) = (20, (2, 3)) if cfg.tiny else (BURST, (32, 32))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
    cmd = serve_command(cfg, port) + ["--max-concurrent-requests", str(running), "--max-queued-requests", str(queued)]
    with ServerProcess(cmd, url, Path(cfg.out) / "server-burst.log", env=env) as server:
        out = asyncio.run(_burst(url, n))
        took = sigterm_exit_s(server.proc)
    m = burst_check(out, running, queued) | {"exit_s": took}
    passed = (not m["other"] and m["max_429_ms"] <= REJECT_MS and m["health_p99_ms"] < HEALTH_MS
              and m["health_bad"] == 0 and m["admitted_p99_ms"] <= m["bound_ms"] and took < EXIT_S)  # fmt: skip
    rows = [
        ("requests at once", f"{m['n']}"), ("200 / 429 / other", f"{m['ok']} / {m['rejected']} / {m['other'] or '-'}"),
        ("slowest 429", f"{m['max_429_ms']:.1f} ms (<= {REJECT_MS:.0f})"),
        ("/health p99 during the burst", f"{m['health_p99_ms']:.1f} ms (< {HEALTH_MS:.0f}), {m['health_bad']} not 200"),
        ("admitted p50 / p99", f"{m['admitted_p50_ms']:.0f} / {m['admitted_p99_ms']:.0f} ms"),
        ("queue bound", f"{m['bound_ms']:.0f} ms"), ("exit after SIGTERM", f"{took:.1f} s (< {EXIT_S:.0f})"),
    ]  # fmt: skip
    return "\n".join(["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]) + (
        f"\n\n{'PASS' if passed else 'FAIL'}. Server: `samelang serve --generator none --max-concurrent-requests "
        f"{running} --max-queued-requests {queued}` (the served default); {n} `/search` at once from one client "
        "process on the same cores (prepared bytes over connections opened before, as wrk sends); `/health` probed "
        "every 20 ms by httpx from a process of its own; the queue bound is (running + queued) / the throughput kept "
        "during the burst + one request alone (samelang/bench/mixed.py)."
    )


# ------------------------------------------------------------------------------------------ mixed soak
def mixed_payloads(index_langs: tuple[str, ...], model: str) -> dict[str, list[dict]]:
    """The soak's requests (:func:`samelang.bench.soak.payloads`) and the OpenAI and TEI routes', as their
    clients send them: OpenAI's names the served ``model``; TEI's rerank asks for long texts to be cut."""
    data = payloads(index_langs)
    queries = [b["query"] for b in data["search"]]
    paras = [d for b in data["rerank"] for d in b["documents"]]
    data["openai_embed"] = [{"model": model, "input": queries[i : i + 4]} for i in range(0, 120, 4)]
    data["tei_embed"] = [{"inputs": queries[i : i + 4]} for i in range(0, 120, 4)]
    data["tei_rerank"] = [{"query": q, "texts": paras[(7 * i) % 100 : (7 * i) % 100 + 6], "truncate": True}
                          for i, q in enumerate(queries[:40])]  # fmt: skip
    return data


class Writer:
    """Adds and deletes documents every ``every`` seconds, as ``samelang index add`` / ``index delete`` do
    (the same functions, the served model's encoder), until stopped: a batch of 3 new documents each time,
    and every second time 2 of those added before are deleted again. New documents are XQuAD train
    paragraphs, which the demo index (test articles) does not hold."""

    def __init__(self, index: Path, encoder, analyzer, uri: str | None, every: float, seed: int = 0):
        self.index, self.encoder, self.analyzer, self.uri, self.every = index, encoder, analyzer, uri, every
        self.rng = random.Random(seed)
        self.pool = load_xquad(["en", "zh"], split="train").documents()
        self.rng.shuffle(self.pool)
        self.live: dict[str, str] = {}  # id -> text
        self.deleted: dict[str, str] = {}
        self.writes, self.errors, self.stop = 0, [], threading.Event()

    def _add(self) -> None:
        batch = [self.pool.pop() for _ in range(3)]
        docs = [Document(f"soak-{d.id}", d.text, d.lang) for d in batch]
        add_documents(self.index, docs, self.encoder.encode_passages, self.encoder.info,
                      lambda t: get_identifier().detect_many(t), 16, analyzer=self.analyzer, uri=self.uri)  # fmt: skip
        self.live |= {d.id: d.text for d in docs}

    def _delete(self) -> None:
        gone = self.rng.sample(sorted(self.live), 2)
        delete_documents(self.index, gone, analyzer=self.analyzer, uri=self.uri)
        for i in gone:
            self.deleted[i] = self.live.pop(i)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self._add()
                if self.writes % 2 == 1 and len(self.live) >= 2:
                    self._delete()
                self.writes += 1
            except Exception as e:  # noqa: BLE001 -- counted and reported: a failed write fails the soak
                self.errors.append(f"{type(e).__name__}: {e}")


async def _traffic(url: str, pid: int, seconds: float, concurrency: int, index_langs, seed: int) -> dict:
    model = httpx.get(f"{url}/v1/models", timeout=30).raise_for_status().json()["data"][0]["id"]
    rng, data = random.Random(seed), mixed_payloads(index_langs, model)
    kinds = weighted_kinds(MIX)
    stats = {k: {"requests": 0, "ok": [], "rejected": [], "errors": []} for k, _ in MIX}
    rss: list[tuple[float, float]] = []  # (seconds since start, server RSS MB)
    start = time.monotonic()
    deadline = start + seconds

    async def worker():
        conn = await RawConnection.open(url)
        while time.monotonic() < deadline:
            kind = rng.choice(kinds)
            s = stats[kind]
            s["requests"] += 1
            request = conn.request(ROUTE.get(kind, f"/{kind}"), json.dumps(rng.choice(data[kind])).encode())
            try:
                code, headers, body, ms = await asyncio.wait_for(conn.send(request), 120)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                s["errors"].append(f"{type(e).__name__}: {e}")
                conn.close()
                continue
            if code == 200:
                s["ok"].append(ms)
            elif code == 429:
                s["rejected"].append(ms)
                await asyncio.sleep(float(headers.get("retry-after", "1")))
            else:
                s["errors"].append(f"HTTP {code}: {body[:200].decode('utf-8', 'replace')}")
        conn.close()

    await asyncio.gather(sample_rss(pid, start, deadline, rss), *(worker() for _ in range(concurrency)))
    return {"stats": stats, "rss": rss, "seconds": time.monotonic() - start}


def write_until_stopped(index: Path, svc: ServiceSettings, uri: str | None, every: float, stop, report) -> None:
    """A :class:`Writer` in a process of its own, as ``samelang index add`` runs beside a server (a thread of the
    load generator's process would stall its event loop, and each 429 would be timed late); sends what it wrote
    (``live``, ``deleted``, ``writes``, ``errors``) through ``report`` once ``stop`` is set."""
    encoder = R.open_encoder(R.chosen_biencoder(svc), home=svc.home, options=svc.engine_options())
    writer = Writer(index, encoder, encoder.analyzer, uri, every=every)
    writer.stop = stop
    writer.run()
    report.send({"live": writer.live, "deleted": writer.deleted, "writes": writer.writes, "errors": writer.errors})


def writes_beside(index: Path, svc: ServiceSettings, uri: str | None, every: float):
    """(start, finish): start :func:`write_until_stopped` in a spawned process; ``finish()`` stops it and returns
    its report (a writer that died is a failed write)."""
    ctx = multiprocessing.get_context("spawn")
    stop, (receive, send) = ctx.Event(), ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=write_until_stopped, args=(index, svc, uri, every, stop, send), name="samelang-soak-writer", daemon=True
    )

    def start() -> None:
        proc.start()
        send.close()  # the child's end only: a writer that dies closes the pipe, and finish() sees it at once

    def finish() -> dict:
        stop.set()
        try:
            report = receive.recv() if receive.poll(600) else None
        except EOFError:
            report = None
        proc.join(30)
        died = {"live": {}, "deleted": {}, "writes": 0, "errors": [f"the writer process ended ({proc.exitcode})"]}
        return report or died

    return start, finish


def findable(url: str, written: dict) -> dict:
    """After the soak (the newest generation served): each live added document among the top 10 for its
    own text, each deleted one nowhere in them (``written``: the writer's report)."""

    def hit_ids(text: str) -> set[str]:
        r = httpx.post(f"{url}/search", json={"query": text[:1000], "k": 10}, timeout=120)
        r.raise_for_status()
        return {h["id"] for h in r.json()["hits"]} | {v["id"] for h in r.json()["hits"] for v in h["versions"]}

    httpx.post(f"{url}/admin/reload", timeout=120).raise_for_status()
    missing = [i for i, t in written["live"].items() if i not in hit_ids(t)]
    back = [i for i, t in written["deleted"].items() if i in hit_ids(t)]
    return {"live": len(written["live"]), "missing": missing, "deleted": len(written["deleted"]), "still_found": back}


def rss_growth(rss: list[tuple[float, float]], seconds: float) -> tuple[float, float, float]:
    """(first, last, growth %): medians of the first and last fifth of the samples after warm-up (the first
    fifth of the run, at most 60 s)."""
    values = [mb for t, mb in rss if t >= min(60.0, seconds / 5)] or [mb for _, mb in rss]
    fifth = max(1, len(values) // 5)
    first, last = statistics.median(values[:fifth]), statistics.median(values[-fifth:])
    return first, last, 100 * (last - first) / first


class MilvusServer:
    """``python -m milvus_lite server`` on a free port for the length of a ``with`` block: a Milvus that the
    server and the writer both reach over gRPC (``http://127.0.0.1:PORT``)."""

    def __init__(self, data_dir: Path, log_path: Path):
        self.data_dir, self.log_path, self.port = data_dir, log_path, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MilvusServer:
        self._log = open(self.log_path, "wb")  # closed in __exit__
        cmd = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.data_dir), "--host",
               "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"milvus-lite server exited ({self.proc.returncode}): see {self.log_path}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"milvus-lite server not listening after 120 s: see {self.log_path}")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def mixed_load(cfg: BenchConfig) -> tuple[int, float]:
    """(concurrent clients, seconds between writes): the issue's 32 and every few seconds; tiny: 4 and 1."""
    return (4, 1.0) if cfg.tiny else (32, 5.0)


def mixed_run(cfg: BenchConfig, store: str, seconds: float) -> dict:
    """One soak over a private copy of the demo index in ``store`` (``faiss`` or ``milvus``)."""
    langs = TINY_LANGS if cfg.tiny else "en,zh"
    svc = ServiceSettings(demo_langs=langs, **({"home": cfg.home} if cfg.home else {}))
    encoder = R.open_encoder(R.chosen_biencoder(svc), home=svc.home, options=svc.engine_options())
    demo = R.ensure_demo_index(svc.home, langs, encoder)
    folder = Path(cfg.out) / f"mixed-{store}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    running, queued = MIXED_LIMITS
    with MilvusServer(folder / "milvus", folder / "milvus.log") if store == "milvus" else nullcontext() as milvus:
        uri = milvus.uri if store == "milvus" else None
        export_index(demo, folder / "index", StoreSpec(store, uri))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = serve_command(cfg, port) + ["--index", str(folder / "index"), "--max-concurrent-requests",
                                          str(running), "--max-queued-requests", str(queued)]  # fmt: skip
        env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
        clients, every = mixed_load(cfg)
        start_writing, finish_writing = writes_beside(folder / "index", svc, uri, every)
        with ServerProcess(cmd, url, folder / "server.log", env=env) as server:
            start_writing()
            try:
                out = asyncio.run(_traffic(url, server.proc.pid, seconds, clients, tuple(langs.split(",")), seed=0))
            finally:
                written = finish_writing()
            out["found"] = findable(url, written)
    out |= {"store": store, "writes": written["writes"], "write_errors": written["errors"]}
    out["rss_first_mb"], out["rss_last_mb"], out["rss_growth_pct"] = rss_growth(out["rss"], out["seconds"])
    return out


def mixed_check(out: dict) -> list[str]:
    """What failed of the soak's promises (empty: it passed)."""
    st = out["stats"]
    errors = [e for s in st.values() for e in s["errors"]]
    slow = [ms for s in st.values() for ms in s["rejected"] if ms > REJECT_MS]
    found = out["found"]
    return [m for bad, m in [
        (errors, f"{len(errors)} answers not 200/429 (first: {errors[:2]})"),
        (slow, f"{len(slow)} 429s slower than {REJECT_MS:.0f} ms (slowest {max(slow, default=0):.0f} ms)"),
        (out["write_errors"], f"writes failed: {out['write_errors'][:2]}"),
        (found["missing"], f"{len(found['missing'])} added documents not found: {found['missing'][:3]}"),
        (found["still_found"], f"{len(found['still_found'])} deleted documents still found"),
        (out["rss_growth_pct"] >= RSS_GROWTH_PCT, f"RSS grew {out['rss_growth_pct']:.1f}%"),
    ] if bad]  # fmt: skip


def format_mixed(out: dict) -> str:
    lines = ["| route | requests | 200 | 429 | other | p50 ms | p99 ms | slowest 429 ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for kind, s in out["stats"].items():
        route = ROUTE.get(kind, f"/{kind}") + {"search_rerank": " (reranked)", "tei_rerank": " (TEI body)"}.get(
            kind, ""
        )
        lines.append(
            f"| {route} | {s['requests']} | {len(s['ok'])} | {len(s['rejected'])} | {len(s['errors'])} "
            f"| {pct(s['ok'], 50):.0f} | {pct(s['ok'], 99):.0f} | {max(s['rejected'], default=0):.1f} |"
        )
    f, failed = out["found"], mixed_check(out)
    lines.append(
        f"\n{out['store']}: {out['seconds']:.0f} s, {out['writes']} writes ({f['live']} added documents live, all "
        f"{'found' if not f['missing'] else 'but ' + str(len(f['missing'])) + ' found'}; {f['deleted']} deleted, "
        f"{len(f['still_found'])} still found); server RSS {out['rss_first_mb']:.0f} -> {out['rss_last_mb']:.0f} MB "
        f"({out['rss_growth_pct']:+.1f}%). " + ("PASS" if not failed else "FAIL: " + "; ".join(failed))
    )
    return "\n".join(lines)


def bench_mixed(cfg: BenchConfig) -> str:
    seconds = min(cfg.soak_seconds, 30.0) if cfg.tiny else cfg.soak_seconds
    parts = [format_mixed(mixed_run(cfg, store, seconds)) for store in ("faiss", "milvus")]
    running, queued = MIXED_LIMITS
    clients, every = mixed_load(cfg)
    return "\n\n".join(parts) + (
        f"\n\nServer: `samelang serve --generator none --max-concurrent-requests {running} --max-queued-requests "
        f"{queued} --index COPY` (a copy of the demo index; Milvus: a milvus-lite server over gRPC); {clients} clients "
        f"on the same cores (each a keep-alive connection sending prepared bytes, as wrk does), each waiting a 429's "
        f"Retry-After; writes every {every:g} s from a process of their own: 3 "
        "documents added, every second time 2 of them deleted (samelang/bench/mixed.py)."
    )
