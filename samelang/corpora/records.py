"""Typed records shared by every corpus loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "test", "all"]
SPLITS: tuple[str, ...] = ("train", "test", "all")


@dataclass(frozen=True)
class Paragraph:
    """One XQuAD paragraph in one language.

    ``group`` is shared by the 12 translations of the same paragraph.
    """

    id: str
    article: int
    paragraph: int
    lang: str
    text: str
    group: str
    title: str


@dataclass(frozen=True)
class Answer:
    text: str
    start: int


@dataclass(frozen=True)
class Question:
    """One XQuAD question in one language; ``group`` names its gold paragraph."""

    id: str
    lang: str
    text: str
    group: str
    article: int
    answers: tuple[Answer, ...]

    @property
    def uid(self) -> str:
        """Unique across languages (XQuAD reuses question ids in every language)."""
        return f"{self.id}:{self.lang}"


@dataclass(frozen=True)
class Document:
    """A document of any corpus as the index stores it."""

    id: str
    text: str
    lang: str | None = None
    group: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LabelledQuery:
    """A query with the ids of its relevant documents (for bias audits)."""

    query: str
    relevant: tuple[str, ...]
    lang: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class SentencePair:
    """A Tatoeba translation pair: English and one target language."""

    lang: str
    index: int
    en: str
    tgt: str
