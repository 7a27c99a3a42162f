"""Bounded work: every request's model work runs under a :class:`Budget` that a deadline, a client
hanging up or the server shutting down can end.

The models run in worker threads, which cannot be interrupted from outside. So the long loops
check the budget of the request they work for between units of work (a batch of the inference
engine, a query of ``/diagnose``, a generated token): ``check()`` raises :class:`Cancelled` once
the budget is spent or cancelled, and the thread returns to the pool within one unit of work. The
budget travels with the request in a context variable, so the core needs no extra argument and
code outside a request (the CLI, training, evaluations) runs unbounded.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("samelang_budget", default=None)


class Cancelled(RuntimeError):
    """The request's work was stopped: ``reason`` is ``deadline``, ``disconnected`` or ``shutdown``."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(detail)


class Budget:
    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self._reason: str | None = None
        self._event = threading.Event()

    def cancel(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.cancel("deadline")
        if self._event.is_set():
            detail = {
                "deadline": f"the request's time budget of {self.seconds:g} s is spent",
                "disconnected": "the client disconnected",
                "shutdown": "the server is shutting down",
            }.get(self._reason or "", str(self._reason))
            raise Cancelled(self._reason or "cancelled", detail)

    def run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Call ``fn`` with this budget as the current one (in the calling thread)."""
        token = _current.set(self)
        try:
            return fn(*args, **kwargs)
        finally:
            _current.reset(token)


def current() -> Budget | None:
    return _current.get()


def check() -> None:
    """Raise :class:`Cancelled` if the current request's budget is spent (no-op outside requests)."""
    b = _current.get()
    if b is not None:
        b.check()


def remaining(default: float) -> float:
    """Seconds left for the current request (``default`` outside requests)."""
    b = _current.get()
    r = None if b is None else b.remaining()
    return default if r is None else min(default, r)
