"""What every dialect's routes share: the documented error codes, and :func:`bounded`, which runs a
handler in the thread pool under the request's time budget."""

from __future__ import annotations

import asyncio
import time

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from samelang.core.budget import Budget, Cancelled
from samelang.service.api.dialects import Dialects
from samelang.service.api.shared import ErrorResponse

ERRORS = {
    400: "malformed JSON or a body that is not UTF-8",
    401: "missing or wrong API key (when the server has one)",
    408: "the request body did not arrive in time",
    413: "body larger than the server's limit",
    422: "a field breaks a rule or a limit: the detail names the field and the limit",
    500: "internal error: the detail carries only the request id to look up in the server log",
}
WORK_ERRORS = {
    **ERRORS,
    429: "overloaded: every turn at model work is taken and the queue is full; retry after Retry-After seconds",
    503: "the request's time budget is spent or the server is shutting down",
}


def responses(codes: dict[int, str]) -> dict:
    return {c: {"model": ErrorResponse, "description": d} for c, d in codes.items()}


async def bounded(request: Request, fn, req):
    """Run ``fn(req)`` in the thread pool, once admitted (:mod:`.admission`), under a
    :class:`~samelang.core.budget.Budget`: the request's time budget, cancelled when the client disconnects or
    the server shuts down; the model loops stop at their next check (see :mod:`samelang.core.budget`)."""

    state = request.app.state
    ticket = await state.admission.enter(request)  # a turn at model work, a wait in the queue, or a 429 at once
    budget = Budget(state.settings.request_timeout_s)
    state.budgets.add(budget)
    state.metrics.in_progress.inc()
    task = asyncio.ensure_future(run_in_threadpool(budget.run, fn, req))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # an abandoned task's end is not an error
    task.add_done_callback(ticket.release)  # the turn is held until the worker has stopped
    grace = 2.0  # past the deadline, the answer does not wait for a worker stuck between checks
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                return task.result()
            if await request.is_disconnected():
                budget.cancel("disconnected")
            if budget.deadline is not None and time.monotonic() > budget.deadline + grace:
                budget.check()  # raises Cancelled("deadline"); the worker stops at its next check
    except Cancelled as e:
        state.metrics.cancelled.labels(e.reason).inc()
        raise
    except asyncio.CancelledError:  # the server is stopping this request (graceful shutdown ran out)
        budget.cancel("shutdown")
        raise
    finally:
        if task.done():
            state.metrics.in_progress.dec()
        else:  # the worker thread still runs until its next check: count it until then
            task.add_done_callback(lambda _: state.metrics.in_progress.dec())
        state.budgets.discard(budget)


def handlers(request: Request) -> Dialects:
    """The handlers every route reads (one assignment swaps them: :func:`~.reload.swap_index`)."""
    return request.app.state.handlers
