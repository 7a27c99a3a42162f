"""Server-sent events for a route whose work yields as it goes (``/answer`` with ``stream: true``).

The work is a plain iterator of ``(event, payload)`` run in a worker thread under the request's
:class:`~samelang.core.budget.Budget`, as :func:`samelang.service.api.routing.bounded` runs a whole call: the events
cross to the event loop through a queue, and the client reads each one as soon as it exists.

Why the first event is awaited before the response starts: until then the work may still fail
as any request does (a limit, a spent budget), and the client should get that as a plain JSON
error with its status code. Once the 200 and the first event are out, a later failure (the
generator down, the budget spent mid-answer) arrives as an ``error`` event carrying the same body
a JSON error would. A client that hangs up cancels the budget, so the worker stops at its next
check (the embedded generator checks after every token) and frees the generator.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from samelang.core.budget import Budget, Cancelled
from samelang.service.api.errors import core_error

_END = object()


def sse(event: str, data: dict) -> bytes:
    """One event in the ``text/event-stream`` format; ASCII JSON, so no text can break a frame."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=True, separators=(',', ':'))}\n\n".encode()


def _payload(data) -> dict:
    return data.model_dump(mode="json") if hasattr(data, "model_dump") else data


GRACE_S = 2.0  # past the deadline, the stream does not wait for a worker stuck between checks (as ``bounded``)


class _Worker:
    """``work(req)`` running in the thread pool under its own budget; its items (or the exception
    that ended it, then ``_END``) wait in a queue for the event loop."""

    def __init__(self, request: Request, work: Callable[..., Iterator[tuple[str, object]]], req, ticket):
        self.request, self.state, self.ticket = request, request.app.state, ticket
        self.queue: asyncio.Queue = asyncio.Queue()
        self.budget = Budget(self.state.settings.request_timeout_s)
        self.finished = False  # the work ran out (or failed): nothing to cancel
        loop = asyncio.get_running_loop()

        def put(item) -> None:
            loop.call_soon_threadsafe(self.queue.put_nowait, item)

        def produce() -> None:
            try:
                for item in work(req):
                    put(item)
            except BaseException as e:  # noqa: BLE001 - handed to the event loop, which answers with it
                if isinstance(e, Cancelled):  # counted here: a reader who left reads no error event
                    self.state.metrics.cancelled.labels(e.reason).inc()
                put(e)
            finally:
                self.finished = True
            put(_END)

        self.state.budgets.add(self.budget)
        self.state.metrics.in_progress.inc()
        task = asyncio.ensure_future(run_in_threadpool(self.budget.run, produce))
        task.add_done_callback(self._done)  # it always ends: the queue never blocks it, the budget has a deadline

    def _done(self, _) -> None:
        self.state.metrics.in_progress.dec()
        self.state.budgets.discard(self.budget)
        self.ticket.release()

    def stop(self, reason: str) -> None:
        if not self.finished:
            self.budget.cancel(reason)

    async def next_item(self):
        """The next item; the budget is cancelled if the client leaves while it is awaited, and past
        its deadline (with a grace) :class:`Cancelled` is raised here, without waiting for the worker."""
        while True:
            try:
                return await asyncio.wait_for(self.queue.get(), timeout=0.1)
            except TimeoutError:
                if await self.request.is_disconnected():
                    self.budget.cancel("disconnected")
                if self.budget.deadline is not None and time.monotonic() > self.budget.deadline + GRACE_S:
                    self.budget.check()  # raises Cancelled("deadline"); the worker stops at its next check


class _EventStream(StreamingResponse):
    """The response stops the work however it ends (a client gone mid-send, a response never
    iterated), not only when its iterator is closed."""

    def __init__(self, worker: _Worker, content: AsyncIterator[bytes]):
        # no proxy buffering (nginx), no caching: each event must reach the client when it is sent
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.worker = worker

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.worker.stop("disconnected")


async def stream_events(request: Request, work: Callable[..., Iterator[tuple[str, object]]], req) -> StreamingResponse:
    """Run ``work(req)`` in the thread pool and stream what it yields as server-sent events."""
    worker = _Worker(request, work, req, await request.app.state.admission.enter(request))
    try:
        first = await worker.next_item()
    except asyncio.CancelledError:  # the server is stopping this request
        worker.stop("shutdown")
        raise
    except BaseException:
        worker.stop("deadline")
        raise
    if first is _END:
        raise RuntimeError("the stream ended before its first event")
    if isinstance(first, BaseException):
        raise first

    async def events() -> AsyncIterator[bytes]:
        item = first
        try:
            while item is not _END:
                if isinstance(item, BaseException):
                    _, body = core_error(item, request)
                    request.app.state.metrics.stream_errors.labels(body["error"]).inc()
                    item = _END
                    yield sse("error", body)
                    return
                name, data = item
                yield sse(name, _payload(data))
                try:
                    item = await worker.next_item()
                except Cancelled as e:  # the deadline passed while the worker is stuck between checks
                    item = e
        finally:
            if item is not _END:  # the client left, or the stream was closed early: stop the work
                worker.stop("disconnected")

    return _EventStream(worker, events())
