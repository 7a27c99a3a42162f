"""Which models and index the service uses when none is configured."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from samelang.core.model_folder import adapter_saved_modules, is_adapter, model_fingerprint, read_manifest
from samelang.core.models.base_model import base_model_dir, ensure_base_model
from samelang.core.models.encoder import Encoder
from samelang.core.models.fused import FusedEncoder, FusionConfig, fused_fingerprint, is_fused_folder, joined_tag
from samelang.core.models.gemma_checkpoint import generator_gguf
from samelang.core.models.hub import is_hub_id, locate
from samelang.core.paths import REPO_MODELS
from samelang.core.runtime.onnx_export import precision_variant
from samelang.core.runtime.precision import resolve
from samelang.corpora import check_langs, load_xquad
from samelang.indexes.generations import IndexNotFound, read_index_manifest
from samelang.indexes.stores import MILVUS_SCHEMA, StoreSpec
from samelang.indexes.writes import build_index

ALIGNED_BIENCODER = REPO_MODELS / "e5-small-aligned"
LAMAR_RERANKER = REPO_MODELS / "lamar-e5-small"
READER = REPO_MODELS / "reader-e5-small-v3"  # the shipped extractive reader (samelang train reader; its card)
NONE = "none"
COSINE = "cosine"  # --reranker cosine: rerank by the served bi-encoder's cosine
BASE = "base"  # the converted multilingual-e5-small
# the served row of `samelang eval pipeline`, written by `samelang eval pipeline --card`
SERVED_DEFAULTS = REPO_MODELS / "serving.json"


@dataclass(frozen=True)
class ServedDefaults:
    """What ``samelang serve`` runs when no flag says otherwise: the pipeline row that won the
    end-to-end evaluation (reader-gold nDCG@1 on the 12-language pool, ties: lower latency).
    Models are named by their folder under ``models/`` or ``base``; ``reranker`` is ``none``,
    ``cosine`` or a cross-encoder folder name. ``search_reranks`` false (``"rerank": false`` in the
    file): ``/search`` and ``/answer`` rerank nothing by default, and ``reranker`` is still the
    cross-encoder that ``/rerank`` (and a request that asks to rerank) uses, so that a faster served
    row does not leave ``/rerank`` to the bi-encoder's cosine."""

    retriever: str = BASE
    reranker: str = "none"
    candidates: str = "groups"
    rerank_k: int = 20
    lexical_weight: float = 0.0  # BM25's weight in hybrid retrieval (0: dense only)
    rerank_fusion: float = 0.0  # the retriever's weight beside the reranker's (0: the reranker alone)
    answer_mode: str = "generative"  # /answer: the generator writes (generative) or the reader copies (extractive)
    search_reranks: bool = True  # whether /search reranks by default (the file's "rerank")

    @property
    def rerank(self) -> bool:
        """Whether the served search reranks (a cross-encoder is named and the row reranks)."""
        return self.reranker != "none" and self.search_reranks

    @property
    def search_reranker(self) -> str:
        """The served search row's cross-encoder: ``reranker`` when it reranks, else ``none``."""
        return self.reranker if self.rerank else "none"


def served_defaults(path: Path = SERVED_DEFAULTS) -> ServedDefaults:
    """The measured defaults; without the file, the base model with group-aware candidates and no
    reranker (the simplest pipeline, which every other must beat to be served)."""
    if not Path(path).exists():
        return ServedDefaults()
    d = json.loads(Path(path).read_text())["served"]
    return ServedDefaults(
        d["retriever"], d["reranker"], d["candidates"], int(d.get("rerank_k", 20)), float(d.get("lexical_weight", 0.0)),
        float(d.get("rerank_fusion", 0.0)), _answer_mode(d.get("answer_mode", "generative"), path),
        bool(d.get("rerank", True)),
    )  # fmt: skip


def _answer_mode(value, path) -> str:
    if value not in ("extractive", "generative"):
        raise ValueError(f"{path}: served answer_mode {value!r} is neither 'extractive' nor 'generative'; run "
                         "`samelang eval answer --card` to measure it again")  # fmt: skip
    return value


def resolve_model(name: str | Path, home: Path, revision: str | None = None) -> Path:
    """``base`` -> the converted base model; another name -> ``models/<name>``; a path -> itself; a
    Hugging Face hub id (``org/name[@revision]``, no such folder) -> its snapshot in the hub cache
    (:mod:`samelang.core.models.hub`)."""
    name = str(name)
    if name == BASE:
        return ensure_base_model(home)
    if (REPO_MODELS / name).is_dir():
        return REPO_MODELS / name
    if is_hub_id(name):
        return locate(name, "model", "pass a model folder or a hub id in the cache", revision=revision)
    return Path(name)


