"""ASGI middleware: body size and UTF-8 checks before any parsing, and the optional API key."""

from __future__ import annotations

import hmac
import json

JSON_ROUTES_METHODS = {"POST", "PUT", "PATCH"}
OPEN_PATHS = {"/health"}


async def _send_error(send, status: int, error: str, detail: str, headers=()) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """Reject oversized or non-UTF-8 bodies (413 / 400) and missing API keys (401)
    before the app reads anything, so bad input never reaches a model."""

    def __init__(self, app, max_body_bytes: int, api_key: str | None):
        self.app, self.max_body, self.api_key = app, max_body_bytes, api_key

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.api_key and scope["path"] not in OPEN_PATHS:
            auth = headers.get(b"authorization", b"").decode("latin-1")
            token = auth[7:] if auth.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                return await _send_error(
                    send,
                    401,
                    "unauthorized",
                    "missing or wrong API key: send 'Authorization: Bearer <key>'",
                    [(b"www-authenticate", b"Bearer")],
                )
        if scope["method"] not in JSON_ROUTES_METHODS:
            return await self.app(scope, receive, send)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return await _send_error(
                send, 413, "payload_too_large", f"body: {int(declared)} bytes, at most {self.max_body} bytes"
            )
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await _send_error(send, 413, "payload_too_large", f"body: more than {self.max_body} bytes")
            chunks.append(chunk)
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await _send_error(
                send, 400, "invalid_encoding", f"body: not UTF-8 (byte {e.start}): send UTF-8 JSON"
            )
        done = False

        async def replay():
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)
