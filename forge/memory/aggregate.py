"""The aggregation tier: fold overlapping deliberate notes into one line, by arithmetic.

No model call. The writer only copies: an aggregate is an optional label and details taken
verbatim from its sources, so every rule below can be checked on words.

- Notes: a note reads as an optional label (`Matériel : …`, a few words before a colon) and
  comma-separated details (a comma between two digits, `1,5 To`, does not separate).
- Words: one tokenizer (`words`) folds case and accents and splits digit runs from letter runs,
  so `SSD 256Go` and `SSD 256 Go` are one word set (FTS5's unicode61 keeps `256go` whole).
  Document frequency (`DocumentFrequency`) counts with the same tokenizer over the whole store,
  archive and superseded entries included. A word is *informative* when it is rare in this store
  by document frequency (`is_informative`, the word channel's rule); no stopword list.
- `distinct`: a detail is dropped only in favour of a detail containing every one of its
  words, connectives included, so a negation is never dropped in favour of its positive. Equal
  word sets keep the spelled-out surface (more separate pieces, then longer). A strictly larger
  detail must also add an informative word, and hold a phrase (4+ words) as one run of words:
  one that adds only common words, or inserts words inside a phrase (`n'a pas`), may say the
  opposite, so both stay and the repetition gate refuses the subject.
- Subjects, over every deliberate, active entry (never a recent window), never across kinds
  or projects: two notes are linked when a detail of one is contained in the other's head (its
  first detail) and their heads share a word; a subject is a connected group of two or more.
  So `Le NiPoGi a 32 Go de RAM` joins `NiPoGi AM06PRO, …, 32 Go de RAM`, while `services Podman`
  and `… des conteneurs Podman …` join nothing: a shared word alone links no notes. More than
  MAX_SUBJECT_NOTES linked notes are refused as they stand (gate `size`).
- Gates, each named in the output when it decides: conflict (two notes of the subject say
  opposite things, forge/memory/conflicts.py: a negation bearing on words the other states, or two
  values for the same thing) refuses the subject before anything else, so absorption and
  containment never cross a negation; closure (every word of the aggregate is in its
  sources), repetition (no two kept details share two informative words, contain one
  another, or differ only by their numbers) abandon the subject; coverage (every informative
  word of a source is in the aggregate) keeps that source active while the rest fold; quorum
  (at least COMPACTION_AGGREGATE_MIN_SOURCES sources) and budget (the line is shorter than what
  it folds by more than the token estimator's measured worst error) write nothing.
- Absorption: when every kept detail is a detail of one source, that entry speaks for the
  others, nothing is written; quorum and budget do not apply (subjects never cross projects).
- Links: sources are linked with `superseded_by` (rag.apply_folds, one transaction that re-checks
  every source), never deleted; every fold is an event; `undo` unfolds one.
- Dry run: this pass with the write off: `run(..., apply=False)`.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .conflicts import subject_conflict
from ..core.notes import Note, parse_note, word_set, words
from ..core.errors import ForgeError
from ..recall.hot_memory import entry_line, render_hot_block
from ..core.log import log
from ..core.tokens import ESTIMATE_WORST_ERROR, estimate_tokens

if TYPE_CHECKING:
    from ..store.rag import Entry, Store

# The budget gate's margin: the offline token estimate's worst measured error on one short
# text (README, "The token estimate, and its measured error"; the design seed measured 21.5%).
BUDGET_MARGIN = ESTIMATE_WORST_ERROR
# A detail of this many words or more is a phrase: it is dropped only in favour of a detail
# holding it as one run of words (a word inserted inside a phrase may negate it).
PHRASE_MIN_WORDS = 4
# More notes than this linked together are many things sharing words, not one subject: the
# group is refused as it stands (gate "size"), before any pairwise work.
MAX_SUBJECT_NOTES = 24
# Two kept details sharing this many informative words say one thing twice (repetition).
REPETITION_SHARED = 2

WRITTEN, ABSORBED, REFUSED, SKIPPED = "written", "absorbed", "refused", "skipped"
GATES = ("conflict", "closure", "repetition", "coverage", "quorum", "budget")


# --------------------------------------------------------------------------- words

@dataclass
class DocumentFrequency:
    """How many entries of the whole store hold each word (the tier's tokenizer)."""

    total: int
    counts: Counter
    max_share: float
    _memo: dict = field(default_factory=dict, repr=False)

    def informative(self, word: str) -> bool:
        known = self._memo.get(word)
        if known is None:
            known = self._memo[word] = is_informative(self.counts.get(word, 0), self.total,
                                                      self.max_share)
        return known


def is_informative(doc_count: int, total: int, max_share: float) -> bool:
    """"Informative" = rare in this store by document frequency: the word channel's admission
    rule, through the one function that states it, so both follow it when it changes."""
    from ..store.rag import rare_by_document_frequency

    return rare_by_document_frequency(doc_count, total, max_share)


def document_frequency(store: "Store") -> DocumentFrequency:
    """Scan every entry once (archive and superseded included, as the word channel counts them)."""
    counts: Counter = Counter()
    total = 0
    from ..store import rag

    for _id, content in rag.texts(store):
        total += 1
        counts.update(word_set(content))
    return DocumentFrequency(total, counts, store.settings.recall_lexical_max_df)


# --------------------------------------------------------------------------- subjects

def subjects(notes: Sequence[Note]) -> list[list[Note]]:
    """Connected groups (two or more) of linked notes of one kind and project, oldest first."""
    by_space: dict[tuple[str, str | None], list[Note]] = {}
    for n in notes:
        by_space.setdefault((n.entry.kind, n.entry.project), []).append(n)
    out: list[list[Note]] = []
    for space in by_space.values():
        out.extend(_components(space))
    out.sort(key=lambda group: group[0].entry.id)
    return out


def _components(notes: list[Note]) -> list[list[Note]]:
    parent = list(range(len(notes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Index heads by word: a detail can only be inside heads holding its rarest word.
    postings: dict[str, list[int]] = {}
    for i, n in enumerate(notes):
        for w in n.head:
            postings.setdefault(w, []).append(i)
    heads = [n.head for n in notes]
    for i, n in enumerate(notes):
        own = heads[i]
        for d in n.detail_words:
            lists = [postings.get(w, ()) for w in d]
            if not all(lists):
                continue
            for j in min(lists, key=len):
                other = heads[j]
                if j != i and d <= other and not own.isdisjoint(other) and find(i) != find(j):
                    parent[find(i)] = find(j)
    groups: dict[int, list[Note]] = {}
    for i, n in enumerate(notes):
        groups.setdefault(find(i), []).append(n)
    return [sorted(g, key=lambda n: n.entry.id) for g in groups.values() if len(g) >= 2]


def subject_name(group: Sequence[Note], df: DocumentFrequency) -> str:
    """A display name: the head word most members share, rarest first (never logged)."""
    counts: Counter = Counter(w for n in group for w in n.head)
    best = max(counts, key=lambda w: (counts[w], w.isalpha(), -df.counts.get(w, 0), len(w)))
    return best


# --------------------------------------------------------------------------- distinct

@dataclass
class _Detail:
    note: int        # index of the note in the subject
    pos: int         # index of the detail in the note
    order: int       # position in the subject's reading order
    surface: str
    words: frozenset[str]
    sequence: list[str] = field(default_factory=list)


def _spelled_out(d: _Detail) -> tuple[int, int, int]:
    """Among equal word sets, the surface that wins: more separate pieces, longer, earlier."""
    return (len(d.surface.split()), len(d.surface), -d.order)


@dataclass
class Distinct:
    kept: list[_Detail]
    ambiguous: list[tuple[_Detail, _Detail]]   # strict containment adding only common words


def distinct(notes: Sequence[Note], informative: "Any") -> Distinct:
    """Drop every detail another detail says entirely, in reading order."""
    pairs = [(i, j, s, w) for i, n in enumerate(notes)
             for j, (s, w) in enumerate(zip(n.details, n.detail_words))]
    details = [_Detail(i, j, k, s, w, words(s)) for k, (i, j, s, w) in enumerate(pairs)]
    dropped: dict[int, _Detail] = {}
    maybe: list[tuple[_Detail, _Detail]] = []
    postings: dict[str, list[_Detail]] = {}
    for d in details:
        for w in d.words:
            postings.setdefault(w, []).append(d)
    for a in details:
        # Only a detail holding a's rarest word can hold all of them.
        for b in min((postings[w] for w in a.words), key=len):
            if a is b or not a.words <= b.words:
                continue
            if a.words == b.words:
                if _spelled_out(b) > _spelled_out(a):
                    dropped.setdefault(a.order, b)
            elif _says_more(a, b, informative):
                dropped.setdefault(a.order, b)
            else:
                maybe.append((a, b))
    kept = [d for d in details if d.order not in dropped]
    # Place each kept detail where the first detail it replaces stood.
    slot = {d.order: d.order for d in kept}
    for d in details:
        if d.order in dropped:
            home = next((k for k in kept if d.words <= k.words), None)
            if home is not None:
                slot[home.order] = min(slot[home.order], d.order)
    kept.sort(key=lambda d: (slot[d.order], d.order))
    kept_ids = {d.order for d in kept}
    ambiguous = [(a, b) for a, b in maybe if a.order in kept_ids and b.order in kept_ids]
    return Distinct(kept, ambiguous)


def _says_more(a: _Detail, b: _Detail, informative: Any) -> bool:
    """May `a` (every word of which is in `b`) be dropped in favour of `b`? Only when `b` adds
    an informative word, and, when `a` is a phrase, holds it as one run of words: a phrase
    with words inserted inside it (`Le NiPoGi a 32 Go` -> `Le NiPoGi n'a pas 32 Go`) may say
    the opposite."""
    if not any(informative(w) for w in b.words - a.words):
        return False
    if len(a.sequence) < PHRASE_MIN_WORDS:
        return True
    n = len(a.sequence)
    return any(b.sequence[k:k + n] == a.sequence for k in range(len(b.sequence) - n + 1))


def compose(notes: Sequence[Note], kept: Sequence[_Detail]) -> str:
    """The aggregate line: the first label among the sources, then the kept details, copied."""
    label = next((n.label for n in notes if n.label), None)
    return (label or "") + ", ".join(d.surface for d in kept)


# --------------------------------------------------------------------------- the plan

@dataclass
class SubjectPlan:
    name: str
    kind: str
    project: str | None
    members: list[int]                # every entry of the subject
    sources: list[int]                # entries that fold (after coverage)
    kept_active: list[int]            # entries the coverage gate kept out of the fold
    outcome: str                      # written | absorbed | refused | skipped
    gate: str | None                  # the gate that refused, or that kept a source active
    reason: str                       # one line a human reads
    line: str | None                  # the exact aggregate line (written) or None
    into: int | None                  # the absorbing entry, or the written aggregate's id
    tokens_before: int = 0            # the sources' lines in the hot block (estimated)
    tokens_after: int = 0
    # What each member said when the pass read it: the write re-checks it (never printed).
    contents: dict[int, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("contents")
        return d


@dataclass
class BlockWeight:
    entries: int
    tokens: int
    left_out: int


@dataclass
class AggregateReport:
    applied: bool
    project: str | None
    db: str
    subjects: list[SubjectPlan] = field(default_factory=list)
    block_before: BlockWeight | None = None
    block_after: BlockWeight | None = None
    entries_scanned: int = 0
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        c = Counter(s.outcome for s in self.subjects)
        return {k: c.get(k, 0) for k in (WRITTEN, ABSORBED, REFUSED, SKIPPED)}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["subjects"] = [s.to_dict() for s in self.subjects]
        d["counts"] = self.counts()
        return d


def _line_tokens(kind: str, project: str | None, content: str) -> int:
    return estimate_tokens(entry_line(_Line(kind, project, content)))


@dataclass
class _Line:
    kind: str
    project: str | None
    content: str
    id: int = 0
    superseded_by: int | None = None
    created: str = "~"


def evaluate(group: Sequence[Note], df: DocumentFrequency, *, min_sources: int) -> SubjectPlan:
    """Run `distinct` and the gates on one subject. Pure: reads nothing, writes nothing."""
    informative = df.informative
    first = group[0].entry
    plan = SubjectPlan(name=subject_name(group, df), kind=first.kind, project=first.project,
                       members=[n.entry.id for n in group], sources=[], kept_active=[],
                       outcome=REFUSED, gate=None, reason="", line=None, into=None,
                       contents={n.entry.id: n.entry.content for n in group})
    notes = list(group)
    if len(notes) > MAX_SUBJECT_NOTES:
        return _refuse(plan, notes, "size", f"{len(notes)} notes are linked, more than one subject "
                       f"holds (at most {MAX_SUBJECT_NOTES}): they share words, not a subject")
    clash = subject_conflict([n.entry for n in notes])
    if clash is not None:
        a, b = clash.ids
        return _refuse(plan, notes, "conflict", f"#{a} {clash.details[0]!r} and #{b} "
                       f"{clash.details[1]!r} say otherwise ({clash.reason}): never folded; "
                       "`forge memory conflicts` lists them, `forge memory supersede` settles one")
    while True:
        found = distinct(notes, informative)
        line = compose(notes, found.kept)
        lexicon = frozenset().union(*(n.all_words for n in notes))
        if not word_set(line) <= lexicon:
            return _refuse(plan, notes, "closure", "a word of the line is in none of its sources")
        clash = _repetition(found, informative)
        if clash:
            return _refuse(plan, notes, "repetition", clash)
        line_words = word_set(line)
        uncovered = [n for n in notes if any(informative(w) and w not in line_words
                                             for w in n.all_words)]
        if not uncovered:
            break
        plan.kept_active += [n.entry.id for n in uncovered]
        plan.gate = "coverage"
        notes = [n for n in notes if n not in uncovered]
        if len(notes) < 2:
            return _refuse(plan, notes, "coverage",
                           "every source but one says something the line would not")
    plan.sources = [n.entry.id for n in notes]
    plan.tokens_before = sum(_line_tokens(n.entry.kind, n.entry.project, n.entry.content)
                             for n in notes)
    absorber = _absorber(notes, found)
    if absorber is not None:
        plan.outcome, plan.into = ABSORBED, absorber.entry.id
        plan.sources = [i for i in plan.sources if i != absorber.entry.id]
        plan.tokens_after = _line_tokens(absorber.entry.kind, absorber.entry.project,
                                         absorber.entry.content)
        plan.reason = (f"#{absorber.entry.id} already says everything; it speaks for "
                       + ", ".join(f"#{i}" for i in plan.sources) + "; nothing written")
        return plan
    plan.line = line
    plan.tokens_after = _line_tokens(first.kind, first.project, line)
    if len(notes) < min_sources:
        return _refuse(plan, notes, "quorum",
                       f"{len(notes)} source(s) would fold, under COMPACTION_AGGREGATE_MIN_SOURCES="
                       f"{min_sources}", keep_line=True)
    limit = plan.tokens_before * (1 - BUDGET_MARGIN)
    if not plan.tokens_after < limit:
        saving = 1 - plan.tokens_after / plan.tokens_before if plan.tokens_before else 0.0
        return _refuse(plan, notes, "budget",
                       f"{plan.tokens_before} -> {plan.tokens_after} estimated tokens saves "
                       f"{saving:.0%}, not more than the estimate's error ({BUDGET_MARGIN:.1%})",
                       keep_line=True)
    plan.outcome = WRITTEN
    plan.reason = (f"{len(notes)} sources fold into one line, {plan.tokens_before} -> "
                   f"{plan.tokens_after} estimated tokens")
    if plan.kept_active:
        plan.reason += "; coverage keeps " + ", ".join(f"#{i}" for i in plan.kept_active) + " active"
    return plan


def _refuse(plan: SubjectPlan, notes: Sequence[Note], gate: str, why: str, *,
            keep_line: bool = False) -> SubjectPlan:
    plan.outcome, plan.gate = REFUSED, gate
    plan.reason = f"{gate}: {why}"
    plan.sources = [n.entry.id for n in notes]
    if not keep_line:
        plan.line = None
    return plan


def _repetition(found: Distinct, informative: Any) -> str | None:
    if found.ambiguous:
        a, b = found.ambiguous[0]
        return (f"{b.surface!r} holds every word of {a.surface!r} but adds only common words "
                "or words inside it (it may be a negation): both stay")
    kept = found.kept
    for i, a in enumerate(kept):
        for b in kept[i + 1:]:
            if _letters(a.words) == _letters(b.words):   # 16 Go / 32 Go, 03:00 / 04:00
                return f"{a.surface!r} and {b.surface!r} differ only by their numbers"
            common = a.words & b.words
            shared = [w for w in common if informative(w)]
            # Two informative words in common, or two words that are half the shorter detail
            # (`32 Go de RAM` / `32 Go de mémoire`, whatever the store counts as rare).
            if len(shared) >= REPETITION_SHARED or (
                    len(common) >= REPETITION_SHARED
                    and 2 * len(common) >= min(len(a.words), len(b.words))):
                return f"{a.surface!r} and {b.surface!r} say one thing twice"
    return None


def _letters(ws: frozenset[str]) -> frozenset[str]:
    return frozenset(w for w in ws if not w.isdigit())


def _absorber(notes: Sequence[Note], found: Distinct) -> Note | None:
    """The source every kept detail belongs to (and whose words hold every label), if any."""
    labels = frozenset().union(*(n.label_words for n in notes))
    for n in sorted(notes, key=lambda n: (-len(n.details), -n.entry.id)):
        own = set(n.detail_words)
        if all(d.words in own for d in found.kept) and labels <= n.all_words:
            return n
    return None


# --------------------------------------------------------------------------- the pass

def plan_pass(store: "Store", *, project: str | None = None, min_sources: int | None = None,
              active: list | None = None) -> list[SubjectPlan]:
    """Every subject of the store (or of `project`) and what the gates decide. Reads only."""
    from ..store import rag

    min_sources = min_sources or store.settings.compaction_aggregate_min_sources
    df = document_frequency(store)
    if active is None:
        active = rag.hot_entries(store, project=project)
    notes = [n for n in (parse_note(e) for e in active) if n is not None]
    return [evaluate(g, df, min_sources=min_sources) for g in subjects(notes)]


def run(store: "Store", *, project: str | None = None, apply: bool = False,
        min_sources: int | None = None) -> AggregateReport:
    """The pass. `apply=False` is the dry run: the same plan, nothing written."""
    from ..store import rag

    started = time.perf_counter()
    before = rag.hot_entries(store, project=project)
    plans = plan_pass(store, project=project, min_sources=min_sources, active=before)
    report = AggregateReport(applied=apply, project=project, db=store.location, subjects=plans,
                             entries_scanned=len(before))
    report.block_before = _weigh(store, before)
    report.block_after = _weigh(store, _after(before, plans))
    if apply:
        _write(store, plans)
    report.seconds = round(time.perf_counter() - started, 4)
    return report


def _weigh(store: "Store", entries: list) -> BlockWeight:
    budget = store.settings.recall_hot_max_tokens
    # Every line costs at least two tokens: past budget // 2 entries, none more can fit, and
    # rendering the prefix gives the same cut (its note counts fewer entries left out).
    cap = budget // 2 + 1
    block = render_hot_block(entries[:cap], max_tokens=budget)
    kept = len(block.entry_ids)
    return BlockWeight(kept, block.tokens, len(entries) - kept)


def _after(entries: list, plans: Sequence[SubjectPlan]) -> list:
    gone = {i for p in plans if p.outcome in (WRITTEN, ABSORBED) for i in p.sources}
    out = [e for e in entries if e.id not in gone]
    out += [_Line(p.kind, p.project, p.line or "") for p in plans if p.outcome == WRITTEN]
    return out


def _write(store: "Store", plans: list[SubjectPlan]) -> None:
    from ..recall.writing import rows_written
    from ..store import rag

    todo = [p for p in plans if p.outcome in (WRITTEN, ABSORBED)]
    if not todo:
        return
    written = [p for p in todo if p.outcome == WRITTEN]
    vectors = (store.checked_embedder().embed_documents([p.line for p in written])
               if written else [])
    vec_of = {id(p): v for p, v in zip(written, vectors)}
    folds = [rag.Fold(sources=p.sources, expected=p.contents, into=p.into,
                      aggregate=(rag.NewEntry(p.kind, p.line or "", p.project, "aggregate",
                                              {"sources": p.sources}) if p.outcome == WRITTEN else None),
                      vector=vec_of.get(id(p)))
             for p in todo]
    results = rag.apply_folds(rows_written(store), folds)
    for p, result in zip(todo, results):
        if result.id is None:
            p.outcome, p.reason = SKIPPED, f"skipped: {result.why}"
        else:
            p.into = result.id



def undo(store: "Store", entry_id: int) -> dict[str, Any]:
    """Unfold one aggregate: its sources become active again; a written aggregate is forgotten
    (an absorbing entry stays). Logged as an `unfold` event."""
    from ..store import rag

    return rag.unfold(store, entry_id)


# --------------------------------------------------------------------------- hook

def after_compaction(settings: Any, store: "Store | None" = None) -> dict[str, Any] | None:
    """Run the pass after a compaction that committed, when COMPACTION_AGGREGATE is on.

    Never raises: a compaction that already committed must not become an error; a failure
    is a warning and comes back as {"error": ...}.
    """
    if not settings.compaction_aggregate:
        return None
    from ..store import rag

    own = store is None
    try:
        if own:
            store = rag.open_store(settings)
        report = run(store, apply=True)
        counts = report.counts()
        log.info("aggregation after compaction: %d written, %d absorbed, %d refused",
                 counts[WRITTEN], counts[ABSORBED], counts[REFUSED])
        return counts
    except Exception as e:  # noqa: BLE001 — swallowed, said
        log.warning("the aggregation pass after compaction failed (the compaction stands): %s", e)
        return {"error": str(e)}
    finally:
        if own and store is not None:
            store.close()


def open_db(settings: Any, db_path: str | Path | None) -> "Store":
    """The configured store, or another store file (`--db`, a snapshot): never created here."""
    from ..store import rag

    if db_path is None:
        return rag.open_store(settings)
    path = Path(db_path)
    if not path.is_file():
        raise ForgeError(f"--db {path}: no such store file (make a copy with db.snapshot or "
                         "`sqlite3 live.db '.backup copy.db'`; of a PostgreSQL store, with "
                         "`forge store migrate --to sqlite:///copy.db`)")
    return rag.open_store(settings, path=path)
