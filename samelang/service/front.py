"""The front process of ``samelang serve``: the listening socket, admission control's 429s and the probes
(``/health``, ``/ready``, ``/metrics``) in an interpreter of their own; every other request goes on to the server
process (the models, the index) over a Unix socket, and its answer comes back as it was sent.

Why: in one process the event loop that answers a 429 shares the interpreter with the model work's threads.
Under the mixed soak (reads, writes, Milvus) a 429 waited behind them up to 480 ms, and making those threads
nicer made it worse: the thread holding the interpreter then waited for a core (py-spy, docs/performance.md).
Here the front holds no model, so what it answers waits for a core only, and the server process runs at a
lower priority (``--server-nice``), so that the core is the front's first. It counts the model-work requests
it has passed on and answers the next one past ``max_concurrent_requests + max_queued_requests`` at once,
in the route's dialect (:func:`~samelang.service.api.admission.overloaded_body`); the server keeps its own
admission control, the queue and the turns at model work. Prometheus runs in its multi-process mode: the
front's ``/metrics`` is both processes' counters, read from files, never a call to the busy server.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import multiprocessing
import os
import signal
import tempfile
from pathlib import Path

import httpx

from samelang.service.api.admission import Overloaded, send_overloaded
from samelang.service.api.middleware import GuardMiddleware, RequestIdMiddleware, send_json
from samelang.service.config import ServiceSettings
from samelang.service.upstream import Upstream, UpstreamGone

log = logging.getLogger("samelang")

PROBE_EVERY_S = 0.5  # how stale the front's /ready may be
# not passed on: they describe one connection, not the message (RFC 9110 7.6.1); the front's own x-request-id
# replaces the server's (the same id: the front sends its own on)
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
NOT_SENT_ON = HOP_BY_HOP | {b"host", b"content-length", b"x-request-id"}
NOT_SENT_BACK = HOP_BY_HOP | {b"x-request-id"}


def model_work_paths(openapi: dict) -> frozenset[str]:
    """The paths admission control bounds, read from the server's OpenAPI schema as the server chooses them
    (:func:`~samelang.service.api.admission.model_work_routes`): the POST routes that document a 429."""
    paths = openapi.get("paths", {}).items()
    return frozenset(p for p, ops in paths if "429" in ops.get("post", {}).get("responses", {}))


class ServerLink:
    """The server process as the front sees it: alive or not, ready (its last ``/ready`` answer) or not."""

    def __init__(self, process, uds: Path, api_key: str | None, keep: int = 64):
        self.process, self.uds = process, uds
        self.upstream = Upstream(str(uds), keep=keep)  # what requests pass on through (probes: httpx, below)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(uds)), base_url="http://server",
                                        headers=headers, timeout=None)  # fmt: skip
        self.ready: tuple[int, bytes] = (503, json.dumps({"status": "starting"}).encode())
        self.paths: frozenset[str] = frozenset()

    def alive(self) -> bool:
        return self.process.is_alive()

    async def probe(self) -> bool:
        try:
            r = await self.client.get("/ready", timeout=5)
        except httpx.HTTPError:
            return False
        self.ready = (r.status_code, r.content)
        return r.status_code == 200

    async def wait_ready(self) -> None:
        """Until the server answers ``/ready``; then its model-work routes. Raises when it exits first."""
        while not await self.probe():
            if not self.alive():
                raise RuntimeError(f"the server process exited (code {self.process.exitcode}) while it loaded")
            await asyncio.sleep(0.1)
        self.paths = model_work_paths((await self.client.get("/openapi.json", timeout=60)).raise_for_status().json())
        await self.upstream.warm(self.upstream.keep)

    async def watch(self, on_exit) -> None:
        """``/ready`` every :data:`PROBE_EVERY_S`; ``on_exit`` when the process has gone."""
        while self.alive():
            await asyncio.sleep(PROBE_EVERY_S)
            if not await self.probe():
                self.ready = (503, json.dumps({"status": "unavailable"}).encode())
        self.ready = (503, json.dumps({"status": "unavailable"}).encode())
        on_exit()


class Front:
    """The front's ASGI app (module docstring): probes and 429s here, the rest to ``server``."""

    def __init__(self, cfg: ServiceSettings, server: ServerLink, metrics, on_exit=lambda: None):
        self.server, self.metrics, self.on_exit = server, metrics, on_exit
        self.max_running, self.inside = cfg.max_concurrent_requests, 0
        self.bound = cfg.max_concurrent_requests + cfg.max_queued_requests
        guarded = GuardMiddleware(self._pass_on, cfg.max_body_bytes, cfg.api_key, cfg.body_timeout_s)
        self.app = RequestIdMiddleware(self._front(guarded))
        self._watch: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        return await self.app(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                try:
                    await self.server.wait_ready()
                except RuntimeError as e:
                    return await send({"type": "lifespan.startup.failed", "message": str(e)})
                self._watch = asyncio.ensure_future(self.server.watch(self.on_exit))
                log.info("samelang front: serving; admission bounds %s", sorted(self.server.paths))
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self._watch is not None:
                    self._watch.cancel()
                await self.server.client.aclose()
                self.server.upstream.close()
                return await send({"type": "lifespan.shutdown.complete"})

    def _front(self, guarded):
        async def front(scope, receive, send):
            path = scope["path"]
            if scope["type"] != "http":  # the API has no websocket
                return await send({"type": "websocket.close", "code": 1003})
            if scope["method"] == "GET" and path in ("/health", "/ready"):
                health = (200, b'{"status":"ok"}') if self.server.alive() else (503, b'{"status":"unavailable"}')
                return await send_json(send, *(self.server.ready if path == "/ready" else health))
            if scope["method"] != "POST" or path not in self.server.paths:
                return await guarded(scope, receive, send)
            if self.inside >= self.bound:
                return await self._overloaded(scope, send)
            self.inside += 1
            try:
                return await guarded(scope, receive, send)
            finally:
                self.inside -= 1

        return front

    async def _overloaded(self, scope, send) -> None:
        self.metrics.rejected.labels(scope["path"]).inc()
        self.metrics.requests.labels(scope["path"], "POST", "429").inc()
        running = min(self.inside, self.max_running)
        await send_overloaded(send, scope, Overloaded(running, self.inside - running))

    async def _pass_on(self, scope, receive, send) -> None:
        """GET ``/metrics`` here (both processes'); anything else to the server, the body already read and
        checked (:class:`GuardMiddleware`), the answer streamed back; a client that leaves while the server
        works closes the server's connection, so that the server drops the request as it does its own."""
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            body, ctype = self.metrics.render()
            return await send_json(send, 200, body, content_type=ctype.encode())
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in NOT_SENT_ON]
        headers.append((b"x-request-id", scope["samelang_request_id"].encode()))
        target = scope.get("raw_path") or scope["path"].encode()
        target = (target + b"?" + scope["query_string"] if scope.get("query_string") else target).decode("latin-1")
        answer = asyncio.ensure_future(self.server.upstream.request(scope["method"], target, headers, body))
        gone = asyncio.ensure_future(receive())  # http.disconnect, once the body is read, only when the client leaves
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                return
            try:
                head = answer.result()
            except UpstreamGone as e:  # the server process has gone (or is going): say so, not a 500
                detail = f"the server process did not answer ({e}); see the server's log"
                body = json.dumps({"error": "unavailable", "detail": detail,
                                   "request_id": scope.get("samelang_request_id")}).encode()  # fmt: skip
                return await send_json(send, 503, body)
            sent_back = [(k, v) for k, v in head.headers if k not in NOT_SENT_BACK]
            await send({"type": "http.response.start", "status": head.status, "headers": sent_back})
            async for chunk in head.chunks():
                if gone.done():  # the client left mid-stream: so does the server's connection
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            gone.cancel()
            if not answer.done():
                answer.cancel()  # closes its connection: the server drops the request
            elif not answer.cancelled() and answer.exception() is None:
                answer.result().release()


