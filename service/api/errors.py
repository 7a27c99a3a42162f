"""Every 4xx/5xx is JSON ``{error, detail}``; validation errors name the field and the limit."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import AnswerUnavailable, BadRequest


def error_response(status: int, error: str, detail: str, **extra) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail, **extra}, status_code=status)


def _field(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            e = next(e for e in errors if e.get("type") == "json_invalid")
            return error_response(
                400, "malformed_json", f"request body is not valid JSON: {e.get('ctx', {}).get('error', e.get('msg'))}"
            )
        msgs = []
        for e in errors:
            msg = e["msg"].removeprefix("Value error, ")
            msgs.append(f"{_field(e['loc'])}: {msg}")
        return error_response(422, "invalid_request", "; ".join(msgs))

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, exc: BadRequest):
        return error_response(422, "invalid_request", str(exc))

    @app.exception_handler(AnswerUnavailable)
    async def _unavailable(request: Request, exc: AnswerUnavailable):
        from .handlers import cited

        passages = [p.model_dump() for p in cited(exc.hits)]
        return error_response(503, "generator_unavailable", str(exc), passages=passages)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        names = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        resp = error_response(exc.status_code, names.get(exc.status_code, "http_error"), str(exc.detail))
        resp.headers.update(getattr(exc, "headers", None) or {})
        return resp

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):  # pragma: no cover - last resort
        return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}")
