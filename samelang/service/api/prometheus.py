"""Prometheus metrics behind ``GET /metrics``: requests and latency per route, batch sizes, cancelled work.

Operational counters only; the ranking metrics (nDCG, Max@R, ...) live in :mod:`samelang.core.metrics`."""

from __future__ import annotations

import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multi-process mode: set by `samelang serve --front`


def multiprocess_values() -> None:
    """prometheus_client chooses where a metric keeps its values (memory, or a file per process) when it is
    first imported; this process may have imported it before :data:`MULTIPROCESS` was set."""
    from prometheus_client import values  # deferred: only the front's start needs it

    values.ValueClass = values.get_value_class()


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "samelang_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "samelang_request_seconds",
            "HTTP request latency",
            ["route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.batch = Histogram(
            "samelang_batch_size",
            "inputs (queries or pairs) per micro-batched model call",
            ["model"],
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.batch_requests = Histogram(
            "samelang_batch_requests",
            "requests served by one micro-batched model call",
            ["model"],
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )

        self.stream_errors = Counter(
            "samelang_stream_errors",
            "streamed responses that ended with an error event (their status was already 200), by error",
            ["error"],
            registry=self.registry,
        )
        self.cancelled = Counter(
            "samelang_work_cancelled",
            "requests whose model work was stopped (deadline, disconnected, shutdown)",
            ["reason"],
            registry=self.registry,
        )
        self.in_progress = Gauge(
            "samelang_work_in_progress", "requests whose model work is running now", registry=self.registry,
            multiprocess_mode="livesum",
        )  # fmt: skip
        self.queue_depth = Gauge(
            "samelang_queue_depth", "requests waiting for a turn at model work (admission control)",
            registry=self.registry, multiprocess_mode="livesum",
        )  # fmt: skip
        self.queued_seconds = Histogram(
            "samelang_queued_seconds", "time a request waited for its turn at model work", ["path"],
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=self.registry,
        )  # fmt: skip
        self.rejected = Counter(
            "samelang_rejected_total", "requests answered 429 at once: every turn taken and the queue full", ["path"],
            registry=self.registry,
        )  # fmt: skip

    def render(self) -> tuple[bytes, str]:
        """This app's metrics; in the multi-process mode every process's (the front's 429s and the server's work)."""
        if not os.environ.get(MULTIPROCESS):
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client import multiprocess  # deferred: only in the multi-process mode

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status, recorded = time.perf_counter(), [None], [False]

        def record():
            """Once per request. A finished response is counted *before* its last byte goes out, so a client that
            reads /metrics right after its answer always sees it (counting after ``send`` raced that read)."""
            if recorded[0]:
                return
            recorded[0] = True
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(path, scope["method"], str(status[0])).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - start)

        async def send_wrapper(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            elif msg["type"] == "http.response.body" and not msg.get("more_body", False):
                record()
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
            if status[0] is None:  # the app returned without answering: the client had gone
                status[0] = 499
        except BaseException:
            status[0] = status[0] or 500
            raise
        finally:
            record()
