"""`forge calibrate`: measure where a store's hits and misses sit, propose a cutoff.

Cases are hit questions, each with the id of the entry that answers it, and miss questions
(nothing in the store answers them). All questions are embedded in ONE call, then each runs
through `channels.search_hybrid` (the code `forge recall` runs) on one read-only connection.

- A hit's distance is the distance to the entry it names, even when that entry ranks outside
  every top k: its vector is read and compared directly, and its rank is counted over every
  vector of the store (or of the project).
- A miss's distance is its nearest entry's: a cutoff must sit below it to return nothing.
- worst hit = the largest hit distance, best miss = the smallest miss distance,
  gap = best miss - worst hit. With a positive gap the proposal is the midpoint plus
  `FRACTION` of the gap, toward the misses ("the room belongs above the hits": real
  questions are longer and messier than the ones a user writes down to calibrate), rounded to
  two decimals when that stays strictly between the midpoint and the best miss, else to the
  fewest of 4, 6, 8 or 10 that do.
  The design seed's reference store measured 0.88 = 0.8392 + 0.18 × 0.2206. With a gap of
  zero or less no distance separates these questions and nothing is proposed.
- For the proposed cutoff (or with none) it counts how many hits each channel still returns
  and how many misses still get rows.

The store is opened read-only: calibrating never writes to it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..core import checks
from ..core.errors import ForgeError, NotFoundError

if TYPE_CHECKING:
    import numpy as np

    from ..embedders import Embedder
    from ..store.rag import SearchRow, Store
    from ..core.settings import Settings

FRACTION = 0.18       # of the gap, above the midpoint (the design seed's 0.8392 + 0.18 × 0.2206)
RANK_CHUNK = 8192     # vectors read per step when a hit's rank is counted over the whole store


@dataclass
class HitCase:
    question: str
    expect: int


@dataclass
class Cases:
    hits: list[HitCase] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)


@dataclass
class Measured:
    question: str
    entry_id: int | None      # a hit: the entry it names; a miss: its nearest entry
    distance: float | None
    rank: int | None          # among the store's vectors by distance (1 = nearest)
    in_top_k: bool            # the vector channel's budget reaches it (before any cutoff)
    vector: bool = False      # at the proposed cutoff: a hit's entry comes back through vectors
    lexical: bool = False     # ... through the word channel
    hot: bool = False         # a hit's entry is in the hot block (deliberate, not superseded)
    rows_kept: int = 0        # a miss: rows it still gets at the proposed cutoff
    coverage: float | None = None  # --coverage: its latent terms' share in its 5 nearest entries

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Calibration:
    hits: list[Measured]
    misses: list[Measured]
    worst_hit: float | None
    best_miss: float | None
    gap: float | None
    midpoint: float | None
    proposed: float | None
    fingerprint: str
    setting: str | None       # "RECALL_MAX_DISTANCE=value@fingerprint" when proposed
    at_cutoff: dict[str, Any]
    message: str
    fraction: float = FRACTION
    vector_k: int = 5
    lexical_k: int = 5
    project: str | None = None
    embed_seconds: float = 0.0
    db_seconds: float = 0.0
    coverage: dict[str, Any] | None = None   # --coverage: the RECALL_MIN_COVERAGE proposal

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hits"] = [h.to_dict() for h in self.hits]
        out["misses"] = [m.to_dict() for m in self.misses]
        return out


# --------------------------------------------------------------------------- cases

def cases_from_options(hits: Sequence[str], expects: Sequence[int], misses: Sequence[str]) -> Cases:
    if len(hits) != len(expects):
        raise ForgeError(f"{len(hits)} --hit but {len(expects)} --expect: give each --hit QUESTION "
                         "the --expect ID of the entry that answers it")
    return Cases([HitCase(q, int(e)) for q, e in zip(hits, expects)], list(misses))


def load_cases(path: Path | str) -> Cases:
    """A YAML cases file (see deploy/calibrate.example.yaml):

        hits:
          - question: Quel processeur a mon NiPoGi ?
            expect: 3
        misses:
          - Comment s'appelle mon chien ?
    """
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ForgeError(f"{path}: no such cases file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ForgeError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    return cases_from_mapping(doc, str(path))


def cases_from_mapping(doc: Any, source: str) -> Cases:
    """Cases from a parsed document `{"hits": [{"question", "expect"}], "misses": [...]}`
    (a YAML file, a JSON request body); `source` names it in errors."""
    if not isinstance(doc, dict) or not set(doc) <= {"hits", "misses"}:
        raise ForgeError(f"{source}: expected a mapping with `hits:` and `misses:` lists "
                         "(see deploy/calibrate.example.yaml)")
    cases = Cases()
    for number, item in enumerate(doc.get("hits") or [], 1):
        expect = item.get("expect") if isinstance(item, dict) else None
        try:
            expect = checks.entry_id(expect, "expect") if isinstance(expect, int) else None
        except checks.BadValue:
            expect = None
        if expect is None or not isinstance(item.get("question"), str):
            raise ForgeError(f"{source}: hit {number} needs `question:` (text) and `expect:` "
                             f"(an entry id), got {item!r}"[:200])
        cases.hits.append(HitCase(item["question"].strip(), expect))
    for number, item in enumerate(doc.get("misses") or [], 1):
        question = item.get("question") if isinstance(item, dict) else item
        if not isinstance(question, str) or not question.strip():
            raise ForgeError(f"{source}: miss {number} must be a question (text), got {item!r}"[:200])
        cases.misses.append(question.strip())
    return cases


def merge(*parts: Cases) -> Cases:
    return Cases([h for p in parts for h in p.hits], [m for p in parts for m in p.misses])


# --------------------------------------------------------------------------- the store

def open_readonly(settings: "Settings", *, path: Path | str | None = None,
                  embedder: "Embedder | None" = None) -> "Store":
    """The store at RAG_DB_FILE (or `path`) on a read-only connection, with the cutoff off, so
    every vector row comes back and calibration sees what the cutoff would drop."""
    from ..store import rag
    from ..store import open_backend

    backend = open_backend(settings, mode="readonly", path=path)
    try:
        if backend.missing:
            raise ForgeError(f"no memory store at {backend.location}: calibrate measures an "
                             "existing store (`forge remember` or `forge compact` write one)")
        version = backend.schema_version()
        if version != backend.SCHEMA_VERSION:
            raise ForgeError(f"{backend.location} has schema version {version}, not "
                             f"{backend.SCHEMA_VERSION}: run `forge memory ls` once to migrate "
                             "it, then calibrate")
    except BaseException:
        backend.close()
        raise
    plain = dataclasses.replace(settings, recall_max_distance=None, recall_min_coverage=None)
    return rag.Store(backend, plain, embedder=embedder, check_identity=True)


def entry_vectors(store: "Store", ids: Sequence[int]) -> dict[int, "np.ndarray"]:
    from ..store import rag

    return rag.entry_vectors(store, ids)


def _ranks(store: "Store", queries: "np.ndarray", distances: Sequence[float], exclude: Sequence[int],
           project: str | None) -> list[int]:
    """1 + how many vectors are nearer than `distances[i]` to `queries[i]` (its own entry
    excluded): one pass over the store's vectors, whatever the number of queries."""
    import numpy as np

    nearer = np.zeros(len(queries), dtype=np.int64)
    limits = np.asarray(distances, dtype=np.float32)[:, None]
    own = np.asarray(exclude, dtype=np.int64)[:, None]
    for ids, matrix in store.backend.iter_vectors(project=project, chunk=RANK_CHUNK):
        dist = np.sqrt(np.maximum(0.0, 2.0 - 2.0 * (queries @ matrix.T)))
        nearer += ((dist < limits) & (ids[None, :] != own)).sum(axis=1)
    return [int(n) + 1 for n in nearer]


