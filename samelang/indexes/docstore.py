"""SQLite docstore: one row per document, ``row`` = the document's FAISS id.

Rows are positions: per-row arrays (languages, groups, BM25 scores) are indexed by them. A deleted
document's row leaves the table (its text is gone, its id free to be added again) but is never given
to another document: the index's row space (``n_rows`` in the manifest) only grows, and the per-row
readers below fill a deleted row with ``None`` (or an empty text)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    row INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    lang TEXT,
    lang_source TEXT NOT NULL,      -- 'given' or 'detected'
    lang_confidence REAL,           -- detector confidence; NULL when given
    grp TEXT,
    metadata TEXT NOT NULL          -- JSON object
);
CREATE INDEX IF NOT EXISTS docs_grp ON docs(grp);
"""


@dataclass(frozen=True)
class StoredDoc:
    row: int
    id: str
    text: str
    lang: str | None
    lang_source: str
    lang_confidence: float | None
    group: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


class DocStore:
    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        if not readonly:
            self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def add(self, docs: list[StoredDoc]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (d.row, d.id, d.text, d.lang, d.lang_source, d.lang_confidence, d.group, json.dumps(d.metadata))
                    for d in docs
                ],
            )

    @staticmethod
    def _row(r) -> StoredDoc:
        return StoredDoc(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]))

    def get_rows(self, rows: list[int]) -> list[StoredDoc | None]:
        if not rows:
            return []
        q = f"SELECT * FROM docs WHERE row IN ({','.join('?' * len(rows))})"
        found = {r[0]: self._row(r) for r in self._db.execute(q, [int(x) for x in rows])}
        return [found.get(int(x)) for x in rows]

    def rows_for_ids(self, ids: list[str]) -> dict[str, int]:
        out = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            q = f"SELECT id, row FROM docs WHERE id IN ({','.join('?' * len(chunk))})"
            out.update(dict(self._db.execute(q, chunk).fetchall()))
        return out

    def members_of_groups(self, groups: list[str]) -> dict[str, list[tuple[int, str, str | None]]]:
        """``group -> [(row, id, lang), ...]`` (row order) for every document of the given parallel
        groups: the language versions a group-aware result can offer, retrieved or not."""
        out: dict[str, list[tuple[int, str, str | None]]] = {g: [] for g in groups}
        for start in range(0, len(groups), 500):
            chunk = groups[start : start + 500]
            q = f"SELECT grp, row, id, lang FROM docs WHERE grp IN ({','.join('?' * len(chunk))}) ORDER BY row"
            for grp, row, doc_id, lang in self._db.execute(q, chunk):
                out[grp].append((int(row), doc_id, lang))
        return out

    def id_text_rows(self):
        """``(id, text)`` of every document in row order (the corpus checksum reads this)."""
        return self._db.execute("SELECT id, text FROM docs ORDER BY row")

    def existing_ids(self, ids: list[str]) -> set[str]:
        return set(self.rows_for_ids(ids))

    def _by_row(self, column: str, n_rows: int | None, empty=None) -> list:
        out = [empty] * max(n_rows or 0, self.max_row() + 1)
        for row, value in self._db.execute(f"SELECT row, {column} FROM docs"):
            out[row] = value
        return out

    def langs(self, n_rows: int | None = None) -> list[str | None]:
        """Language of every row, by position (``None``: unknown, or a deleted row), at least ``n_rows`` long."""
        return self._by_row("lang", n_rows)

    def groups(self, n_rows: int | None = None) -> list[str | None]:
        """Parallel group of every row, by position (``None``: the document stands alone, or was deleted)."""
        return self._by_row("grp", n_rows)

    def texts(self, n_rows: int | None = None) -> list[str]:
        """Text of every row, by position (``""`` for a deleted row: BM25 gives it no score)."""
        return self._by_row("text", n_rows, empty="")

    def rows(self) -> list[int]:
        """The rows of the documents, in order."""
        return [r[0] for r in self._db.execute("SELECT row FROM docs ORDER BY row")]

    def delete_rows(self, rows: list[int]) -> None:
        with self._db:
            self._db.executemany("DELETE FROM docs WHERE row = ?", [(int(r),) for r in rows])

    def lang_counts(self) -> dict[str, int]:
        counts = Counter()
        for lang, n in self._db.execute("SELECT lang, COUNT(*) FROM docs GROUP BY lang"):
            counts[lang or "und"] += n
        return dict(counts)

    def max_row(self) -> int:
        r = self._db.execute("SELECT MAX(row) FROM docs").fetchone()[0]
        return -1 if r is None else int(r)
