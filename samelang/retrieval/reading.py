"""``/answer``'s extractive mode: the reader (:mod:`samelang.core.models.reader`) copies the answer
out of the passages the search found, and says which passage and language it came from.

The reader's language: with the reader's language preference (the default), each cited hit is read
in the reader's own version when the index holds one: a group-aware hit already is; a hit of another
language with a version in the reader's language becomes that version (the version is then the
cited passage, the hit's language its version), so an answer in the reader's language is found where
it exists. Otherwise the answer is in its passage's language and ``answer_lang`` says so. The reader
answers nothing when its best span's margin is below its calibrated threshold: no guess.
"""

from __future__ import annotations

from dataclasses import replace

from samelang.retrieval.hits import Answered, Hit, Ranked, Version
from samelang.retrieval.options import READER, SearchOptions

EXTRACTIVE, GENERATIVE = "extractive", "generative"
ANSWER_MODES = (EXTRACTIVE, GENERATIVE)


def in_reader_language(pipeline, hits: list[Hit], lang: str | None) -> list[Hit]:
    """``hits`` with each one of another language swapped for its version in ``lang``, when it has
    one (the swapped-out document joins the hit's versions)."""
    if lang is None:
        return hits
    wanted: dict[int, Version] = {}
    for i, h in enumerate(hits):
        v = next((v for v in h.versions if v.lang == lang), None) if h.doc.lang != lang else None
        if v is not None:
            wanted[i] = v
    if not wanted:
        return hits
    docs = pipeline.index.docs.get_rows([v.row for v in wanted.values()])
    out = list(hits)
    for (i, v), doc in zip(wanted.items(), docs):
        if doc is not None:
            h = hits[i]
            rest = [Version(h.doc.row, h.doc.id, h.doc.lang)] + [x for x in h.versions if x.row != v.row]
            out[i] = replace(h, doc=doc, versions=rest)
    return out


def prepare_extract(pipeline, query: str, opts: SearchOptions, passages: int) -> Ranked:
    """Search as ``/search`` does and keep the first ``passages`` hits of distinct groups, each in
    the reader's version where one exists (with the reader's language preference): what is read."""
    ranked = pipeline.search(query, opts)
    cited = pipeline.cite(ranked, passages)
    if opts.language_preference == READER:
        cited = in_reader_language(pipeline, cited, ranked.query_lang)
    return replace(ranked, hits=cited)


def read(pipeline, query: str, ranked: Ranked) -> Answered:
    """The reader's span over the cited hits, or no answer (below its threshold)."""
    span = pipeline.reader.read(query, [h.doc.text for h in ranked.hits])
    if span is None:
        return Answered(None, EXTRACTIVE, None, ())
    doc = ranked.hits[span.passage].doc
    return Answered(span.text, EXTRACTIVE, doc.lang, (doc.id,))


def extract(pipeline, query: str, opts: SearchOptions, passages: int) -> tuple[Ranked, Answered]:
    """(the cited hits, the reader's answer over them)."""
    ranked = prepare_extract(pipeline, query, opts, passages)
    return ranked, read(pipeline, query, ranked)
