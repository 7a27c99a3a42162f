"""Admission control: at most ``max_concurrent_requests`` requests run model work at once, at most
``max_queued_requests`` wait for a turn, and past that a request is answered 429 at once, with
``Retry-After``, in its dialect's error shape.

Why: without a bound, a burst waits in the thread pool until each request's deadline and ends in 503s
(200 searches at once: 143 waited 30 s). Clients and load balancers expect what text-embeddings-inference
answers (``--max-concurrent-requests``: 429 "overloaded" at once), so that they retry elsewhere instead of
holding a connection. A waiting request whose client has gone leaves the queue before any model work; a
server that is shutting down admits nothing more. ``/health``, ``/ready`` and ``/metrics`` never come here.
The bound is kept twice: :class:`AdmissionMiddleware` counts the model-work requests inside the server and
answers the rest before their body is read or a route matched (a burst's 429s must not wait behind the
parsing of the requests ahead of them); :meth:`Admission.enter` gives the turns at model work.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

from fastapi import Request

from samelang.core.budget import Cancelled
from samelang.service.api.middleware import send_json

SHUTTING_DOWN = "the server is shutting down: it admits no more work"
RETRY_AFTER_S = 1  # what a 429 tells the client to wait: about one request's model work on 2 cores


class Overloaded(Exception):
    """Every slot is taken and the queue is full: a 429 at once."""

    def __init__(self, running: int, queued: int):
        super().__init__(f"overloaded: {running} requests run model work and {queued} wait; retry in "
                         f"{RETRY_AFTER_S} s")  # fmt: skip
        self.retry_after = RETRY_AFTER_S


class Admission:
    """The bound on model work, shared by every route that does it (one per app)."""

    def __init__(self, max_running: int, max_queued: int, metrics):
        self.max_running, self.max_queued, self.metrics = max_running, max_queued, metrics
        self.running = self.queued = 0
        self.inside = 0  # model-work requests past AdmissionMiddleware and not yet answered
        self.closed = False
        self._free: asyncio.Semaphore | None = None  # made on the event loop, at first use

    def describe(self) -> dict:
        return {"max_concurrent_requests": self.max_running, "max_queued_requests": self.max_queued}

    def close(self) -> None:
        """Admit nothing more (SIGTERM): queued requests end at their next look, new ones at once."""
        self.closed = True

    async def _wait_turn(self, request: Request) -> None:
        free = self._free = self._free or asyncio.Semaphore(self.max_running)
        turn = asyncio.ensure_future(free.acquire())
        try:
            while True:
                done, _ = await asyncio.wait({turn}, timeout=0.05)
                if done:
                    return
                if self.closed:
                    raise Cancelled("shutdown", SHUTTING_DOWN)
                if await request.is_disconnected():
                    raise Cancelled("disconnected", "the client left while its request waited for a turn")
        except BaseException:
            if turn.done() and not turn.cancelled():
                free.release()  # got the turn in the same instant it was given up
            turn.cancel()
            raise

    async def enter(self, request: Request) -> Ticket:
        """A turn for the request's model work: at once when one is free, after a wait when the queue has
        room, else :class:`Overloaded` (nothing queued, nothing run). The caller releases the ticket when
        the work has ended (a worker past its deadline still holds its turn until it stops)."""
        route = request.url.path
        if self.closed:
            raise Cancelled("shutdown", SHUTTING_DOWN)
        if self.running >= self.max_running and self.queued >= self.max_queued:
            self.metrics.rejected.labels(route).inc()
            raise Overloaded(self.running, self.queued)
        self.queued += 1
        self.metrics.queue_depth.set(self.queued)
        start = time.perf_counter()
        try:
            await self._wait_turn(request)
        finally:
            self.queued -= 1
            self.metrics.queue_depth.set(self.queued)
        self.metrics.queued_seconds.labels(route).observe(time.perf_counter() - start)
        self.running += 1
        return Ticket(self)

    def _leave(self) -> None:
        self.running -= 1
        self._free.release()


class Ticket:
    """One admitted request's turn; :meth:`release` gives it back (once, from the event loop)."""

    def __init__(self, admission: Admission):
        self._admission: Admission | None = admission

    def release(self, *_) -> None:
        if self._admission is not None:
            self._admission._leave()
            self._admission = None


class AdmissionMiddleware:
    """ASGI: a POST to a model-work route (``routes``: path -> route, those that document a 429) when
    ``max_concurrent_requests + max_queued_requests`` such requests are already inside is answered 429
    at once, in its dialect's shape, before its body is read or a route is matched; an overloaded server
    says only that it is busy, so it answers so before the API key is checked. The rest pass, counted
    until they are answered."""

    def __init__(self, app, admission: Admission, routes: dict):
        self.app, self.admission, self.routes = app, admission, routes

    async def __call__(self, scope, receive, send):
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            return await self.app(scope, receive, send)
        a = self.admission
        if a.inside >= a.max_running + a.max_queued and not a.closed:
            scope["route"] = route  # the metrics' path label
            a.metrics.rejected.labels(scope["path"]).inc()
            exc = Overloaded(a.running, a.queued)
            return await send_overloaded(send, scope, exc)
        a.inside += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            a.inside -= 1


def model_work_routes(routes) -> dict:
    """The routes admission control bounds: the POST routes whose documented answers include the 429."""
    return {r.path: r for r in routes if 429 in (getattr(r, "responses", None) or {}) and "POST" in r.methods}


def retry_after(exc: Overloaded) -> dict[str, str]:
    return {"retry-after": str(math.ceil(exc.retry_after))}


async def send_overloaded(send, scope, exc: Overloaded) -> None:
    """The 429 of ``exc`` (ASGI), with ``Retry-After``, in the shape the route's clients read."""
    body = json.dumps(overloaded_body(scope["path"], str(exc), scope.get("samelang_request_id"))).encode()
    await send_json(send, 429, body, [(k.encode(), v.encode()) for k, v in retry_after(exc).items()])


OPENAI_ROUTES = ("/v1/embeddings", "/v1/models")
COHERE_ROUTES = ("/v1/rerank", "/v2/rerank")
TEI_ROUTES = ("/embed", "/", "/tokenize", "/rerank")  # /rerank: TEI's body and samelang's share it


def overloaded_body(path: str, detail: str, request_id: str | None) -> dict:
    """The 429's body in the shape the route's clients read: OpenAI's ``{"error": {message, type, code}}``,
    Cohere's ``{"message"}``, text-embeddings-inference's ``{"error", "error_type": "overloaded"}``, and
    samelang's ``{"error", "detail", "request_id"}`` (``/rerank`` carries both of the last two)."""
    if path in OPENAI_ROUTES:
        return {"error": {"message": detail, "type": "overloaded", "param": None, "code": "overloaded"}}
    ours = {"error": "overloaded", "detail": detail, "request_id": request_id}
    if path in COHERE_ROUTES:
        return {"message": detail, **ours}
    if path in TEI_ROUTES:
        return {**ours, "error": detail if path != "/rerank" else "overloaded", "error_type": "overloaded"}
    return ours
