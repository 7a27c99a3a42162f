"""Where the checkout's own folders are: the shipped models (``models/``, or their copy inside an
installed wheel) and the measured pages (``docs/``), beside the package folder. One place, so that
moving a module never moves them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the shipped model folders and records (serving.json, fusion.json): the checkout's, or in an installed wheel
# the copy setup.py puts inside the package
INSTALLED_MODELS = Path(__file__).resolve().parents[1] / "_shipped" / "models"
REPO_MODELS = REPO / "models" if (REPO / "models").is_dir() or not INSTALLED_MODELS.is_dir() else INSTALLED_MODELS
DOCS = REPO / "docs"  # the measured pages, written by the commands that measure them
EVALUATION_DOC = DOCS / "evaluation.md"
DATA_DOC = DOCS / "data.md"
PERFORMANCE_DOC = DOCS / "performance.md"
