# ruff: noqa: E501  (NOT_TAKEN is data: one reason a line)
"""The training corpora: one declaration per source (repository, commit, files with size and sha256),
kept as data in ``sources.json``.

Everything else derives from these records: ``samelang data import`` copies exactly these files from a
snapshot of the repository and checks each against its sha256, ``PROVENANCE.md`` is written from them
(``samelang data info --write``; a test keeps the two equal), and the readers know each
source by its name. The files themselves are not in the repository (see ``store.py`` for why and where
they live).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal


@dataclass(frozen=True)
class SourceFile:
    path: str  # inside the repository, at the commit
    size: int
    sha256: str


@dataclass(frozen=True)
class Source:
    name: str
    kind: Literal["qa", "parallel"]
    repo: str  # owner/name on GitHub
    commit: str
    files: tuple[SourceFile, ...]
    licence: str  # SPDX identifier of the data's licence
    licence_file: str | None  # the repository's own statement of it, among ``files``
    langs: str
    about: str

    @property
    def data_files(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.path != self.licence_file)


def _declared() -> tuple[Source, ...]:
    """The declarations in ``sources.json`` (data, one source a record, one file ``[path, size, sha256]``)."""
    rows = json.loads(resources.files("samelang.corpora").joinpath("sources.json").read_text(encoding="utf-8"))
    return tuple(Source(**{**r, "files": tuple(SourceFile(*f) for f in r["files"])}) for r in rows)


SOURCES: tuple[Source, ...] = _declared()

BY_NAME: dict[str, Source] = {s.name: s for s in SOURCES}

# Looked at and not taken, with the reason (PROVENANCE.md lists them; the test sets are here too so
# that nothing can add them back without deleting a line that says why not).
NOT_TAKEN: tuple[tuple[str, str], ...] = (
    ("MLQA (any copy, including the one in wuhjie/few_shots_that_matters_wu)", "an evaluation set of ours: never trained on"),
    ("XQuAD copies in other repositories", "our own test articles come from it; XQuAD is read only from samelang/corpora/data/xquad"),
    ("SQuAD v1.1 / v2.0 dev, and anything derived from it", "XQuAD's 48 articles are drawn from SQuAD v1.1 dev"),
    ("XNLI", "CC BY-NC 4.0: NonCommercial, and the shipped models are Apache-2.0 products"),
    ("TQuAD (TQuad/turkish-nlp-qa-dataset)", "no licence is stated in the repository: not redistributable"),
    ("CMRC 2018 train (squad-style-data/cmrc2018_train.json)", "over 4 MiB: not in the repository snapshot"),
    ("DRCD training set (DRCD_training.json)", "over 4 MiB: not in the repository snapshot"),
    ("iApp Wiki QA, the single-file release (iapp-thai-wikipedia-qa-1961-docs-9170-questions.json)", "over 4 MiB: not in the snapshot; squad_format/data.zip holds the same questions"),
    ("TyDi QA GoldP ar and ru train", "over 4 MiB: not in the snapshot at that commit"),
    ("FLORES-200 dev split", "not in the OPUS-MT-testsets snapshot (devtest only)"),
)  # fmt: skip
