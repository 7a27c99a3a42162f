"""Where the checkout's own folders are: the shipped models (``models/``) and the measured pages
(``docs/``), beside the package folder. One place, so that moving a module never moves them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPO_MODELS = REPO / "models"  # the shipped model folders and records (serving.json, fusion.json)
DOCS = REPO / "docs"  # the measured pages, written by the commands that measure them
EVALUATION_DOC = DOCS / "evaluation.md"
DATA_DOC = DOCS / "data.md"
PERFORMANCE_DOC = DOCS / "performance.md"