# --------------------------------------------------------------------------- measuring

def calibrate(store: "Store", cases: Cases, *, vector_k: int = 5, lexical_k: int = 5,
              project: str | None = None, coverage: bool = False) -> Calibration:
    """Measure `cases` on `store` (open it with `open_readonly`) and propose a cutoff; with
    `coverage`, each case's coverage (forge/recall/refusal.py) and a RECALL_MIN_COVERAGE proposal."""
    import numpy as np

    from ..store import rag
    from . import many

    if not cases.hits or not cases.misses:
        raise ForgeError("calibrate needs at least one hit (--hit QUESTION --expect ID) and one "
                         "miss (--miss QUESTION): the cutoff sits between them")
    expected = [h.expect for h in cases.hits]
    known = {e.id: e for e in _entries(store, expected)}
    unknown = [i for i in expected if i not in known]
    if unknown:
        raise NotFoundError(f"--expect {unknown[0]}: no memory entry #{unknown[0]} in "
                            f"{store.location}; `forge memory ls` lists the ids")
    if project is not None:
        outside = [i for i in expected if known[i].project != project]
        if outside:
            raise ForgeError(f"--expect {outside[0]}: entry #{outside[0]} is not in project "
                             f"{project!r}, so no recall with --project {project!r} can return it")
    questions = [h.question for h in cases.hits] + list(cases.misses)
    started = time.perf_counter()
    vectors = many.embed_queries(store, questions)
    embedded = time.perf_counter()
    batch = many.search_many(store, questions, project=project, vector_k=vector_k,
                             lexical_k=lexical_k, vectors=vectors)
    stored = entry_vectors(store, expected)
    missing = [i for i in expected if i not in stored]
    if missing:
        raise ForgeError(f"entry #{missing[0]} has no vector in {store.location}: run `forge reindex`")
    hot_ids = {e.id for e in rag.hot_entries(store, project=project)}

    hits: list[Measured] = []
    outside: list[int] = []
    for index, (case, answer) in enumerate(zip(cases.hits, batch.answers)):
        vector_rows = [r for r in answer.result.rows if r.distance is not None]
        position = next((n for n, r in enumerate(vector_rows, 1) if r.entry.id == case.expect), None)
        if position is not None:
            distance, rank = float(vector_rows[position - 1].distance), position
        else:
            distance = float(np.linalg.norm(vectors[index] - stored[case.expect]))
            rank = None
            outside.append(index)
        hits.append(Measured(case.question, case.expect, distance, rank, position is not None,
                             hot=case.expect in hot_ids))
    if outside:
        ranks = _ranks(store, vectors[outside], [hits[i].distance for i in outside],
                       [hits[i].entry_id for i in outside], project)
        for i, rank in zip(outside, ranks):
            hits[i].rank = max(rank, vector_k + 1)  # the KNN did not reach it: below its budget
    misses: list[Measured] = []
    for question, answer in zip(cases.misses, batch.answers[len(cases.hits):]):
        vector_rows = [r for r in answer.result.rows if r.distance is not None]
        nearest = vector_rows[0] if vector_rows else None
        misses.append(Measured(question, nearest.entry.id if nearest else None,
                               float(nearest.distance) if nearest else None,
                               1 if nearest else None, nearest is not None))
    done = time.perf_counter()

    worst = max(h.distance for h in hits if h.distance is not None)
    miss_distances = [m.distance for m in misses if m.distance is not None]
    best = min(miss_distances) if miss_distances else None
    gap = best - worst if best is not None else None
    midpoint = (worst + best) / 2 if best is not None else None
    proposed = propose(worst, best) if best is not None else None
    fingerprint = rag.query_fingerprint(store.settings, store.identity)
    at_cutoff = _at_cutoff(hits, misses, batch.answers, proposed)
    result = Calibration(
        hits=hits, misses=misses, worst_hit=_r(worst), best_miss=_r(best), gap=_r(gap),
        midpoint=_r(midpoint), proposed=proposed, fingerprint=fingerprint,
        setting=f"RECALL_MAX_DISTANCE={format_distance(proposed)}@{fingerprint}" if proposed else None,
        at_cutoff=at_cutoff, message="", vector_k=vector_k, lexical_k=lexical_k, project=project,
        embed_seconds=round(embedded - started, 4), db_seconds=round(done - embedded, 4))
    result.message = _message(result)
    if coverage:
        started = time.perf_counter()
        result.coverage = _coverage(store, hits, misses, vectors, project)
        result.embed_seconds = round(result.embed_seconds + time.perf_counter() - started, 4)
    return result


