"""Offline language identification (lingua) for documents and queries without a ``lang``.

Restricting the candidate languages makes detection both faster and more
accurate on short texts; the default set is the 12 XQuAD languages plus a few
other major ones. Codes are ISO 639-1, lower case.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_DETECT_LANGS: tuple[str, ...] = (
    "en", "ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh",
    "fr", "it", "pt", "nl", "ja", "ko",
)  # fmt: skip


# scripts used by exactly one of the candidate languages: decided by counting letters,
# which is more robust than n-gram models on short mixed-script text (e.g. "V＆A起源于哪个博览会？")
_SCRIPT_RANGES: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    ("ja", ((0x3040, 0x30FF),)),  # kana; checked before Han, since Japanese mixes kana and kanji
    ("ko", ((0xAC00, 0xD7AF), (0x1100, 0x11FF))),
    ("zh", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF))),
    ("th", ((0x0E00, 0x0E7F),)),
    ("el", ((0x0370, 0x03FF),)),
    ("hi", ((0x0900, 0x097F),)),
    ("ar", ((0x0600, 0x06FF),)),
)


_SCRIPT_PATTERNS = {
    lang: re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges) + "]")
    for lang, ranges in _SCRIPT_RANGES
}


def _script_language(text: str, candidates: tuple[str, ...]) -> tuple[str, float] | None:
    """The language whose script holds at least half of the letters (any kana: Japanese). Counted by
    regular expressions, in C: a paragraph costs microseconds, not the milliseconds of a Python loop
    over its letters."""
    letters = "".join(_LETTER.findall(text))  # only letters count: not "・" (a kana-block mark), digits, signs
    n_letters = len(letters)
    if not n_letters:
        return None
    for lang, _ in _SCRIPT_RANGES:
        if lang not in candidates:
            continue
        n = len(_SCRIPT_PATTERNS[lang].findall(letters))
        if lang == "ja" and n > 0:
            return "ja", 1.0
        if n / n_letters >= 0.5:
            return lang, n / n_letters
    return None


# the letters: word characters that are not decimal digits or "_" (str.isalpha's, plus the rare other
# numerals such as "½", which no script range below holds)
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class Detection:
    lang: str
    confidence: float


def supported_languages() -> set[str]:
    from lingua import Language  # deferred: keeps lingua out of start-up

    return {lang.iso_code_639_1.name.lower() for lang in Language.all()}


class LanguageIdentifier:
    """Thread-safe wrapper over a lingua detector restricted to ``langs``."""

    def __init__(self, langs: tuple[str, ...] = DEFAULT_DETECT_LANGS, preload: bool = True):
        from lingua import IsoCode639_1, LanguageDetectorBuilder  # deferred: keeps lingua out of start-up

        unknown = sorted(set(langs) - supported_languages())
        if unknown:
            raise ValueError(f"language identification does not know {unknown}")
        codes = [IsoCode639_1.from_str(c) for c in langs]
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*codes)
        if preload:
            builder = builder.with_preloaded_language_models()
        self.langs = tuple(langs)
        self._detector = builder.build()
        self._lock = threading.Lock()

    def detect(self, text: str) -> Detection | None:
        by_script = _script_language(text, self.langs)
        if by_script:
            return Detection(*by_script)
        with self._lock:
            values = self._detector.compute_language_confidence_values(text)
        if not values:
            return None
        top = values[0]
        return Detection(top.language.iso_code_639_1.name.lower(), float(top.value))

    def detect_many(self, texts: list[str]) -> list[Detection | None]:
        out: list[Detection | None] = [None] * len(texts)
        rest = []
        for i, t in enumerate(texts):
            by_script = _script_language(t, self.langs)
            if by_script:
                out[i] = Detection(*by_script)
            else:
                rest.append(i)
        if rest:
            with self._lock:
                results = self._detector.compute_language_confidence_values_in_parallel([texts[i] for i in rest])
            for i, r in zip(rest, results):
                out[i] = Detection(r[0].language.iso_code_639_1.name.lower(), float(r[0].value)) if r else None
        return out


@lru_cache(maxsize=4)
def get_identifier(langs: tuple[str, ...] = DEFAULT_DETECT_LANGS) -> LanguageIdentifier:
    return LanguageIdentifier(langs)
