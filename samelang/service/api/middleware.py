"""ASGI middleware: body size and UTF-8 checks before any parsing, and the optional API key."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import uuid

JSON_ROUTES_METHODS = {"POST", "PUT", "PATCH"}
OPEN_PATHS = {"/health", "/ready"}  # probes: no secret needed, nothing secret returned
# the audit page and its script are static files with nothing secret in them: a browser cannot send a
# bearer key when it navigates, so the page asks for the key and sends it with the calls it makes


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path == "/audit" or path.startswith("/audit/assets/")


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    """Give every request an id (the client's ``X-Request-ID`` when well-formed), echo it in the
    response header; error bodies and the log carry it too."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope["samelang_request_id"] = rid

        async def send_with_id(msg):
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*msg.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(msg)

        return await self.app(scope, receive, send_with_id)


async def send_json(send, status: int, body: bytes, headers=(), content_type: bytes = b"application/json") -> None:
    """One whole answer of ``body`` (ASGI), with its length."""
    head = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, status: int, error: str, detail: str, headers=(), scope=None) -> None:
    rid = (scope or {}).get("samelang_request_id")
    body = json.dumps({"error": error, "detail": detail, "request_id": rid}).encode()
    await send_json(send, status, body, headers)


class GuardMiddleware:
    """Reject oversized or non-UTF-8 bodies (413 / 400) and missing API keys (401)
    before the app reads anything, so bad input never reaches a model."""

    def __init__(self, app, max_body_bytes: int, api_key: str | None, body_timeout_s: float = 15.0):
        self.app, self.max_body, self.api_key, self.body_timeout = app, max_body_bytes, api_key, body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.api_key and not is_open(scope["path"]):
            auth = headers.get(b"authorization", b"").decode("latin-1")
            token = auth[7:] if auth.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                return await _send_error(
                    send,
                    401,
                    "unauthorized",
                    "missing or wrong API key: send 'Authorization: Bearer <key>'",
                    [(b"www-authenticate", b"Bearer")],
                    scope,
                )
        if scope["method"] not in JSON_ROUTES_METHODS:
            return await self.app(scope, receive, send)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return await _send_error(
                send, 413, "payload_too_large", f"body: {int(declared)} bytes, at most {self.max_body} bytes", (), scope
            )
        body = await self._read_body(receive, send, scope)
        if body is None:
            return
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await _send_error(
                send, 400, "invalid_encoding", f"body: not UTF-8 (byte {e.start}): send UTF-8 JSON", (), scope
            )
        done = False

        async def replay():
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _read_body(self, receive, send, scope) -> bytes | None:
        """The whole body within ``max_body`` bytes and ``body_timeout`` seconds; ``None`` when an
        error went out instead (413, 408) or the client left."""
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        while True:
            try:  # a body that trickles in (or never ends) must not hold a worker forever
                msg = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:
                await _send_error(
                    send, 408, "request_timeout", f"body: not received within {self.body_timeout:g} s",
                    [(b"connection", b"close")], scope,
                )  # fmt: skip
                return None
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_error(send, 413, "payload_too_large", f"body: more than {self.max_body} bytes", (), scope)
                return None
            chunks.append(chunk)
            if not msg.get("more_body"):
                return b"".join(chunks)
