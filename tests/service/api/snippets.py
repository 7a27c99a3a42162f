"""The documentation's own client code, run verbatim against a real server: the snippets of
docs/api.md and the README's, and a venv of its own for a client whose pins clash with ours."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from samelang.indexes.vectors import normalise

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def doc_snippet(name: str) -> str:
    """The python block that follows ``<!-- snippet: name -->`` in docs/api.md."""
    m = re.search(rf"<!-- snippet: {name} -->\n```python\n(.*?)```", API_DOC.read_text(), re.S)
    assert m, f"docs/api.md has no snippet {name!r}"
    return m.group(1)


def run_snippet(name: str, url: str, monkeypatch, api_key: str | None = None) -> dict:
    monkeypatch.setenv("SAMELANG_URL", url)
    if api_key:
        monkeypatch.setenv("SAMELANG_API_KEY", api_key)
    else:
        monkeypatch.delenv("SAMELANG_API_KEY", raising=False)
    ns: dict = {}
    exec(compile(doc_snippet(name), f"docs/api.md:{name}", "exec"), ns)  # noqa: S102 - the page's own code
    return ns


def ours(encoder, texts: list[str], passages: bool = False) -> np.ndarray:
    return normalise(encoder.encode_passages(texts) if passages else encoder.encode_queries(texts))


def readme_snippet(package: str, url: str) -> str:
    """The README's python block that starts by importing from ``package``, at ``url``."""
    text = API_DOC.parents[1].joinpath("README.md").read_text()
    m = re.search(rf"```python\n(from {package}\b.*?)```", text, re.S)
    assert m, f"README.md has no snippet importing {package}"
    return m.group(1).replace("http://127.0.0.1:8000", url)


def run_readme(package: str, url: str) -> dict:
    ns: dict = {}
    exec(compile(readme_snippet(package, url), f"README.md:{package}", "exec"), ns)  # noqa: S102 - the README's code
    return ns


def readme_query(encoder) -> np.ndarray:
    """The vector the README's snippets ask for, as /v1/embeddings gives it."""
    return ours(encoder, ["谁是V＆A的第一任馆长？"])[0]


# LangChain's TEI client runs from a venv of its own: it pins huggingface-hub < 1 (ours is 2.x), and 1.2.0
# is its last release that takes an endpoint's URL (1.2.1 on refuse one: "must be a HuggingFace repo ID")
LANGCHAIN_HF = ("langchain-huggingface==1.2.0", "numpy")  # numpy: huggingface_hub decodes vectors with it


def client_venv(home: Path, requirements: tuple[str, ...]) -> Path:
    """A venv holding one client's ``requirements`` (made once under ``home``, ~20 s), so that its pins
    never touch ours."""
    venv = Path(home) / "clients" / requirements[0].replace("==", "-")
    if not (venv / "READY").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *requirements], check=True)
        (venv / "READY").write_text(" ".join(requirements) + "\n")
    return venv
