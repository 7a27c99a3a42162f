"""``samelang bench --section stream``: what a reader of a streamed ``/answer`` waits for, against
``/search`` and the waited-for ``/answer`` on the same server and questions.

For each question, in alternation (so that machine noise hits all alike): ``/search`` (``k`` 10),
``/answer`` with ``stream: true`` read by an SSE client (time to the ``passages`` event, to the
first ``token`` event, to ``done``), and ``/answer`` without streaming. Times are the client's,
from sending the request. The streamed and the waited-for answers are compared too (greedy
decoding: they must be the same text).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import httpx
from httpx_sse import connect_sse

from samelang.bench.common import TINY_LANGS, serve_command
from samelang.bench.http_load import ServerProcess, free_port
from samelang.corpora import XQUAD_LANGS, load_xquad


def questions(tiny: bool) -> list[str]:
    """A fixed sample: the first questions of the held-out test articles in every XQuAD language
    (three per language; one English question at tiny sizes)."""
    if tiny:
        return [load_xquad(["en"], split="test").questions[0].text]
    return [q.text for lang in XQUAD_LANGS for q in load_xquad([lang], split="test").questions[:3]]


def _streamed(client: httpx.Client, body: dict) -> dict:
    t0 = time.perf_counter()
    out: dict = {"first_token": None}
    with connect_sse(client, "POST", "/answer", json={**body, "stream": True}) as s:
        s.response.raise_for_status()
        for e in s.iter_sse():
            ms = (time.perf_counter() - t0) * 1000
            if e.event == "passages":
                out["passages"] = ms
            elif e.event == "token" and out["first_token"] is None:
                out["first_token"] = ms
            elif e.event == "done":
                out["done"], out["answer"] = ms, e.json()["answer"]
            elif e.event == "error":
                raise RuntimeError(f"the stream ended with an error: {e.data}")
    return out


def measure(url: str, texts: list[str], max_tokens: int) -> dict[str, list]:
    """Per question: the four times (ms) and whether the streamed answer was the waited-for one."""
    times: dict[str, list] = {k: [] for k in ("search", "passages", "first_token", "done", "plain", "same")}
    with httpx.Client(base_url=url, timeout=600) as client:
        client.post("/answer", json={"query": texts[0], "max_tokens": max_tokens}).raise_for_status()  # warm
        for q in texts:
            t0 = time.perf_counter()
            client.post("/search", json={"query": q, "k": 10}).raise_for_status()
            times["search"].append((time.perf_counter() - t0) * 1000)
            s = _streamed(client, {"query": q, "max_tokens": max_tokens})
            t0 = time.perf_counter()
            plain = client.post("/answer", json={"query": q, "max_tokens": max_tokens}).raise_for_status().json()
            times["plain"].append((time.perf_counter() - t0) * 1000)
            for k in ("passages", "first_token", "done"):
                if s[k] is not None:
                    times[k].append(s[k])
            times["same"].append(s["answer"] == plain["answer"])
    return times


def format_stream_table(times: dict[str, list]) -> str:
    def q(xs: list[float], p: float) -> str:
        return f"{statistics.quantiles(xs, n=10)[int(p * 10) - 1]:.0f}" if len(xs) > 1 else f"{xs[0]:.0f}"

    search_p50 = statistics.median(times["search"])
    rows = [
        ("/search (k 10)", "search"),
        ("streamed /answer: `passages` event", "passages"),
        ("streamed /answer: first `token` event", "first_token"),
        ("streamed /answer: `done` event", "done"),
        ("/answer, not streamed", "plain"),
    ]
    lines = ["| what the client waits for | n | p50 ms | p90 ms | p50 / /search p50 |", "|---|---|---|---|---|"]
    for label, key in rows:
        xs = times[key]
        if not xs:  # e.g. no answer had a first token
            lines.append(f"| {label} | 0 | - | - | - |")
            continue
        med = statistics.median(xs)
        lines.append(f"| {label} | {len(xs)} | {med:.0f} | {q(xs, 0.9)} | {med / search_p50:.2f}x |")
    same = sum(times["same"])
    return "\n".join(lines) + f"\n\nStreamed answer identical to the waited-for one: {same} of {len(times['same'])}."


def bench_stream(cfg) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **({"SAMELANG_HOME": str(cfg.home)} if cfg.home else {})}
    cmd = serve_command(cfg, port)
    cmd[cmd.index("--generator") + 1] = "llamacpp"
    texts = questions(cfg.tiny)
    max_tokens = 8 if cfg.tiny else 48
    with ServerProcess(cmd, url, Path(cfg.out) / "server-stream.log", env=env):
        times = measure(url, texts, max_tokens)
    index = f"bundled {TINY_LANGS} demo index" if cfg.tiny else "bundled en+zh demo index"
    return format_stream_table(times) + (
        f"\n\nServer: `samelang serve` (embedded generator, {index}); {len(texts)} XQuAD test questions "
        f"(the first three of each language), `max_tokens` {max_tokens}; each question's four requests in turn, "
        "one at a time. The `passages` event comes after retrieval and after fitting the prompt to the generator's "
        "context (its tokenizer), before generation starts."
    )
