"""Where the training corpora's files live, and reading them back checked against their sha256.

The files are not shipped: they are only for training and auditing the models (the service needs none of
them), they weigh 29 MB upstream, and each source comes under its own licence, which a user accepts by
fetching it from its publisher (PROVENANCE.md). The store is a folder laid out as
``<store>/<source>/<path>.xz`` (xz-compressed, the sha256 being the upstream file's), filled by
``samelang data fetch`` (or ``samelang data import --snapshots DIR`` offline), and looked for first in
``shared/corpora`` beside the checkout (a store a team shares), then in ``$SAMELANG_HOME/corpora``. Every
read checks the sha256, so a file that is not the declared one is never trained on.
"""

from __future__ import annotations

import hashlib
import lzma
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from samelang.corpora.sources import SOURCES, Source, SourceFile
from samelang.primitives.atomic import atomic_dir

IMPORT_HINT = "run `samelang data fetch` (offline: `samelang data import --snapshots DIR`)"


class CorpusMissing(FileNotFoundError):
    """A source's file is not in the store, or is not the declared file."""


def shared_store() -> Path:
    """``shared/corpora`` beside the checkout this package runs from."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "corpora"


def default_store(home: Path) -> Path:
    """The shared store when it holds any source, else ``<home>/corpora``."""
    shared = shared_store()
    if any((shared / s.name).is_dir() for s in SOURCES):
        return shared
    return Path(home) / "corpora"


class CorpusStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def file(self, source: Source, f: SourceFile) -> Path:
        return self.root / source.name / (f.path + ".xz")

    def has(self, source: Source) -> bool:
        return all(self.file(source, f).is_file() for f in source.files)

    def present(self) -> list[Source]:
        return [s for s in SOURCES if self.has(s)]

    def read(self, source: Source, path: str) -> bytes:
        """The upstream bytes of ``path``, checked against the declared sha256."""
        f = next((x for x in source.files if x.path == path), None)
        if f is None:
            raise KeyError(f"{source.name} declares no file {path!r}")
        target = self.file(source, f)
        if not target.is_file():
            raise CorpusMissing(f"{source.name}: {path} is not in the corpus store {self.root}: {IMPORT_HINT}")
        data = lzma.decompress(target.read_bytes())
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise CorpusMissing(f"{target}: not the declared file (sha256 differs): {IMPORT_HINT}")
        return data

    def write(self, source: Source, blobs: dict[SourceFile, bytes]) -> None:
        """Every file of ``source`` (its upstream bytes, checked by the caller), xz-compressed, as one
        complete folder: a source is in the store whole or not at all."""
        with atomic_dir(self.root / source.name) as tmp:
            for f, data in blobs.items():
                target = tmp / (f.path + ".xz")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))

    def size_on_disk(self, source: Source) -> int:
        return sum(self.file(source, f).stat().st_size for f in source.files if self.file(source, f).is_file())


def snapshot_places(root: Path, source: Source) -> list[Path]:
    """Where a snapshot of ``source``'s repository may be under ``root``: a bare git directory or a
    checkout, named ``owner+name/repo``, ``owner+name``, ``owner/name`` or ``name``."""
    owner, name = source.repo.split("/")
    return [root / f"{owner}+{name}" / "repo", root / f"{owner}+{name}", root / owner / name, root / name]


def snapshot_blob(place: Path, source: Source, f: SourceFile) -> bytes | None:
    """``f`` at the declared commit from a git directory (bare or a checkout's), or the plain file in a
    folder that is not one; ``None`` when it is not there."""
    git_dir = place / ".git" if (place / ".git").exists() else place
    if (git_dir / "HEAD").is_file() and (git_dir / "objects").is_dir():
        out = subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "blob", f"{source.commit}:{f.path}"],
            capture_output=True,
        )
        return out.stdout if out.returncode == 0 else None
    plain = place / f.path
    return plain.read_bytes() if plain.is_file() else None


class CorporaOption(BaseModel):
    """The corpus store: one declaration, for ``samelang data`` and the trainers that read the views (a plain
    model, so that each command's settings class keeps its own ``SAMELANG_*`` prefix)."""

    corpora: Path | None = Field(
        None,
        validation_alias="SAMELANG_CORPORA",
        description="the corpus store (default: shared/corpora beside the checkout when it holds a source, else "
        "$SAMELANG_HOME/corpora)",
    )

    def store(self) -> CorpusStore:
        return CorpusStore(self.corpora or default_store(self.home))
