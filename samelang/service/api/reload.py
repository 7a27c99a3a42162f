"""Hot reload: a running server swaps in a new index generation (``samelang index add`` wrote it, or
``POST /admin/reload`` asks) between requests; requests in flight finish on the generation they began
with. A generation that ``samelang adapt`` embedded again, with a model adapted from the one served
(its manifest says which), brings that model in with it: the encoder and the index switch together."""

from __future__ import annotations

import asyncio
import logging
import threading

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from samelang.core import catalogue
from samelang.core.models.cross_encoder import CosineReranker
from samelang.indexes.generations import live_identity, read_index_manifest
from samelang.indexes.index import OpenIndex, open_index
from samelang.service.api.dialects import Dialects
from samelang.service.components import Components

log = logging.getLogger("samelang")


def swap_index(app: FastAPI, index: OpenIndex, encoder=None) -> None:
    """Serve ``index`` (and ``encoder``, when it brings another model) from the next request on; requests
    in flight finish on the pipeline they started with, and the old index is closed when the last of them
    lets go of it. One assignment (the handlers, which every route reads) switches everything at once."""
    pipeline = app.state.handlers.pipeline
    if encoder is None:
        pipeline = pipeline.replace(index=index)
    else:  # a cosine reranker scores with the encoder: it follows it
        cosine = isinstance(pipeline.reranker, CosineReranker)
        pipeline = pipeline.replace(index=index, encoder=encoder,
                                    reranker=CosineReranker(encoder) if cosine else pipeline.reranker)  # fmt: skip
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
        encoder = adapted_encoder(app, read_index_manifest(pipeline.index.path))
        info = (encoder or pipeline.encoder).info
        index = open_index(pipeline.index.path, info, use_gpu=cfg.use_gpu_index, uri=cfg.milvus_uri)
        if index.identity == pipeline.index.identity:
            index.close()
            return False
        swap_index(app, index, encoder)
        return True


def adapted_encoder(app: FastAPI, manifest: dict):
    """The model a live generation was embedded again with by ``samelang adapt``, loaded, when it was adapted
    from the model served now (else ``None``: the served encoder stays, and a generation of another model is
    refused as ever)."""
    note = manifest.get("reembedded") or {}
    served = app.state.handlers.pipeline.encoder.info.fingerprint
    want = (manifest.get("embedding_model") or {}).get("fingerprint")
    if not note.get("model") or want == served or note.get("from") != served:
        return None
    cfg = app.state.settings
    encoder = catalogue.open_encoder(note["model"], device=cfg.torch_device(), home=cfg.home,
                                    options=cfg.engine_options())  # fmt: skip
    if encoder.info.fingerprint != want:
        raise ValueError(f"{note['model']} is not the model the index's live generation was embedded with")
    log.info("samelang: the index was embedded again with %s (adapted from the served model): serving it",
             note["model"])  # fmt: skip
    return encoder


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
