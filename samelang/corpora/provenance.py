"""``PROVENANCE.md``, written from the source declarations (a test keeps the file equal to this)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from samelang.corpora.sources import NOT_TAKEN, SOURCES

PROVENANCE = Path(__file__).with_name("PROVENANCE.md")
LICENCE_FILES = {
    "CC-BY-SA-4.0": "licences/CC-BY-SA-4.0.txt",
    "CC-BY-SA-3.0": "licences/CC-BY-SA-3.0.txt",
    "MIT": "licences/MIT.txt",
    "Apache-2.0": "licences/Apache-2.0.txt",
}


def licence_text(spdx: str) -> str:
    return resources.files("samelang.corpora").joinpath(LICENCE_FILES[spdx]).read_text(encoding="utf-8")


def render_provenance() -> str:
    out = [
        "# Training corpora: provenance",
        "",
        "Written by `samelang data info --write` from `samelang/corpora/sources.json`; do not edit.",
        "",
        "Each file is taken from the repository at the commit named, checked against its size and sha256 by",
        "`samelang data import` and again at every read. The files live in the corpus store, not in this",
        "repository (`samelang/corpora/store.py` says why and where). The licence texts are in `licences/`.",
        "No passage from an XQuAD article is kept: by title, and by the aligned model's cosine to every XQuAD",
        "paragraph (`samelang data filter`).",
        "",
    ]
    for s in SOURCES:
        out += [
            f"## {s.name}",
            "",
            f"- {s.about}.",
            f"- Repository: `{s.repo}`, commit `{s.commit}`.",
            f"- Licence: {s.licence} (`{LICENCE_FILES[s.licence]}`)"
            + (f"; the repository states it in `{s.licence_file}`." if s.licence_file else "."),
            f"- Languages: {s.langs}; view: {s.kind}.",
            "",
            "| path | bytes | sha256 |",
            "|---|---|---|",
            *[f"| `{f.path}` | {f.size} | `{f.sha256}` |" for f in s.files],
            "",
        ]
    out += ["## Looked at and not taken", "", "| what | why not |", "|---|---|"]
    out += [f"| {what} | {why} |" for what, why in NOT_TAKEN]
    return "\n".join(out) + "\n"
