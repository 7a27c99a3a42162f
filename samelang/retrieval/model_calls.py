"""What the dialects ask of the served models themselves, beside searches and answers: vectors (``/v1/embeddings``,
``/embed``), tokens (``/tokenize``), a reranker's scores of texts as sent, raw or checked against its window (TEI's and
Cohere's ``/rerank``), and what the served models are (``/v1/models``, TEI's ``/info``).

Why here: a mixin of :class:`~samelang.retrieval.pipeline.Pipeline`, so that every handler reaches a model through the
one façade, which applies the limits and the window checks once, and no handler reaches into an encoder's engine.
Vectors are not micro-batched: a request carries up to ``max_embedding_inputs`` texts of any length, and waiting
for other requests gains it nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from samelang.core.models.cross_encoder import BI_ENCODER_COSINE
from samelang.indexes.vectors import normalise
from samelang.retrieval.errors import BadRequest


@dataclass(frozen=True)
class Token:
    """One token of a tokenised text: ``start``/``stop`` are offsets into the text as sent (``None`` for a special
    token or one of the prompt's)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class ServedModel:
    name: str
    path: Path | None  # its folder (None: the bi-encoder's cosine has none of its own)
    task: str  # "embeddings" or "rerank"
    dim: int | None = None


@dataclass(frozen=True)
class EncoderFacts:
    """What TEI's ``/info`` says of the served bi-encoder."""

    name: str
    fingerprint: str  # what its vectors depend on: an index built with another one is refused
    precision: str  # the engine's: fp32, bf16 or int8
    max_length: int  # tokens per input; longer ones are truncated
    max_batch_tokens: int


def first_over_window(field: str, long: list[bool], window: int, what: str) -> None:
    """TEI's ``truncate: false``: a 422 naming the first input over the model's window."""
    if any(long):
        i = long.index(True)
        raise BadRequest(f"{field}[{i}]", f"the {what} is longer than the model's {window}-token window; "
                         "send truncate: true to cut it")  # fmt: skip


class ModelCalls:
    """The calls on the served models themselves (the module docstring); :class:`Pipeline` has the
    ``encoder``, ``reranker``, ``limits`` and ``rerank`` they use."""

    def check_inputs(self, field: str, texts: list[str]) -> None:
        """The texts of one embedding or tokenize request: at most ``max_embedding_inputs`` (a 422 naming the field)."""
        cap = self.limits.max_embedding_inputs
        if len(texts) > cap:
            raise BadRequest(field, f"{len(texts)} texts, at most {cap} per request")

    def prompt_of(self, name: str | None) -> str:
        """The text put before each input for the encoder's named prompt (``query``, ``passage``), or none."""
        return self.encoder.unbatched.prompt(name == "passage") if name else ""

    def embed(self, texts: list[str], field: str, *, role: str | None = None, prompt: str = "",
              normalize: bool = True, truncate: bool = True) -> np.ndarray:  # fmt: skip
        """Vectors of ``texts`` by the served bi-encoder: for ``role`` ``query`` or ``passage`` with e5's own
        prompts (OpenAI's ``input_type``), else with ``prompt`` before each text; ``normalize: False``: the pooled
        vectors before their L2 normalisation; ``truncate: False``: a 422 naming the first text over the window."""
        self.check_inputs(field, texts)
        enc = self.encoder.unbatched
        if role is not None:
            return normalise(enc.encode_passages(texts) if role == "passage" else enc.encode_queries(texts))
        if not truncate:
            first_over_window(field, enc.engine.overflowing([prompt + t for t in texts]), enc.engine.max_length, "text")
        vecs = enc.encode_text(texts, prompt, pooled=not normalize)
        return normalise(vecs) if normalize else vecs

    def count_tokens(self, texts: list[str], passages: bool = False) -> int:
        """The tokens the served bi-encoder reads of ``texts`` (with e5's query or passage prompt)."""
        return sum(self.encoder.count_tokens(texts, passages=passages))

    def tokenize(self, texts: list[str], field: str, prompt: str, add_special_tokens: bool) -> list[list[Token]]:
        """The served bi-encoder's tokens of each text, ``prompt``'s first; offsets into the text as sent."""
        self.check_inputs(field, texts)
        tokenizer = self.encoder.unbatched.engine.tokenizer
        out = []
        for text in texts:
            e = tokenizer.encode(prompt + text, add_special_tokens=add_special_tokens)
            toks = []
            for tid, tok, (a, b), special in zip(e.ids, e.tokens, e.offsets, e.special_tokens_mask, strict=True):
                own = not special and b > len(prompt)  # a token of the text (not of the prompt)
                start, stop = (max(a - len(prompt), 0), b - len(prompt)) if own else (None, None)
                toks.append(Token(tid, text[start:stop] if own else tok, bool(special), start, stop))
            out.append(toks)
        return out

    def rerank_texts(self, query: str, texts: list[str], field: str, *, raw: bool = False,
                     truncate: bool = True) -> np.ndarray:  # fmt: skip
        """``rerank``'s scores of ``texts``; ``truncate: False``: a 422 naming the first pair over the reranker's
        window; ``raw``: a cross-encoder's logits instead of its probabilities (the cosine has only its own)."""
        reranker = self.reranker
        self.check_rerank(texts)
        if not truncate:
            long = reranker.overflowing(query, texts)
            first_over_window(field, long, reranker.max_length, "query with this text")
        if raw and reranker.kind != BI_ENCODER_COSINE:  # the logits under the sigmoid
            return np.asarray(reranker.logits(query, texts), dtype=np.float64)
        return self.rerank(query, texts)

    def cut_for_reranker(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its first ``n_tokens`` of the reranker's tokens (Cohere's ``max_tokens_per_doc``)."""
        return self.reranker.truncate(text, n_tokens)

    def rerank_tokens(self, query: str, texts: list[str]) -> int:
        return self.reranker.count_tokens(query, texts)

    def served_models(self) -> list[ServedModel]:
        """The bi-encoder and the reranker, as ``/v1/models`` lists them."""
        enc, reranker = self.encoder, self.reranker
        return [ServedModel(enc.name, Path(enc.path), "embeddings", enc.dim),
                ServedModel(reranker.name, Path(reranker.path) if reranker.path else None, "rerank")]  # fmt: skip

    def encoder_facts(self) -> EncoderFacts:
        enc = self.encoder.unbatched
        o = enc.engine.options
        return EncoderFacts(enc.name, enc.fingerprint, o.precision, enc.engine.max_length, o.max_batch_tokens)