def _coverage(store: "Store", hits: list[Measured], misses: list[Measured], vectors: Any,
              project: str | None) -> dict[str, Any]:
    """Each case's coverage by its 5 nearest entries, and the RECALL_MIN_COVERAGE that keeps
    at least 95% of the hit cases (refusal.propose); what it keeps and refuses on them."""
    from . import channels, refusal

    for measured, vector in zip(hits + misses, vectors):
        nearest = [i for i, _ in channels.search_vector(store, vector, k=refusal.POOL, project=project)]
        verdict = refusal.measure(store, measured.question, nearest)
        measured.coverage = verdict.value if verdict is not None else None
    hit_values = [h.coverage for h in hits if h.coverage is not None]
    proposed = refusal.propose(hit_values)
    kept = sum(v >= proposed for v in hit_values) if proposed is not None else len(hit_values)
    refused = (sum(m.coverage is not None and m.coverage < proposed for m in misses)
               if proposed is not None else 0)
    setting = f"RECALL_MIN_COVERAGE={proposed:g}" if proposed is not None else None
    message = (f"proposed {setting}: it keeps {kept} of {len(hits)} hit questions and refuses "
               f"{refused} of {len(misses)} misses (measured on these same questions: expect "
               "fewer on new ones; each recall then costs the sparse head's pass over the "
               "question and its 5 nearest entries)" if setting else
               "no hit reached any vector: no RECALL_MIN_COVERAGE proposed")
    return {"proposed": proposed, "setting": setting, "keep": 0.95, "hits_kept": kept,
            "misses_refused": refused, "pool": refusal.POOL, "query_terms": refusal.QUERY_TERMS,
            "message": message}


