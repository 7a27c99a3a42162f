"""``atomic_dir``: replacing an existing folder leaves no moment without a complete one at the path.

The crash test rebuilds a real index over an existing one in a child process that SIGKILLs itself
at each step of the replace (no ``finally``, no ``atexit``: as a power cut or the OOM killer would)
and opens whatever the path holds afterwards: the complete old index or the complete new one. The
embedding is a fixed function of the text (the ``indexes`` package only sees a callable), so no
model is loaded and each child takes about a second."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from samelang.corpora import Document
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives import atomic as A
from samelang.primitives.identity import ModelInfo

REPO = Path(__file__).resolve().parents[2]
DIM = 8
MODEL = ModelInfo("hash-embedding", "0" * 64, DIM)


def embed(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in for a model: one unit vector per text."""
    out = np.stack(
        [
            np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8])).standard_normal(DIM)
            for t in texts
        ]
    )
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def corpus(version: str, n: int) -> list[Document]:
    return [Document(f"{version}-{i}", f"document {i} of the {version} build", "en") for i in range(n)]


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import samelang.primitives.atomic as A
    import samelang.indexes.writes as I
    from tests.primitives.test_atomic import MODEL, corpus, embed

    path, kill_at = Path(sys.argv[1]), sys.argv[2]
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    if kill_at == "mid-write":  # the new generation half written inside the scratch folder
        I.V.write = die
    else:  # after a named step of atomic_dir's replace
        A._step = lambda name: die() if name == kill_at else None
    I.build_index(path, corpus("new", 7), embed, MODEL)
    """
)

# where the child dies -> what the path must hold afterwards
STEPS = {"mid-write": "old", "written": "old", "swapped": "new", "synced": "new", "cleaned": "new"}


@pytest.mark.parametrize("kill_at", list(STEPS))
def test_a_kill_at_any_step_of_a_rebuild_leaves_the_old_or_the_new_index_whole(tmp_path, kill_at):
    path = tmp_path / "idx"
    build_index(path, corpus("old", 5), embed, MODEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), kill_at], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-3000:]  # it died where it was told to, not elsewhere
    idx = open_index(path, MODEL)
    try:
        version = STEPS[kill_at]
        n = 5 if version == "old" else 7
        assert idx.size == n and idx.manifest["n_docs"] == n
        assert idx.docs.rows_for_ids([f"{version}-{i}" for i in range(n)]).keys() == {
            f"{version}-{i}" for i in range(n)
        }
        _, rows = idx.search(embed([f"document 3 of the {version} build"]), 1)
        assert idx.docs.get_rows(rows[0].tolist())[0].id == f"{version}-3"
    finally:
        idx.close()
    # a kill before the clean-up leaves a hidden scratch sibling that nothing reads; the next build works
    build_index(path, corpus("next", 3), embed, MODEL)
    idx = open_index(path, MODEL)
    assert idx.size == 3
    idx.close()


def _replace_in_a_loop(target: Path, rounds: int, errors: list) -> None:
    try:
        for i in range(rounds):
            with A.atomic_dir(target) as tmp:
                (tmp / "a").write_text(str(i))
                (tmp / "b").write_text(str(i))
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def test_a_reader_never_finds_the_folder_missing_or_half_made(tmp_path):
    target = tmp_path / "t"
    with A.atomic_dir(target) as tmp:
        (tmp / "a").write_text("start")
        (tmp / "b").write_text("start")
    errors: list = []
    writer = threading.Thread(target=_replace_in_a_loop, args=(target, 300, errors))
    writer.start()
    seen, complete = 0, 0
    while writer.is_alive() or seen == 0:
        # the path always names a folder (listdir never raises) whose file is never empty. A reader
        # that resolved the path just before a swap holds the *old* folder while it is being removed
        # (it may list fewer files; seen under load): index readers hold a lock on their generation
        # against exactly that, and the kill test above covers half-made folders.
        names = sorted(os.listdir(target))
        assert set(names) <= {"a", "b"}, names
        try:
            assert (target / "a").read_text()  # never empty
        except FileNotFoundError:
            pass
        seen += 1
        complete += names == ["a", "b"]
    writer.join()
    assert not errors, errors
    assert complete >= 0.5 * seen, (complete, seen)
    assert (target / "a").read_text() == (target / "b").read_text() == "299"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # the old folders are gone


def test_without_an_atomic_exchange_it_falls_back_to_two_renames(tmp_path, monkeypatch):
    monkeypatch.setattr(A, "_EXCHANGE", None)
    target = tmp_path / "t"
    for version in ("old", "new"):
        with A.atomic_dir(target) as tmp:
            (tmp / "v").write_text(version)
    assert (target / "v").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_a_failing_block_leaves_the_old_folder_and_no_scratch(tmp_path):
    target = tmp_path / "t"
    with A.atomic_dir(target) as tmp:
        (tmp / "v").write_text("old")
    with pytest.raises(ValueError), A.atomic_dir(target) as tmp:
        (tmp / "v").write_text("half")
        raise ValueError("the writer failed")
    assert (target / "v").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["t"]
