"""Your own training data (``--data FILE``): pairs for the bi-encoder and the reranker, SQuAD for the reader.

Why: a user with labelled pairs (FAQ matches, click logs, a QA set) trains on them with the trainers that
learn from the built-in corpus, alone (``--data-only``) or mixed with it. Pairs use sentence-transformers'
column names: ``anchor``, ``positive``, optional ``negative`` / ``negatives`` (a list) / ``negative_1`` ..
``negative_N``, and an optional ``lang`` (detected as the service detects a query's when absent); formats
JSONL, JSON (a list of rows), Parquet, CSV/TSV or a ``datasets`` ``save_to_disk`` folder. The reader reads
SQuAD's JSON (``data[].paragraphs[].qas[]``, ``is_impossible`` for a question its passage does not answer).
Every row is checked before the first training step: an error names the file, the row and the column.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from samelang.primitives.langid import get_identifier
from samelang.training.reader_data import ReadingExample
from samelang.training.relevance_first import RankingGroup

PAIR_COLUMNS = ("anchor", "positive", "negative", "negatives", "negative_N", "lang")
FORMATS = ".jsonl, .ndjson, .json, .parquet, .csv, .tsv or a datasets.save_to_disk folder"
_NEGATIVE_N = re.compile(r"negative_\d+")
_LANG = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")
MAX_NEGATIVES = 64  # per row: a listwise group is one forward pass, so its width is bounded


class DataFileError(ValueError):
    """A training file that cannot be read as the trainer needs it; the message names file, row, column."""


class UserDataOptions(BaseModel):
    """``--data`` / ``--data-only``, declared once for the three trainers (a plain model: each trainer's
    settings class keeps its own ``SAMELANG_*`` prefix)."""

    data: Path | None = Field(
        None,
        description="Your own training data: for the bi-encoder and the reranker a file of pairs (columns anchor, "
        "positive, optional negative/negatives/negative_N and lang; JSONL, JSON, Parquet, CSV/TSV or a "
        "datasets.save_to_disk folder), for the reader SQuAD JSON; mixed with the trainer's own data",
    )
    data_only: bool = Field(False, description="With --data: train on the file alone (no XQuAD, no corpus).")

    @model_validator(mode="after")
    def _data_only_needs_data(self):
        if self.data_only and self.data is None:
            raise ValueError("--data-only trains on --data FILE alone: pass --data")
        return self

    def user_pairs(self) -> list[RankingGroup]:
        """The file's pairs (none without ``--data``), checked before any training step."""
        return read_pairs(self.data) if self.data is not None else []

    def user_squad(self) -> tuple[list[ReadingExample], list[list[str]]]:
        """The file's reading examples and, for each, its article's other passages (none without ``--data``)."""
        return read_squad(self.data) if self.data is not None else ([], [])


