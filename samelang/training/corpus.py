"""``samelang data fetch|import|info`` and the corpus options the trainers share.

* fetch: downloads each declared file from its repository at the pinned commit (``samelang.corpora.fetch``);
* import: copies each declared file (``samelang.corpora.sources``) from snapshots of its repository,
  checks size and sha256, and writes each source as one complete folder (nothing half-written);
* info: the table of examples per source x language x view, the drops, the licences and the sizes;
* :class:`CorporaOption`, :class:`CorpusTrainingOptions`: the store and the held-out sources, declared
  once for ``samelang data``, ``train biencoder --corpus`` and ``train reranker --stage 0``.

``samelang data filter`` (XQuAD kept out by the aligned model's cosine) is ``contamination.py``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from samelang.core.options import StrList
from samelang.core.settings import default_home
from samelang.corpora.fetch import RAW_GITHUB
from samelang.corpora.sources import SOURCES, Source
from samelang.corpora.store import (
    IMPORT_HINT,
    CorporaOption,
    CorpusStore,
    snapshot_blob,
    snapshot_places,
)
from samelang.corpora.views import DEV_EVERY, Views, load_views, read_contamination
from samelang.corpora.xquad import XQUAD_LANGS

DATA_DOC_HEAD = """# Training corpora

Written by `samelang data info --write` (sources, licences and sha256: `samelang/corpora/PROVENANCE.md`).
The files are not shipped (29 MB upstream, each source under its own licence, which a user accepts
from its publisher): `samelang data fetch` downloads them at the pinned commits into the corpus store
(`samelang data import --snapshots DIR` offline), `samelang data filter` keeps XQuAD out. QA rows are
(question, gold passage, same-document negatives); parallel passages are about 4 consecutive sentences in
all 12 languages; ICT queries are one sentence of a parallel passage, the rest of the passage in another
language the positive.

"""


class CorpusTrainingOptions(CorporaOption):
    """What a trainer takes of the corpus views (both trainers: one declaration)."""

    hold_out: str = Field(
        "", description="Corpus sources left out of training, comma-separated (an out-of-domain test set)."
    )

    def training_views(self) -> Views:
        return load_views(self.store(), exclude=tuple(x for x in self.hold_out.split(",") if x))


class DataOptions(BaseSettings, CorporaOption):
    """Every ``samelang data`` command's options (``SAMELANG_DATA_<NAME>``)."""

    model_config = SettingsConfigDict(
        env_prefix="SAMELANG_DATA_", extra="ignore", env_ignore_empty=True, validate_by_name=True
    )

    home: Path = Field(
        default_factory=default_home,
        validation_alias="SAMELANG_HOME",
        description="Cache of converted models and embeddings (default ~/.cache/samelang).",
    )


class DataImportOptions(DataOptions):
    """Options of ``samelang data import``."""

    snapshots: Path = Field(
        ...,
        description="folder with snapshots of the repositories PROVENANCE.md names: git directories or checkouts "
        "named owner+name/repo, owner+name, owner/name or name",
    )
    force: bool = Field(False, description="Copy a source again even if the store has it.")


class DataFetchOptions(DataOptions):
    """Options of ``samelang data fetch``."""

    source: StrList = Field(default_factory=list, description="Only these sources (names as in PROVENANCE.md).")
    base_url: str = Field(RAW_GITHUB, description="Where the repositories' files are published (GitHub's raw layout).")
    force: bool = Field(False, description="Fetch a source again even if the store has it.")

    def chosen(self) -> list[Source]:
        unknown = sorted(set(self.source) - {s.name for s in SOURCES})
        if unknown:
            raise ValueError(f"--source: no source named {unknown}; the sources: {', '.join(s.name for s in SOURCES)}")
        return [s for s in SOURCES if not self.source or s.name in self.source]


class DataInfoOptions(DataOptions):
    """Options of ``samelang data info``."""

    write: bool = Field(
        False,
        description="Also write samelang/corpora/PROVENANCE.md (from the declarations) and docs/data.md (this table).",
    )


def import_sources(snapshots: Path, store: CorpusStore, force: bool = False) -> dict[str, str]:
    """Copy every source found under ``snapshots`` into ``store``; ``name -> what happened``."""
    report = {}
    for source in SOURCES:
        if store.has(source) and not force:
            report[source.name] = "already in the store"
            continue
        place = next((p for p in snapshot_places(Path(snapshots), source) if p.exists()), None)
        if place is None:
            report[source.name] = f"no snapshot of {source.repo} under {snapshots}"
            continue
        report[source.name] = _copy(place, source, store)
    return report


