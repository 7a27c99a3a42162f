"""``samelang serve``: prepare what the server reads (once, in a child process), then serve the API until
SIGTERM."""

from __future__ import annotations

import logging
import math
import multiprocessing
import sys

import typer

from samelang.core import options
from samelang.service.config import ServiceSettings


def ready_to_serve(cfg: ServiceSettings) -> bool:
    """Whether everything a server reads is made (cheap: manifests and file names, no weights)."""
    # deferred (every import below): keeps faiss, numpy and the models out of the CLI's start-up
    from samelang.core import catalogue as R  # deferred: see above
    from samelang.core.models.base_model import base_model_ready  # deferred: see above
    from samelang.core.models.gemma_checkpoint import generator_ready  # deferred: see above
    from samelang.core.runtime.engine import cache_dir  # deferred: see above
    from samelang.core.runtime.onnx_export import export_pending  # deferred: see above

    if not base_model_ready(cfg.home):
        return False  # converting it is the child's work (default_biencoder below would convert it here)
    device, options, cache = cfg.torch_device(), cfg.engine_options(), cache_dir(cfg.home)
    for part in R.model_parts(R.chosen_biencoder(cfg), cfg.home):
        if export_pending(options, device, part, cache, "embed"):
            return False
    reranker = R.default_reranker(cfg.reranker, cfg.home, cfg.revision)
    if reranker is not None and export_pending(options, device, reranker, cache, "score"):
        return False
    reader = R.default_reader(cfg.reader, cfg.home)
    if reader is not None and export_pending(options, device, reader, cache, "span"):
        return False
    if cfg.generator == "llamacpp" and cfg.generator_model is None and not generator_ready(cfg.home):
        return False
    return cfg.index is not None or R.demo_index_ready(R.default_index_path(cfg))


def prepare_serving(cfg: ServiceSettings) -> None:
    """Make what the server reads: the converted base model, the ONNX exports of the served models
    (the extractive reader's too), the demo index and the generator checkpoint (each once; cached
    under ``$SAMELANG_HOME``)."""
    # deferred (every import below): keeps faiss, numpy and the models out of the CLI's start-up
    from samelang.core import catalogue as R  # deferred: see above
    from samelang.core.models.cross_encoder import CrossEncoderReranker  # deferred: see above
    from samelang.core.models.gemma_checkpoint import prepare_generator  # deferred: see above
    from samelang.core.models.reader import ExtractiveReader  # deferred: see above
    from samelang.core.runtime.engine import cache_dir  # deferred: see above
    from samelang.core.runtime.onnx_export import export_pending  # deferred: see above

    device, options = cfg.torch_device(), cfg.engine_options()
    encoder = R.open_encoder(R.chosen_biencoder(cfg), device=device, home=cfg.home, options=options)
    if cfg.index is None:
        R.ensure_demo_index(cfg.home, cfg.demo_langs, encoder, store=cfg.store_spec())
    reranker = R.default_reranker(cfg.reranker, cfg.home, cfg.revision)
    if reranker is not None:
        CrossEncoderReranker(
            reranker, device=device, max_length=cfg.reranker_max_length, home=cfg.home, options=options
        )
    reader = R.default_reader(cfg.reader, cfg.home)
    if reader is not None and export_pending(options, device, reader, cache_dir(cfg.home), "span"):
        ExtractiveReader(reader, device=device, home=cfg.home, options=options).load()  # the server needs no torch
    if cfg.generator == "llamacpp" and cfg.generator_model is None:
        prepare_generator(cfg.home)


def apply_switch_interval(cfg: ServiceSettings) -> float:
    """Set the interpreter's switch interval to ``--switch-interval-ms`` (the whole process: the server's
    event loop and its model-work threads); returns the one it replaces."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(cfg.switch_interval_ms / 1000)
    return before


def _prepare_in_child(cfg: ServiceSettings) -> None:
    """:func:`prepare_serving` in a child process: converting and exporting read the torch weights
    (~4 GB at peak on a first start), and a process does not give such memory back; the server then
    loads only the finished artefacts, and stays at its steady-state size from its first start."""

    child = multiprocessing.get_context("spawn").Process(target=prepare_serving, args=(cfg,), name="samelang-prepare")
    child.start()
    child.join()
    if child.exitcode != 0:
        typer.echo(f"samelang: preparing the models failed (exit code {child.exitcode}; see above)", err=True)
        raise typer.Exit(1)


@options.command(ServiceSettings)
def serve(cfg: ServiceSettings) -> None:
    """Serve the API: prepares the models and the demo index on first run (cached)."""

    import uvicorn  # deferred: keeps uvicorn out of start-up

    from samelang.service.api.app import create_app  # deferred: keeps fastapi, starlette out of start-up
    from samelang.service.api.server import draining_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # faiss tries its builds from the most specialised down and logs each miss at INFO, which reads like
    # an error; the build it settled on is in /info (index) and the bench tables
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    apply_switch_interval(cfg)
    if not ready_to_serve(cfg):
        _prepare_in_child(cfg)
    typer.echo(f"samelang: loading models and index, then serving on http://{cfg.host}:{cfg.port} ...")
    app = create_app(cfg)
    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="info",
        timeout_graceful_shutdown=max(1, math.ceil(cfg.shutdown_timeout_s)),  # uvicorn: 0 would mean "forever"
    )  # fmt: skip
    draining_server(app, config).run()
