"""The settings every command shares (``$SAMELANG_HOME``, device, precision, engine): each option
has a ``SAMELANG_*`` environment-variable twin.

Precedence: a CLI flag, then the environment variable, then the default here. CLI commands pass only
the flags the user gave to :func:`settings`. Only the commands (the composition roots) build these:
library code takes ``home`` and the engine's options as parameters, so that a test, a worker or an
evaluation can run with any home without touching the environment.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from samelang.core.runtime.precision import MAX_BATCH_TOKENS, PARALLEL_BATCHES, EngineOptions


def default_home() -> Path:
    """``~/.cache/samelang``: where converted models, built indexes and caches live unless SAMELANG_HOME says."""
    return Path.home() / ".cache" / "samelang"


class HubOptions(BaseSettings):
    """How a model named by a Hugging Face hub id is fetched and run (:mod:`samelang.core.models.hub`);
    shared by the serving commands and the trainers, one variable each."""

    revision: str | None = Field(
        None,
        validation_alias="SAMELANG_REVISION",
        description="revision (branch, tag or commit) of every Hugging Face hub id named without its own "
        "(org/name@revision)",
    )
    trust_remote_code: bool = Field(
        False, validation_alias="SAMELANG_TRUST_REMOTE_CODE",
        description="run a hub checkpoint's own code (config.json's auto_map, e.g. the jina models); "
        "without it such a checkpoint is refused, not loaded as a stock class",
    )  # fmt: skip


class Settings(HubOptions):
    """Process-wide configuration (``SAMELANG_<FIELD>`` in the environment)."""

    # an empty variable (compose passes `SAMELANG_INDEX=` through) means "not set", not an empty path
    model_config = SettingsConfigDict(
        env_prefix="SAMELANG_", extra="ignore", env_ignore_empty=True, validate_by_name=True
    )

    home: Path = Field(default_factory=default_home, description="cache for converted models and built indexes")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device for the encoders")
    threads: int | None = Field(
        None, ge=1,
        description="intra-op threads of torch / of each ONNX Runtime pass (default: all cores; ONNX: cores / "
        "parallel_batches)",
    )  # fmt: skip
    precision: Literal["auto", "fp32", "bf16", "fp16", "int8"] = Field(
        "auto", description="encoder precision; auto: the precision the model card recorded (else fp32)"
    )
    backend: Literal["auto", "torch", "onnx"] = Field(
        "auto", description="auto: ONNX Runtime on CPU for fp32/int8 when installed, else torch"
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=16,
        description=f"padded tokens per forward pass; unset: {MAX_BATCH_TOKENS['cpu']} on CPU (small batches stay "
        f"in cache and fill the parallel lanes), {MAX_BATCH_TOKENS['gpu']} on a GPU (a pass costs about the same at "
        "either size there)",
    )

    parallel_batches: int = Field(
        PARALLEL_BATCHES, ge=1, le=64,
        description="forward passes of one call in flight at once on ONNX Runtime (overlaps the small operators)",
    )  # fmt: skip

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        if not glob.glob("/dev/nvidia[0-9]*"):
            return "cpu"  # no NVIDIA device node, no CUDA: and no torch import (~0.4 GB) just to learn that
        import torch  # deferred: keeps torch out of start-up

        return "cuda" if torch.cuda.is_available() else "cpu"

    def engine_options(self) -> EngineOptions:
        return EngineOptions(
            self.precision, self.backend, self.max_batch_tokens, threads=self.threads,
            parallel_batches=self.parallel_batches, trust_remote_code=self.trust_remote_code,
        )  # fmt: skip


def settings(**flags) -> Settings:
    """Settings from the environment, overridden by the CLI ``flags`` that were given (not None)."""
    return Settings(**{k: v for k, v in flags.items() if v is not None})