def is_measured_model(named: str | Path, measured: str, home: Path) -> bool:
    """Whether ``named`` (a flag's model: a ``models/`` name, a folder or a hub id) is the model the
    measured defaults name (``measured``: a ``models/`` name or ``base``); no weights are read."""
    if measured in ("none", COSINE):
        return False
    target = base_model_dir(home) if measured == BASE else REPO_MODELS / measured
    text = str(named)
    if text == measured:
        return True
    path = REPO_MODELS / text if (REPO_MODELS / text).is_dir() else Path(text)
    return path.exists() and path.resolve() == target.resolve()


def chosen_biencoder(cfg) -> Path:
    """The bi-encoder a command's settings name (``--model``: a folder, a ``models/`` name or a hub
    id), else the served one."""
    return resolve_model(cfg.model, cfg.home, cfg.revision) if cfg.model else default_biencoder(cfg.home)


def open_encoder(path: str | Path, device: str = "cpu", *, home: Path, options=None):
    """The bi-encoder of a model folder: an :class:`Encoder`, or for a fused retriever's folder
    (``fused.json``, :mod:`samelang.core.models.fused`) a :class:`FusedEncoder` over its two parts
    (one encoder in both roles when they name the same model)."""
    if not is_fused_folder(path):
        return Encoder(path, device=device, home=home, options=options)
    if home is None:
        raise ValueError(f"{path} is a fused retriever: its parts are found under the home folder, pass home")
    same, cross = model_parts(path, home)
    first = Encoder(same, device=device, home=home, options=options)
    second = first if cross == same else Encoder(cross, device=device, home=home, options=options)
    return FusedEncoder(Path(path), first, second, FusionConfig.read(Path(path)))


def served_fingerprint(model: Path, home: Path) -> str:
    """:func:`model_fingerprint`, also for a fused retriever's folder (from its parts; no weights read)."""
    if not is_fused_folder(model):
        return model_fingerprint(model)
    return fused_fingerprint(*(model_fingerprint(p) for p in model_parts(model, home)))


def model_parts(model: str | Path, home: Path) -> list[Path]:
    """The weight folders behind a bi-encoder folder: itself, or a fused retriever's two models."""
    if not is_fused_folder(model):
        return [Path(model)]
    cfg = FusionConfig.read(Path(model))
    return [resolve_model(p, home) for p in (cfg.same, cfg.cross)]


def default_weights(home: Path) -> Path:
    """The served bi-encoder's weights, for what measures one model (engine speed, precision, the
    reranker evaluation's candidates): the served folder, or a fused retriever's same-language model."""
    return model_parts(default_biencoder(home), home)[0]


def default_biencoder(home: Path) -> Path:
    """The served bi-encoder: the retriever of the measured defaults (``models/serving.json``)."""
    ensure_base_model(home)
    return resolve_model(served_defaults().retriever, home)


def default_reranker(choice: str | Path | None, home: Path | None = None, revision: str | None = None) -> Path | None:
    """The cross-encoder that ``/rerank`` (and reranking, when on) uses: ``choice`` when it names a
    folder or a hub id, ``None`` (bi-encoder cosine) for ``cosine``; unset: the measured defaults'
    cross-encoder, else ``None``."""
    if choice is not None and str(choice) != "":
        if str(choice).lower() == COSINE:
            return None
        return resolve_model(choice, home, revision) if home is not None else Path(choice)
    name = served_defaults().reranker
    if name in ("none", COSINE):
        return None
    return resolve_model(name, home) if home is not None else REPO_MODELS / name


def shipped_biencoders() -> list[Path]:
    """The trained bi-encoders the repository ships (``models/*``: LoRA adapters that save no head
    of their own, unlike a cross-encoder's ``classifier``), by name; the judge rows every one."""
    return sorted(p for p in REPO_MODELS.iterdir() if is_adapter(p) and not adapter_saved_modules(p))


def default_reader(choice: str | Path | None, home: Path | None = None) -> Path | None:
    """The extractive reader ``/answer`` uses: ``choice`` when it names a folder (a ``models/`` name or
    a path), ``None`` for ``none``; unset: the shipped :data:`READER` when present, else ``None``."""
    if choice is not None and str(choice) != "":
        if str(choice).lower() == NONE:
            return None
        return resolve_model(str(choice), home) if home is not None else Path(choice)
    return READER if is_model_kind(READER, "extractive-reader") else None


def is_model_kind(path: Path, kind: str) -> bool:
    """Whether ``path`` holds a model whose manifest's kind starts with ``kind`` (e.g. ``extractive-reader``)."""
    return str((read_manifest(path) or {}).get("kind", "")).startswith(kind)


