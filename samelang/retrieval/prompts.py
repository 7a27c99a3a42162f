"""What ``/answer`` asks the generator and which passages its answer cites: the prompt over the
passages in the reader's language, fitted to the generator's context, and the citations read back
from the answer."""

from __future__ import annotations

from difflib import SequenceMatcher

from samelang.retrieval.errors import BadRequest
from samelang.retrieval.hits import Hit


def fit_prompt(generator, query: str, cited: list, max_tokens: int) -> tuple[list, str]:
    """The prompt over ``cited`` hits that fits the generator's context with ``max_tokens`` to spare:
    the last passages are dropped first (they are the least relevant), and a first passage that is
    alone too long is cut. A generator without a context limit (a remote server that checks its own)
    takes every passage."""
    texts = [h.doc.text for h in cited]
    prompt = build_prompt(query, texts)
    fits = generator.fits if generator.capabilities.checks_fit else None
    if fits is None or fits(prompt, max_tokens):
        return cited, prompt
    while len(texts) > 1 and not fits(prompt, max_tokens):
        texts.pop()
        prompt = build_prompt(query, texts)
    if not fits(prompt, max_tokens):
        # 8 tokens of slack: a cut text can tokenise a little differently where it meets the question
        spare = generator.n_ctx - max_tokens - generator.count_tokens(build_prompt(query, [""])) - 8
        if spare >= 1:
            texts = [generator.truncate(texts[0], spare)]
            prompt = build_prompt(query, texts)
        if spare < 1 or not fits(prompt, max_tokens):
            raise BadRequest("max_tokens", f"the question and max_tokens={max_tokens} leave no room for a passage in "
                             f"the generator's context ({generator.n_ctx} tokens, --generator-ctx)")  # fmt: skip
    return cited[: len(texts)], prompt


def build_prompt(query: str, passages: list[str]) -> str:
    """Reading-comprehension prompt that base and instruct models both complete with
    a one-line answer; the passages are in the reader's language where one exists,
    which is what makes a small model answer in that language."""
    return "\n\n".join(passages) + f"\n\nQuestion: {query}\nAnswer:"


def citations(answer: str | None, hits: list[Hit]) -> list[str]:
    """Ids of the passages the answer used. The prompt asks for a short reading-comprehension
    answer, which a model copies out of a passage: a passage is cited when it holds the answer
    (case and spacing ignored), else when it shares the answer's longest run of characters that
    covers at least half of it (a model that changed an ending or a word). Characters, not words,
    so that languages written without spaces are judged alike. No answer cites nothing."""

    def norm(t: str) -> str:
        return " ".join(t.casefold().split())

    a = norm(answer or "")
    if not a:
        return []
    texts = [norm(h.doc.text) for h in hits]
    held = [h.doc.id for h, t in zip(hits, texts) if a in t]
    if held:
        return held
    runs = []
    for t in texts:
        m = SequenceMatcher(None, a, t, autojunk=False).find_longest_match(0, len(a), 0, len(t))
        runs.append(m.size)
    best = max(runs, default=0)
    if 2 * best < len(a):
        return []
    return [h.doc.id for h, n in zip(hits, runs) if n == best]
