"""A user's own corpus and labelled queries as JSONL.

Documents: one object per line with ``id`` (string or integer), ``text``,
optional ``lang``, optional ``group`` (ids of parallel versions share a group)
and any other keys, kept as metadata. Labelled queries: ``query``, optional
``lang``, optional ``id``, ``relevant`` (a non-empty list of document ids).
Every bad line raises :class:`CorpusFormatError` naming file, line and field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from samelang.corpora.records import Document, LabelledQuery
from samelang.primitives.text import text_problem


class CorpusFormatError(ValueError):
    def __init__(self, path, line: int, field: str, problem: str):
        self.path, self.line, self.field = str(path), line, field
        super().__init__(f"{path}:{line}: field '{field}': {problem}")


def _objects(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusFormatError(path, n, "<line>", f"not UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusFormatError(path, n, "<line>", f"not valid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(obj, dict):
                raise CorpusFormatError(path, n, "<line>", f"expected a JSON object, got {type(obj).__name__}")
            yield n, obj


def _opt_str(path, n, obj, key) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise CorpusFormatError(path, n, key, "must be a non-empty string when present")
    return v.strip()


def _id(path, n, obj, key="id") -> str:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and not v.strip()):
        raise CorpusFormatError(path, n, key, "required; a non-empty string or an integer")
    return str(v)


def load_documents_jsonl(path: str | Path) -> list[Document]:
    path = Path(path)
    docs, seen = [], {}
    for n, obj in _objects(path):
        doc_id = _id(path, n, obj)
        if doc_id in seen:
            raise CorpusFormatError(path, n, "id", f"duplicate id {doc_id!r} (first on line {seen[doc_id]})")
        seen[doc_id] = n
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise CorpusFormatError(path, n, "text", "required; a non-empty string")
        for key, value in (("id", doc_id), ("text", text)):
            if problem := text_problem(value):
                raise CorpusFormatError(path, n, key, problem)
        lang = _opt_str(path, n, obj, "lang")
        group = obj.get("group")
        if group is not None:
            if isinstance(group, bool) or not isinstance(group, (str, int)):
                raise CorpusFormatError(path, n, "group", "must be a string or an integer when present")
            group = str(group)
        meta = {k: v for k, v in obj.items() if k not in ("id", "text", "lang", "group")}
        docs.append(Document(doc_id, text, lang.lower() if lang else None, group, meta))
    return docs


def load_labelled_queries_jsonl(path: str | Path) -> list[LabelledQuery]:
    path = Path(path)
    out = []
    for n, obj in _objects(path):
        query = obj.get("query")
        if not isinstance(query, str) or not query.strip():
            raise CorpusFormatError(path, n, "query", "required; a non-empty string")
        if problem := text_problem(query):
            raise CorpusFormatError(path, n, "query", problem)
        rel = obj.get("relevant")
        if not isinstance(rel, list) or not rel:
            raise CorpusFormatError(path, n, "relevant", "required; a non-empty list of document ids")
        ids = []
        for r in rel:
            if isinstance(r, bool) or not isinstance(r, (str, int)) or (isinstance(r, str) and not r.strip()):
                raise CorpusFormatError(path, n, "relevant", f"ids must be non-empty strings or integers, got {r!r}")
            ids.append(str(r))
        lang = _opt_str(path, n, obj, "lang")
        qid = str(obj["id"]) if obj.get("id") is not None else None
        out.append(LabelledQuery(query.strip(), tuple(ids), lang.lower() if lang else None, qid))
    return out
