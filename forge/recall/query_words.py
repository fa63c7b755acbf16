"""The word channel's query: which of a question's words are searched.

A query word is searched when
1. it is not a function word of its language: the `stop-words` package's French and English
   lists (a maintained artefact, not a list written here), folded the way the word index folds
   (`d'` -> `d`, `après` -> `apres`), minus KEEP: the words of those lists that discriminate in
   a question (before, after, first, last, again, numbers spelled out...). On a 25-entry store
   every word is rare, so the document frequency alone admits `que` from `plutôt que Exim`;
2. it is rare in the store (`is_informative`: held by at most a RECALL_LEXICAL_MAX_DF share of
   its entries, fewer on a small store), and
3. its inflected forms come with it: every word of the store's own vocabulary that has the same
   Snowball stem (French or English, PyStemmer) as the query word (`factures` -> `facture`,
   `backups` -> `backup`), each admitted by its own document frequency. The forms are looked up
   in the word index's vocabulary by the stem as a prefix, so SQLite (FTS5's vocabulary) and
   PostgreSQL (`memory_words`) admit the same words, and the index itself is not changed.

This applies to the word channel's admission ONLY: aggregation's informative words, its
detail containment and the conflict detection keep every word (negations such as `pas`,
`not`, `sans` are on every stop list and must keep counting there).

POLICY is what `forge recall` uses; the alternatives (measured in docs/benchmarks/recall.md) are
another `Policy` (function words from `stopwordsiso`, none, raw prefixes without the stem check).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

if TYPE_CHECKING:
    from ..store.backend import Backend

LANGUAGES = ("french", "english")
MIN_STEM = 3          # a shorter stem (`pc`, `os`) is matched as it is: no prefix lookup
MAX_FORMS = 64        # vocabulary terms read per stem (a stem shared by more is not a word form)

# Words of the stop lists that carry meaning in a question (order, time, quantity, negation of
# time): a question about what came `before` or `after`, the `first` or `last` time, `again`,
# `twice`, `deux`, `trois` must still find the entry that says so. Content words the long
# English list holds (`home`, `computer`, `year`, `work`, `buy`...) are here for the same reason.
KEEP = frozenset("""
before after first last again ago since until till later earlier early next previous
previously recent recently soon today yesterday tomorrow tonight once twice never always ever
still yet already during end beginning begin began morning evening night week weeks month
months year years day days time times hour hours minute minutes
zero one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty
forty fifty sixty seventy eighty ninety hundred thousand million billion trillion
second third fourth fifth sixth seventh eighth ninth tenth half
home house computer work worked working works world buy bill fire test free room rooms money
date name old older oldest new newer newest young younger youngest big small large long high
low early late full empty open close help run kind man men member members group problem
problems system web website page text words number numbers value state states
avant apres premier premiere dernier derniere encore depuis jusque jamais toujours deux
trois quatre cinq six sept huit neuf dix prochain prochaine hier demain aujourd matin soir
nuit semaine mois annee debut fin fois moins plus nouveau nouveaux nom personne personnes
""".split())


class Policy(NamedTuple):
    """How the word channel admits a query's words (a NamedTuple, not a frozen dataclass: ~0.3
    against ~2 ms to create in every fresh `forge recall`)."""

    function_words: str = "stop-words"   # "stop-words" | "stopwordsiso" | "none"
    keep: bool = True                     # take KEEP out of the list
    stems: str = "stem"                   # "stem" | "prefix" (every term with the stem) | "none"


POLICY = Policy()


_FUNCTION_WORDS: dict[tuple[str, bool], frozenset[str]] = {}
_PLAIN = re.compile(r"[a-z0-9]+")


def function_words(source: str = "stop-words", keep: bool = True,
                   tokenize: "Callable[[str], list[str]] | None" = None) -> frozenset[str]:
    """The folded function words of LANGUAGES from `source`, KEEP taken out when `keep`.

    A word of plain lowercase ASCII letters and digits is its own folded form; the others
    (`après`, `qu'`, `aujourd'hui`) go through the word index's tokenizer, all in one call:
    `tokenize` (the backend's `query_words`, whose connection a recall has open already), else
    store.fold's. The set is kept for the process."""
    known = _FUNCTION_WORDS.get((source, keep))
    if known is not None:
        return known
    if source == "none":
        return frozenset()
    if source == "stop-words":
        from stop_words import get_stop_words

        raw = [w for lang in LANGUAGES for w in get_stop_words(lang)]
    elif source == "stopwordsiso":
        import stopwordsiso

        raw = sorted(stopwordsiso.stopwords(["fr", "en"]))
    else:
        raise ValueError(f"unknown function-word source {source!r}")
    if tokenize is None:
        from ..store import fold

        tokenize = fold.words
    plain = {w for w in raw if _PLAIN.fullmatch(w)}
    folded = plain | set(tokenize(" ".join(w for w in raw if w not in plain)))
    folded = {t for t in folded if not t.isdigit()}   # `10`, `39`: numbers are never dropped
    _FUNCTION_WORDS[(source, keep)] = result = frozenset(folded - KEEP) if keep else frozenset(folded)
    return result


@lru_cache(maxsize=2)
def _stemmers() -> tuple:
    import Stemmer

    return tuple(Stemmer.Stemmer(lang) for lang in LANGUAGES)


def stems(word: str) -> tuple[str, ...]:
    """The word's Snowball stem in each of LANGUAGES."""
    return tuple(s.stemWord(word) for s in _stemmers())


def forms(backend: "Backend", word: str, rule: str = "stem") -> list[str]:
    """`word` and the store's words that share its stem (in any of LANGUAGES), `word` first."""
    if rule == "none" or word.isdigit():
        return [word]
    own = stems(word)
    prefix = min(own, key=len)
    if len(prefix) < MIN_STEM:
        return [word]
    terms = backend.words_with_prefix(prefix, limit=MAX_FORMS)
    if rule == "stem":
        terms = [t for t in terms if any(a == b for a, b in zip(stems(t), own))]
    return [word] + [t for t in terms if t != word]


class Reading:
    """The word channel's reading of a question in one store: `total`, its entries;
    `forms`, each of the question's content words (function words out, in query order) -> the
    store's forms of it, the word first; `df`, each form an entry holds -> how many do;
    `admitted`, the forms the word channel searches (rare enough), in query order. rank's
    word coverage reads the same forms and frequencies."""

    __slots__ = ("total", "forms", "df", "admitted")

    def __init__(self, total: int, forms: dict[str, list[str]], df: dict[str, int],
                 admitted: list[str]):
        self.total, self.forms, self.df, self.admitted = total, forms, df, admitted


def read(backend: "Backend", max_df: float, text: str, policy: Policy | None = None
         ) -> Reading:
    """`text` as the word channel reads it in the store `backend` answers for."""
    from ..store.common import is_informative

    policy = policy or POLICY
    if not backend.fts:
        return Reading(0, {}, {}, [])
    total = backend.count_entries()
    if total == 0:
        return Reading(0, {}, {}, [])
    skip = function_words(policy.function_words, policy.keep, backend.query_words)
    words = [w for w in backend.query_words(text) if w not in skip]
    found = {w: forms(backend, w, policy.stems) for w in dict.fromkeys(words)}
    wanted = list(dict.fromkeys(f for w in words for f in found[w]))
    df = backend.document_frequency(wanted)
    return Reading(total, found, df,
                   [w for w in wanted if w in df and is_informative(df[w], total, max_df)])


def admitted(backend: "Backend", max_df: float, text: str, policy: Policy | None = None
             ) -> list[str]:
    """The index words the word channel searches for `text`, in query order."""
    return read(backend, max_df, text, policy).admitted


def query_forms(backend: "Backend", text: str, policy: Policy | None = None) -> Sequence[str]:
    """The words `admitted` starts from (before the document frequency): for reports and tests."""
    policy = policy or POLICY
    skip = function_words(policy.function_words, policy.keep, backend.query_words)
    return [w for w in backend.query_words(text) if w not in skip]
