"""Section "HTTP": latency percentiles and throughput of a running server's routes at a given concurrency.

Measured end to end over real HTTP (one pooled `httpx.AsyncClient`, N workers sharing one request counter),
so the numbers include JSON, the ASGI stack and queueing in the server, which is what a client sees and what
an in-process timing of the model hides. Errors are counted, never retried: a route that fails fast under load
must not look fast.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import numpy as np


def _percentiles_ms(latencies_s: list[float]) -> tuple[float | None, float | None, float | None]:
    if not latencies_s:
        return None, None, None
    p50, p95, p99 = np.percentile(np.asarray(latencies_s) * 1e3, [50, 95, 99])
    return float(p50), float(p95), float(p99)


@dataclass
class _Tally:
    """What the workers of one run share (one event loop: no locks needed)."""

    requests: int
    sent: int = 0
    errors: int = 0
    first_error: str | None = None
    latencies: list[float] = field(default_factory=list)

    def next_index(self) -> int | None:
        if self.sent >= self.requests:
            return None
        self.sent += 1
        return self.sent - 1

    def error(self, message: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or message


async def run_load(
    base_url: str,
    path: str,
    payloads: list[dict],
    concurrency: int,
    requests: int,
    timeout: float = 120.0,
    headers: dict | None = None,
) -> dict:
    """POST `requests` payloads (round robin over `payloads`) to `path` from `concurrency` workers.

    One untimed warm-up request goes first. Latency percentiles are over successful (2xx) requests; a non-2xx
    status or an exception is an error, and the first one's message is kept. Throughput is successful
    requests per wall second of the whole timed run.
    """
    if not payloads:
        raise ValueError("run_load needs at least one payload")
    if concurrency < 1 or requests < 1:
        raise ValueError("concurrency and requests must be at least 1")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    tally = _Tally(requests)

    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits, headers=headers) as client:
        try:
            await client.post(path, json=payloads[0])
        except httpx.HTTPError:
            pass  # the timed run will count and report it

        async def worker() -> None:
            while (i := tally.next_index()) is not None:
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json=payloads[i % len(payloads)])
                except Exception as e:  # any failure is an error of the run, not of the harness
                    tally.error(f"{type(e).__name__} on {path}: {e}")
                    continue
                if 200 <= r.status_code < 300:
                    tally.latencies.append(time.perf_counter() - t0)
                else:
                    tally.error(f"HTTP {r.status_code} on {path}: {r.text[:300]}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
        wall_s = time.perf_counter() - t0

    p50, p95, p99 = _percentiles_ms(tally.latencies)
    return {
        "path": path, "concurrency": concurrency, "requests": requests, "errors": tally.errors,
        "first_error": tally.first_error, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
        "throughput_rps": len(tally.latencies) / wall_s if wall_s > 0 else 0.0, "wall_s": wall_s,
    }  # fmt: skip


def load(base_url: str, path: str, payloads: list[dict], *, server_pid: int | None = None, **options) -> dict:
    """`run_load` for callers without an event loop (``options``: its ``concurrency``, ``requests``,
    ``timeout`` and ``headers``); with `server_pid` (a local server) the row also holds the CPU time
    per request of the server (all its threads) and of this load generator, which says whether a
    throughput is bound by the cores (CPU per request x req/s = the cores in use) or by waiting."""
    server0, client0 = process_cpu_s(server_pid), _self_cpu_s()
    row = asyncio.run(run_load(base_url, path, payloads, **options))
    requests = row["requests"]
    server1, client1 = process_cpu_s(server_pid), _self_cpu_s()
    if server0 is not None and server1 is not None:
        row["server_cpu_ms"] = 1e3 * (server1 - server0) / requests
    row["client_cpu_ms"] = 1e3 * (client1 - client0) / requests
    return row


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` so far (all threads), from /proc; None elsewhere."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def free_port() -> int:
    """A TCP port free on localhost now (the OS picks it; a race with other binders is possible but rare)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class ServerProcess:
    """Run a server command for the length of a `with` block, ready (GET /ready is 200) on entry.

    `env` is the child's whole environment (None: this process's). The default ready timeout is long because
    the first `samelang serve` on a host prepares models and the demo index.
    """

    def __init__(
        self,
        command: Sequence[str],
        base_url: str,
        log_path: str | os.PathLike,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        ready_timeout: float = 900.0,
        ready_path: str = "/ready",
    ) -> None:
        self.command = list(command)
        self.base_url = base_url.rstrip("/")
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.ready_path = ready_path
        self.proc: subprocess.Popen | None = None
        self._log = None

    def __enter__(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        url = self.base_url + self.ready_path
        deadline = time.monotonic() + self.ready_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._log.flush()
                raise RuntimeError(
                    f"server exited with code {rc} before {url} was ready; log {self.log_path}, last 40 lines:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{url} not ready after {self.ready_timeout:.0f} s; log {self.log_path}, last 40 lines:\n"
                    f"{_tail(self.log_path)}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM, up to 10 s for a clean shutdown, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "–" if x is None else format(x, spec)


def format_http_table(rows: list[dict]) -> str:
    """Markdown table of `run_load` results; "x vs c=1" is throughput over the same route's concurrency-1 row."""
    base = {r["path"]: r["throughput_rps"] for r in rows if r["concurrency"] == 1}
    lines = [
        "| route | concurrency | requests | errors | p50 ms | p95 ms | p99 ms | req/s | x vs c=1 "
        "| server CPU ms/req | client CPU ms/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = base.get(r["path"])
        ratio = f"{r['throughput_rps'] / b:.2f}" if b else "–"
        cells = [r["path"], str(r["concurrency"]), str(r["requests"]), str(r["errors"])]
        cells += [_fmt(r[k]) for k in ("p50_ms", "p95_ms", "p99_ms")] + [f"{r['throughput_rps']:.1f}", ratio]
        cells += [_fmt(r.get(k)) for k in ("server_cpu_ms", "client_cpu_ms")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class RawConnection:
    """One HTTP/1.1 keep-alive connection that writes prepared bytes and reads the answer by its
    ``content-length``: a load generator, as wrk is. On cores shared with the server a Python HTTP client's
    own work per request queues behind the server's (httpx took seconds to send 200 requests at once there),
    so cheap answers such as a 429 would be timed as the client's queue, not the server's."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        conn = cls(host, int(port))
        conn.reader, conn.writer = await asyncio.open_connection(host, int(port))
        return conn

    def request(self, path: str, body: bytes) -> bytes:
        return (f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip

    async def send(self, request: bytes) -> tuple[int, dict[str, str], bytes, float]:
        """Status, headers (lower-case names), body, and milliseconds from the write to the body's last byte;
        the connection is opened again after a server that closes it."""
        reused = self.writer is not None and not self.writer.is_closing()
        if not reused:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        t0 = time.perf_counter()
        self.writer.write(request)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionResetError) as e:
            if not reused or getattr(e, "partial", b""):
                raise
            self.close()  # the server closed an idle keep-alive connection before reading: nothing was done
            return await self.send(request)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        ms = 1000 * (time.perf_counter() - t0)
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split(" ", 2)[1]), headers, body, ms

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
