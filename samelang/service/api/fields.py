"""The field types, limits and base model that every dialect's protocol shares: a text must have
something visible in it, a language is an ISO 639-1 code, numbers and booleans are JSON's own, and
an unknown field is a 422 (an option that silently does nothing is worse than an error)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Strict, Tag, WithJsonSchema

from samelang.primitives.langid import supported_languages
from samelang.primitives.text import text_problem
from samelang.retrieval.limits import CEILINGS

MAX_QUERY_CHARS = 2000
MAX_ID_CHARS = 512
# the hard ceilings (declared with the limits: a server's --max-* may be lower, and its schema says so)
MAX_DOCUMENTS = CEILINGS["max_rerank_documents"]
MAX_DOCUMENT_CHARS = CEILINGS["max_document_chars"]
MAX_DIAGNOSE_QUERIES = CEILINGS["max_diagnose_queries"]
MAX_EMBEDDING_INPUTS = CEILINGS["max_embedding_inputs"]  # OpenAI's own ceiling

_LANGS = frozenset(supported_languages())

# what a client must send: text with something visible in it (the server also refuses lone surrogates
# and zero-width-only text, which a pattern cannot express)
_VISIBLE = r"\S"


def visible_text(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty or only whitespace")
    if problem := text_problem(v):
        raise ValueError(problem)
    return v


def _query(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty or only whitespace")
    return visible_text(v).strip()


def _lang(v: str | None) -> str | None:
    if v is None:
        return None
    code = v.strip().lower()
    if code not in _LANGS:
        raise ValueError(f"unknown language code {v!r}: use a two-letter ISO 639-1 code such as 'en' or 'zh'")
    return code


# the schema states minLength / pattern; the validators give the clearer messages
SCHEMA_TEXT = {"minLength": 1, "pattern": _VISIBLE}

Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS, json_schema_extra=SCHEMA_TEXT), AfterValidator(_query)]
Text = Annotated[str, Field(json_schema_extra=SCHEMA_TEXT), AfterValidator(visible_text)]
DocId = Annotated[str, Field(max_length=MAX_ID_CHARS, json_schema_extra=SCHEMA_TEXT), AfterValidator(visible_text)]

# codes are matched case-insensitively; the schema lists the canonical lower-case ones
Lang = Annotated[
    str,
    AfterValidator(_lang),
    WithJsonSchema({"type": "string", "enum": sorted(_LANGS), "description": "ISO 639-1 language code"}),
]

# JSON numbers and booleans only: no "3" for 3, no true for 1
Int = Annotated[int, Strict()]

Bool = Annotated[bool, Strict()]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def text_or(document: type[BaseModel]):
    """A document given as its text or as a ``document`` object; an error in a text is reported as
    ``documents[i].text``, as in an object."""
    return Annotated[
        Annotated[Annotated[Text, Field(max_length=MAX_DOCUMENT_CHARS)], Tag("text")]
        | Annotated[document, Tag("object")],
        Discriminator(lambda v: "text" if isinstance(v, str) else "object"),
    ]


# the length is a string's (checked before the text rules), not a generic "items" bound
EmbeddingText = Annotated[
    str, Field(max_length=MAX_DOCUMENT_CHARS, json_schema_extra=SCHEMA_TEXT), AfterValidator(visible_text)
]

_TEXT_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_DOCUMENT_CHARS, "pattern": r"\S"}

# a text or a list of texts (the routes that embed: OpenAI's and TEI's); the schema says both
EmbeddingTexts = Annotated[
    list[EmbeddingText],
    Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS),
    WithJsonSchema({
        "anyOf": [_TEXT_SCHEMA, {"type": "array", "items": _TEXT_SCHEMA, "minItems": 1,
                                 "maxItems": MAX_EMBEDDING_INPUTS}],
        "description": "a text, or a list of texts (token ids are refused)",
    }),
]  # fmt: skip


def token_ids(v) -> bool:
    """Whether an ``input`` holds token ids (a list of ints, or of lists of ints) rather than text."""
    items = v if isinstance(v, list) else [v]
    return any(isinstance(x, int) or (isinstance(x, list) and x and isinstance(x[0], int)) for x in items)