def _entries(store: "Store", ids: Sequence[int]) -> list[Any]:
    from ..store import rag

    out = []
    for entry_id in sorted(set(ids)):
        try:
            out.append(rag.get_entry(store, entry_id))
        except NotFoundError:
            pass
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def propose(worst_hit: float, best_miss: float, fraction: float = FRACTION) -> float | None:
    """The cutoff for a worst hit and a best miss: None unless the gap is positive."""
    gap = best_miss - worst_hit
    if not gap > 0:
        return None
    midpoint = (worst_hit + best_miss) / 2
    raw = midpoint + fraction * gap
    for digits in (2, 4, 6, 8, 10):   # the shortest that stays strictly between
        rounded = round(raw, digits)
        if midpoint < rounded < best_miss:
            return rounded
    return None   # a gap under 1e-10: no distance worth writing separates them


def format_distance(value: float) -> str:
    """A cutoff as `.env` holds it: no exponent, no trailing zeros."""
    text = f"{value:.10f}".rstrip("0").rstrip(".")
    return text if text else "0"


def _kept(rows: Sequence["SearchRow"], cutoff: float | None) -> list["SearchRow"]:
    """The rows a recall returns under `cutoff` (the cutoff judges vector-only rows)."""
    from ..store import rag

    return [r for r in rows if not rag.beyond_cutoff(r.channel, r.distance, cutoff)]


