"""The notes' one tokenizer, read alike by the aggregation tier, the conflict check and recall's
order of two rows that say one thing: case and accents folded, digit runs split from letter runs
(`16Go` and `16 Go` are the same words); and the closed list of negation words (English, French)."""
from __future__ import annotations

import re
import unicodedata

# Combining marks left by NFKD (accents): removed, as FTS5's remove_diacritics does.
MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)

# Words that deny what follows them; independent of any stopword list.
NEGATIONS = frozenset({"not", "no", "never", "without", "none", "nor",
                       "pas", "jamais", "sans", "aucun", "aucune", "ni", "non"})


def fold(text: str) -> str:
    return MARKS.sub("", unicodedata.normalize("NFKD", text.casefold()))


def words(text: str) -> list[str]:
    """Case and accents folded, digit runs split from letter runs (`256Go` -> `256`, `go`;
    `n'a` -> `n`, `a`), in order."""
    return _WORD.findall(fold(text))


def word_set(text: str) -> frozenset[str]:
    return frozenset(words(text))
