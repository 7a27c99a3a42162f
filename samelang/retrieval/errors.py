"""Errors the retrieval core raises. They carry no HTTP types: ``samelang.service.api.errors`` maps them
to status codes, and the evaluation and the CLI can catch them without importing the web stack."""

from __future__ import annotations


class BadRequest(ValueError):
    """A request that is well-formed but cannot be served (a 422 naming the field)."""

    def __init__(self, field: str, detail: str):
        self.field = field
        super().__init__(f"{field}: {detail}")


class AnswerUnavailable(RuntimeError):
    """The generator failed; ``hits`` are the passages the answer would have cited (a 503 returns
    them, so that a client still gets the retrieved evidence)."""

    def __init__(self, detail: str, hits: list, refused: bool = False):
        super().__init__(detail)
        self.hits = hits
        self.refused = refused  # the generator refused this request (a prompt too long): a 422, not a 503
