"""``samelang bench --section soak``: mixed traffic against a real server for a bounded time,
counting every error and watching the server's resident memory.

Loopback only; the run stops by itself after ``seconds``. Traffic mix (weights): /search 6,
/search with reranking 1, /rerank 1, /answer 1, /diagnose (12 labelled queries) 1, plus a request
that hangs up early now and then (a client disconnect must neither be an error nor leak work).
RSS drift = (median RSS of the last fifth of the run - median of the first fifth after warm-up)
/ the latter.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from pathlib import Path

import httpx

from samelang.corpora import load_xquad

MIX = (("search", 6), ("search_rerank", 1), ("rerank", 1), ("answer", 1), ("diagnose", 1))


def rss_mb(pid: int) -> float:
    """Resident MB of ``pid`` and its descendants: ``samelang serve`` is a front process and the server
    process it started (samelang/service/front.py)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text().splitlines()
            kids = [Path(t / "children").read_text().split() for t in Path(f"/proc/{p}/task").iterdir()]
        except (FileNotFoundError, ProcessLookupError):
            if p == pid:
                raise RuntimeError(f"no process {pid}") from None
            continue  # a child that ended meanwhile
        total += next((int(ln.split()[1]) for ln in status if ln.startswith("VmRSS:")), 0) / 1024
        todo += [int(k) for ks in kids for k in ks]
    return total


def weighted_kinds(mix) -> list[str]:
    """Each kind of request as many times as its weight: what a worker's ``rng.choice`` draws from."""
    return [k for k, w in mix for _ in range(w)]


async def sample_rss(pid: int, start: float, deadline: float, into: list[tuple[float, float]]) -> None:
    """(seconds since ``start``, resident MB of ``pid``) every 2 s until ``deadline`` (``time.monotonic``)."""
    while time.monotonic() < deadline:
        into.append((time.monotonic() - start, rss_mb(pid)))
        await asyncio.sleep(2.0)


def payloads(index_langs: tuple[str, ...] = ("en", "zh")) -> dict[str, list[dict]]:
    """Requests of each kind; /diagnose labels name the gold paragraph in each of ``index_langs``
    (the served index's languages: a label outside the index is a 422)."""
    x = load_xquad(["en", "zh"], split="test")
    qs = [q for q in x.questions]
    paras = [d.text for d in x.documents()]
    labelled = [{"query": q.text, "relevant": [f"xquad-{lang}-{q.group[6:]}" for lang in index_langs]} for q in qs]
    return {
        "search": [{"query": q.text, "k": 10} for q in qs[:200]],
        "search_rerank": [{"query": q.text, "k": 5, "rerank": True, "rerank_k": 10} for q in qs[200:260]],
        "rerank": [
            {"query": q.text, "documents": paras[(5 * i) % 150 : (5 * i) % 150 + 8]} for i, q in enumerate(qs[:50])
        ],
        "answer": [{"query": q.text, "k": 10, "passages": 2} for q in qs[300:360]],
        "diagnose": [{"queries": labelled[i : i + 12]} for i in range(0, 240, 12)],
    }


async def _soak(base_url: str, pid: int, seconds: float, concurrency: int, seed: int, index_langs) -> dict:
    rng = random.Random(seed)
    data = payloads(index_langs)
    kinds = weighted_kinds(MIX)
    route = {"search_rerank": "/search"}
    stats = {k: {"requests": 0, "errors": 0, "latencies": []} for k, _ in MIX}
    stats["hang_up"] = {"requests": 0, "errors": 0, "latencies": []}
    first_error: list[str] = []
    rss: list[tuple[float, float]] = []
    start = time.monotonic()
    deadline = start + seconds

    async def worker(client: httpx.AsyncClient):
        while time.monotonic() < deadline:
            kind = rng.choice(kinds)
            if rng.random() < 0.02:  # a client that gives up after 50 ms
                stats["hang_up"]["requests"] += 1
                try:
                    await client.post("/rerank", json=rng.choice(data["rerank"]), timeout=0.05)
                except httpx.TimeoutException:
                    pass
                continue
            body = rng.choice(data[kind])
            t0 = time.perf_counter()
            s = stats[kind]
            s["requests"] += 1
            try:
                r = await client.post(route.get(kind, f"/{kind}"), json=body)
                ok = r.status_code == 200
                err = None if ok else f"HTTP {r.status_code} on {kind}: {r.text[:200]}"
            except httpx.HTTPError as e:
                ok, err = False, f"{type(e).__name__} on {kind}: {e}"
            if ok:
                s["latencies"].append(time.perf_counter() - t0)
            else:
                s["errors"] += 1
                first_error.append(err)

    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        await asyncio.gather(sample_rss(pid, start, deadline, rss), *(worker(client) for _ in range(concurrency)))
    return {"stats": stats, "rss": rss, "first_error": first_error[:3], "seconds": time.monotonic() - start}


def soak(
    base_url: str,
    pid: int,
    seconds: float = 600,
    concurrency: int = 8,
    seed: int = 0,
    index_langs: tuple[str, ...] = ("en", "zh"),
) -> dict:
    out = asyncio.run(_soak(base_url, pid, seconds, concurrency, seed, tuple(index_langs)))
    values = [mb for t, mb in out["rss"] if t >= min(30.0, seconds / 5)] or [mb for _, mb in out["rss"]]
    fifth = max(1, len(values) // 5)
    first, last = statistics.median(values[:fifth]), statistics.median(values[-fifth:])
    out["rss_first_mb"], out["rss_last_mb"] = first, last
    out["rss_drift_pct"] = 100 * (last - first) / first
    return out


def format_soak(out: dict) -> str:
    lines = ["| traffic | requests | errors | p50 ms |", "|---|---:|---:|---:|"]
    for kind, s in out["stats"].items():
        p50 = f"{1000 * statistics.median(s['latencies']):.0f}" if s["latencies"] else "-"
        lines.append(f"| {kind} | {s['requests']} | {s['errors']} | {p50} |")
    total_err = sum(s["errors"] for s in out["stats"].values())
    lines.append(
        f"\n{out['seconds']:.0f} s of mixed traffic, {total_err} errors; server RSS {out['rss_first_mb']:.0f} MB -> "
        f"{out['rss_last_mb']:.0f} MB (drift {out['rss_drift_pct']:+.1f}%)"
        + (f"; first errors: {out['first_error']}" if out["first_error"] else "")
    )
    return "\n".join(lines)
