"""What every dialect shares, and no dialect owns: the error body (``ErrorResponse``, which carries the
retrieved passages when an answer could not be made) and the passage it cites. Dialects import this base,
never each other."""

from __future__ import annotations

from pydantic import BaseModel

from samelang.retrieval.hits import Hit


class Version(BaseModel):
    id: str
    lang: str | None


class CitedPassage(BaseModel):
    id: str
    lang: str | None
    group: str | None
    score: float
    text: str
    versions: list[Version] = []


class ErrorResponse(BaseModel):
    error: str
    detail: str
    request_id: str | None = None
    passages: list[CitedPassage] | None = None


def versions_of(h: Hit) -> list[Version]:
    return [Version(id=v.id, lang=v.lang) for v in h.versions]


def cited(hits: list[Hit]) -> list[CitedPassage]:
    return [
        CitedPassage(
            id=h.doc.id, lang=h.doc.lang, group=h.doc.group, score=h.score, text=h.doc.text, versions=versions_of(h)
        )  # fmt: skip
        for h in hits
    ]
