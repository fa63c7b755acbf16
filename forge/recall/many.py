"""Many recalls in one process: `forge recall --queries FILE|-`, calibration and the benchmarks.

Every query goes through the code `forge recall QUERY` runs — `rank.search` (the fused
rows budget, `limit`), or `channels.search_hybrid` when per-channel budgets are given — with its
vector embedded beforehand: one `embed_queries` call for the whole batch, so a script pays the
model load (or the server round trip) once, not once per question.

Input (`parse_queries`): one query per line, or JSON Lines `{"q": "...", "id": ...}` (the id is
any JSON value and comes back untouched; a plain line has id null). Blank lines are skipped.
Lines may mix both shapes. A line that starts with `{` is JSON and must parse.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..core import checks
from ..core.errors import ForgeError

if TYPE_CHECKING:
    import numpy as np

    from ..store.rag import SearchResult, Store


@dataclass
class Query:
    q: str
    id: Any = None
    line: int = 0


@dataclass
class BatchAnswer:
    query: Query
    result: "SearchResult"

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query.q, "id": self.query.id, **self.result.to_dict()}


@dataclass
class BatchRecall:
    answers: list[BatchAnswer]
    embed_seconds: float
    search_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"answers": [a.to_dict() for a in self.answers],
                "embed_seconds": self.embed_seconds, "search_seconds": self.search_seconds}


def parse_queries(text: str, *, source: str = "--queries") -> list[Query]:
    """The queries of a file: plain lines or JSONL `{"q", "id"}`; a bad line names its number."""
    out: list[Query] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("{"):
            try:
                obj = json.loads(stripped)
            except ValueError as e:
                raise ForgeError(f"{source} line {number} starts with {{ but is not JSON: "
                                 f"{getattr(e, 'msg', e)}") from None
            except RecursionError:
                raise ForgeError(f"{source} line {number} is nested too deeply to be a "
                                 "query") from None
            try:
                checks.json_text(obj, "line")
            except checks.BadValue as e:
                raise ForgeError(f"{source} line {number}: {e.why}") from None
            q = obj.get("q") if isinstance(obj, dict) else None
            if not isinstance(q, str) or not q.strip():
                raise ForgeError(f'{source} line {number} needs a non-empty "q" string, '
                                 'like {"q": "Quel processeur ?", "id": 1}')
            out.append(Query(q.strip(), obj.get("id"), number))
        else:
            out.append(Query(stripped, None, number))
    return out


def embed_queries(store: "Store", texts: Sequence[str]) -> "np.ndarray":
    """The query vectors of `texts` in ONE embedder call (after the store's identity check)."""
    import numpy as np

    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return store.checked_embedder().embed_queries(list(texts))


def search_many(store: "Store", queries: Iterable[Query | str], *, project: str | None = None,
                vector_k: int | None = 5, lexical_k: int | None = 5, kind: str | None = None,
                vectors: "np.ndarray | None" = None,
                on_progress: Callable[[int], None] | None = None,
                limit: int | None = None, neighbours: bool = True, read_time: bool = True,
                window: Any = None, as_of: str | None = None) -> BatchRecall:
    """Run `rank.recall` (what `forge recall` runs) for every query, in input order, on
    one connection: the fused budget when `limit` is given, else the per-channel budgets.

    `vectors`: the queries' vectors when the caller already has them (no embedding call).
    `read_time`, `window`, `as_of`: as rank.recall's (recall --no-time, --since/
    --until, --as-of).
    """
    from . import rank

    items = [q if isinstance(q, Query) else Query(q) for q in queries]
    started = time.perf_counter()
    if vectors is None:
        vectors = embed_queries(store, [q.q for q in items])
    embedded = time.perf_counter()
    answers = []
    for index, (query, vector) in enumerate(zip(items, vectors)):
        result = rank.recall(store, query.q, limit=limit, vector_k=vector_k,
                             lexical_k=lexical_k, project=project, kind=kind,
                             neighbours=neighbours, query_vector=vector,
                             read_time=read_time, window=window, as_of=as_of)
        answers.append(BatchAnswer(query, result))
        if on_progress:
            on_progress(index + 1)
    done = time.perf_counter()
    return BatchRecall(answers, round(embedded - started, 4), round(done - embedded, 4))
