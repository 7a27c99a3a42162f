"""Settings: every option has a ``SAMELANG_*`` environment-variable twin.

Precedence: a CLI flag, then the environment variable, then the default here.
CLI commands pass only the flags the user gave to :func:`settings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path.home() / ".cache" / "samelang"


class Settings(BaseSettings):
    """Process-wide configuration (``SAMELANG_<FIELD>`` in the environment)."""

    model_config = SettingsConfigDict(env_prefix="SAMELANG_", extra="ignore")

    home: Path = Field(default_factory=_default_home, description="cache for converted models and built indexes")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device for the encoders")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads (default: torch's choice)")


def settings(**flags) -> Settings:
    """Settings from the environment, overridden by the CLI ``flags`` that were given (not None)."""
    return Settings(**{k: v for k, v in flags.items() if v is not None})
