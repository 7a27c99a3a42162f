"""The corpus declarations: provenance, licences, and the test sets kept out by construction."""

from __future__ import annotations

import re

from samelang.corpora.provenance import LICENCE_FILES, PROVENANCE, licence_text, render_provenance
from samelang.corpora.sources import NOT_TAKEN, SOURCES


def test_provenance_md_is_written_from_the_declarations():
    assert PROVENANCE.read_text(encoding="utf-8") == render_provenance(), "samelang data info --write"


def test_every_source_has_its_provenance_entry_and_licence_file():
    text = PROVENANCE.read_text(encoding="utf-8")
    for s in SOURCES:
        assert re.fullmatch(r"[0-9a-f]{40}", s.commit) and f"`{s.repo}`, commit `{s.commit}`" in text
        for f in s.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256) and f"| `{f.path}` | {f.size} | `{f.sha256}` |" in text
        assert s.licence in LICENCE_FILES and len(licence_text(s.licence)) > 1000
        assert s.licence_file is None or s.licence_file in {f.path for f in s.files}


def test_no_test_set_and_nothing_noncommercial_is_declared():
    for s in SOURCES:
        assert "NC" not in s.licence
        for f in s.files:
            p = f.path.lower()
            assert (
                "mlqa" not in p
                and "xquad" not in p
                and "squad/dev" not in p
                and "dev-v1.1" not in p
                and "dev-v2.0" not in p
            )
    tydi = next(s for s in SOURCES if s.name == "tydiqa_goldp")
    assert tydi.commit.startswith("6bfe6324") and all(f.path.startswith("data/tydiqa/") for f in tydi.files)
    said = " ".join(what for what, _ in NOT_TAKEN)
    assert "MLQA" in said and "SQuAD" in said and "XNLI" in said and "TQuAD" in said
