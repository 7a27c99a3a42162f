"""The wheel carries the shipped models: ``models/`` (the trained adapters, their cards and records,
``serving.json``) is copied into the built package as ``samelang/_shipped/models``, so an installed
``samelang serve`` runs the measured defaults with no checkout (:mod:`samelang.core.paths` finds it).
Resumable training checkpoints stay in the repository only. Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithModels(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "samelang" / "_shipped" / "models"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree("models", target, ignore=shutil.ignore_patterns("checkpoints", "*.tmp", "__pycache__"))


setup(cmdclass={"build_py": BuildWithModels})