def shipped_cross_encoders() -> list[Path]:
    """The finished rerankers the repository ships: cross-encoder adapters (they save their head,
    ``classifier``) whose run was LAMAR's last stage; a relevance-stage or stage-1 folder is kept
    only as the next stage's starting point (``training_args.json``: ``"stage"`` 0 or 1). The judge
    reranks with every one."""
    out = []
    for p in sorted(REPO_MODELS.iterdir()):
        if is_adapter(p) and adapter_saved_modules(p) and not is_model_kind(p, "extractive-reader"):
            args = p / "training_args.json"
            if not args.exists() or json.loads(args.read_text()).get("stage") not in (0, 1):
                out.append(p)
    return out


def default_cross_encoder() -> Path | None:
    """The cross-encoder that evaluations and benchmarks of "the reranker" use: the served one when
    the measured defaults serve one, else the LAMAR reranker the repository ships (if any)."""
    return default_reranker(None) or (LAMAR_RERANKER if is_adapter(LAMAR_RERANKER) else None)


def default_generator_path(home: Path) -> Path:
    """The embedded generator's GGUF (raises, naming ``samelang models prepare --generator``, if absent)."""
    return generator_gguf(home)


def demo_index_path(home: Path, langs: str, fingerprint: str, variant: str = "fp32", store: str = "faiss",
                    uri: str | None = None) -> Path:  # fmt: skip
    """Where the demo index of one encoder at one precision variant lives (an int8 index holds int8
    passage vectors: another index, so that what is served does not depend on what ran before); one
    whose vectors are in Milvus is another folder again, one per Milvus (``uri``)."""
    tag = "" if variant == "fp32" else f"-{variant}"
    if store != "faiss":
        where = StoreSpec(store, uri).resolved_uri() or ""
        tag += f"-{store}-{hashlib.sha256(where.encode()).hexdigest()[:8]}"
    return Path(home) / "indexes" / f"xquad-{'-'.join(check_langs(langs))}-{fingerprint[:12]}{tag}"


def adapted_model(index: Path, model: str | Path, home: Path) -> str | Path:
    """The model to serve ``index`` with when ``model`` is chosen: the one ``samelang adapt`` embedded the
    index's live generation with, if it was adapted from ``model`` (no weights read), else ``model``."""
    try:
        manifest = read_index_manifest(Path(index))
    except (IndexNotFound, OSError, ValueError):
        return model
    note = manifest.get("reembedded") or {}
    if note.get("model") and Path(note["model"]).is_dir() and note.get("from") == served_fingerprint(model, home):
        return Path(note["model"])
    return model


def default_index_path(cfg) -> Path:
    """The demo index of the served encoder at the precision it runs here (cheap: no weights read)."""

    model = chosen_biencoder(cfg)
    parts = model_parts(model, cfg.home)
    variants = [precision_variant(resolve(cfg.engine_options(), cfg.torch_device(), p).precision) for p in parts]
    variant = joined_tag(variants)
    return demo_index_path(cfg.home, cfg.demo_langs, served_fingerprint(model, cfg.home), variant, cfg.store,
                           cfg.milvus_uri)  # fmt: skip


def demo_index_ready(path: Path) -> bool:
    """Whether the demo index at ``path`` is built, with its lexical (BM25) half (and, in Milvus, with
    the collection schema of this version)."""

    try:
        manifest = read_index_manifest(path)
    except IndexNotFound:
        return False
    store = manifest.get("store") or {"kind": "faiss"}
    return bool(manifest.get("lexical")) and (store["kind"] != "milvus" or store.get("schema") == MILVUS_SCHEMA)


def ensure_demo_index(home: Path, langs: str, encoder, log=print, embed=None, store=None) -> Path:
    """Build (once) the bundled demo index: all 240 XQuAD paragraphs per language (``embed``: the
    passages' vectors when the caller has them already, by the same encoder; ``store``: a
    :class:`~samelang.indexes.stores.StoreSpec`, FAISS by default)."""

    store = store or StoreSpec()
    variant = encoder.cache_tag
    out = demo_index_path(home, langs, encoder.fingerprint, variant, store.kind, store.uri)
    if demo_index_ready(out):
        return out
    if out.exists():
        log(f"samelang: the demo index at {out} predates this version (its BM25 half or Milvus schema): rebuilding it")
    docs = load_xquad(langs, split="all").documents()
    log(f"samelang: building the demo index ({len(docs)} XQuAD paragraphs, {langs}) into {out} ...")
    build_index(
        out, docs, embed or encoder.encode_passages, encoder.info, source=f"xquad:{langs}:all",
        analyzer=encoder.analyzer, store=store,
    )  # fmt: skip
    return out
