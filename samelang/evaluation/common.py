"""What every ``samelang eval ...`` shares: its options' base and the written report.

An evaluation is an object built from its options (declared once, :mod:`samelang.core.options`) that
owns its scoring, its caches and the sections it writes (results folder, model cards, docs/evaluation.md);
``samelang/cli/evaluate.py`` only parses arguments and calls :meth:`Evaluation.run`-style methods.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from samelang.core.settings import default_home
from samelang.primitives.atomic import atomic_write_bytes, atomic_write_text


class EvalOptions(BaseSettings):
    """Options every evaluation has (``SAMELANG_EVAL_<NAME>``; the cache is ``SAMELANG_HOME``)."""

    model_config = SettingsConfigDict(
        env_prefix="SAMELANG_EVAL_", extra="ignore", env_ignore_empty=True, validate_by_name=True
    )

    out: Path = Field(Path("runs/eval"), description="Folder for results.json, results.md (and figures).")
    home: Path = Field(
        default_factory=default_home,
        validation_alias="SAMELANG_HOME",
        description="Cache of converted models, embeddings and scores (default ~/.cache/samelang).",
    )


@dataclass
class Report:
    """What an evaluation produced: the table printed, the JSON kept, extra files beside them."""

    table: str
    data: dict
    files: dict[str, bytes] = field(default_factory=dict)

    def write(self, out: Path) -> None:
        """``results.json``, ``results.md`` and the extra files, each written atomically."""
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "results.json", json.dumps(self.data, indent=2))
        atomic_write_text(out / "results.md", self.table + "\n")
        for name, blob in self.files.items():
            atomic_write_bytes(out / name, blob)
