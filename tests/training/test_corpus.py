"""``samelang data import``: checked files, one complete folder per source."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import replace

from samelang.corpora import sources
from samelang.corpora.store import CorpusStore
from samelang.training import corpus
from samelang.training.corpus import import_sources


def _repo(tmp_path, files: dict[str, bytes]) -> tuple[str, str]:
    repo = tmp_path / "snaps" / "owner+name" / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "data"], check=True)
    return str(repo), subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_import_copies_checked_files_and_refuses_a_wrong_one_whole(tmp_path, monkeypatch):
    files = {"a/one.json": b'{"x": 1}', "two.txt": b"two\n"}
    _, commit = _repo(tmp_path, files)
    decl = tuple(sources.SourceFile(p, len(b), hashlib.sha256(b).hexdigest()) for p, b in files.items())
    good = replace(sources.SOURCES[0], name="good", repo="owner/name", commit=commit, files=decl)
    wrong = replace(good, name="wrong", files=(*decl[:1], sources.SourceFile("two.txt", 4, "0" * 64)))
    absent = replace(good, name="absent", repo="nobody/here")
    monkeypatch.setattr(corpus, "SOURCES", (good, wrong, absent))
    store = CorpusStore(tmp_path / "store")
    report = import_sources(tmp_path / "snaps", store)
    assert report["good"].startswith("imported 2 files")
    assert "not the declared" in report["wrong"] and not (store.root / "wrong").exists()  # nothing half-written
    assert "no snapshot of nobody/here" in report["absent"]
    assert store.read(good, "a/one.json") == b'{"x": 1}'
    assert import_sources(tmp_path / "snaps", store)["good"] == "already in the store"
