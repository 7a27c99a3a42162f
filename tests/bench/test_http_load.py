"""The HTTP load harness against real servers: a uvicorn thread for `load`, a subprocess for `ServerProcess`."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from samelang.bench.http_load import ServerProcess, format_http_table, free_port, load
from tests.bench._tiny_app import app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_url():
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "tiny app did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_load_ok(base_url):
    r = load(base_url, "/ok", [{"q": i} for i in range(3)], concurrency=4, requests=20)
    assert r["errors"] == 0 and r["first_error"] is None
    assert r["requests"] == 20 and r["concurrency"] == 4 and r["path"] == "/ok"
    assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
    assert r["throughput_rps"] > 0 and r["wall_s"] > 0


def test_load_counts_errors(base_url):
    r = load(base_url, "/fail", [{}], concurrency=4, requests=20)
    assert r["errors"] == 20 and "500" in r["first_error"]
    assert r["throughput_rps"] == 0 and r["p50_ms"] is None


def test_load_counts_connection_errors():
    r = load(f"http://127.0.0.1:{free_port()}", "/ok", [{}], concurrency=2, requests=5, timeout=2)
    assert r["errors"] == 5 and "ConnectError" in r["first_error"]


def test_http_table(base_url):
    rows = [load(base_url, "/ok", [{}], concurrency=c, requests=10) for c in (1, 4)]
    lines = format_http_table(rows).splitlines()
    assert len(lines) == 4
    assert "| 1.00 |" in lines[2]
    assert lines[0].endswith("| server CPU ms/req | client CPU ms/req |")
    assert lines[2].split("|")[-3].strip() == "–"  # no server pid given: no server CPU, not a made-up 0


def test_load_reports_cpu_per_request_of_server_and_client(base_url):
    """Here the server is a thread of this process, so its "server" CPU (from /proc, in clock ticks
    of 10 ms) holds the client's too (from getrusage, in microseconds): at least the client's, less
    two ticks of rounding, and 100 requests cannot cost no CPU."""
    import os

    n = 100
    r = load(base_url, "/ok", [{}], concurrency=2, requests=n, server_pid=os.getpid())
    assert r["client_cpu_ms"] > 0
    assert r["server_cpu_ms"] * n >= r["client_cpu_ms"] * n - 20.0


def test_server_process_ready_then_terminated(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "uvicorn", "tests.bench._tiny_app:app", "--port", str(port)]
    with ServerProcess(cmd, url, tmp_path / "server.log", cwd=REPO, ready_timeout=60) as server:
        assert httpx.get(url + "/ready").status_code == 200
        assert server.proc.poll() is None
    assert server.proc.poll() is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/ready", timeout=2)


def test_server_process_that_exits_raises(tmp_path):
    log = tmp_path / "dead.log"
    cmd = [sys.executable, "-c", "import sys; print('boom before ready'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match="dead.log") as e:
        with ServerProcess(cmd, f"http://127.0.0.1:{free_port()}", log, ready_timeout=30):
            pass
    assert "boom before ready" in str(e.value) and "code 3" in str(e.value)


def test_a_raw_connection_keeps_alive_and_opens_again_after_the_server_closed_it(base_url):
    """The load generator's connection: prepared bytes in, status, headers and body out, several requests on one
    connection; one the server has closed (an idle keep-alive's end) is opened again and the request sent once."""
    import asyncio
    import json

    from samelang.bench.http_load import RawConnection

    async def scenario():
        conn = await RawConnection.open(base_url)
        got = [await conn.send(conn.request("/ok", json.dumps({"n": i}).encode())) for i in range(3)]
        assert [(code, json.loads(body)) for code, _, body, _ in got] == [(200, {"echo": {"n": i}}) for i in range(3)]
        assert all(h["content-type"] == "application/json" and ms > 0 for _, h, _, ms in got)
        code, _, body, _ = await conn.send(conn.request("/fail", b"{}"))
        assert (code, json.loads(body)) == (500, {"detail": "always fails"})
        first = conn.writer
        first.transport.abort()  # as the server's end of an idle connection would look to the client
        code, _, body, _ = await conn.send(conn.request("/ok", b'{"again": 1}'))
        assert (code, json.loads(body)) == (200, {"echo": {"again": 1}}) and conn.writer is not first
        conn.close()

    asyncio.run(scenario())
