"""Answer metrics: exact match and token F1 against the gold answers, in any language.

SQuAD's metric (Rajpurkar et al. 2016) made multilingual exactly as MLQA's official script does
(``mlqa_evaluation_v1.py``, Lewis et al. 2020), the metric the XQuAD and MLQA papers report:

* normalise: lower-case; delete punctuation (Unicode category P* and ASCII ``string.punctuation``); replace the
  language's articles (:data:`ARTICLES`: en, es, de, vi, ar; el, ro, ru, tr, th have none) by a space; re-join;
* tokens: white-space words, except Chinese and Thai (:data:`SEGMENTED`), where MLQA's ``mixed_segmentation`` makes
  every CJK (or Thai) character and punctuation mark a token (a word metric on unspaced Thai would be exact match);
* ``F1 = 2 P R / (P + R)``, ``P = |common| / |prediction tokens|``, ``R = |common| / |gold tokens|`` (``common``: the
  multiset intersection; none: 0); EM: the normalised strings are equal. Both take the best over a question's gold
  answers, in %; no prediction scores 0.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "ar": r"\sال^|ال",
}
# a character that is a token of its own: MLQA's CJK range for Chinese; Thai letters for Thai
SEGMENTED = {"zh": re.compile(r"[\u4e00-\u9fa5]"), "th": re.compile(r"[\u0e00-\u0e7f]")}


@lru_cache(maxsize=1)
def _punctuation() -> frozenset[str]:
    return frozenset(chr(i) for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P")) | frozenset(
        string.punctuation
    )


def _segment(text: str, lang: str) -> list[str]:
    """MLQA's ``mixed_segmentation`` (``lang``'s single-character script, else white space)."""
    single, punct = SEGMENTED[lang], _punctuation()
    out, run = [], ""
    for ch in text:
        if single.search(ch) or ch in punct:
            out += run.split()
            run = ""
            out.append(ch)
        else:
            run += ch
    return out + run.split()


def normalise(text: str, lang: str) -> str:
    """MLQA's ``normalize_answer``."""
    punct = _punctuation()
    text = "".join(ch for ch in text.lower() if ch not in punct)
    if lang in ARTICLES:
        text = re.sub(ARTICLES[lang], " ", text)
    pieces = _segment(text, lang) if lang in SEGMENTED else text.split()
    return " ".join(t for t in pieces if t.strip())


def tokens(text: str, lang: str) -> list[str]:
    return normalise(text, lang).split()


def f1_one(prediction: str, gold: str, lang: str) -> float:
    pred, ref = tokens(prediction, lang), tokens(gold, lang)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(ref)
    return 2 * p * r / (p + r)


def answer_f1(prediction: str | None, golds: Iterable[str], lang: str) -> float:
    """Token F1 in %, the best over the gold answers; no prediction: 0."""
    golds = list(golds)
    if prediction is None or not golds:
        return 0.0
    return 100.0 * max(f1_one(prediction, g, lang) for g in golds)


def exact_match(prediction: str | None, golds: Iterable[str], lang: str) -> float:
    """Exact match in %, after :func:`normalise`; no prediction: 0."""
    if prediction is None:
        return 0.0
    pred = normalise(prediction, lang)
    return 100.0 * any(pred == normalise(g, lang) for g in golds)
