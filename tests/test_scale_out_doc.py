"""docs/scale-out.md's commands are the tested ones: the default run checks that the CLI accepts each
`samelang` line of the page as written; the slow test runs them all, in order, in a fresh folder (the
page's relative paths), and the README's curls against each `samelang serve` of the page (port 8000, as
the README's main job). Slow: `python -m pytest -m slow tests/test_scale_out_doc.py`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "scale-out.md"


def page_commands() -> list[str]:
    """The command lines of the page's "Commands" block, comments left out."""
    text = PAGE.read_text()
    start = text.index("```bash", text.index("## Commands")) + len("```bash")
    block = text[start : text.index("```", start)]
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_every_samelang_command_of_the_page_is_accepted_by_the_cli():
    """Each option of each line exists (an unknown one fails before ``--help`` is reached)."""
    from samelang.cli import app

    cmds = page_commands()
    samelang = [c for c in cmds if c.startswith("samelang ")]
    assert len(samelang) == 8 and "docker compose --profile scale config" in cmds  # run by tests/test_deploy.py
    for line in samelang:
        result = CliRunner().invoke(app, [*shlex.split(line)[1:], "--help"])
        assert result.exit_code == 0, (line, result.output[-2000:])
    bogus = CliRunner().invoke(app, ["index", "delete", "x", "--no-such-option", "--help"])
    assert bogus.exit_code == 2  # the check above can fail


def _serve_and_curl(args: list[str], cwd: Path, env: dict) -> None:
    from tests.test_main_job import readme_curls, readme_response, serving

    with serving(args, env, cwd):
        assert httpx.get("http://127.0.0.1:8000/info").json()["index"]["store"] == "milvus"
        for cmd in readme_curls():
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600)
            assert out.returncode == 0 and "error" not in readme_response(out.stdout), (args, cmd, out.stdout[-500:])


@pytest.mark.slow
def test_the_page_commands_run_as_written(tmp_path, samelang_home):
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(REPO)}
    more = [{"id": "more-1", "text": "The Zorblax festival of light is held every spring in Ulaanbaatar.",
             "lang": "en"}]  # fmt: skip
    (tmp_path / "more.jsonl").write_text("".join(json.dumps(d) + "\n" for d in more))
    ran = []
    for line in page_commands():
        args = shlex.split(line)
        if args[0] != "samelang":  # pip: this environment has the extras; compose: tests/test_deploy.py
            continue
        if args[1] == "serve":
            _serve_and_curl(args[1:], tmp_path, env)
        else:
            proc = subprocess.run([sys.executable, "-m", "samelang", *args[1:]], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=1200)  # fmt: skip
            assert proc.returncode == 0, (line, proc.stderr[-3000:])
        ran.append(args[1:3])
    assert ["index", "delete"] in ran and ran.count(["serve", "--index"]) == 1
    info = json.loads(subprocess.run([sys.executable, "-m", "samelang", "index", "info", "my-index"], cwd=tmp_path,
                                     env=env, capture_output=True, text=True, check=True).stdout)  # fmt: skip
    # the Ray build of the 80 English test paragraphs, one added, two deleted
    assert (info["n_docs"], info["n_rows"], info["generation"], info["store"]["kind"]) == (79, 81, 3, "milvus")
