"""What every ``samelang eval ...`` shares: its options' base and the written report.

An evaluation is an object built from its options (declared once, :mod:`service.options`) that
owns its scoring, its caches and the sections it writes (results folder, model cards, README);
``training/cli.py`` only parses arguments and calls :meth:`Evaluation.run`-style methods.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexes.atomic import atomic_write_bytes, atomic_write_text


class EvalOptions(BaseSettings):
    """Options every evaluation has (``SAMELANG_EVAL_<NAME>``; the cache is ``SAMELANG_HOME``)."""

    model_config = SettingsConfigDict(
        env_prefix="SAMELANG_EVAL_", extra="ignore", env_ignore_empty=True, validate_by_name=True
    )

    out: Path = Field(Path("runs/eval"), description="Folder for results.json, results.md (and figures).")
    home: Path | None = Field(
        None, validation_alias="SAMELANG_HOME", description="Cache of converted models, embeddings and scores."
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


def replace_section(path: Path, heading: str, body: str, *, before: str | None = None) -> None:
    """Replace the Markdown section ``heading`` of ``path`` (up to the next ``## `` heading) with
    ``body``, keeping every other section; a missing section goes before ``before`` (or at the end)."""
    text = path.read_text() if path.exists() else f"# {path.parent.name}\n"
    if heading in text:
        head, _, rest = text.partition(heading)
        later = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
    elif before and before in text:
        head, _, later = text.partition(before)
        later = before + later
    else:
        head, later = text, ""
    atomic_write_text(path, head.rstrip("\n") + f"\n\n{heading}\n\n{body.rstrip()}\n" + ("\n" + later if later else ""))