def _at_cutoff(hits: list[Measured], misses: list[Measured], answers: Sequence[Any],
               cutoff: float | None) -> dict[str, Any]:
    for measured, answer in zip(hits, answers):
        kept = {r.entry.id: r.channel for r in _kept(answer.result.rows, cutoff)}
        channel = kept.get(measured.entry_id)
        measured.vector = channel in ("vector", "both")
        measured.lexical = channel in ("lexical", "both")
    for measured, answer in zip(misses, answers[len(hits):]):
        measured.rows_kept = len(_kept(answer.result.rows, cutoff))
        kept = _kept(answer.result.rows, cutoff)
        measured.vector = any(r.channel in ("vector", "both") for r in kept)
        measured.lexical = any(r.channel in ("lexical", "both") for r in kept)
    return {
        "cutoff": cutoff,
        "hits": len(hits),
        "hits_vector": sum(h.vector for h in hits),
        "hits_lexical": sum(h.lexical for h in hits),
        "hits_returned": sum(h.vector or h.lexical for h in hits),
        "hits_hot": sum(h.hot for h in hits),
        "misses": len(misses),
        "misses_with_rows": sum(m.rows_kept > 0 for m in misses),
        "misses_vector": sum(m.vector for m in misses),
        "misses_lexical": sum(m.lexical for m in misses),
    }


def _message(c: Calibration) -> str:
    a = c.at_cutoff
    if c.best_miss is None:
        return "no miss reached any vector: the store has no vectors to measure"
    if c.proposed is None:
        return (f"no distance cutoff separates these questions (worst hit {c.worst_hit:.4f} >= best "
                f"miss {c.best_miss:.4f}, gap {c.gap:+.4f}): none proposed; leave "
                f"RECALL_MAX_DISTANCE unset. What still carries the hits: the word channel "
                f"returns {a['hits_lexical']} of {a['hits']} hit entries, the hot block holds "
                f"{a['hits_hot']} of {a['hits']}")
    return (f"proposed RECALL_MAX_DISTANCE={format_distance(c.proposed)}@{c.fingerprint} "
            f"(midpoint {c.midpoint:.4f} + {c.fraction} x gap {c.gap:.4f}); at it the vector "
            f"channel returns {a['hits_vector']} of {a['hits']} hit entries, the word channel "
            f"{a['hits_lexical']}, either {a['hits_returned']}; {a['misses_with_rows']} of "
            f"{a['misses']} misses still get rows")


def write_coverage(result: Calibration, env_file: Path | str) -> Any:
    """Put the RECALL_MIN_COVERAGE proposal into `.env` (only that line changes)."""
    from ..core import dotenv_edit

    if not result.coverage or result.coverage["proposed"] is None:
        raise ForgeError("--write --coverage: no RECALL_MIN_COVERAGE proposed (no hit case "
                         "reached a vector)")
    return dotenv_edit.set_value(env_file, "RECALL_MIN_COVERAGE", f"{result.coverage['proposed']:g}")


def write_cutoff(result: Calibration, env_file: Path | str) -> Any:
    """Put the proposal into `.env` (only that line changes); a clear error without one."""
    from ..core import dotenv_edit

    if result.proposed is None:
        raise ForgeError("--write: nothing to write, " + result.message.split(": none proposed")[0]
                         + "; the word channel and the hot block still carry recall without one")
    return dotenv_edit.set_value(env_file, "RECALL_MAX_DISTANCE",
                                 f"{format_distance(result.proposed)}@{result.fingerprint}")


def tag_status(settings: "Settings", fingerprint: str) -> tuple[str, str]:
    """doctor: the configured cutoff's tag against the current query fingerprint, no network.
    (status, detail) with status matching / missing / stale / unset."""
    cutoff = settings.recall_max_distance
    if cutoff is None:
        return "unset", (f"RECALL_MAX_DISTANCE unset: no cutoff (the safe start); `forge calibrate "
                         f"--cases FILE` measures one for fingerprint {fingerprint}")
    if cutoff.tag == fingerprint:
        return "matching", f"{cutoff} matches this store and query wrapper ({fingerprint})"
    if cutoff.tag is None:
        return "missing", (f"{cutoff} carries no fingerprint: used, but measured under which "
                           f"regime is unknown; write it back as {cutoff.value}@{fingerprint} "
                           "or re-measure with `forge calibrate --cases FILE --write`")
    return "stale", (f"{cutoff} was measured under fingerprint {cutoff.tag}, this store and query "
                     f"wrapper are {fingerprint}: the cutoff is off; re-measure it with "
                     "`forge calibrate --cases FILE --write`")
