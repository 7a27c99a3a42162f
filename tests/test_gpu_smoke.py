"""``scripts/gpu_smoke.sh`` and ``scripts/gpu_train.sh`` run only on a GPU host, so nothing else would
notice that they call a flag or subcommand that was renamed: these checks read the scripts instead of
running them (seconds).

* ``bash -n``: it parses;
* every ``samelang ...`` it invokes (also ``-m samelang`` under torchrun) names a real subcommand,
  and every ``--flag`` on that command line is one of that subcommand's options (read from the
  click command tree ``samelang`` is built from: the same source as its ``--help``);
* every ``python scripts/...py`` it runs takes the flags it is given (from its ``--help``);
* every ``SAMELANG_*`` variable it sets is a service setting;
* its embedded Python snippets compile and what they import exists."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"
TRAIN = REPO / "scripts" / "gpu_train.sh"
# what each script must run (a script that stopped calling samelang would pass vacuously)
CALLS = {
    SCRIPT: {"models prepare", "train biencoder", "train reranker", "index build", "eval reranker"},
    TRAIN: {"models prepare", "train biencoder", "train reranker", "eval pipeline"},
}


def logical_lines(text: str) -> list[str]:
    """The script's lines with ``\\``-continuations joined, comments and heredoc bodies left out."""
    out, heredoc_end = [], None
    for line in text.replace("\\\n", " ").splitlines():
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        m = re.search(r"<<-?\s*'?(\w+)'?", line)
        if m:
            heredoc_end = m.group(1)
        if not line.lstrip().startswith("#"):
            out.append(line)
    return out


def heredocs(text: str) -> list[str]:
    return re.findall(r"<<'PY'\n(.*?)\nPY\n", text, flags=re.S)


def invocations(text: str) -> list[tuple[list[str], list[str]]]:
    """(subcommand words, --flags) of each ``samelang`` command line in the script."""
    found = []
    for line in logical_lines(text):
        for m in re.finditer(r"(?:^|\s)(?:-m\s+)?samelang((?:\s+[a-z][\w-]*)*)(.*)", line):
            words = m.group(1).split()
            flags = re.findall(r"(?<!\S)(--[a-z][\w-]*)", m.group(2).split("|")[0].split(";")[0])
            found.append((words, flags))
    return found


@pytest.fixture(scope="module")
def script() -> str:
    return SCRIPT.read_text()


@pytest.mark.parametrize("path", list(CALLS), ids=lambda p: p.name)
def test_the_script_parses(path):
    bash = shutil.which("bash")
    assert bash, "bash is needed to check the script"
    proc = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", list(CALLS), ids=lambda p: p.name)
def test_every_samelang_subcommand_and_flag_it_calls_exists(path):
    from samelang.cli import app

    root = typer.main.get_command(app)
    calls = invocations(path.read_text())
    called = {" ".join(words) for words, _ in calls}
    assert CALLS[path] <= called, called
    for words, flags in calls:
        cmd = root
        for w in words:  # a group has .commands (typer may bring its own click: no isinstance)
            assert w in getattr(cmd, "commands", {}), f"`samelang {' '.join(words)}`: no {w!r}"
            cmd = cmd.commands[w]
        assert not hasattr(cmd, "commands"), f"`samelang {' '.join(words)}` needs a subcommand"
        options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        missing = [f for f in flags if f not in options]
        assert not missing, f"`samelang {' '.join(words)}` has no option {missing}"


def test_the_python_scripts_it_runs_take_their_flags():
    import sys

    lines = [m for line in logical_lines(TRAIN.read_text()) for m in re.finditer(r"python (scripts/\S+\.py)(.*)", line)]
    assert lines, "gpu_train.sh runs the fused grid"
    for m in lines:
        usage = subprocess.run([sys.executable, str(REPO / m.group(1)), "--help"], capture_output=True, text=True)
        assert usage.returncode == 0, usage.stderr
        for flag in re.findall(r"(?<!\S)(--[a-z][\w-]*)", m.group(2)):
            assert flag in usage.stdout, f"{m.group(1)} has no option {flag}"


def test_every_samelang_variable_it_sets_is_a_setting(script):
    from samelang.service.config import ServiceSettings

    names = set(re.findall(r"\bSAMELANG_([A-Z_]+)=", script))
    assert {"HOME", "DEVICE", "INDEX", "MODEL"} <= names
    fields = {f.upper() for f in ServiceSettings.model_fields}
    assert names <= fields, names - fields


def test_its_python_snippets_compile_and_their_imports_exist(script):
    snippets = heredocs(script)
    assert len(snippets) >= 2
    for code in snippets:
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "samelang":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


def test_the_reader_of_the_script_finds_commands_and_flags():
    text = (
        "# samelang serve --in-a-comment\n"
        'step a samelang index build --out "$OUT" \\\n  --langs en --no-resume\n'
        "step b torchrun --nproc_per_node=2 -m samelang train biencoder --max-steps 3 | tee log\n"
        "python - <<'PY'\nsamelang = 1  # not a command\nPY\n"
    )
    assert invocations(text) == [
        (["index", "build"], ["--out", "--langs", "--no-resume"]),
        (["train", "biencoder"], ["--max-steps"]),
    ]
