"""The training views both trainers read, built from the corpus store, with the test sets kept out.

* ``qa``: (query, positive passage, same-document negatives, language) from the QA sources;
* ``parallel``: passages of about 4 consecutive sentences in all 12 languages (FLORES, NTREX);
* ``ict``: synthetic cross-language queries, the inverse cloze task: a sentence of a parallel passage
  in language A is the query, the passage without that sentence in language B the positive.

Splits are by document: a fixed 1 in ``DEV_EVERY`` of each source's documents (by a hash of the
source and the document id, so that no run, seed or new source moves one) is ``dev``, held out of
training. Two filters keep XQuAD out: a passage whose article title is an XQuAD article's, and every
passage that ``samelang data filter`` found too close to an XQuAD paragraph (``contamination.json``).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from samelang.corpora.parallel import ParallelPassage, read_parallel
from samelang.corpora.qa import QAExample, QAPassage, read_qa
from samelang.corpora.records import Answer
from samelang.corpora.sources import SOURCES
from samelang.corpora.store import CorpusMissing, CorpusStore
from samelang.corpora.xquad import XQUAD_LANGS, load_split

DEV_EVERY = 20
MAX_NEGATIVES = 4
CONTAMINATION_FILE = "contamination.json"
FILTER_HINT = "run `samelang data filter` (the aligned model's cosine against every XQuAD paragraph)"
PartName = Literal["train", "dev"]


def split_of(source: str, doc: str) -> PartName:
    h = int(hashlib.sha1(f"{source}|{doc}".encode()).hexdigest()[:8], 16)
    return "dev" if h % DEV_EVERY == 0 else "train"


def title_key(title: str) -> str:
    return " ".join(title.replace("_", " ").casefold().split())


def xquad_titles() -> frozenset[str]:
    """Every XQuAD article's title (all 48: train and test articles alike are kept out)."""
    return frozenset(title_key(t) for t in load_split()["titles_en"].values())


@dataclass(frozen=True)
class QARow:
    id: str
    source: str
    lang: str
    query: str
    positive: str
    positive_id: str
    negatives: tuple[str, ...]  # other passages of the same document
    answers: tuple[Answer, ...]
    doc: str
    split: PartName


@dataclass(frozen=True)
class ICTQuery:
    id: str
    query: str
    query_lang: str
    positive: str
    positive_lang: str
    passage: str  # the ParallelPassage id
    source: str
    split: PartName


@dataclass
class Views:
    qa: list[QARow]
    parallel: list[ParallelPassage]
    ict: list[ICTQuery]
    passages: dict[str, QAPassage]
    drops: dict[str, Counter] = field(default_factory=dict)  # source -> reason -> passages dropped
    seconds: float = 0.0
    digests: dict[str, str] = field(default_factory=dict)  # source -> digest of every passage id read

    def split(self, part: PartName) -> Views:
        keep = {p.id for p in self.parallel if split_of(p.source, p.doc) == part}
        return Views(
            [r for r in self.qa if r.split == part],
            [p for p in self.parallel if p.id in keep],
            [q for q in self.ict if q.split == part],
            self.passages,
            self.drops,
            self.seconds,
            self.digests,
        )


def read_contamination(store: CorpusStore) -> dict:
    path = store.root / CONTAMINATION_FILE
    if not path.is_file():
        raise CorpusMissing(f"no {CONTAMINATION_FILE} in the corpus store {store.root}: {FILTER_HINT}")
    return json.loads(path.read_text(encoding="utf-8"))


def _qa_rows(passages: dict[str, QAPassage], examples: list[QAExample]) -> list[QARow]:
    by_doc: dict[tuple[str, str], list[str]] = {}
    for p in passages.values():
        by_doc.setdefault((p.source, p.doc), []).append(p.id)
    rows = []
    for e in examples:
        p = passages.get(e.passage)
        if p is None:
            continue
        siblings = sorted(
            (x for x in by_doc[(p.source, p.doc)] if x != p.id),
            key=lambda x: hashlib.sha1(f"{e.id}|{x}".encode()).digest(),
        )
        negatives = tuple(passages[x].text for x in siblings[:MAX_NEGATIVES])
        rows.append(
            QARow(
                e.id, e.source, e.lang, e.question, p.text, p.id, negatives, e.answers, p.doc, split_of(p.source, p.doc)
            )
        )
    return rows


def ict_queries(parallel: list[ParallelPassage], seed: int = 0) -> list[ICTQuery]:
    """One query per passage and query language: a random sentence, its positive in a random other language."""
    rng, out = random.Random(f"ict-{seed}"), []
    for p in parallel:
        n = len(p.sentences["en"])
        for a in XQUAD_LANGS:
            i = rng.randrange(n)
            b = rng.choice([x for x in XQUAD_LANGS if x != a])
            query = p.sentences[a][i]
            if query:
                out.append(
                    ICTQuery(
                        f"{p.id}-{a}{i}-{b}", query, a, p.text(b, skip=i), b, p.id, p.source, split_of(p.source, p.doc)
                    )
                )
    return out


def load_views(
    store: CorpusStore,
    *,
    sources: tuple[str, ...] | None = None,
    exclude: tuple[str, ...] = (),
    contamination: dict | None = None,
    require_filter: bool = True,
) -> Views:
    """Every view of the sources in the store (``sources``: these only; ``exclude``: held out, e.g. an
    out-of-domain source). ``require_filter=False`` reads them unfiltered (the filter's own input)."""
    start = time.perf_counter()
    chosen = [s for s in SOURCES if (sources is None or s.name in sources) and s.name not in exclude]
    missing = [s.name for s in chosen if not store.has(s)]
    if missing:  # before the filter's result: importing comes first, and filtering needs it
        raise CorpusMissing(
            f"{', '.join(missing)} not in the corpus store {store.root}: run `samelang data import --snapshots DIR`"
        )
    if contamination is None and require_filter:
        contamination = read_contamination(store)
    dropped = (contamination or {}).get("dropped", {})
    titles = xquad_titles()
    passages: dict[str, QAPassage] = {}
    examples: list[QAExample] = []
    parallel: list[ParallelPassage] = []
    drops: dict[str, Counter] = {}
    digests: dict[str, str] = {}
    for s in chosen:
        counts = drops.setdefault(s.name, Counter())
        if s.kind == "parallel":
            read = read_parallel(store, s.name)
            digests[s.name] = _checked_digest(s.name, [p.id for p in read], contamination)
            for p in read:
                if p.id in dropped:
                    counts[dropped[p.id].get("reason", "cosine")] += 1
                else:
                    parallel.append(p)
            continue
        ps, es = read_qa(store, s.name)
        digests[s.name] = _checked_digest(s.name, [p.id for p in ps], contamination)
        for p in ps:
            if p.title and title_key(p.title) in titles:
                counts["xquad title"] += 1
            elif p.id in dropped:
                counts[dropped[p.id].get("reason", "cosine")] += 1
            else:
                passages[p.id] = p
        examples += es
    qa = _qa_rows(passages, examples)
    return Views(qa, parallel, ict_queries(parallel), passages, drops, time.perf_counter() - start, digests)


def _checked_digest(source: str, ids: list[str], contamination: dict | None) -> str:
    """The digest of a source's passage ids; a filter result that saw other passages of it is refused
    (a re-imported or new source would otherwise be read unfiltered)."""
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]
    seen = (contamination or {}).get("sources")
    if seen is not None and seen.get(source) != digest:
        raise CorpusMissing(f"{CONTAMINATION_FILE} was computed over other {source} passages: {FILTER_HINT}")
    return digest
