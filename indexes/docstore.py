"""SQLite docstore: one row per document, ``row`` = the document's FAISS id."""

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

    def langs(self) -> list[str | None]:
        """Language of every row, in row order."""
        return [r[0] for r in self._db.execute("SELECT lang FROM docs ORDER BY row")]

    def groups(self) -> list[str | None]:
        """Parallel group of every row, in row order (``None``: the document stands alone)."""
        return [r[0] for r in self._db.execute("SELECT grp FROM docs ORDER BY row")]

    def lang_counts(self) -> dict[str, int]:
        return dict(Counter(lang or "und" for lang in self.langs()))

    def max_row(self) -> int:
        r = self._db.execute("SELECT MAX(row) FROM docs").fetchone()[0]
        return -1 if r is None else int(r)
