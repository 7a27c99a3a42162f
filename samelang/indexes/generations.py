"""A multilingual index on disk: FAISS vectors + SQLite docstore + manifest, in generations. This module owns the
layout, the generations and the locks; :mod:`.index` opens and checks an index, :mod:`.writes` builds, adds, deletes
and exports. The embedding model and the analyzer of the lexical half (:mod:`.lexical`) are the caller's.

Layout: ``DIR/CURRENT`` names the live generation (replaced atomically); ``DIR/gen-000001/`` holds ``vectors.faiss``,
``docs.sqlite``, ``manifest.json`` and ``lexical/`` (BM25, when the index has that half). A generation is complete
and never modified once written: a write makes generation N+1 beside N, then swaps ``CURRENT`` (``os.replace``), so
a crash at any point leaves N loadable. Writers hold an exclusive OS lock on ``.DIR.lock`` from reading ``CURRENT``
to switching it, so two writers run one after the other and neither loses documents. Readers
(:func:`.index.open_index`) hold a shared lock on their generation's ``READERS`` file while it is open; a writer
deletes an old generation only when it can take that lock exclusively, so a generation left behind goes once its
readers do.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

FORMAT_VERSION = 1
CURRENT = "CURRENT"
READERS = "READERS"  # per generation: readers hold a shared lock on it


class IndexError_(RuntimeError):
    """Base class of index errors (name avoids the builtin)."""


class IndexNotFound(IndexError_):
    pass


class IndexModelMismatch(IndexError_):
    pass


class AnalyzerMismatch(IndexError_):
    """The lexical half was built with another analyzer than the one given now."""


class IndexBusy(IndexError_):
    """Another writer holds the index and the caller chose not to wait."""


def _lock_path(path: Path) -> Path:
    # beside the folder, not in it: build_index replaces the whole folder
    return Path(path).parent / f".{Path(path).name}.lock"


@contextmanager
def writer_lock(path: Path, wait: bool = True, log: Callable[[str], None] | None = None) -> Iterator[None]:
    """Exclusive write access to the index at ``path`` (an OS lock, released if the process dies)."""
    lock = _lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise IndexBusy(f"another process is writing the index at {path}; try again when it is done") from None
            (log or (lambda m: print(m, file=sys.stderr)))(
                f"samelang: another process is writing the index at {path}; waiting for it to finish ..."
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def reader_lock(gen: Path) -> int | None:
    """A shared lock on ``gen/READERS`` that keeps writers from deleting the generation."""
    try:
        fd = os.open(gen / READERS, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:  # a read-only copy of an index: nobody can delete it from under us either
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def remove_unread_generations(path: Path, keep: str) -> list[str]:
    """Delete every generation but ``keep`` that no reader holds; returns the names removed."""
    removed = []
    for old in sorted(path.glob("gen-*")):
        if old.name == keep or not old.is_dir():
            continue
        try:
            fd = os.open(old / READERS, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a server still reads it: a later writer removes it
            continue
        try:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old.name)
        finally:
            os.close(fd)
    return removed


def gen_number(gen: Path) -> int:
    return int(re.sub(r"\D", "", gen.name))


def gen_name(n: int) -> str:
    return f"gen-{n:06d}"


def current_generation(path: Path) -> Path:
    path = Path(path)
    pointer = path / CURRENT
    if not pointer.exists():
        raise IndexNotFound(
            f"no index at {path}: build one with `samelang index build --out {path} ...` "
            "(or let `samelang serve` build the bundled demo index)"
        )
    gen = path / pointer.read_text().strip()
    if not (gen / "manifest.json").exists():
        raise IndexNotFound(f"index at {path} points at {gen.name}, which is incomplete: rebuild it")
    return gen


def read_index_manifest(path: Path) -> dict:
    """The manifest of the index's current generation (the index's record, not a model's)."""
    return json.loads((current_generation(path) / "manifest.json").read_text())


def live_identity(path: Path) -> tuple[str, str]:
    """:attr:`OpenIndex.identity` of the generation ``CURRENT`` names now (cheap: two small reads)."""
    gen = current_generation(path)
    m = json.loads((gen / "manifest.json").read_text())
    return (str(m.get("build_id") or m.get("built_at")), gen.name)


def n_rows(manifest: dict) -> int:
    """The manifest's row space (an index written before deletion existed has no holes: ``n_docs``)."""
    return int(manifest.get("n_rows", manifest["n_docs"]))