# ----------------------------------------------------------------------------- reading tables


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a table file or ``datasets`` folder, as dicts."""
    path = Path(path)
    if not path.exists():
        raise DataFileError(f"{path}: no such file or folder")
    if path.is_dir():
        return _dataset_rows(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                rows.append(_json_object(line, path, n))
        return rows
    if suffix == ".json":
        rows = _load_json(path)
        if not isinstance(rows, list):
            raise DataFileError(f"{path}: a .json file of pairs holds a list of rows (objects); JSONL holds one a line")
        return rows
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # deferred: only for Parquet files
        except ImportError as e:
            raise DataFileError(f"{path}: Parquet needs pyarrow: pip install 'samelang[data]'") from e
        return pq.read_table(path).to_pylist()
    if suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ","))
    raise DataFileError(f"{path}: unknown format {suffix or '(no suffix)'}; use {FORMATS}")


def _dataset_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import datasets  # deferred: only for datasets folders
    except ImportError as e:
        raise DataFileError(f"{path}: a datasets folder needs the datasets package: pip install 'samelang[data]'"
                            ) from e  # fmt: skip
    try:
        ds = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise DataFileError(f"{path}: not a datasets.save_to_disk folder ({e})") from e
    if isinstance(ds, datasets.DatasetDict):
        raise DataFileError(f"{path}: holds the splits {sorted(ds)}; pass one split's folder, e.g. {path / 'train'}")
    return ds.to_list()


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e


def _json_object(line: str, path: Path, n: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: row {n}: not valid JSON ({e.msg}, column {e.colno})") from e
    if not isinstance(row, dict):
        raise DataFileError(f"{path}: row {n}: a row is an object with named columns, got {type(row).__name__}")
    return row


# ----------------------------------------------------------------------------- pairs


def _text(value, path: Path, n: int, column: str) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None or value == "" else f"{type(value).__name__} {str(value)[:40]!r}"
        raise DataFileError(f"{path}: row {n}, column {column!r}: needs a non-empty text, got {got}")
    return value


def _negatives(row: dict, path: Path, n: int) -> list[str]:
    out = []
    if row.get("negative") not in (None, ""):
        out.append(_text(row["negative"], path, n, "negative"))
    many = row.get("negatives")
    if isinstance(many, str) and many.strip():  # a CSV cell: a JSON list
        try:
            many = json.loads(many)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path}: row {n}, column 'negatives': a list of texts (JSON in CSV), got {many[:40]!r}"
                                ) from e  # fmt: skip
    if many not in (None, ""):
        if not isinstance(many, list):
            raise DataFileError(f"{path}: row {n}, column 'negatives': a list of texts, got {type(many).__name__}")
        out += [_text(x, path, n, f"negatives[{i}]") for i, x in enumerate(many)]
    for column in sorted((c for c in row if _NEGATIVE_N.fullmatch(c)), key=lambda c: int(c.split("_")[1])):
        if row[column] not in (None, ""):
            out.append(_text(row[column], path, n, column))
    if len(out) > MAX_NEGATIVES:
        raise DataFileError(f"{path}: row {n}: {len(out)} negatives; at most {MAX_NEGATIVES} a row")
    return out


def key_of(text: str) -> str:
    """What a text says, for the losses' false-negative mask: the text itself (hashed)."""
    return hashlib.sha1(text.strip().encode("utf-8")).hexdigest()[:16]


