"""A tiny ASGI app for the HTTP-load tests: a route that echoes, one that fails, and /ready."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()


@app.post("/ok")
async def ok(request: Request) -> dict:
    return {"echo": await request.json()}


@app.post("/fail")
async def fail() -> JSONResponse:
    return JSONResponse({"detail": "always fails"}, status_code=500)


@app.get("/ready")
async def ready() -> dict:
    return {"ready": True}
