"""Tatoeba English <-> target sentence pairs (LASER test set), vendored."""

from __future__ import annotations

import io
import lzma
import tarfile
from functools import lru_cache
from importlib import resources

from samelang.corpora.records import SentencePair

# ISO 639-3 (file names) -> the XQuAD language codes used everywhere else
TATOEBA_CODES: dict[str, str] = {
    "ar": "ara", "de": "deu", "el": "ell", "es": "spa", "hi": "hin", "ro": "ron",
    "ru": "rus", "th": "tha", "tr": "tur", "vi": "vie", "zh": "cmn",
}  # fmt: skip


@lru_cache(maxsize=1)
def _files() -> dict[str, list[str]]:
    raw = resources.files("samelang.corpora").joinpath("data", "tatoeba", "tatoeba.tar.xz").read_bytes()
    out = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(raw)), mode="r:") as tar:
        for member in tar.getmembers():
            if member.isfile():
                out[member.name] = tar.extractfile(member).read().decode("utf-8").splitlines()
    return out


def load_tatoeba(langs=None) -> list[SentencePair]:
    """English/target pairs for each target language (default: all 11)."""
    if isinstance(langs, str):
        langs = [x for x in langs.split(",") if x]
    langs = [x for x in (langs or TATOEBA_CODES) if x != "en"]
    unknown = [x for x in langs if x not in TATOEBA_CODES]
    if unknown:
        raise ValueError(f"no Tatoeba pairs for {unknown}; available: {','.join(TATOEBA_CODES)}")
    files = _files()
    pairs = []
    for lang in langs:
        code = TATOEBA_CODES[lang]
        tgt = files[f"tatoeba.{code}-eng.{code}"]
        en = files[f"tatoeba.{code}-eng.eng"]
        if len(tgt) != len(en):
            raise ValueError(f"tatoeba {code}: {len(tgt)} target lines vs {len(en)} English lines")
        pairs += [SentencePair(lang, i, e.strip(), t.strip()) for i, (e, t) in enumerate(zip(en, tgt))]
    return pairs
