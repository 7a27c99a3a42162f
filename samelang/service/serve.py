"""``samelang serve``: prepare what the server reads (once, in a child process), then serve the API until
SIGTERM."""

from __future__ import annotations

import logging
import multiprocessing

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
    from samelang.service.api.server import serve_app  # deferred: keeps uvicorn out of start-up
    from samelang.service.front import serve_with_front  # deferred: as above

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not ready_to_serve(cfg):
        _prepare_in_child(cfg)
    typer.echo(f"samelang: loading models and index, then serving on http://{cfg.host}:{cfg.port} ...")
    if not cfg.front:
        return serve_app(cfg)
    code = serve_with_front(cfg)
    if code:
        raise typer.Exit(code)
