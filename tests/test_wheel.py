"""A wheel that serves: ``pip wheel .``, then that wheel (with its extras) installed into a fresh
virtual environment, and its ``samelang serve``, run outside the checkout, answers the README's tour
(``/search``, ``/answer`` ...) from the models the wheel carries (setup.py copies ``models/`` into it).
Slow (a fresh environment installs torch and the rest): ``python -m pytest -m slow tests/test_wheel.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from tests.test_main_job import REPO, readme_curls, readme_response, serving


@pytest.mark.slow
def test_the_built_wheel_serves_the_readme_tour(tmp_path, samelang_home):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-w", str(dist), "-q"],
                   check=True, timeout=600)  # fmt: skip
    wheel = next(dist.glob("samelang-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "samelang/_shipped/models/serving.json" in names and not any("/checkpoints/" in n for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[cpu,generator]"], check=True, timeout=2400)
    run_dir = tmp_path / "elsewhere"  # no checkout in sight: the wheel's own models are what serves
    run_dir.mkdir()
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    where = subprocess.run([str(py), "-c", "import samelang.core.paths as p; print(p.REPO_MODELS)"], cwd=run_dir,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert where.endswith("samelang/_shipped/models") and str(venv) in where
    with serving(["serve"], env, cwd=run_dir, python=str(py)):
        for cmd in readme_curls():
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, (cmd, out.stderr)
            assert "error" not in readme_response(out.stdout), cmd
