"""Checks every text that enters the system (HTTP fields, JSONL corpora) must pass.

Two kinds of string parse as JSON but are not text a model can use: a lone UTF-16 surrogate
(``"\\ud800"`` decodes in Python and then fails to encode as UTF-8 wherever it goes next: SQLite,
the tokenizer, a JSON response) and a string of only invisible characters (zero-width spaces,
joiners, control and format characters, whitespace), which a model embeds as noise and which
then matches arbitrary documents.
"""

from __future__ import annotations

import unicodedata

# Unicode general categories with nothing to see: controls, format characters (zero-width
# space/joiners, BOM, bidi marks), separators, and combining marks with no base character
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})


def text_problem(s: str) -> str | None:
    """Why ``s`` is not usable text, or ``None`` when it is."""
    try:
        s.encode("utf-8")  # in C: only a lone surrogate fails
    except UnicodeEncodeError as e:
        return f"contains a lone UTF-16 surrogate (U+{ord(s[e.start]):04X}) at position {e.start}: send valid Unicode"
    if not any(unicodedata.category(c) not in _INVISIBLE for c in s):  # stops at the first visible one
        return "must contain visible characters (not only whitespace, zero-width or control characters)"
    return None
