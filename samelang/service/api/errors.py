"""Every 4xx/5xx is JSON ``{error, detail, request_id}``; validation errors name the field and the
limit; a 500 says nothing about the failure but the request id under which the log has it."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from samelang.core.budget import Cancelled
from samelang.retrieval.errors import AnswerUnavailable, BadRequest
from samelang.service.api.admission import Overloaded, overloaded_body, retry_after
from samelang.service.api.shared import cited

log = logging.getLogger("samelang")
CLIENT_CLOSED = 499  # nginx's "client closed request": counted apart from server errors


def request_id(request: Request) -> str | None:
    return request.scope.get("samelang_request_id")


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: an error that quotes the client's input can
    never fail to encode (a lone surrogate would, in UTF-8)."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(status: int, error: str, detail: str, request: Request | None = None, **extra) -> JSONResponse:
    rid = request_id(request) if request is not None else None
    return AsciiJSONResponse({"error": error, "detail": detail, "request_id": rid, **extra}, status_code=status)


def _field(loc) -> str:
    # "object": the tag of {id, text} documents, "samelang" / "tei": of the two /rerank bodies; a field
    # name may hold a lone surrogate: escape it
    tags = ("body", "object", "samelang", "tei")
    parts = [str(p).encode("utf-8", "backslashreplace").decode() for p in loc if p not in tags]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def core_error(exc: Exception, request: Request) -> tuple[int, dict]:
    """(status, body) of an error the retrieval core raised: what a JSON response carries, and what
    a stream that already started sends as its ``error`` event. Anything else is an internal error,
    logged here with the request id (the client gets only the id)."""
    rid = request_id(request)
    if isinstance(exc, BadRequest):
        return 422, {"error": "invalid_request", "detail": str(exc), "request_id": rid}
    if isinstance(exc, Cancelled):
        if exc.reason == "disconnected":  # nobody reads this; the metrics count it apart from 5xx
            return CLIENT_CLOSED, {"error": "client_closed_request", "detail": str(exc), "request_id": rid}
        name = "time_budget_exceeded" if exc.reason == "deadline" else "shutting_down"
        return 503, {"error": name, "detail": str(exc), "request_id": rid}
    if isinstance(exc, AnswerUnavailable):
        passages = [p.model_dump() for p in cited(exc.hits)]
        if exc.refused:  # a smaller request may be answered: the client's move, so a 4xx
            detail = f"{exc} (ask with fewer passages or a lower max_tokens)"
            return 422, {"error": "generator_refused", "detail": detail, "request_id": rid, "passages": passages}
        return 503, {"error": "generator_unavailable", "detail": str(exc), "request_id": rid, "passages": passages}
    log.error("samelang: internal error in request %s (%s %s)", rid, request.method, request.url.path, exc_info=exc)
    return 500, {"error": "internal_error", "detail": f"internal error; the server log has it under request id {rid}",
                 "request_id": rid}  # fmt: skip


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            e = next(e for e in errors if e.get("type") == "json_invalid")
            return error_response(
                400,
                "malformed_json",
                f"request body is not valid JSON: {e.get('ctx', {}).get('error', e.get('msg'))}",
                request,
            )
        msgs = []
        for e in errors:
            msg = e["msg"].removeprefix("Value error, ")
            msgs.append(f"{_field(e['loc'])}: {msg}")
        return error_response(422, "invalid_request", "; ".join(msgs), request)

    @app.exception_handler(BadRequest)
    @app.exception_handler(Cancelled)
    @app.exception_handler(AnswerUnavailable)
    async def _core(request: Request, exc: Exception):
        status, content = core_error(exc, request)
        return AsciiJSONResponse(content, status_code=status)

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded):
        body = overloaded_body(request.url.path, str(exc), request_id(request))
        return AsciiJSONResponse(body, status_code=429, headers=retry_after(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        names = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        resp = error_response(exc.status_code, names.get(exc.status_code, "http_error"), str(exc.detail), request)
        resp.headers.update(getattr(exc, "headers", None) or {})
        return resp

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        """Last resort: the log gets the traceback, the client the request id and a closed connection."""
        rid = request_id(request)
        status, content = core_error(exc, request)
        resp = AsciiJSONResponse(content, status_code=status)
        resp.headers["connection"] = "close"
        if rid:
            resp.headers["x-request-id"] = rid
        return resp