def _copy(place: Path, source: Source, store: CorpusStore) -> str:
    blobs = {}
    for f in source.files:
        data = snapshot_blob(place, source, f)
        if data is None:
            return (
                f"{f.path} is not in {place} at {source.commit[:12]} (a file of 4 MiB or more is left out of snapshots)"
            )
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != f.size or digest != f.sha256:
            declared = f"the declared {f.size} bytes {f.sha256[:12]}..."
            return f"{f.path}: {len(data)} bytes, sha256 {digest[:12]}..., not {declared}"
        blobs[f] = data
    store.write(source, blobs)
    return f"imported {len(blobs)} files from {place}"


def info_rows(views: Views) -> list[dict]:
    """One row per source x language: examples of each view, the passages dropped."""
    counts: Counter = Counter()
    spans: Counter = Counter()
    for r in views.qa:
        counts[(r.source, r.lang, "qa")] += 1
        spans[(r.source, r.lang)] += bool(r.answers)
    for p in views.parallel:
        for lang in XQUAD_LANGS:
            counts[(p.source, lang, "parallel")] += 1
    for q in views.ict:
        counts[(q.source, q.query_lang, "ict")] += 1
    rows = []
    for source, lang in sorted({(s, lang) for s, lang, _ in counts}):
        rows.append({
            "source": source, "lang": lang,
            "qa": counts[(source, lang, "qa")], "with spans": spans[(source, lang)],
            "parallel": counts[(source, lang, "parallel")], "ict": counts[(source, lang, "ict")],
        })  # fmt: skip
    return rows


def info_report(options: DataInfoOptions) -> str:
    """The table ``samelang data info`` prints: views per source x language, drops, licences, sizes."""
    store = options.store()
    present = store.present()
    if not present:
        return f"the corpus store {store.root} holds no source: {IMPORT_HINT}"
    views = load_views(store, sources=tuple(s.name for s in present))
    rows = info_rows(views)
    head = ["source", "lang", "qa", "with spans", "parallel passages", "ict queries"]
    lines = [_md_row(head), "|" + "---|" * len(head)]
    lines += [_md_row([r["source"], r["lang"], r["qa"], r["with spans"], r["parallel"], r["ict"]]) for r in rows]
    qa_langs = Counter()
    for r in rows:
        qa_langs[r["lang"]] += r["qa"]
    par = Counter()
    for r in rows:
        par[r["lang"]] += r["parallel"]
    lines += [
        _md_row(["**all**", f"{len([x for x in qa_langs.values() if x])} QA languages", sum(qa_langs.values()),
                 sum(r["with spans"] for r in rows), f"min {min(par.values(), default=0)} per language",
                 len(views.ict)]),
        "",
        "| source | licence | kept passages | dropped: XQuAD title | dropped: cosine | dropped: rest of an XQuAD "
        "article | on disk (xz) |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    kept = Counter(p.source for p in views.passages.values()) + Counter(p.source for p in views.parallel)
    for s in present:
        d = views.drops.get(s.name, Counter())
        lines.append(
            _md_row(
                [
                    s.name,
                    s.licence,
                    kept[s.name],
                    d["xquad title"],
                    d["cosine"],
                    d["article"],
                    f"{store.size_on_disk(s) / 2**20:.1f} MiB",
                ]
            )
        )
    cal = read_contamination(store)
    c = cal["calibration"]
    lines += [
        "",
        f"store: {store.root}; missing sources: {', '.join(s.name for s in SOURCES if s not in present) or 'none'}",
        f"filter: {cal['model']} cosine >= {c['threshold']} to any of {c['versions']} XQuAD paragraph versions "
        f"(translations caught {c['caught_pct']}%, at {c['start']}: {c['caught_at_start_pct']}%; XQuAD versions "
        f"with an unrelated paragraph over it: {c['unrelated_over_threshold_pct']}%)",
        f"splits by document: dev = 1 in {DEV_EVERY} documents; train/dev QA "
        f"{sum(r.split == 'train' for r in views.qa)}/{sum(r.split == 'dev' for r in views.qa)}",
        f"loading every view: {views.seconds:.1f} s",
    ]
    return "\n".join(lines)


def _md_row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