def run_server_process(cfg: ServiceSettings, uds: str) -> None:
    """The server process (spawned): the app over ``uds``, at ``--server-nice``."""
    from samelang.service.api.server import serve_app  # deferred: the child's own imports, in its own interpreter

    if cfg.server_nice:
        os.nice(cfg.server_nice)
    serve_app(cfg, uds=uds)


def serve_with_front(cfg: ServiceSettings) -> int:
    """The front here, the server in a spawned process over a Unix socket; returns the exit code: 0 after a
    SIGTERM drained both, 1 when the server process failed or exited on its own."""
    import uvicorn  # deferred: keeps uvicorn out of start-up

    with tempfile.TemporaryDirectory(prefix="samelang-serve-") as tmp:
        metrics_dir = Path(tmp) / "metrics"
        metrics_dir.mkdir()
        from samelang.service.api.prometheus import MULTIPROCESS, Metrics, multiprocess_values  # deferred: as above

        os.environ[MULTIPROCESS] = str(metrics_dir)  # this process's metrics and the child's (it inherits it)
        multiprocess_values()  # this process may have imported prometheus_client before the variable
        uds = Path(tmp) / "server.sock"
        child = multiprocessing.get_context("spawn").Process(target=run_server_process, args=(cfg, str(uds)),
                                                             name="samelang-server")  # fmt: skip
        child.start()
        failed = []
        server_holder: list = []

        def server_gone() -> None:
            if server_holder[0].should_exit:
                return  # it drained after a SIGTERM, as asked
            failed.append(child.exitcode)
            log.error("samelang front: the server process exited (code %s); stopping", child.exitcode)
            server_holder[0].should_exit = True

        keep = cfg.max_concurrent_requests + cfg.max_queued_requests  # a connection per request inside, kept
        front = Front(cfg, ServerLink(child, uds, cfg.api_key, keep), Metrics(), on_exit=server_gone)
        config = uvicorn.Config(front, host=cfg.host, port=cfg.port, log_level="info", lifespan="on",
                                timeout_graceful_shutdown=max(1, int(cfg.shutdown_timeout_s) + 1))  # fmt: skip

        class FrontServer(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:
                if child.is_alive():  # the server drains as it would alone (it admits nothing more)
                    os.kill(child.pid, signal.SIGTERM)
                super().handle_exit(sig, frame)

        server = FrontServer(config)
        server_holder.append(server)
        # what start-up made (fastapi, pydantic: ~60,000 objects) stays: a burst's garbage collections then walk only
        # the requests' objects (they had paused a burst's 429s by 50-80 ms, docs/performance.md)
        gc.freeze()
        server.run()
        child.join(timeout=cfg.shutdown_timeout_s + 2)
        if child.is_alive():
            child.kill()
            child.join()
        from prometheus_client import multiprocess  # deferred: as above

        multiprocess.mark_process_dead(child.pid, str(metrics_dir))
        return 1 if failed or not server.started else 0
