"""The reliability audit's hostile requests against a real `samelang serve` on loopback, one line each.

Run: `python scripts/probe_reliability.py` (SAMELANG_HOME as for the server; ~2 minutes on 2 cores).
It starts its own server (`--generator none`, the bundled demo index, a free port), sends each
hostile or careless request, and prints what came back and how long the work took. Loopback only;
every request is bounded in count and time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from samelang.bench.http_load import ServerProcess, free_port
from samelang.corpora import load_xquad


def metric(c: httpx.Client, name: str, **labels) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def serve_cmd(port: int, *extra: str) -> list[str]:
    """`samelang serve` on ``port`` without a generator (the probes need none), plus ``extra`` flags."""
    return [sys.executable, "-m", "samelang", "serve", "--port", str(port), "--generator", "none", *extra]


def probe(name: str, fn) -> None:
    """Run one probe and print its table row; a failing probe reports, it does not stop the others."""
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001
        out = f"probe failed: {type(e).__name__}: {e}"
    print(f"| {name} | {out} | {time.perf_counter() - t0:.2f} s |", flush=True)


def request_probes(c: httpx.Client) -> None:
    """Hostile or careless request bodies: each must be a 4xx naming the field, or bounded work."""
    raw = {"content-type": "application/json"}

    def post(path, body):
        r = c.post(path, content=body if isinstance(body, str) else json.dumps(body), headers=raw)
        return f"{r.status_code} {r.json().get('error', 'ok')}: {r.json().get('detail', '')[:90]}"

    probe(
        "86-byte /diagnose (en-zh, all, rerank_k 100)",
        lambda: post("/diagnose", '{"dataset":"xquad","pair":"en-zh","split":"all","rerank":true,"rerank_k":100}'),
    )
    probe(
        "/diagnose en-zh test split, no rerank (748 queries)",
        lambda: post("/diagnose", {"dataset": "xquad", "pair": "en-zh"}),
    )
    probe("lone surrogate in a /rerank document", lambda: post("/rerank", '{"query": "q", "documents": ["\\ud800"]}'))
    probe(
        "lone surrogate in a /diagnose relevant id",
        lambda: post("/diagnose", '{"queries": [{"query": "q", "relevant": ["\\ud800"]}]}'),
    )
    probe("/diagnose pair en-fr", lambda: post("/diagnose", {"dataset": "xquad", "pair": "en-fr"}))
    probe("/diagnose pair EN-ZH (k 5)", lambda: post("/diagnose", {"dataset": "xquad", "pair": "EN-ZH", "k": 5}))
    probe("zero-width-only query", lambda: post("/search", {"query": "\u200b\u200c"}))
    probe("k: true", lambda: post("/search", {"query": "x", "k": True}))
    probe(
        "/answer passages 10 x max_tokens 512",
        lambda: post("/answer", {"query": "x", "passages": 10, "max_tokens": 512, "k": 100, "rerank_k": 100}),
    )


def connection_probes(c: httpx.Client, port: int) -> None:
    """A client that hangs up mid-work, and a body that never completes."""
    paras = [d.text for d in load_xquad(["en", "de", "zh"], split="test").documents()]
    heavy = {"query": "Who was the first director?", "documents": [(" ".join([p] * 8))[:19_900] for p in paras[:100]]}

    def disconnect():
        t0 = time.perf_counter()
        try:
            c.post("/rerank", json=heavy, timeout=1.0)
        except httpx.TimeoutException:
            pass
        hung_up = time.perf_counter()
        while metric(c, "samelang_work_in_progress") > 0:
            time.sleep(0.05)
        stopped = time.perf_counter() - hung_up
        return (
            f"client gave up after {hung_up - t0:.1f} s; work stopped {stopped:.2f} s later; "
            f"499s counted: {metric(c, 'samelang_requests_total', route='/rerank', status='499'):.0f}"
        )

    def slow_body():
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(
                b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"query": '
            )
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        return data.split(b"\r\n")[0].decode()

    probe("/rerank 100 x 19,900 chars, client hangs up at 1 s", disconnect)
    probe("a body that never completes", slow_body)


def keyed_probe(env: dict, log: Path) -> None:
    """/ready stays open for orchestrators when an API key guards the rest."""
    port = free_port()
    with ServerProcess(
        serve_cmd(port, "--api-key", "k3y"), f"http://127.0.0.1:{port}", log, env=env, ready_path="/health"
    ):
        probe(
            "/ready with a key set, no key sent", lambda: str(httpx.get(f"http://127.0.0.1:{port}/ready").status_code)
        )


def index_probes(env: dict, log: Path) -> None:
    """Two writers at once lose nothing; a running server picks up a new generation."""
    with tempfile.TemporaryDirectory() as d:
        docs = load_xquad(["en"], split="test").documents()
        out = Path(d) / "idx"
        base = [sys.executable, "-m", "samelang", "index"]
        for name, part in (("a", docs[20:30]), ("b", docs[30:40]), ("c", docs[:20])):
            Path(d, f"{name}.jsonl").write_text(
                "".join(json.dumps({"id": x.id, "text": x.text, "lang": "en"}) + "\n" for x in part)
            )
        build = [*base, "build", "--corpus", "jsonl", "--input", str(Path(d, "c.jsonl")), "--out", str(out)]
        subprocess.run(build, check=True, capture_output=True)

        def concurrent_adds():
            ps = [
                subprocess.Popen([*base, "add", str(out), "--input", str(Path(d, f))], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for f in ("a.jsonl", "b.jsonl")
            ]  # fmt: skip
            codes = [p.wait(600) for p in ps]
            info = json.loads(subprocess.run([*base, "info", str(out)], capture_output=True, text=True).stdout)
            return f"exit codes {codes}; documents {info['n_docs']} of 40 expected"

        probe("two `index add` at once", concurrent_adds)
        port = free_port()
        Path(d, "e.jsonl").write_text(json.dumps({"id": "new", "text": "The Zorblax festival.", "lang": "en"}) + "\n")

        def live():
            subprocess.run(
                [*base, "add", str(out), "--input", str(Path(d, "e.jsonl"))], check=True, capture_output=True
            )
            t0 = time.perf_counter()
            while httpx.get(f"http://127.0.0.1:{port}/ready").json()["documents"] != 41:
                time.sleep(0.05)
            return f"new generation served {time.perf_counter() - t0:.2f} s after `index add` returned"

        with ServerProcess(serve_cmd(port, "--index", str(out)), f"http://127.0.0.1:{port}", log, env=env):
            probe("a running server and `index add`", live)


def main() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SAMELANG_MAX_BODY_BYTES": "4000000"}
    log = Path(tempfile.mkdtemp()) / "server.log"
    print("| probe | answer | time |\n|---|---|---|")
    with ServerProcess(serve_cmd(port), url, log, env=env), httpx.Client(base_url=url, timeout=120) as c:
        request_probes(c)
        connection_probes(c, port)
    keyed_probe(env, log.with_name("keyed.log"))
    index_probes(env, log.with_name("live.log"))


if __name__ == "__main__":
    main()
