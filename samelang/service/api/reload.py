"""Hot reload: a running server swaps in a new index generation (``samelang index add`` wrote it, or
``POST /admin/reload`` asks) between requests; requests in flight finish on the generation they began
with."""

from __future__ import annotations

import asyncio
import logging
import threading

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from samelang.indexes.generations import live_identity
from samelang.indexes.index import OpenIndex, open_index
from samelang.service.api.dialects import Dialects
from samelang.service.components import Components

log = logging.getLogger("samelang")


def swap_index(app: FastAPI, index: OpenIndex) -> None:
    """Serve ``index`` from the next request on; requests in flight finish on the pipeline they
    started with, and the old index is closed when the last of them lets go of it. One assignment
    (the handlers, which every route reads) switches everything at once."""
    pipeline = app.state.handlers.pipeline.replace(index=index)
    app.state.handlers = Dialects.over(pipeline)
    app.state.components = Components(pipeline, app.state.components.info)
    log.info("samelang: serving index generation %s (%d documents)", index.generation, index.documents)


_RELOAD = threading.Lock()


def reload_index(app: FastAPI) -> bool:
    """Open the index's live generation if it is not the one served (another generation, or the
    folder rebuilt: another build id); True when it swapped. One reload at a time."""

    with _RELOAD:
        pipeline = app.state.handlers.pipeline
        if live_identity(pipeline.index.path) == pipeline.index.identity:
            return False
        cfg = app.state.settings
        index = open_index(pipeline.index.path, pipeline.encoder.info, use_gpu=cfg.use_gpu_index, uri=cfg.milvus_uri)
        if index.identity == pipeline.index.identity:
            index.close()
            return False
        swap_index(app, index)
        return True


async def watch_index(app: FastAPI, every_s: float) -> None:
    """Poll the index's ``CURRENT`` and swap in a new generation (``samelang index add``)."""

    failed: str | None = None
    while True:
        await asyncio.sleep(every_s)
        try:
            await run_in_threadpool(reload_index, app)
            failed = None
        except Exception as e:  # noqa: BLE001 - a half-written or broken index must not stop the server
            if str(e) != failed:  # once per distinct failure, not every poll
                failed = str(e)
                log.exception("samelang: could not reload the index; still serving generation %s",
                              app.state.handlers.pipeline.index.generation)  # fmt: skip
