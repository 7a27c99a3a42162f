"""The README's main job, as a user runs it: `samelang serve` on port 8000 and the
README's curl examples against it. Slow (builds the demo index, loads the generator):
run with `python -m pytest -m slow`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_curls() -> list[str]:
    text = (REPO / "README.md").read_text()
    tour = text[text.index("## A 30-second tour") :].split("\n## ")[0]
    return [c.strip() for c in re.findall(r"^(curl .+?)(?=^\S|\Z)", tour, flags=re.M | re.S) if c.strip()]


def readme_response(stdout: str) -> dict:
    """The body a README curl printed: JSON, or for the streamed ``/answer`` its ``done`` event's data,
    after checking the events came in order (``passages`` first, no ``error``)."""
    if not stdout.startswith("event:"):
        return json.loads(stdout)
    events = [block.split("\n", 1) for block in stdout.strip().split("\n\n")]
    names = [head.removeprefix("event: ") for head, _ in events]
    assert names[0] == "passages" and names[-1] == "done" and "error" not in names, names
    return json.loads(events[-1][1].removeprefix("data: "))


@contextmanager
def serving(
    args: list[str], env: dict, cwd: Path | None = None, python: str = sys.executable, port: int = 8000
) -> Iterator[subprocess.Popen]:
    """``samelang ARGS`` (a serve on ``port``) running until the block ends, once ``/ready`` answers."""
    proc = subprocess.Popen([python, "-m", "samelang", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.time() + 900
        while True:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "server not ready in 15 minutes"
            time.sleep(2)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_serve_and_readme_examples(samelang_home):
    with httpx.Client() as probe:
        try:
            probe.get("http://127.0.0.1:8000/health", timeout=1)
            pytest.fail("port 8000 is taken; the README examples need it")
        except httpx.HTTPError:
            pass
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    with serving(["serve"], env):
        curls = readme_curls()
        assert len(curls) >= 4
        for cmd in curls:
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, (cmd, out.stderr)
            body = readme_response(out.stdout)
            assert "error" not in body, (cmd, body)
