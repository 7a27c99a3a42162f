"""The metrics middleware (samelang/service/api/prometheus.py): what a client can rely on reading from /metrics."""

from __future__ import annotations

import asyncio

from samelang.service.api.prometheus import Metrics, MetricsMiddleware


def _count(metrics: Metrics, route: str, status: str) -> float:
    return metrics.registry.get_sample_value(
        "samelang_requests_total", {"route": route, "method": "POST", "status": status}
    ) or 0.0  # fmt: skip


class _Route:
    path = "/search"


def _run(app):
    """Drive ``MetricsMiddleware(app)`` once; returns (the metrics, the count seen as each message went out)."""
    metrics = Metrics()
    seen = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg):
        seen.append((msg["type"], msg.get("more_body", False), _count(metrics, "/search", "200")))

    scope = {"type": "http", "method": "POST", "path": "/search", "route": _Route()}
    try:
        asyncio.run(MetricsMiddleware(app, metrics)(scope, receive, send))
    except RuntimeError as e:  # the app's own error goes on up, after it was counted
        assert str(e) == "boom"
    return metrics, seen


async def _answer(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"a", "more_body": True})
    await send({"type": "http.response.body", "body": b"b"})


def test_a_request_is_counted_before_its_last_byte_goes_out_and_only_once():
    """A client that reads /metrics right after its answer must see it: the count is taken before the final body
    message is sent (counting after the app returned raced that read: CI's stop 67), never twice."""
    metrics, seen = _run(_answer)
    assert seen == [("http.response.start", False, 0.0), ("http.response.body", True, 0.0),
                    ("http.response.body", False, 1.0)]  # fmt: skip
    assert _count(metrics, "/search", "200") == 1.0
    assert metrics.registry.get_sample_value("samelang_request_seconds_count", {"route": "/search"}) == 1.0


def test_an_app_that_fails_or_never_answers_is_counted_500_or_499():
    async def fails(scope, receive, send):
        raise RuntimeError("boom")

    async def silent(scope, receive, send):
        return None

    for app, status in ((fails, "500"), (silent, "499")):
        metrics, _ = _run(app)
        assert _count(metrics, "/search", status) == 1.0 and _count(metrics, "/search", "200") == 0.0