def read_pairs(path: Path) -> list[RankingGroup]:
    """Every row as a ranking group: the anchor as the query, the positive first, then the negatives."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise DataFileError(f"{path}: no rows; a pairs file needs columns anchor and positive")
    parsed, undetected = [], []
    for n, row in enumerate(rows, 1):
        unknown = [c for c in row if c not in PAIR_COLUMNS and not _NEGATIVE_N.fullmatch(c)]
        if unknown:
            raise DataFileError(f"{path}: row {n}: unknown column {unknown[0]!r} (known: {', '.join(PAIR_COLUMNS)})")
        anchor = _text(row.get("anchor"), path, n, "anchor")
        docs = (_text(row.get("positive"), path, n, "positive"), *_negatives(row, path, n))
        lang = row.get("lang")
        if lang not in (None, "") and (not isinstance(lang, str) or not _LANG.fullmatch(lang)):
            raise DataFileError(f"{path}: row {n}, column 'lang': an ISO 639-1 code such as 'en', got {lang!r}")
        parsed.append((anchor, docs, lang or None))
        if not lang:
            undetected += [anchor, *docs]
    found = iter(_detect(undetected))
    out = []
    for anchor, docs, lang in parsed:
        langs = (lang,) * (1 + len(docs)) if lang else tuple(next(found) for _ in range(1 + len(docs)))
        out.append(RankingGroup(anchor, langs[0], docs, langs[1:], tuple(key_of(d) for d in docs), "data"))
    return out


def _detect(texts: list[str]) -> list[str]:
    if not texts:
        return []
    return [d.lang if d is not None else "und" for d in get_identifier().detect_many(texts)]


def fill_negatives(groups: list[RankingGroup], k: int, seed: int) -> list[RankingGroup]:
    """Groups with fewer than ``k`` negatives topped up with other rows' positives (a random, seeded choice
    among those that say something else): a listwise loss needs wrong documents to rank below the right one."""
    rng = random.Random(f"user-negatives-{seed}")
    out = []
    for g in groups:
        have = len(g.docs) - 1
        extra = []
        for _ in range(4 * max(0, k - have)):
            if have + len(extra) >= k:
                break
            other = groups[rng.randrange(len(groups))]
            if other.keys[0] not in g.keys and other.keys[0] not in (e.keys[0] for e in extra):
                extra.append(other)
        out.append(RankingGroup(
            g.query, g.lang, (*g.docs, *(e.docs[0] for e in extra)), (*g.doc_langs, *(e.doc_langs[0] for e in extra)),
            (*g.keys, *(e.keys[0] for e in extra)), g.source,
        ))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- SQuAD


def _field(obj, name: str, kind: type, where: str, path: Path):
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        got = type(value).__name__ if value is not None else "nothing"
        raise DataFileError(f"{path}: {where}, field {name!r}: needs {kind.__name__}, got {got}")
    return value


def read_squad(path: Path) -> tuple[list[ReadingExample], list[list[str]]]:
    """SQuAD JSON as reading examples, each with its article's other passages (the reader's no-answer
    pool). Every answer must lie at its ``answer_start`` in its context."""
    path = Path(path)
    if not path.exists():
        raise DataFileError(f"{path}: no such file")
    if path.is_dir() or path.suffix.lower() != ".json":
        raise DataFileError(f"{path}: the reader reads SQuAD JSON (a .json file with data[].paragraphs[].qas[])")
    doc = _load_json(path)
    articles = _field(doc, "data", list, "top level", path)
    found, others = [], []
    for a, article in enumerate(articles):
        paragraphs = _field(article, "paragraphs", list, f"data[{a}]", path)
        contexts = [_field(p, "context", str, f"data[{a}].paragraphs[{i}]", path) for i, p in enumerate(paragraphs)]
        for i, p in enumerate(paragraphs):
            for j, qa in enumerate(_field(p, "qas", list, f"data[{a}].paragraphs[{i}]", path)):
                where = f"question {len(found) + 1} (data[{a}].paragraphs[{i}].qas[{j}])"
                question = _field(qa, "question", str, where, path)
                answers = _answers(qa, contexts[i], where, path)
                found.append((question, contexts[i], answers, qa.get("lang")))
                others.append([c for c in contexts if c != contexts[i]])
    if not found:
        raise DataFileError(f"{path}: no questions (data[].paragraphs[].qas[] is empty)")
    langs = iter(_detect([q for q, _, _, lang in found if not lang]))
    examples = [ReadingExample(q, c, ans, lang or next(langs), "data") for q, c, ans, lang in found]
    return examples, others


def _answers(qa: dict, context: str, where: str, path: Path) -> tuple[tuple[str, int], ...]:
    out = []
    for m, ans in enumerate(_field(qa, "answers", list, where, path) if not qa.get("is_impossible") else []):
        text = _field(ans, "text", str, f"{where}.answers[{m}]", path)
        start = _field(ans, "answer_start", int, f"{where}.answers[{m}]", path)
        if context[start : start + len(text)] != text:
            raise DataFileError(f"{path}: {where}.answers[{m}], field 'answer_start': {start} does not point at "
                                f"{text[:40]!r} in the context")  # fmt: skip
        out.append((text, start))
    if not out and not qa.get("is_impossible"):
        raise DataFileError(f"{path}: {where}, field 'answers': empty; mark a question its passage does not answer "
                            "with is_impossible: true")  # fmt: skip
    return tuple(out)
