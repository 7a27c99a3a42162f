"""A peer embedding engine, run in the peer's own virtual environment (its pins never touch ours).

``samelang bench --section peers`` starts ``<peer venv>/bin/python samelang/bench/peer_worker.py ENGINE MODEL``
and talks JSON lines over stdin/stdout, so that the peer stays loaded and warm while the bench
alternates between it and our engine (medians over the same rounds, machine noise hits both alike).
Requests: ``{"op": "embed", "texts": [...]}``; answers: ``{"seconds": s, "vectors": [[...], ...]}``
(the texts carry the model's prompts already: the peers do not add e5's "query: " / "passage: ").

Engines: ``infinity-torch`` and ``infinity-optimum`` (infinity-emb's torch and ONNX Runtime/optimum
engines, in process through its ``AsyncEmbeddingEngine``: what its server runs behind HTTP).
This file imports only the standard library at module level: it runs under another interpreter.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time


def _infinity(engine: str, model: str, threads: int):
    from infinity_emb import AsyncEmbeddingEngine, EngineArgs  # deferred: keeps infinity_emb out of start-up

    args = EngineArgs(
        model_name_or_path=model, engine=engine, device="cpu", batch_size=32, model_warmup=False,
        bettertransformer=False, compile=False,
    )  # fmt: skip
    return AsyncEmbeddingEngine.from_args(args)


def _root_cause(e: Exception, engine_name: str) -> str:
    """What really failed: infinity reports a missing optional import without saying why it failed."""
    if engine_name.endswith("optimum"):
        try:
            import optimum.onnxruntime.modeling_ort  # noqa: F401  # deferred: keeps optimum out of start-up
        except Exception as inner:  # noqa: BLE001 - reported, not handled
            while inner.__cause__ is not None:
                inner = inner.__cause__
            return f"{type(inner).__name__}: {inner}".splitlines()[-1]
    return f"{type(e).__name__}: {e}".splitlines()[0]


async def main(engine_name: str, model: str) -> None:
    threads = os.cpu_count() or 1
    try:
        eng = _infinity(engine_name.split("-", 1)[1], model, threads)
        await eng.astart()
    except Exception as e:
        print(f"PeerError: {_root_cause(e, engine_name)}", file=sys.stderr, flush=True)
        raise
    print(json.dumps({"ready": True, "engine": engine_name}), flush=True)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            req = json.loads(line)
            t0 = time.perf_counter()
            vectors, _ = await eng.embed(sentences=req["texts"])
            sec = time.perf_counter() - t0
            out = {"seconds": sec}
            if req.get("vectors", True):
                out["vectors"] = [[float(x) for x in v] for v in vectors]
            print(json.dumps(out), flush=True)
    finally:
        await eng.astop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
